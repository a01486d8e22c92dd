"""DMA-able host memory on Linux: locked, populated anonymous mappings and their physical addresses.

Physical addresses come from ``/proc/self/pagemap``. Without ``CAP_SYS_ADMIN`` the kernel reports PFN 0 for every
page; we detect that and raise ``PermissionError`` instead of handing a device the bus address 0. The kernel must not
migrate locked pages (``/proc/sys/vm/compact_unevictable_allowed`` must be 0); we check it and never call sudo.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct

from tg.drivers.errors import native_permission_error
from tg.drivers.mmio import HostMMIO
from tg.drivers.pci.base import MAX_CONTIGUOUS_SYSMEM, PAGE_SIZE_4K

__all__ = [
    "COMPACT_UNEVICTABLE_PATH",
    "PAGEMAP_PATH",
    "LibC",
    "alloc_locked_memory",
    "alloc_locked_shared",
    "check_compact_unevictable",
    "expand_paddrs",
    "libc",
    "read_pagemap",
    "system_paddrs",
]

PAGEMAP_PATH = "/proc/self/pagemap"
COMPACT_UNEVICTABLE_PATH = "/proc/sys/vm/compact_unevictable_allowed"

PROT_READ, PROT_WRITE = mmap.PROT_READ, mmap.PROT_WRITE
MAP_SHARED, MAP_ANONYMOUS, MAP_FIXED = 0x01, 0x20, 0x10
MAP_LOCKED, MAP_POPULATE, MAP_HUGETLB = 0x2000, 0x8000, 0x40000
MADV_DONTFORK = 10
PFN_MASK = (1 << 55) - 1
PAGE_PRESENT = 1 << 63


class LibC:
    """The few libc calls we need (mmap/munmap/madvise), with errno, loaded on first use."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(None, use_errno=True)
        self.mmap = lib.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        self.munmap = lib.munmap
        self.munmap.restype = ctypes.c_int
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.madvise = lib.madvise
        self.madvise.restype = ctypes.c_int
        self.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def map(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
        """``mmap``; raises OSError (with errno) on failure and returns the address."""
        res = self.mmap(addr or None, length, prot, flags, fd, offset)
        if res is None or res == ctypes.c_void_p(-1).value:
            err = ctypes.get_errno()
            raise OSError(err, f"Failed to mmap {length:#x} bytes at {addr:#x}: {os.strerror(err)}")
        return int(res)

    def unmap(self, addr: int, length: int) -> None:
        """``munmap``; raises OSError on failure."""
        if self.munmap(addr, length) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"munmap of {length:#x} bytes at {addr:#x} failed: {os.strerror(err)}")


_libc: LibC | None = None


def libc() -> LibC:
    """The process-wide :class:`LibC` (loaded lazily)."""
    global _libc
    if _libc is None:
        _libc = LibC()
    return _libc


def check_compact_unevictable() -> None:
    """Make sure the kernel does not migrate locked pages; try to set it, else raise with the command to run."""
    try:
        with open(COMPACT_UNEVICTABLE_PATH) as f:
            value = f.read().strip()
    except FileNotFoundError:
        return  # older kernels have no such knob and never migrate locked pages
    if value == "0":
        return
    try:
        with open(COMPACT_UNEVICTABLE_PATH, "w") as f:
            f.write("0")
    except OSError as e:
        raise RuntimeError(
            f"{COMPACT_UNEVICTABLE_PATH} is {value}: the kernel may move locked DMA pages. Run "
            f"`sudo sh -c 'echo 0 > {COMPACT_UNEVICTABLE_PATH}'` ({e})"
        ) from e


