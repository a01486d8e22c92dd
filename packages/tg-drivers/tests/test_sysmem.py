"""Native DMA memory: pagemap validation and expansion, compaction check, allocation through LinuxPCIDevice."""

from __future__ import annotations

import errno
import io
import mmap
import os
from typing import Any

import pytest

from tg.drivers.pci import LinuxPCIDevice, sysmem

PRESENT = 1 << 63
BUS = "0000:03:00.0"


@pytest.fixture
def no_compaction(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "compact_unevictable_allowed"
    path.write_text("0\n")
    monkeypatch.setattr(sysmem, "COMPACT_UNEVICTABLE_PATH", str(path))
    return str(path)


def test_expand_paddrs_per_4k_page_and_truncation() -> None:
    entries = [PRESENT | 5, PRESENT | 9]
    assert sysmem.expand_paddrs(entries, 5000, page_size=4096) == [5 * 4096, 9 * 4096]
    assert sysmem.expand_paddrs(entries, 4096, page_size=4096) == [5 * 4096]
    # 16 KiB system pages expand into four 4 KiB bus addresses each
    assert sysmem.expand_paddrs([PRESENT | 3], 3 * 4096 + 1, page_size=16384) == [
        3 * 16384,
        3 * 16384 + 4096,
        3 * 16384 + 8192,
        3 * 16384 + 12288,
    ]
    assert sysmem.expand_paddrs([PRESENT | 3 | (1 << 55)], 1, page_size=4096) == [3 * 4096]  # flag bits ignored


def test_zero_pfn_is_a_permission_error() -> None:
    with pytest.raises(PermissionError, match="requires CAP_SYS_ADMIN"):
        sysmem.expand_paddrs([PRESENT], 4096)


def test_absent_page_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not present"):
        sysmem.expand_paddrs([7], 4096)


def test_compaction_knob_is_set_or_explained(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "knob"
    path.write_text("1\n")
    monkeypatch.setattr(sysmem, "COMPACT_UNEVICTABLE_PATH", str(path))
    sysmem.check_compact_unevictable()
    assert path.read_text() == "0"
    path.write_text("1\n")

    def read_only_open(p: str, mode: str = "r", *a: Any, **k: Any) -> Any:
        if "w" in mode:
            raise PermissionError(13, "Permission denied", p)
        return io.StringIO("1\n")

    monkeypatch.setattr(sysmem, "open", read_only_open, raising=False)
    with pytest.raises(RuntimeError, match=r"sudo sh -c 'echo 0 > .*knob'"):
        sysmem.check_compact_unevictable()


def test_contiguous_limit(fake_sysfs: Any, no_compaction: str) -> None:
    fake_sysfs.add_device(BUS)
    with LinuxPCIDevice("AM", BUS) as dev:
        with pytest.raises(ValueError, match="contiguous system memory is limited to 2 MiB"):
            dev.alloc_sysmem((2 << 20) + 1, contiguous=True)
        with pytest.raises(ValueError, match="positive"):
            dev.alloc_sysmem(0)


def test_alloc_with_fake_pagemap(fake_sysfs: Any, no_compaction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_sysfs.add_device(BUS)
    seen: list[tuple[int, int]] = []

    def fake_pagemap(vaddr: int, npages: int) -> list[int]:
        seen.append((vaddr, npages))
        return [PRESENT | (0x1000 + 2 * i) for i in range(npages)]

    monkeypatch.setattr(sysmem, "read_pagemap", fake_pagemap)
    with LinuxPCIDevice("AM", BUS) as dev:
        view, paddrs = dev.alloc_sysmem(3 * 4096 + 10)
        page = mmap.PAGESIZE
        assert len(paddrs) == 4 and paddrs[0] == 0x1000 * page
        assert seen and seen[0][0] % page == 0
        view.write32(0, 0x12345678)
        assert view.read(0, 4) == bytes([0x78, 0x56, 0x34, 0x12]) and view.nbytes == 3 * 4096 + 10
        dev.free_sysmem(view)
        with pytest.raises(ValueError, match="not returned by alloc_sysmem"):
            dev.free_sysmem(view)
        with pytest.raises(RuntimeError, match="no longer mapped"):
            view.read32(0)
        kept, _ = dev.alloc_sysmem(4096)
    with pytest.raises(RuntimeError, match="no longer mapped"):
        kept.write32(0, 1)  # closing the device unmapped it


def test_unprivileged_pagemap_raises_and_unmaps(
    fake_sysfs: Any, no_compaction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_sysfs.add_device(BUS)
    monkeypatch.setattr(sysmem, "read_pagemap", lambda vaddr, npages: [PRESENT] * npages)  # what the kernel gives
    unmapped: list[int] = []
    lib = sysmem.libc()
    real_unmap = lib.unmap
    monkeypatch.setattr(lib, "unmap", lambda addr, length: (unmapped.append(length), real_unmap(addr, length)))
    with LinuxPCIDevice("AM", BUS) as dev, pytest.raises(PermissionError, match="/proc/self/pagemap requires CAP_SYS_"):
        dev.alloc_sysmem(8192)
    assert unmapped == [8192]


def test_real_pagemap_gives_addresses_or_the_permission_error(fake_sysfs: Any, no_compaction: str) -> None:
    fake_sysfs.add_device(BUS)
    with LinuxPCIDevice("AM", BUS) as dev:
        try:
            view, paddrs = dev.alloc_sysmem(8192)
        except PermissionError as e:
            assert "CAP_SYS_ADMIN" in str(e)
            return
        except OSError as e:  # locked memory limit in a constrained container: the hint must say so
            assert "ulimit -l" in str(e) or "cap_ipc_lock" in str(e)
            return
        assert len(paddrs) == 2 and all(p % 4096 == 0 and p > 0 for p in paddrs)
        view.write(0, b"dma!")
        assert view.read(0, 4) == b"dma!"


def test_shared_alloc_with_fake_pagemap(fake_sysfs: Any, no_compaction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    fake_sysfs.add_device(BUS)
    monkeypatch.setattr(sysmem, "read_pagemap", lambda vaddr, npages: [PRESENT | (7 + i) for i in range(npages)])
    with LinuxPCIDevice("AM", BUS) as dev:
        fd, view, paddrs = dev.alloc_sysmem_shared(4096 + 1)
        try:
            page = mmap.PAGESIZE
            assert paddrs[0] == 7 * page and len(paddrs) == 2
            view.write(0, b"shared")
            other = mmap.mmap(fd, page)
            assert other[:6] == b"shared"
            other.close()
        finally:
            os.close(fd)
        dev.free_sysmem(view)
        with pytest.raises(NotImplementedError, match="contiguous"):
            dev.alloc_sysmem_shared(2 * mmap.PAGESIZE, contiguous=True)


@pytest.mark.parametrize(
    ("err", "contiguous", "hint"),
    [
        (errno.ENOMEM, True, r"Failed to mmap 0x200000 bytes.*reserve hugepages: echo N > /proc/sys/vm/nr_hugepages"),
        (errno.EAGAIN, False, r"Failed to mmap 0x2000 bytes.*`ulimit -l` \(locked memory\) or grant cap_ipc_lock"),
        (errno.EPERM, False, r"ulimit -l.*cap_ipc_lock"),
    ],
)
def test_mmap_failures_carry_a_hint(
    no_compaction: str, monkeypatch: pytest.MonkeyPatch, err: int, contiguous: bool, hint: str
) -> None:
    lib = sysmem.libc()

    def fail(addr: int, length: int, *args: int) -> int:
        raise OSError(err, f"Failed to mmap {length:#x} bytes at {addr:#x}: {os.strerror(err)}")

    monkeypatch.setattr(lib, "map", fail)
    with pytest.raises(OSError, match=hint) as e:
        sysmem.alloc_locked_memory(8192, contiguous=contiguous)
    assert e.value.errno == err
    if not contiguous:  # the memfd path (MAP_SYSMEM_FD) gives the same hints and closes its fd
        with pytest.raises(OSError, match=hint):
            sysmem.alloc_locked_shared(8192)
