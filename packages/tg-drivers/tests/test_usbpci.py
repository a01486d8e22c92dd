"""USBPCIDevice over MockASM24Bridge: bus and BAR setup, REBAR, BAR access, SRAM sysmem, locking, discovery."""

from __future__ import annotations

import pytest

from tg.drivers.errors import DeviceBusyError
from tg.drivers.mock import BarSpec, DwordRegisterFile, MockPCIDevice
from tg.drivers.mock.usb import MockASM24Bridge, MockUSBContext
from tg.drivers.usb import USB3, USBMMIO, USBPCIDevice


def _gpu(regs: DwordRegisterFile | None = None) -> MockPCIDevice:
    return MockPCIDevice(
        "G",
        "mock:usbgpu",
        lock=False,
        rebar={0: [256 << 20, 1 << 30, 4 << 30]},
        bars={0: BarSpec(256 << 20, is64=True, prefetch=True), 2: BarSpec(8 << 10), 5: BarSpec(1 << 20, backing=regs)},
    )


@pytest.fixture
def setup() -> tuple[USBPCIDevice, MockASM24Bridge, DwordRegisterFile]:
    regs = DwordRegisterFile(1 << 20, log_size=8)
    bridge = MockASM24Bridge(_gpu(regs))
    return USBPCIDevice("AM", bridge, "usb:3-2"), bridge, regs


def test_bridge_bus_numbers_windows_and_command(setup: tuple[USBPCIDevice, MockASM24Bridge, DwordRegisterFile]) -> None:
    _, bridge, _ = setup
    for b, cfg in enumerate(bridge.bridges):
        assert list(cfg[0x18:0x1B]) == [0, b + 1, 4]
        assert int.from_bytes(cfg[0x20:0x22], "little") == 0x1000 and cfg[0x22:0x24] == b"\xff\xff"
        assert int.from_bytes(cfg[0x24:0x26], "little") == 0 and int.from_bytes(cfg[0x28:0x2C], "little") == 8
        assert cfg[0x04] == 0x7
    assert bridge.gpu.read_config(0x04, 2) == 0x7
    assert bridge.violations == []


def test_bar_assignment_and_rebar(setup: tuple[USBPCIDevice, MockASM24Bridge, DwordRegisterFile]) -> None:
    dev, bridge, _ = setup
    assert dev.bar_info(0) == (0x8_0000_0000, 4 << 30)  # resized to the largest REBAR size first
    assert dev.bar_info(2) == (0x1000_0000, 8 << 10)
    assert dev.bar_info(5) == (0x1020_0000, 1 << 20)  # BAR2's slot is rounded up to 2 MiB
    assert dev.bar_info(1) == (0, 0) and dev.bar_info(3) == (0, 0)
    ctrl = bridge.gpu.read_config(0x108, 4)
    assert (ctrl >> 8) & 0x1F == 12  # 2^12 MiB
    assert bridge.gpu.bar_info(5) == (0x1020_0000, 1 << 20)  # the GPU itself sees the programmed addresses
    dev.resize_bar(0)  # no-op
    assert dev.peer_group == "USBPCIDevice_usb:3-2"


def test_config_access_goes_to_the_gpu(setup: tuple[USBPCIDevice, MockASM24Bridge, DwordRegisterFile]) -> None:
    dev, bridge, _ = setup
    assert dev.read_config(0, 4) == 0x744C1002 and dev.read_config(2, 2) == 0x744C and dev.read_config(0x0B, 1) == 3
    dev.write_config(0x4D, 0x5A, 1)
    assert bridge.gpu.read_config(0x4C, 4) == 0x5A00
    with pytest.raises(ValueError, match="crosses a dword"):
        dev.read_config(0x4E, 4)
    with pytest.raises(ValueError, match="outside"):
        dev.read_config(4096, 1)


def test_map_bar_reaches_the_register_model(setup: tuple[USBPCIDevice, MockASM24Bridge, DwordRegisterFile]) -> None:
    dev, _, regs = setup
    regs.on_read(0x5A3A4, lambda: 0x12345678)
    bar5 = dev.map_bar(5)
    assert isinstance(bar5, USBMMIO) and bar5.nbytes == 1 << 20
    assert bar5.read32(0x5A3A4) == 0x12345678
    bar5.write32(0x100, 0xAABBCCDD)
    assert regs.peek(0x100) == 0xAABBCCDD
    assert list(regs.log)[-2:] == [("r", 0x5A3A4, 4, 0x12345678), ("w", 0x100, 4, 0xAABBCCDD)]
    window = dev.map_bar(5, off=0x1000)
    assert window.nbytes == (1 << 20) - 0x1000  # default size subtracts the offset
    with pytest.raises(ValueError, match="4-byte aligned"):
        bar5.read(1, 4)
    with pytest.raises(ValueError, match="4-byte aligned"):
        bar5[3]  # single bytes cannot be read over the bridge
    with pytest.raises(ValueError, match="exceeds the BAR size"):
        dev.map_bar(5, off=0x1000, size=1 << 20)


def test_alloc_sysmem_uses_sram(setup: tuple[USBPCIDevice, MockASM24Bridge, DwordRegisterFile]) -> None:
    dev, bridge, _ = setup
    view, paddrs = dev.alloc_sysmem(0x2800)
    assert paddrs == [0x200000, 0x201000, 0x202000]
    view.write(0, b"ring")
    assert bytes(bridge.sram[:4]) == b"ring" and bridge.dma_read(paddrs[0], 4) == b"ring"
    bridge.dma_write(paddrs[0] + 4, b"done")
    assert view.read(0, 8) == b"ringdone"
    _, second = dev.alloc_sysmem(0x100)
    assert second == [0x203000]
    dev.free_sysmem(view)  # no-op
    with pytest.raises(RuntimeError, match="Out of memory"):
        dev.alloc_sysmem(0x80000)
    with pytest.raises(ValueError, match="2 MiB"):
        dev.alloc_sysmem(3 << 20, contiguous=True)


def test_reset_is_not_available(setup: tuple[USBPCIDevice, MockASM24Bridge, DwordRegisterFile]) -> None:
    dev, _, _ = setup
    with pytest.raises(NotImplementedError, match="not available through the USB bridge"):
        dev.reset()


def test_lock_taken_before_touching_the_bridge() -> None:
    first = USBPCIDevice("AM", MockASM24Bridge(), "usb:1-1")
    other = MockASM24Bridge()
    with pytest.raises(DeviceBusyError, match=r"am_usb:1-1.lock"):
        USBPCIDevice("AM", other, "usb:1-1")
    assert not other.requests
    first.close()
    USBPCIDevice("AM", other, "usb:1-1").close()


def test_mock_usb_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    bridge = MockASM24Bridge()
    name = MockUSBContext.register(bridge, 0x3801, 0x0001)
    try:
        monkeypatch.setenv("TG_DRIVERS_BACKEND", "mock")
        assert USB3.list_devices(0x3801, 0x0001) == [(bridge, name)]
        assert USB3.list_devices(0xADD1, 0x0001) == []
        ((dev, found),) = USB3.list_devices(0x3801, 0x0001)
        with USBPCIDevice("AF", dev, found) as gpu:
            assert gpu.read_config(0, 2) == 0x1002
    finally:
        MockUSBContext.clear()