def read_pagemap(vaddr: int, npages: int) -> list[int]:
    """Raw pagemap entries (u64) for ``npages`` system pages starting at virtual address ``vaddr``."""
    page = mmap.PAGESIZE
    try:
        fd = os.open(PAGEMAP_PATH, os.O_RDONLY | os.O_CLOEXEC)
    except PermissionError as e:
        raise native_permission_error("read physical addresses", PAGEMAP_PATH, e) from e
    try:
        data = os.pread(fd, 8 * npages, (vaddr // page) * 8)
    finally:
        os.close(fd)
    if len(data) != 8 * npages:
        raise OSError(f"short read from {PAGEMAP_PATH}: {len(data)} of {8 * npages} bytes")
    return list(struct.unpack(f"<{npages}Q", data))


def expand_paddrs(entries: list[int], size: int, page_size: int | None = None) -> list[int]:
    """Validate pagemap entries and turn them into one bus address per 4 KiB page, ``ceil(size/4096)`` of them."""
    page = page_size or mmap.PAGESIZE
    paddrs: list[int] = []
    for i, entry in enumerate(entries):
        pfn = entry & PFN_MASK
        if not entry & PAGE_PRESENT:
            raise RuntimeError(f"page {i} of a locked DMA allocation is not present (pagemap entry {entry:#x})")
        if pfn == 0:
            raise PermissionError(
                f"reading physical addresses from {PAGEMAP_PATH} requires CAP_SYS_ADMIN (the kernel reported PFN 0): "
                "run as root or grant cap_sys_admin (sudo setcap 'cap_dac_override,cap_sys_rawio,cap_sys_admin,"
                "cap_ipc_lock=ep' <path to python>)"
            )
        paddrs.extend(pfn * page + off for off in range(0, page, PAGE_SIZE_4K))
    return paddrs[: -(-size // PAGE_SIZE_4K)]


def system_paddrs(vaddr: int, size: int) -> list[int]:
    """Bus addresses (one per 4 KiB page) of the locked memory ``[vaddr, vaddr+size)``."""
    page = mmap.PAGESIZE
    first = vaddr - vaddr % page
    npages = -(-(vaddr + size - first) // page)
    return expand_paddrs(read_pagemap(first, npages), size)


def _with_mmap_hint(e: OSError, hugepage: bool) -> OSError:
    """The OSError of a failed locked mmap, with what to do about it appended."""
    hint = ""
    if e.errno == errno.ENOMEM and hugepage:
        hint = "; reserve hugepages: echo N > /proc/sys/vm/nr_hugepages"
    elif e.errno in (errno.EAGAIN, errno.EPERM, errno.ENOMEM):
        hint = "; raise `ulimit -l` (locked memory) or grant cap_ipc_lock"
    return OSError(e.errno, f"{e.strerror}{hint}")


def alloc_locked_memory(size: int, vaddr: int = 0, contiguous: bool = False) -> tuple[HostMMIO, list[int], int]:
    """Map locked, populated shared anonymous memory; return ``(view, paddrs, mapped_length)``.

    ``contiguous`` (at most 2 MiB) uses one huge page when more than one page is needed, which is physically
    contiguous. The mapping is released again if physical addresses cannot be read.
    """
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"system memory size must be a positive int, got {size!r}")
    if contiguous and size > MAX_CONTIGUOUS_SYSMEM:
        raise ValueError(f"contiguous system memory is limited to 2 MiB, {size:#x} bytes requested")
    check_compact_unevictable()
    page = mmap.PAGESIZE
    length = -(-size // page) * page
    flags = MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE | MAP_LOCKED | (MAP_FIXED if vaddr else 0)
    if contiguous and length > page:
        flags |= MAP_HUGETLB
        length = MAX_CONTIGUOUS_SYSMEM
    lib = libc()
    try:
        addr = lib.map(vaddr, length, PROT_READ | PROT_WRITE, flags, -1, 0)
    except OSError as e:
        raise _with_mmap_hint(e, hugepage=bool(flags & MAP_HUGETLB)) from e
    try:
        paddrs = system_paddrs(addr, size)
    except BaseException:
        lib.unmap(addr, length)
        raise
    return HostMMIO(addr, size, "B"), paddrs, length


def alloc_locked_shared(size: int) -> tuple[int, HostMMIO, list[int], int]:
    """Locked memory backed by a memfd another process can map: ``(fd, view, paddrs, mapped_length)``.

    The caller owns ``fd``. Physically contiguous shared memory is not supported.
    """
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"system memory size must be a positive int, got {size!r}")
    check_compact_unevictable()
    length = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
    fd = os.memfd_create("tg-sysmem", os.MFD_CLOEXEC)
    lib = libc()
    try:
        os.ftruncate(fd, length)
        try:
            addr = lib.map(0, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE | MAP_LOCKED, fd, 0)
        except OSError as e:
            raise _with_mmap_hint(e, hugepage=False) from e
        try:
            paddrs = system_paddrs(addr, size)
        except BaseException:
            lib.unmap(addr, length)
            raise
    except BaseException:
        os.close(fd)
        raise
    return fd, HostMMIO(addr, size, "B"), paddrs, length
