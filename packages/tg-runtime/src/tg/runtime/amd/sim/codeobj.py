"""Minimal reader of gfx1100 relocatable code objects for the emulator's own tests and `launch`.

It places the allocatable PROGBITS sections in one image, applies the AMDGPU relocations of amd.md 2.3 and finds
each kernel's entry and 64-byte descriptor. (The device path loads code objects with tg.runtime.amd.program.)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tg.runtime.amd.sim.decode import EmulatorError

R_AMDGPU_ABS64, R_AMDGPU_REL64, R_AMDGPU_REL32_LO, R_AMDGPU_REL32_HI = 3, 5, 10, 11
SHT_PROGBITS, SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHF_ALLOC = 1, 2, 4, 8, 2


@dataclass(frozen=True)
class KernelInfo:
    """A kernel of a loaded image: entry offset, descriptor offset and the descriptor's 64 bytes."""

    name: str
    entry: int
    size: int
    kd_offset: int
    descriptor: bytes

    @property
    def group_segment_size(self) -> int:
        return struct.unpack_from("<I", self.descriptor, 0x00)[0]

    @property
    def private_segment_size(self) -> int:
        return struct.unpack_from("<I", self.descriptor, 0x04)[0]

    @property
    def kernarg_size(self) -> int:
        return struct.unpack_from("<I", self.descriptor, 0x08)[0]

    @property
    def rsrc1(self) -> int:
        return struct.unpack_from("<I", self.descriptor, 0x30)[0]

    @property
    def rsrc2(self) -> int:
        return struct.unpack_from("<I", self.descriptor, 0x34)[0]

    @property
    def code_properties(self) -> int:
        return struct.unpack_from("<H", self.descriptor, 0x38)[0]


@dataclass(frozen=True)
class CodeImage:
    """A code object laid out for execution at address 0 (add the load address to every offset)."""

    image: bytes
    text_offset: int
    text_size: int
    kernels: dict[str, KernelInfo]


def load_code_object(blob: bytes) -> CodeImage:
    """Lay out a gfx1100 relocatable code object (ELF64, EM_AMDGPU) and find its kernels."""
    if blob[:4] != b"\x7fELF" or blob[4] != 2 or blob[5] != 1:
        raise EmulatorError("not a 64-bit little-endian ELF code object")
    e_machine = struct.unpack_from("<H", blob, 18)[0]
    if e_machine != 0xE0:
        raise EmulatorError(f"not an AMDGPU code object (e_machine=0x{e_machine:x})")
    e_shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", blob, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    shstr = secs[e_shstrndx]

    def sname(off: int, strsec: tuple) -> str:
        start = strsec[4] + off
        return blob[start : blob.index(b"\0", start)].decode()

    names = [sname(s[0], shstr) for s in secs]
    placed: dict[int, int] = {}
    size = 0
    for i, s in enumerate(secs):
        if s[1] in (SHT_PROGBITS, SHT_NOBITS) and s[2] & SHF_ALLOC:
            align = max(s[8], 256 if names[i] == ".text" else 1)
            size = (size + align - 1) // align * align
            placed[i] = size
            size += s[5]
    image = bytearray(size)
    for i, off in placed.items():
        if secs[i][1] == SHT_PROGBITS:
            image[off : off + secs[i][5]] = blob[secs[i][4] : secs[i][4] + secs[i][5]]
    symtab_i = next((i for i, s in enumerate(secs) if s[1] == SHT_SYMTAB), None)
    if symtab_i is None:
        raise EmulatorError("code object has no symbol table")
    symtab, strtab = secs[symtab_i], secs[secs[symtab_i][6]]
    syms = []
    for k in range(symtab[5] // 24):
        st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", blob, symtab[4] + k * 24)
        syms.append((sname(st_name, strtab), st_info, st_shndx, st_value, st_size))

    def sym_addr(k: int) -> int:
        name, _, shndx, value, _ = syms[k]
        if shndx == 0 or shndx not in placed:
            raise EmulatorError(f"code object references undefined symbol {name}")
        return placed[shndx] + value

    for s in secs:
        if s[1] != SHT_RELA or s[7] not in placed:
            continue
        for k in range(s[5] // 24):
            r_off, r_info, r_add = struct.unpack_from("<QQq", blob, s[4] + k * 24)
            where = placed[s[7]] + r_off
            S, kind = sym_addr(r_info >> 32), r_info & 0xFFFFFFFF
            if kind == R_AMDGPU_REL64:
                struct.pack_into("<q", image, where, S + r_add - where)
            elif kind == R_AMDGPU_ABS64:
                struct.pack_into("<Q", image, where, S + r_add)
            elif kind == R_AMDGPU_REL32_LO:
                struct.pack_into("<I", image, where, (S + r_add - where) & 0xFFFFFFFF)
            elif kind == R_AMDGPU_REL32_HI:
                struct.pack_into("<I", image, where, ((S + r_add - where) >> 32) & 0xFFFFFFFF)
            else:
                raise EmulatorError(f"unsupported AMDGPU relocation type {kind}")
    text_i = names.index(".text")
    kernels = {}
    by_name = {name: (info, shndx, value, sz) for name, info, shndx, value, sz in syms}
    for name, (info, shndx, _value, sz) in by_name.items():
        if info & 0xF == 2 and (name + ".kd") in by_name and shndx in placed:  # STT_FUNC with a descriptor
            _, kshndx, kvalue, _ = by_name[name + ".kd"]
            kd_off = placed[kshndx] + kvalue
            kd = bytes(image[kd_off : kd_off + 64])
            entry = kd_off + struct.unpack_from("<q", kd, 0x10)[0]
            kernels[name] = KernelInfo(name, entry, sz, kd_off, kd)
    return CodeImage(bytes(image), placed[text_i], secs[text_i][5], kernels)
