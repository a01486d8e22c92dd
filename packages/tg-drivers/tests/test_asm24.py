"""ASM24Controller over MockASM24Bridge: link bring-up, config/memory TLPs, retries, completion errors, streaming,
the SRAM engine and XDATA chunking."""

from __future__ import annotations

import re

import pytest

from tg.drivers.errors import LinkDownError, MockAccessError, PCIeCompletionError, ShortReadError
from tg.drivers.mock import BarSpec, DwordRegisterFile, MockPCIDevice
from tg.drivers.mock.usb import MockASM24Bridge
from tg.drivers.usb import USBMMIO, ASM24Controller


def _ctrl(**kwargs: object) -> tuple[ASM24Controller, MockASM24Bridge]:
    bridge = MockASM24Bridge(link_up=True, **kwargs)  # type: ignore[arg-type]
    return ASM24Controller(bridge, sleep=lambda s: None), bridge


def test_link_up_path_powers_on() -> None:
    bridge = MockASM24Bridge()
    assert bridge.ltssm == 0
    ASM24Controller(bridge)
    assert bridge.ltssm == 0x78
    assert [r[:2] for r in bridge.requests] == [(0xE4, 0xB450), (0xF3, 1), (0xE4, 0xB450)]
    bridge.requests.clear()
    ASM24Controller(bridge)  # already up: no power request
    assert [r[0] for r in bridge.requests] == [0xE4]


def test_link_never_up() -> None:
    sleeps: list[float] = []
    with pytest.raises(LinkDownError, match=r"PCIe link not up \(LTSSM=0x00\), custom firmware not ready"):
        ASM24Controller(MockASM24Bridge(link_never_up=True), link_wait_s=0.05, sleep=sleeps.append)
    assert issubclass(LinkDownError, RuntimeError)


@pytest.mark.parametrize("size", [1, 2, 4])
def test_config_read_write_byte_enables(size: int) -> None:
    ctrl, bridge = _ctrl()
    for offset in range(0, 5 - size):
        bridge.tlps.clear()
        value = 0xA5A5A5A5 & ((1 << (8 * size)) - 1)
        ctrl.pcie_cfg_req(0x40 + offset, bus=4, value=value, size=size)
        assert ctrl.pcie_cfg_req(0x40 + offset, bus=4, size=size) == value
        be = ((1 << size) - 1) << offset
        (wfmt, waddr, wbe, wval), (rfmt, raddr, rbe, _) = bridge.tlps
        assert (wfmt, rfmt) == (0x45, 0x05) and waddr == raddr == (4 << 24) | 0x40
        assert wbe == rbe == be and wval == value << (8 * offset)
    with pytest.raises(ValueError, match="cross a dword"):
        ctrl.pcie_cfg_req(0x42, bus=4, size=4)


def test_type0_for_the_bridge_type1_beyond() -> None:
    ctrl, bridge = _ctrl()
    assert ctrl.pcie_cfg_req(0, bus=0) == 0x24631B21
    assert ctrl.pcie_cfg_req(0, bus=4) == 0x744C1002
    assert [t[0] for t in bridge.tlps] == [0x04, 0x05]
    assert ctrl.pcie_cfg_req(0x0E, bus=2, size=1) == 1  # bridges have type-1 headers
    assert bridge.violations == []
    for bad in [dict(byte_addr=4096), dict(byte_addr=0, bus=256), dict(byte_addr=0, dev=32), dict(byte_addr=0, fn=8)]:
        with pytest.raises(ValueError):
            ctrl.pcie_cfg_req(**bad)  # type: ignore[arg-type]


def test_unsupported_request_for_missing_function() -> None:
    ctrl, _ = _ctrl()
    with pytest.raises(PCIeCompletionError, match=r"TLP completion status: Unsupported Request: 0x4080000") as e:
        ctrl.pcie_cfg_req(0, bus=4, dev=1)
    assert e.value.status == 0b001


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (0b001, "Unsupported Request: 0x"),
        (0b010, "Config Retry"),
        (0b100, "Completer Abort"),
        (0b110, "Reserved (0b110)"),
    ],
)
def test_completion_status_texts(status: int, text: str) -> None:
    ctrl, _ = _ctrl(completion_status={(4 << 24) | 0x10: status})
    with pytest.raises(PCIeCompletionError, match=re.escape(f"TLP completion status: {text}")):
        ctrl.pcie_cfg_req(0x10, bus=4)


def test_retries_then_success_and_exhaustion() -> None:
    ctrl, bridge = _ctrl(fail_next_completions=3)
    assert ctrl.pcie_cfg_req(0, bus=4) == 0x744C1002
    assert len(bridge.tlps) == 4  # the whole request was re-issued
    ctrl, bridge = _ctrl(fail_next_completions=11)
    with pytest.raises(PCIeCompletionError, match=r"TLP error after retries: ret_status=1, address=0x4000000") as e:
        ctrl.pcie_cfg_req(0, bus=4)
    assert e.value.status is None and len(bridge.tlps) == 11


