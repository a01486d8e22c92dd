"""MockPCIDevice as a simulator: config space, BAR sizing, REBAR, BAR views, DMA memory, violations, reset, locks."""

from __future__ import annotations

import pytest

from tg.drivers.errors import DeviceBusyError, MockAccessError
from tg.drivers.mmio import BufferMMIO, ModelMMIO
from tg.drivers.mock import BarSpec, DwordRegisterFile, MockPCIDevice


def test_config_space_layout() -> None:
    dev = MockPCIDevice(
        "T",
        vendor=0x10DE,
        device=0x2684,
        class_code=0x030200,
        revision=0xA1,
        bars={0: BarSpec(16 << 20), 1: BarSpec(256 << 20, is64=True, prefetch=True)},
    )
    assert dev.read_config(0, 4) == 0x268410DE
    assert dev.read_config(8, 4) == 0x030200A1 and dev.read_config(0x0E, 1) == 0
    assert dev.read_config(0x10, 4) == 0x8000_0000  # 32-bit, non-prefetchable: type bits 0
    assert dev.read_config(0x14, 4) & 0xF == 0xC  # 64-bit prefetchable
    assert (dev.read_config(0x18, 4) << 32 | dev.read_config(0x14, 4) & ~0xF) == dev.bar_info(1)[0] == 0x50_0000_0000
    dev.write_config(0, 0xFFFF, 2)  # ids are read-only
    assert dev.read_config(0, 2) == 0x10DE
    dev.write_config(0x04, 0x6, 2)
    assert dev.read_config(0x04, 2) == 0x6
    assert dev.bar_info(2) == (0, 0) and dev.read_config(0x1C, 4) == 0


def test_bar_sizing_protocol() -> None:
    dev = MockPCIDevice("T", bars={0: BarSpec(256 << 20, is64=True, prefetch=True), 5: BarSpec(1 << 20)})
    dev.write_config(0x24, 0xFFFFFFFF, 4)
    assert dev.read_config(0x24, 4) == 0xFFF00000
    dev.write_config(0x24, 0xD000_0000, 4)
    assert dev.bar_info(5) == (0xD000_0000, 1 << 20)
    dev.write_config(0x10, 0xFFFFFFFF, 4)
    dev.write_config(0x14, 0xFFFFFFFF, 4)
    assert dev.read_config(0x10, 4) == 0xF000000C and dev.read_config(0x14, 4) == 0xFFFFFFFF
    dev.write_config(0x10, 0x0, 4)
    dev.write_config(0x14, 0x8, 4)
    assert dev.bar_info(0) == (0x8_0000_0000, 256 << 20)
    dev.write_config(0x24, 0x1234_5678, 4)  # low bits below the BAR size are not writable
    assert dev.bar_info(5)[0] == 0x1230_0000


def test_rebar_capability_and_resize() -> None:
    dev = MockPCIDevice("T", rebar={0: [256 << 20, 512 << 20, 2 << 30]})
    assert dev.read_config(0x100, 4) == 0x15 | 1 << 16
    assert dev.read_config(0x104, 4) == (1 << 12) | (1 << 13) | (1 << 15)
    ctrl = dev.read_config(0x108, 4)
    assert ctrl & 0x7 == 0 and (ctrl >> 5) & 0x7 == 1 and (ctrl >> 8) & 0x1F == 8
    dev.write_config(0x108, (ctrl & ~0x1F00) | 9 << 8, 4)
    assert dev.bar_info(0)[1] == 512 << 20
    dev.write_config(0x108, (ctrl & ~0x1F00) | 10 << 8, 4)  # 1 GiB is not supported
    assert dev.bar_info(0)[1] == 512 << 20 and "unsupported size" in dev.violations[-1]
    dev.resize_bar(0)
    assert dev.bar_info(0)[1] == 2 << 30
    dev.map_bar(0, off=(2 << 30) - 4).write32(0, 7)
    with pytest.raises(RuntimeError, match="Cannot resize BAR 5"):
        dev.resize_bar(5)


def test_map_bar_views_and_bounds() -> None:
    model = DwordRegisterFile(0x2000, log_size=4)
    dev = MockPCIDevice("T", bars={2: BarSpec(0x1000), 5: BarSpec(0x2000, backing=model)})
    assert isinstance(dev.map_bar(2), BufferMMIO) and isinstance(dev.map_bar(5), ModelMMIO)
    v = dev.map_bar(5, off=0x100, size=0x10, fmt="I")
    v[1] = 0x55
    assert model.peek(0x104) == 0x55 and list(model.log)[-1] == ("w", 0x104, 4, 0x55)
    for kwargs in [dict(off=0x1000, size=0x1001), dict(off=0x2001), dict(off=-1)]:
        with pytest.raises(ValueError):
            dev.map_bar(5, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="absent"):
        dev.map_bar(0)
    with pytest.raises(IndexError):
        v[4]
    assert len(dev.violations) == 5  # every refused access was recorded
    assert dev.bars[5].backing is model


