"""A loader for relocatable ELF objects (`e_type = REL`) without a linker: sections, symbols, relocations.

`ElfObject(data)` parses a 64-bit little-endian ELF file; `link(obj, base, ...)` lays its allocated sections out in
one image (each at its alignment) and applies the RELA relocations for a load address `base`, so the image can be
copied to `base` and run. Two relocation tables are known: x86-64 (`R_X86_64_64/PC32/PLT32/PC64`, for CPU:LLVM) and
AMDGPU (`R_AMDGPU_ABS64/REL32_LO/REL32_HI/REL64`, for GPU code objects). A reference to an undefined symbol (a
library function) or a relocation of another kind raises CompileError naming the kernel and the symbol: tg kernels
call nothing. `load_executable(image)` maps an image into executable host memory (read/write, then read/execute).
"""

from __future__ import annotations

import ctypes
import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass

from tg.runtime.device import CompileError

ET_REL = 1
EM_X86_64, EM_AARCH64, EM_AMDGPU = 62, 183, 224
SHT_PROGBITS, SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 1, 2, 4, 8, 9
SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4
SHN_UNDEF, SHN_ABS = 0, 0xFFF1
STT_SECTION = 3


class ElfError(CompileError):
    """An object file that is not a relocatable ELF tg can load; the message says which field is wrong."""


@dataclass(frozen=True)
class Section:
    """One section header (and its bytes; NOBITS sections have none)."""

    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int
    data: bytes


@dataclass(frozen=True)
class Symbol:
    """One symbol table entry (`shndx` 0 is undefined, 0xFFF1 absolute)."""

    name: str
    value: int
    size: int
    type: int
    bind: int
    shndx: int


@dataclass(frozen=True)
class Relocation:
    """One RELA entry: patch `section` (a section index) at `offset` with `type`, `symbol` and `addend`."""

    section: int
    offset: int
    type: int
    symbol: int
    addend: int


class ElfObject:
    """A parsed 64-bit little-endian ELF file: header fields, sections, symbols and RELA relocations."""

    def __init__(self, data: bytes, what: str = "object file") -> None:
        self.data, self.what = bytes(data), what
        if len(self.data) < 64 or self.data[:4] != b"\x7fELF":
            raise ElfError(f"{what} is not an ELF file (magic {self.data[:4]!r})")
        if self.data[4] != 2 or self.data[5] != 1:
            raise ElfError(f"{what}: only 64-bit little-endian ELF is supported (class {self.data[4]}, "
                           f"data {self.data[5]})")  # fmt: skip
        self.osabi, self.abi_version = self.data[7], self.data[8]
        (self.type, self.machine, _, _, _, shoff, self.flags, _, _, _, shentsize, shnum, shstrndx) = struct.unpack_from(
            "<HHIQQQIHHHHHH", self.data, 16
        )
        if shentsize != 64 or shoff + shnum * 64 > len(self.data):
            raise ElfError(f"{what}: section headers out of bounds ({shnum} at {shoff})")
        raw = [struct.unpack_from("<IIQQQQIIQQ", self.data, shoff + i * 64) for i in range(shnum)]
        names = self._bytes(raw[shstrndx][4], raw[shstrndx][5]) if shstrndx < shnum else b""
        self.sections: list[Section] = []
        for i, (name, typ, flags, _, off, size, link, info, align, entsize) in enumerate(raw):
            data = b"" if typ == SHT_NOBITS else self._bytes(off, size)
            self.sections.append(
                Section(i, _cstr(names, name), typ, flags, off, size, link, info, align, entsize, data)
            )
        self.symbols: list[Symbol] = []
        for sec in self.sections:
            if sec.type == SHT_SYMTAB:
                strtab = self.sections[sec.link].data
                for off in range(0, sec.size, 24):
                    name, info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", sec.data, off)
                    sym_name = _cstr(strtab, name)
                    if info & 0xF == STT_SECTION and shndx < len(self.sections):
                        sym_name = self.sections[shndx].name
                    self.symbols.append(Symbol(sym_name, value, size, info & 0xF, info >> 4, shndx))
        self.relocations: list[Relocation] = []
        for sec in self.sections:
            if sec.type == SHT_REL:
                raise ElfError(f"{what}: REL relocations (section {sec.name}) are not supported, only RELA")
            if sec.type == SHT_RELA and self.sections[sec.info].flags & SHF_ALLOC:
                for off in range(0, sec.size, 24):
                    r_off, r_info, addend = struct.unpack_from("<QQq", sec.data, off)
                    self.relocations.append(Relocation(sec.info, r_off, r_info & 0xFFFFFFFF, r_info >> 32, addend))

    def _bytes(self, off: int, size: int) -> bytes:
        if off + size > len(self.data):
            raise ElfError(f"{self.what}: section data out of bounds ({size} bytes at {off})")
        return self.data[off : off + size]

    def symbol(self, name: str) -> Symbol | None:
        """The defined symbol called `name`, or None."""
        return next((s for s in self.symbols if s.name == name and s.shndx != SHN_UNDEF), None)

    def section(self, name: str) -> Section | None:
        """The section called `name`, or None."""
        return next((s for s in self.sections if s.name == name), None)


def _cstr(table: bytes, off: int) -> str:
    end = table.find(b"\0", off)
    return table[off : end if end >= 0 else len(table)].decode(errors="replace")