def _enabled_gpu() -> tuple[ASM24Controller, MockASM24Bridge, DwordRegisterFile]:
    regs = DwordRegisterFile(0x1000, log_size=32)
    gpu = MockPCIDevice("G", "mock:g", lock=False, bars={0: BarSpec(0x1000, backing=regs)})
    ctrl, bridge = _ctrl(gpu=gpu)
    ctrl.pcie_cfg_req(0x04, bus=4, value=0x6, size=2)
    return ctrl, bridge, regs


def test_memory_write_is_posted_and_read_completes() -> None:
    ctrl, bridge, regs = _enabled_gpu()
    base, _ = bridge.gpu.bar_info(0)
    bridge.requests.clear()
    ctrl.pcie_request(0x60, base + 0x10, value=0xCAFEF00D, size=4)
    assert [r[0] for r in bridge.requests] == [0xF0]  # no 0xF0 IN for a posted write
    assert regs.peek(0x10) == 0xCAFEF00D
    assert ctrl.pcie_request(0x20, base + 0x12, size=2) == 0xCAFE
    assert ctrl.pcie_request(0x20, base + 0x13, size=1) == 0xCA
    ctrl.pcie_request(0x60, base + 0x11, value=0x77, size=1)
    assert regs.peek(0x10) == 0xCAFE770D


def test_memory_read_of_unassigned_address() -> None:
    ctrl, _, _ = _enabled_gpu()
    with pytest.raises(PCIeCompletionError, match="Unsupported Request: 0x1234"):
        ctrl.pcie_request(0x20, 0x1234)


def test_streaming_read_write_and_length_checks() -> None:
    ctrl, bridge, regs = _enabled_gpu()
    base, _ = bridge.gpu.bar_info(0)
    ctrl.pcie_mem_write(base + 0x20, bytes(range(16)))
    assert ctrl.pcie_mem_read(base + 0x20, 16) == bytes(range(16))
    assert ("w", 0x20, 16, int.from_bytes(bytes(range(16)), "little")) in regs.log
    ctrl.pcie_mem_write(base, b"")  # empty is a no-op
    with pytest.raises(ValueError, match="4-byte aligned"):
        ctrl.pcie_mem_write(base, b"abc")
    with pytest.raises(ValueError, match="4-byte aligned"):
        ctrl.pcie_mem_read(base + 2, 4)
    (_, value, index, _) = bridge.requests[-1]
    assert index in (1, 2) and value == 0x20 | (0x0F << 8)


def test_streaming_splits_at_one_mib() -> None:
    gpu = MockPCIDevice("G", "mock:big", lock=False, bars={0: BarSpec(4 << 20)})
    ctrl, bridge = _ctrl(gpu=gpu)
    ctrl.pcie_cfg_req(0x04, bus=4, value=0x2, size=2)
    base, _ = gpu.bar_info(0)
    data = bytes(range(256)) * (5 << 10)  # 1.25 MiB
    ctrl.pcie_mem_write(base, data)
    assert ctrl.pcie_mem_read(base, len(data)) == data
    streams = [r for r in bridge.requests if r[0] == 0xF0 and r[2] in (1, 2)]
    assert len(streams) == 4


def test_sram_write_and_read_arm_math() -> None:
    ctrl, bridge = _ctrl()
    cases = {
        1: (1, 0x100),
        512: (1, 0x100),
        513: (2, 0x100),
        0x4000: (0x20, 0x100),
        0x4001: (0x21, 0x200),
        0x80000: (0x400, 0x2000),
    }
    for size, (sectors, slots_index) in cases.items():
        bridge.requests.clear()
        ctrl.scsi_write(b"\x5a" * size)
        assert bridge.requests[0] == (0xF2, sectors, slots_index, 0)
        assert bytes(bridge.sram[:size]) == b"\x5a" * size
        bridge.requests.clear()
        ctrl.scsi_read_arm(size)
        assert bridge.requests[0] == (0xF2, sectors | 0x8000, slots_index, 0)
        assert ctrl.scsi_read(size) == b"\x5a" * size
    bridge.requests.clear()
    ctrl.scsi_write(b"\x01" * 10, slot_start=16)
    assert bridge.requests[0] == (0xF2, 1, 16 | 0x100, 0) and bridge.sram[256 << 10] == 1
    with pytest.raises(ValueError, match="exceeds the 512 KiB SRAM"):
        ctrl.scsi_write(b"\x00" * 0x4001, slot_start=31)


def test_xdata_chunking_and_bounds() -> None:
    ctrl, bridge = _ctrl()
    bridge.requests.clear()
    ctrl.write(0x2000, bytes(range(200)) * 3)
    assert len(bridge.requests) == 600 and bridge.requests[1] == (0xE5, 0x2001, 1, 0)
    bridge.requests.clear()
    assert ctrl.read(0x2000, 600) == bytes(range(200)) * 3
    assert [(r[1], r[3]) for r in bridge.requests] == [(0x2000, 255), (0x20FF, 255), (0x21FE, 90)]
    with pytest.raises(ValueError, match="64 KiB XDATA"):
        ctrl.read(0xFFFF, 2)