def test_model_errors_are_recorded() -> None:
    model = DwordRegisterFile(0x100, strict=True)
    dev = MockPCIDevice("T", bars={5: BarSpec(0x100, backing=model)})
    with pytest.raises(MockAccessError):
        dev.map_bar(5).read32(0x10)
    assert "unmodelled register 0x10" in dev.violations[0]


def test_sysmem_paddrs_and_dma() -> None:
    dev = MockPCIDevice("T")
    view, paddrs = dev.alloc_sysmem(0x1800)
    assert len(paddrs) == 2 and all(p % 4096 == 0 and p >= 0x1_0000_0000 for p in paddrs)
    assert paddrs[1] != paddrs[0] + 4096  # scattered pages catch code that assumes contiguity
    cview, cpaddrs = dev.alloc_sysmem(0x3000, contiguous=True)
    assert cpaddrs == [cpaddrs[0] + 4096 * i for i in range(3)]
    dev.dma_write(cpaddrs[0] + 4090, b"0123456789")  # crosses a page boundary of a contiguous allocation
    assert cview.read(4090, 10) == b"0123456789"
    view.write(0x1000, b"host")
    assert dev.dma_read(paddrs[1], 4) == b"host"
    with pytest.raises(MockAccessError, match="unmapped bus address"):
        dev.dma_write(paddrs[0] + 4094, b"abcd")  # the next bus page is not part of the allocation
    assert view.read(4094, 2) == b"\x00\x00"  # validated before anything was written
    with pytest.raises(MockAccessError, match="past the end"):
        dev.dma_read(paddrs[1] + 0x7FF, 2)
    dev.free_sysmem(view)
    with pytest.raises(MockAccessError):
        dev.dma_read(paddrs[0], 1)
    with pytest.raises(ValueError, match="2 MiB"):
        dev.alloc_sysmem(3 << 20, contiguous=True)


def test_reset_calls_models_and_counts() -> None:
    model = DwordRegisterFile(0x100)
    model.poke(0, 5)
    dev = MockPCIDevice("T", bars={5: BarSpec(0x100, backing=model)})
    dev.reset()
    assert dev.reset_count == 1 and model.peek(0) == 0


def test_locking_and_close() -> None:
    dev = MockPCIDevice("AM", "mock:7")
    with pytest.raises(DeviceBusyError, match=r"am_mock:7.lock"):
        MockPCIDevice("AM", "mock:7")
    MockPCIDevice("AM", "mock:7", lock=False).close()
    dev.close()
    with MockPCIDevice("AM", "mock:7") as again:
        assert again.read_config(0, 2) == 0x1002
    with pytest.raises(RuntimeError, match="closed"):
        again.map_bar(5)


def test_shared_violation_list_and_validation() -> None:
    shared: list[str] = []
    a = MockPCIDevice("T", "mock:a", violations=shared)
    b = MockPCIDevice("T", "mock:b", violations=shared)
    with pytest.raises(ValueError):
        a.read_config(4096, 1)
    with pytest.raises(ValueError):
        b.write_config(0, 1 << 8, 1)
    assert len(shared) == 2
    with pytest.raises(ValueError, match="power of two"):
        MockPCIDevice("T", "mock:c", bars={0: BarSpec(100)})
    with pytest.raises(ValueError, match="overlaps"):
        MockPCIDevice("T", "mock:c", bars={0: BarSpec(4096, is64=True), 1: BarSpec(4096)})
    with pytest.raises(ValueError, match="not among"):
        MockPCIDevice("T", "mock:c", rebar={0: [1 << 30]})
    with pytest.raises(ValueError, match="buffer has"):
        MockPCIDevice("T", "mock:c", bars={0: BarSpec(4096, backing=bytearray(16))})


def test_make_backend_factories_share_models() -> None:
    model = DwordRegisterFile(0x1000)
    backend = MockPCIDevice.make_backend([{"bars": {5: BarSpec(0x1000, backing=model)}}])
    ((factory, name),) = backend(0x1002, ((0xFFFF, (0x744C,)),), 0x03)
    assert name == "mock:0" and "MockPCIDevice" in repr(factory)
    with factory("SV", name) as dev:
        dev.map_bar(5).write32(0, 9)
    with factory("SV", name) as dev:
        assert dev.map_bar(5).read32(0) == 9
    assert backend(0x1002, ((0xFFFF, (0x744C,)),), 0x02) == []


def test_shared_sysmem_is_visible_through_the_fd() -> None:
    import mmap
    import os

    with pytest.raises(NotImplementedError, match="not supported"):
        MockPCIDevice("T", "mock:noshare").alloc_sysmem_shared(4096)
    dev = MockPCIDevice("T", shared_sysmem=True)
    fd, view, paddrs = dev.alloc_sysmem_shared(5000)
    try:
        assert len(paddrs) == 2 and view.nbytes == 5000
        other = mmap.mmap(fd, 8192)  # what a client process maps
        view.write(0, b"from the device side")
        assert other[:20] == b"from the device side"
        other[4096:4100] = b"host"
        assert dev.dma_read(paddrs[1], 4) == b"host"
        other.close()
    finally:
        os.close(fd)
    dev.free_sysmem(view)
    with pytest.raises(MockAccessError):
        dev.dma_read(paddrs[0], 1)
