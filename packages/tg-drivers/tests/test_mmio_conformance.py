"""The MMIO conformance suite (tg.drivers.testing.MMIOConformance) run over every local view backend.

Other backends join by subclassing MMIOConformance with their own ``make_view`` fixture (see tg.drivers.testing).
"""

from __future__ import annotations

import ctypes

import pytest

from tg.drivers.mmio import BufferMMIO, HostMMIO, MMIOView, ModelMMIO
from tg.drivers.mock import BarSpec, DwordRegisterFile, MockPCIDevice
from tg.drivers.testing import MakeView, MMIOConformance


class TestHostMMIO(MMIOConformance):
    @pytest.fixture
    def make_view(self) -> MakeView:
        def make(nbytes: int, fmt: str) -> MMIOView:
            buf = (ctypes.c_uint8 * nbytes)()
            return HostMMIO(ctypes.addressof(buf), nbytes, fmt, owner=buf)

        return make


class TestBufferMMIO(MMIOConformance):
    @pytest.fixture
    def make_view(self) -> MakeView:
        return lambda nbytes, fmt: BufferMMIO(bytearray(nbytes), fmt)


class TestModelMMIO(MMIOConformance):
    @pytest.fixture
    def make_view(self) -> MakeView:
        return lambda nbytes, fmt: ModelMMIO(DwordRegisterFile(nbytes), 0, nbytes, fmt)


class TestMockBarMMIO(MMIOConformance):
    """A window in the middle of a mock device's BAR (so offsets are really relative)."""

    @pytest.fixture
    def make_view(self) -> MakeView:
        devices: list[MockPCIDevice] = []

        def make(nbytes: int, fmt: str) -> MMIOView:
            dev = MockPCIDevice("T", f"mock:conf{len(devices)}", bars={2: BarSpec(4096)})
            devices.append(dev)
            return dev.map_bar(2, off=256, size=nbytes, fmt=fmt)

        return make


class TestMockModelBarMMIO(MMIOConformance):
    @pytest.fixture
    def make_view(self) -> MakeView:
        devices: list[MockPCIDevice] = []

        def make(nbytes: int, fmt: str) -> MMIOView:
            bars = {5: BarSpec(4096, backing=DwordRegisterFile(4096))}
            dev = MockPCIDevice("T", f"mock:model{len(devices)}", bars=bars)
            devices.append(dev)
            return dev.map_bar(5, off=1024, size=nbytes, fmt=fmt)

        return make


class TestUSBPCIeMMIO(MMIOConformance):
    """A BAR window through the simulated USB bridge (streaming TLPs; 4-byte aligned only)."""

    @pytest.fixture
    def make_view(self) -> MakeView:
        from tg.drivers.mock.usb import MockASM24Bridge
        from tg.drivers.usb import USBPCIDevice

        devices: list[USBPCIDevice] = []

        def make(nbytes: int, fmt: str) -> MMIOView:
            dev = USBPCIDevice("T", MockASM24Bridge(), f"usb:conf-{len(devices)}")
            devices.append(dev)
            return dev.map_bar(5, off=0x100, size=nbytes, fmt=fmt)

        return make


class TestUSBXdataMMIO(MMIOConformance):
    """Controller XDATA through the simulated bridge (0xE4/0xE5 requests)."""

    @pytest.fixture
    def make_view(self) -> MakeView:
        from tg.drivers.mock.usb import MockASM24Bridge
        from tg.drivers.usb import USBMMIO, ASM24Controller

        return lambda nbytes, fmt: USBMMIO(
            ASM24Controller(MockASM24Bridge(link_up=True)), 0x1000, nbytes, fmt, pcimem=False
        )
