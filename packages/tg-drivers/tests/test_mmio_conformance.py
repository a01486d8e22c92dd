"""The MMIO conformance suite (tg.drivers.testing.MMIOConformance) run over every local view backend.

Other backends join by subclassing MMIOConformance with their own ``make_view`` fixture (see tg.drivers.testing).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

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


def bar_windows(open_device: Callable[[int], Any], bar: int, off: int) -> MakeView:
    """Views at `off` in BAR `bar` of a new device per view (`open_device(n)` opens the n-th; all stay alive)."""
    devices: list[Any] = []

    def make(nbytes: int, fmt: str) -> MMIOView:
        devices.append(dev := open_device(len(devices)))
        return dev.map_bar(bar, off=off, size=nbytes, fmt=fmt)

    return make


class TestMockBarMMIO(MMIOConformance):
    """A window in the middle of a mock device's BAR (so offsets are really relative)."""

    @pytest.fixture
    def make_view(self) -> MakeView:
        return bar_windows(lambda n: MockPCIDevice("T", f"mock:conf{n}", bars={2: BarSpec(4096)}), 2, 256)


class TestMockModelBarMMIO(MMIOConformance):
    @pytest.fixture
    def make_view(self) -> MakeView:
        def open_device(n: int) -> MockPCIDevice:  # a register file of its own per device
            return MockPCIDevice("T", f"mock:model{n}", bars={5: BarSpec(4096, backing=DwordRegisterFile(4096))})

        return bar_windows(open_device, 5, 1024)


class TestUSBPCIeMMIO(MMIOConformance):
    """A BAR window through the simulated USB bridge (streaming TLPs; 4-byte aligned only)."""

    @pytest.fixture
    def make_view(self) -> MakeView:
        from tg.drivers.mock.usb import MockASM24Bridge
        from tg.drivers.usb import USBPCIDevice

        return bar_windows(lambda n: USBPCIDevice("T", MockASM24Bridge(), f"usb:conf-{n}"), 5, 0x100)


class TestUSBXdataMMIO(MMIOConformance):
    """Controller XDATA through the simulated bridge (0xE4/0xE5 requests)."""

    @pytest.fixture
    def make_view(self) -> MakeView:
        from tg.drivers.mock.usb import MockASM24Bridge
        from tg.drivers.usb import USBMMIO, ASM24Controller

        return lambda nbytes, fmt: USBMMIO(
            ASM24Controller(MockASM24Bridge(link_up=True)), 0x1000, nbytes, fmt, pcimem=False
        )
