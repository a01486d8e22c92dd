"""GPU memory of the AM driver (amd.md 5.4): physical VRAM, the GPU virtual address space, 4-level page tables.

- :class:`RangeAllocator`: a segregated-fit allocator (TLSF's first level: free blocks binned by power-of-two size,
  neighbours coalesced on free) for VRAM pages and GPU virtual addresses.
- :class:`MemoryManager`: physical VRAM below the top 64 MiB (reserved for firmware), of which the first 32 MiB are
  the *boot region*: allocations there (PSP, IH, MQDs, the root page table) come in a fixed order, so a partial boot
  finds them where the previous session left them; GPU virtual addresses from one range shared by every AM device
  (base 0x2000_0000_0000, 2^44 bytes); page tables of 512 u64 entries per 4 KiB (levels PDB2, PDB1, PDB0, PTB with
  shifts 39/30/21/12), written through the VRAM BAR.

PTE (gfx10/11): ``VALID[0] SYSTEM[1] SNOOPED[2] EXECUTABLE[4] READABLE[5] WRITEABLE[6] FRAG[11:7]``, address
[47:12], ``MTYPE[50:48]`` (3 = uncached), ``PDE_PTE[54]`` (a PDB0/PDB1 entry that maps a 2 MiB / 1 GiB page).
Allocations of 8 MiB or more use 2 MiB pages. Host pages are mapped ``SYSTEM|SNOOPED`` uncached at their bus address.
After every change ``on_change`` runs (the HDP flush and TLB invalidations of tg.runtime.amd.am.gmc).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PTE", "Mapping", "MemoryManager", "RangeAllocator"]

PAGE = 0x1000
HUGE = 2 << 20
VA_BASE, VA_SIZE = 0x2000_0000_0000, 1 << 44
BOOT_SIZE = 32 << 20
RESERVED_TOP = 64 << 20
SHIFTS = (39, 30, 21, 12)  # PDB2, PDB1, PDB0, PTB
ENTRIES = 512
ADDR_MASK = 0x0000_FFFF_FFFF_F000


class PTE:
    """Page table entry bits (gfx10/11)."""

    VALID, SYSTEM, SNOOPED, EXECUTABLE, READABLE, WRITEABLE = 1 << 0, 1 << 1, 1 << 2, 1 << 4, 1 << 5, 1 << 6
    FRAG_SHIFT, MTYPE_SHIFT, MTYPE_UC = 7, 48, 3
    PDE_PTE = 1 << 54
    RWX = EXECUTABLE | READABLE | WRITEABLE


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


class RangeAllocator:
    """Allocates aligned ranges of ``[base, base + size)``. Free blocks are binned by the power of two below their
    size; an allocation searches the bins that can hold it, splits the block it takes, and ``free`` merges a block
    with free neighbours. MemoryError names the request and the space left."""

    def __init__(self, size: int, base: int = 0, name: str = "memory") -> None:
        self.base, self.size, self.name = base, size, name
        self.bins: list[set[int]] = [set() for _ in range(65)]
        self.free_blocks: dict[int, int] = {}  # start -> size
        self.free_ends: dict[int, int] = {}  # end -> start
        self.used: dict[int, tuple[int, int]] = {}  # allocation -> (block start, block end)
        self.free_bytes = 0
        self._insert(base, size)

    def _insert(self, start: int, size: int) -> None:
        self.free_blocks[start] = size
        self.free_ends[start + size] = start
        self.bins[size.bit_length() - 1].add(start)
        self.free_bytes += size

    def _remove(self, start: int) -> int:
        size = self.free_blocks.pop(start)
        del self.free_ends[start + size]
        self.bins[size.bit_length() - 1].discard(start)
        self.free_bytes -= size
        return size

    def alloc(self, size: int, align: int = PAGE) -> int:
        """The start of ``size`` bytes aligned to ``align`` (a power of two)."""
        if size <= 0 or align <= 0 or align & (align - 1):
            raise ValueError(f"{self.name}: cannot allocate {size} bytes aligned to {align}")
        for b in range((size.bit_length() - 1), 65):
            for start in sorted(self.bins[b]):
                bsize = self.free_blocks[start]
                at = _round_up(start, align)
                if at + size <= start + bsize:
                    self._remove(start)
                    if at > start:
                        self._insert(start, at - start)
                    if at + size < start + bsize:
                        self._insert(at + size, start + bsize - at - size)
                    self.used[at] = (at, at + size)
                    return at
        raise MemoryError(f"{self.name}: no free range of {size:#x} bytes aligned to {align:#x} "
                          f"({self.free_bytes:#x} of {self.size:#x} bytes free, fragmented)")  # fmt: skip

    def free(self, addr: int) -> None:
        """Return an allocation; it merges with free neighbours."""
        if addr not in self.used:
            raise ValueError(f"{self.name}: {addr:#x} is not an allocation")
        start, end = self.used.pop(addr)
        if end in self.free_blocks:
            end += self._remove(end)
        if start in self.free_ends:
            prev = self.free_ends[start]
            self._remove(prev)
            start = prev
        self._insert(start, end - start)


@dataclass
class Mapping:
    """A mapped GPU virtual range: ``va``, ``size``, its physical ``pages`` ((address, bytes) runs), whether they are
    host (``system``) pages, and whether the mapping owns them (VRAM from ``valloc``)."""

    va: int
    size: int
    pages: list[tuple[int, int]]
    system: bool = False
    uncached: bool = False
    owned: list[int] = field(default_factory=list)


class MemoryManager:
    """VRAM, GPU virtual addresses and page tables of one AM device (see the module docstring).

    ``vram`` is a byte view of VRAM (BAR0, or indirect access when the BAR is small) used to write page tables;
    ``on_change()`` runs after mappings change (flush HDP, invalidate TLBs)."""

    va_space = RangeAllocator(VA_SIZE, VA_BASE, "GPU virtual address space")  # one range for every AM device

    def __init__(self, vram: Any, vram_size: int, on_change: Callable[[], None] = lambda: None) -> None:
        if vram_size <= RESERVED_TOP + BOOT_SIZE:
            raise ValueError(f"VRAM of {vram_size:#x} bytes is too small for the AM driver")
        self.vram, self.vram_size, self.on_change = vram, vram_size, on_change
        self.boot_next = 0
        self.booting = True
        self.phys = RangeAllocator(vram_size - RESERVED_TOP - BOOT_SIZE, BOOT_SIZE, "VRAM")
        self.tables: dict[int, int] = {}  # page-table page -> its level
        self.root = self.palloc(PAGE, boot=True, zero=True)
        self.tables[self.root] = 0

    # ---- physical memory -------------------------------------------------------------------------------------------

    def palloc(self, size: int, align: int = PAGE, *, boot: bool = False, zero: bool = False) -> int:
        """``size`` bytes of VRAM (their offset). Boot allocations are only allowed while booting and come from the
        boot region in order (the same addresses every session)."""
        size = _round_up(size, PAGE)
        if boot:
            if not self.booting:
                raise RuntimeError("AM: a boot-region allocation after boot (it would move between sessions)")
            at = _round_up(self.boot_next, align)
            if at + size > BOOT_SIZE:
                raise MemoryError(f"AM boot region of {BOOT_SIZE:#x} bytes is full")
            self.boot_next = at + size
        else:
            at = self.phys.alloc(size, align)
        if zero:
            self.zero(at, size)
        return at

    def pfree(self, paddr: int) -> None:
        """Free VRAM from ``palloc`` (boot-region memory is never freed)."""
        if paddr >= BOOT_SIZE:
            self.phys.free(paddr)

    def zero(self, paddr: int, size: int) -> None:
        chunk = bytes(min(size, 1 << 20))
        for off in range(0, size, len(chunk)):
            self.vram.write(paddr + off, chunk[: min(len(chunk), size - off)])

    # ---- virtual memory --------------------------------------------------------------------------------------------

    @staticmethod
    def alloc_va(size: int, align: int = PAGE) -> int:
        """A GPU virtual range (shared by every AM device of the process)."""
        return MemoryManager.va_space.alloc(_round_up(size, PAGE), align)

    @staticmethod
    def free_va(va: int) -> None:
        MemoryManager.va_space.free(va)

    def valloc(self, size: int, *, uncached: bool = False) -> Mapping:
        """``size`` bytes of VRAM mapped at a new GPU virtual address (2 MiB pages from 8 MiB on)."""
        page = HUGE if size >= 8 << 20 else PAGE
        size = _round_up(size, page)
        paddr = self.palloc(size, page)
        try:
            va = self.alloc_va(size, page)
        except MemoryError:
            self.pfree(paddr)
            raise
        m = self.map_range(va, size, [(paddr, size)], uncached=uncached)
        m.owned.append(paddr)
        return m

    def vfree(self, m: Mapping) -> None:
        """Unmap and free a mapping from ``valloc`` (or unmap one from ``map_range``) and its virtual range."""
        self.unmap_range(m.va, m.size)
        for p in m.owned:
            self.pfree(p)
        self.free_va(m.va)

    def map_range(self, va: int, size: int, pages: Sequence[tuple[int, int]], *, system: bool = False,
                  snooped: bool = False, uncached: bool = False) -> Mapping:  # fmt: skip
        """Map ``[va, va + size)`` to the physical runs ``pages`` (VRAM offsets, or bus addresses when ``system``)."""
        if va % PAGE or size % PAGE or sum(n for _, n in pages) < size:
            raise ValueError(f"AM map of {size:#x} bytes at {va:#x}: unaligned, or the pages cover less")
        flags = PTE.VALID | PTE.RWX | (PTE.SYSTEM if system else 0) | (PTE.SNOOPED if snooped else 0)
        flags |= (PTE.MTYPE_UC << PTE.MTYPE_SHIFT) if uncached else 0
        pos = va
        for paddr, n in pages:
            n = min(n, va + size - pos)
            off = 0
            while off < n:
                huge = not system and (pos + off) % HUGE == 0 and (paddr + off) % HUGE == 0 and n - off >= HUGE
                step = HUGE if huge else PAGE
                self._set(pos + off, paddr + off, flags, huge)
                off += step
            pos += n
            if pos >= va + size:
                break
        self.on_change()
        return Mapping(va, size, list(pages), system, uncached)

    def unmap_range(self, va: int, size: int) -> None:
        """Remove the entries of ``[va, va + size)`` (tables stay allocated)."""
        pos = va
        while pos < va + size:
            table, idx, level = self._leaf(pos)
            if table is None:
                pos += 1 << SHIFTS[level]
                pos -= pos % (1 << SHIFTS[level])
                continue
            self.vram.view(table + 8 * idx, 8, "Q")[0] = 0
            pos += 1 << SHIFTS[level]
        self.on_change()

    def translate(self, va: int) -> tuple[int, bool] | None:
        """(physical address, is host memory) of ``va``, or None when unmapped."""
        table, idx, level = self._leaf(va)
        if table is None:
            return None
        pte = int(self.vram.view(table + 8 * idx, 8, "Q")[0])
        return (pte & ADDR_MASK) + (va - VA_BASE) % (1 << SHIFTS[level]), bool(pte & PTE.SYSTEM)

    # ---- tables ----------------------------------------------------------------------------------------------------

    @staticmethod
    def _index(va: int, level: int) -> int:
        if not VA_BASE <= va < VA_BASE + VA_SIZE:
            raise ValueError(f"{va:#x} is outside the AM GPU address range [{VA_BASE:#x}, {VA_BASE + VA_SIZE:#x})")
        return ((va - VA_BASE) >> SHIFTS[level]) & (ENTRIES - 1)

    def _entry(self, table: int, idx: int) -> int:
        return int(self.vram.view(table + 8 * idx, 8, "Q")[0])

    def _set(self, va: int, paddr: int, flags: int, huge: bool) -> None:
        table = self.root
        last = 2 if huge else 3
        for level in range(last):
            idx = self._index(va, level)
            e = self._entry(table, idx)
            if not e & PTE.VALID or e & PTE.PDE_PTE:
                child = self.palloc(PAGE, zero=True)
                self.tables[child] = level + 1
                self.vram.view(table + 8 * idx, 8, "Q")[0] = child | PTE.VALID
                table = child
            else:
                table = e & ADDR_MASK
        entry = (paddr & ADDR_MASK) | flags | (PTE.PDE_PTE if huge else 0) | ((9 if huge else 0) << PTE.FRAG_SHIFT)
        self.vram.view(table + 8 * self._index(va, last), 8, "Q")[0] = entry

    def _leaf(self, va: int) -> tuple[int | None, int, int]:
        """(table, index, level) of the entry mapping ``va``; table None when a level is missing at ``level``."""
        table = self.root
        for level in range(4):
            idx = self._index(va, level)
            e = self._entry(table, idx)
            if not e & PTE.VALID:
                return None, idx, level
            if level == 3 or e & PTE.PDE_PTE:
                return table, idx, level
            table = e & ADDR_MASK
        return None, 0, 3