# relocation kinds: type -> (name, byte width, pc-relative, part) with part "" (all), "lo" / "hi" (32-bit halves)
RelocKind = tuple[str, int, bool, str]
X86_64_RELOCATIONS: dict[int, RelocKind] = {
    1: ("R_X86_64_64", 8, False, ""), 2: ("R_X86_64_PC32", 4, True, ""), 4: ("R_X86_64_PLT32", 4, True, ""),
    24: ("R_X86_64_PC64", 8, True, ""),
}  # fmt: skip
AMDGPU_RELOCATIONS: dict[int, RelocKind] = {
    3: ("R_AMDGPU_ABS64", 8, False, ""), 5: ("R_AMDGPU_REL64", 8, True, ""),
    10: ("R_AMDGPU_REL32_LO", 4, True, "lo"), 11: ("R_AMDGPU_REL32_HI", 4, True, "hi"),
}  # fmt: skip


@dataclass
class LinkedImage:
    """An object's allocated sections in one image for load address `base`: `image` bytes, the offset of each
    section in it, and the image offset of each defined symbol."""

    image: bytes
    base: int
    section_offsets: dict[int, int]
    symbols: dict[str, int]


def layout(obj: ElfObject, min_align: Callable[[Section], int] = lambda s: 1) -> tuple[dict[int, int], int]:
    """(image offset of each allocated section, image size): sections in file order, each at its alignment (at least
    `min_align(section)`)."""
    offsets, end = {}, 0
    for sec in obj.sections:
        if sec.flags & SHF_ALLOC and sec.size:
            align = max(sec.align, min_align(sec), 1)
            end = (end + align - 1) // align * align
            offsets[sec.index] = end
            end += sec.size
    return offsets, end


def link(obj: ElfObject, relocations: dict[int, RelocKind], kernel: str, base: int = 0,
         min_align: Callable[[Section], int] = lambda s: 1) -> LinkedImage:  # fmt: skip
    """Lay out `obj`'s allocated sections and apply its relocations for load address `base`.

    Raises CompileError for an undefined symbol (`kernel <kernel> references undefined symbol <name>`) and for a
    relocation type missing from `relocations`."""
    offsets, size = layout(obj, min_align)
    image = bytearray(size)
    for idx, off in offsets.items():
        sec = obj.sections[idx]
        if sec.type != SHT_NOBITS:
            image[off : off + sec.size] = sec.data
    symbols = {s.name: offsets[s.shndx] + s.value for s in obj.symbols if s.shndx in offsets and s.name}
    for r in obj.relocations:
        if r.section not in offsets:
            continue
        sym = obj.symbols[r.symbol] if r.symbol < len(obj.symbols) else None
        if sym is None or (sym.shndx == SHN_UNDEF and r.symbol != 0):
            name = sym.name if sym is not None else f"#{r.symbol}"
            raise CompileError(f"kernel {kernel} references undefined symbol {name}; tg kernels must not call library "
                               "functions")  # fmt: skip
        if (kind := relocations.get(r.type)) is None:
            raise CompileError(f"kernel {kernel}: unsupported relocation type {r.type} against {sym.name or '?'} in "
                               f"section {obj.sections[r.section].name}")  # fmt: skip
        name, width, pcrel, part = kind
        if sym.shndx == SHN_ABS:
            s = sym.value
        elif sym.shndx in offsets:
            s = base + offsets[sym.shndx] + sym.value
        elif r.symbol == 0:
            s = 0
        else:
            raise CompileError(
                f"kernel {kernel}: relocation {name} against {sym.name!r} in a section that is not loaded"
            )
        p = base + offsets[r.section] + r.offset
        value = s + r.addend - (p if pcrel else 0)
        if part == "hi":
            value >>= 32
        if width == 4 and part == "" and not -(2**31) <= value < 2**31:
            raise CompileError(f"kernel {kernel}: {name} against {sym.name!r} does not fit in 32 bits ({value:#x})")
        at = offsets[r.section] + r.offset
        if at + width > len(image):
            raise CompileError(f"kernel {kernel}: relocation {name} at {r.offset:#x} is outside its section")
        image[at : at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return LinkedImage(bytes(image), base, offsets, symbols)


# *** executable host memory ***

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int


class ExecutableMemory:
    """Host memory holding machine code: written while read/write, then made read/execute (never both)."""

    def __init__(self, size: int) -> None:
        self.size = max(size, 1)
        self._map = mmap.mmap(-1, self.size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                              prot=mmap.PROT_READ | mmap.PROT_WRITE)  # fmt: skip
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self._sealed = False

    def write(self, data: bytes) -> None:
        """Copy `data` to the start of the memory and make it executable (once)."""
        if self._sealed:
            raise RuntimeError("executable memory is already sealed")
        self._map[: len(data)] = data
        if _libc.mprotect(ctypes.c_void_p(self.addr), self.size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            raise OSError(ctypes.get_errno(), "mprotect(PROT_READ|PROT_EXEC) failed for kernel code")
        self._sealed = True


def load_executable(obj: ElfObject, kernel: str) -> tuple[ExecutableMemory, dict[str, int]]:
    """Link an x86-64 object at a fresh executable mapping; returns the mapping and the address of every symbol."""
    if obj.type != ET_REL or obj.machine != EM_X86_64:
        raise ElfError(f"kernel {kernel}: expected an x86-64 relocatable object, got e_type {obj.type}, "
                       f"e_machine {obj.machine}")  # fmt: skip
    _, size = layout(obj)
    mem = ExecutableMemory(size)
    linked = link(obj, X86_64_RELOCATIONS, kernel, base=mem.addr)
    mem.write(linked.image)
    return mem, {name: mem.addr + off for name, off in linked.symbols.items()}