def test_usbmmio_sram_window() -> None:
    ctrl, bridge = _ctrl()
    whole = USBMMIO(ctrl, 0xF000, 0x10000, pcimem=False)
    whole.write(0, b"abcd" * 10)
    assert whole.read(0, 40) == b"abcd" * 10
    second = USBMMIO(ctrl, 0xF000 + 0x4000, 0x1000, pcimem=False)
    second.write(0, b"slot1")
    assert bytes(bridge.sram[0x4000:0x4005]) == b"slot1"
    assert second.read(1, 4) == b"lot1"  # reads at an offset return the right bytes
    with pytest.raises(ValueError, match="16 KiB slot boundary"):
        second.write(4, b"x")
    with pytest.raises(ValueError, match="exceeds"):
        USBMMIO(ctrl, 0xF000, 0x80001, pcimem=False)
    with pytest.raises(ValueError, match="exceeds"):
        USBMMIO(ctrl, 0xE000, 0x2000, pcimem=False)


def test_short_usb_reads_raise_instead_of_returning_less_data() -> None:
    """Issue 29 finding 9: a 0x1000-byte read through the bridge returned 2048 bytes without any error."""
    ctrl, bridge = _ctrl()
    bridge.sram[:0x1000] = bytes(range(256)) * 16
    sram = USBMMIO(ctrl, 0xF000, 0x10000, pcimem=False)
    assert sram.read(0, 0x1000) == bytes(bridge.sram[:0x1000])  # complete transfers still work
    bridge.short_reads = 2048
    with pytest.raises(ShortReadError, match=r"SRAM read returned 0x800 of 0x1000 bytes"):
        sram.read(0, 0x1000)
    with pytest.raises(ShortReadError, match="SRAM read"):
        ctrl.scsi_read_arm(0x1000)
        ctrl.scsi_read(0x1000)
    bridge.gpu.write_config(0x04, 0x2, 2)  # memory decoding on, BAR0 at its reset address
    bridge.short_reads = 8
    with pytest.raises(ShortReadError, match="pcie_mem_read short read"):
        ctrl.pcie_mem_read(bridge.gpu.bar_info(0)[0], 0x1000)
    bridge.short_reads = 100
    with pytest.raises(ShortReadError, match="XDATA read at 0x2000 returned 100 of 255 bytes"):
        ctrl.read(0x2000, 300)
    bridge.short_reads = 7
    with pytest.raises(ShortReadError, match="0xF0 IN"):
        ctrl.pcie_cfg_req(0, bus=4)


def test_mmio_views_refuse_a_backend_that_returns_the_wrong_length() -> None:
    from tg.drivers.mmio import MMIOView

    class Truncating(MMIOView):  # a backend that drops data: the view must not hand out a short result
        def _read_bytes(self, off: int, n: int) -> bytes:
            return bytes(n // 2)

    view = Truncating(0x1000, "I")
    for read in (lambda: view.read(0, 0x1000), lambda: view[0:4], lambda: view[3], lambda: view.read32(8)):
        with pytest.raises(ShortReadError, match=r"Truncating: read of 0x\w+ bytes at offset 0x\w+ returned"):
            read()
    assert view.read(0, 0) == b""


def test_bridge_dma_windows() -> None:
    ctrl, bridge = _ctrl()
    bridge.dma_write(0x200010, b"gpu!")
    ctrl.scsi_read_arm(512)
    assert ctrl.scsi_read(0x14)[0x10:] == b"gpu!"
    bridge.dma_write(0x820800, b"\x01\x02")
    assert ctrl.read(0xA800, 2) == b"\x01\x02"
    assert bridge.dma_read(0x822000, 2) == b"\x00\x00"
    with pytest.raises(Exception, match="hits no bridge memory"):
        bridge.dma_read(0x900000, 4)


def test_bridge_rejects_protocol_misuse() -> None:
    _, bridge = _ctrl()
    with pytest.raises(MockAccessError, match="without a pending non-posted TLP"):
        bridge.control_read(0xF0, 8)
    bridge.control_write(0xF2, value=1, index=0x100)
    with pytest.raises(MockAccessError, match="bulk OUT of 4 bytes, 512 were armed"):
        bridge.bulk_write(b"abcd")
    with pytest.raises(MockAccessError, match="without an armed read"):
        bridge.bulk_read(4)
    with pytest.raises(MockAccessError, match="unknown vendor request"):
        bridge.control_write(0x99)
    bridge.control_write(0xF0, value=0x60 | 0xF << 8, data=(0x1234).to_bytes(4, "little") + bytes(8))
    assert "posted memory write to undecoded address 0x1234 dropped" in bridge.violations[-1]


def test_async_transfers_complete_through_bulk_wait() -> None:
    _, bridge = _ctrl()
    tag = bridge.control_write_async(0xE5, value=0x3000, index=0x42)
    bridge.bulk_wait(tag)
    tag, data = bridge.control_read_async(0xE4, 1, value=0x3000)
    bridge.bulk_wait(tag)
    assert bytes(data) == b"\x42"
    with pytest.raises(MockAccessError, match="unknown tag"):
        bridge.bulk_wait(tag)
