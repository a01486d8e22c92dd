"""The relocatable-ELF loader and AMD code objects, on committed objects of both producers (fixtures/codeobj:
LLVM 22 through llvmlite, Debian's clang-15; `make_fixtures.py` there regenerates them). No llvmlite needed."""

from __future__ import annotations

import ctypes
import platform
import struct
from pathlib import Path

import pytest

from tg.runtime.amd.program import CodeObject, KernelDescriptor, kernarg_layout
from tg.runtime.device import CompileError
from tg.runtime.elf import AMDGPU_RELOCATIONS, ElfError, ElfObject, link, load_executable

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "codeobj"
X86_64 = platform.machine().lower() in ("x86_64", "amd64")


def _obj(name: str) -> bytes:
    return (FIXTURES / f"{name}.o").read_bytes()


# *** AMD code objects ***


@pytest.mark.parametrize(
    "fixture, kernel, abi, nbufs, nvars",
    [("clang15_add", "add", 2, 2, 1), ("llvm22_lds", "lds", 4, 2, 1), ("llvm22_table", "table", 4, 1, 1)],
)
def test_code_object_header_descriptor_and_kernargs(
    fixture: str, kernel: str, abi: int, nbufs: int, nvars: int
) -> None:
    co = CodeObject(_obj(fixture), kernel)
    assert co.elf.abi_version == abi and co.elf.flags & 0xFF == 0x41
    kd = co.descriptor
    assert kd.wave32 and kd.kernarg_pointer and kd.kernarg_preload == 0
    assert kd.kernarg_size == kernarg_layout(nbufs, nvars)[1] == 8 * nbufs + 4 * nvars
    co.check_kernargs(nbufs, nvars)
    with pytest.raises(CompileError, match="kernarg_size"):
        co.check_kernargs(nbufs + 1, nvars)
    assert kd.workgroup_id_enabled[0] or kernel == "table"  # ids are loaded only when the kernel reads them
    assert kd.vgprs % 8 == 0 and 0 < kd.vgprs <= 256
    # the code starts on a 256-byte boundary, the descriptor is in .rodata (64-byte aligned)
    assert co.entry_offset % 256 == 0 and co.kd_offset % 64 == 0


def test_llvm22_descriptor_fields_match_the_kernel() -> None:
    lds = CodeObject(_obj("llvm22_lds"), "lds").descriptor
    assert lds.group_segment_fixed_size == 64 * 4  # the 64-float LDS array
    assert lds.private_segment_fixed_size == 0 and not lds.scratch_enabled
    assert lds.ieee_mode and lds.dx10_clamp and lds.float_mode == 0xF0  # denormals kept for f32 and f16/f64
    assert lds.compute_pgm_rsrc1 >> 29 == 0b111  # wgp_mode, mem_ordered, fwd_progress (amd.md: 0xE0AF0000 family)
    clang = CodeObject(_obj("clang15_add"), "add").descriptor
    assert clang.user_sgprs == 15 and clang.workgroup_id_enabled == (True, False, False)
    assert clang.kernel_code_properties == 0x0408  # kernarg pointer + wave32 (amd.md 2.3, observed)


@pytest.mark.parametrize("fixture, kernel", [("clang15_add", "add"), ("llvm22_table", "table")])
def test_relocated_entry_and_pc_relative_data_at_any_base(fixture: str, kernel: str) -> None:
    co = CodeObject(_obj(fixture), kernel)
    for base in (0, 0x7F12_3456_0000):
        linked = co.link(base)
        kd = KernelDescriptor.parse(linked.image[co.kd_offset : co.kd_offset + 64])
        assert co.kd_offset + kd.kernel_code_entry_byte_offset == linked.symbols[kernel] == co.entry_offset
        assert linked.image == co.image  # only pc-relative relocations: the image does not depend on the base
    if kernel == "table":
        # s_getpc_b64 + REL32_LO/HI: the two literals are the halves of `values + addend - (literal's address)`
        values = co.linked.symbols["values"]
        (lo_rel, hi_rel) = sorted(
            (r for r in co.elf.relocations if AMDGPU_RELOCATIONS[r.type][3]), key=lambda r: r.type
        )
        at_lo, at_hi = (co.linked.section_offsets[r.section] + r.offset for r in (lo_rel, hi_rel))
        lo, hi = struct.unpack_from("<I", co.image, at_lo)[0], struct.unpack_from("<I", co.image, at_hi)[0]
        assert lo == (values + lo_rel.addend - at_lo) & 0xFFFFFFFF
        assert hi == ((values + hi_rel.addend - at_hi) >> 32) & 0xFFFFFFFF
        assert struct.unpack_from("<8f", co.image, values) == (1, 2, 3, 4, 5, 6, 7, 8)


def test_undefined_symbol_is_refused_naming_kernel_and_symbol() -> None:
    with pytest.raises(CompileError, match="kernel calls references undefined symbol tg_missing; tg kernels must not"):
        CodeObject(_obj("clang15_undefined"), "calls")


@pytest.mark.parametrize("fixture", ["clang15_dispatch_ptr", "llvm22_dispatch_ptr"])
def test_dispatch_ptr_kernel_is_refused(fixture: str) -> None:
    with pytest.raises(CompileError, match="unsupported kernel ABI feature: dispatch ptr"):
        CodeObject(_obj(fixture), "dptr")


def test_bad_headers_and_descriptors_name_the_field() -> None:
    data = bytearray(_obj("llvm22_lds"))
    with pytest.raises(CompileError, match="no kernel 'nope'"):
        CodeObject(bytes(data), "nope")
    for offset, value, message in [(7, 0, "EI_OSABI"), (8, 9, "ABI version 9"), (16, 2, "e_type 2"),
                                   (18, 62, "e_machine 0x3e"), (48, 0x30, "e_flags machine 0x30")]:  # fmt: skip
        bad = bytearray(data)
        bad[offset] = value
        with pytest.raises(CompileError, match=message):
            CodeObject(bytes(bad), "lds")
    with pytest.raises(ElfError, match="not an ELF file"):
        CodeObject(b"\x7fELG" + bytes(60), "lds")
    # LDS over 64 KiB in the descriptor
    co = CodeObject(bytes(data), "lds")
    kd_file = co.elf.sections[co.elf.symbol("lds.kd").shndx].offset + co.elf.symbol("lds.kd").value  # type: ignore[union-attr]
    big = bytearray(data)
    big[kd_file : kd_file + 4] = (65537).to_bytes(4, "little")
    with pytest.raises(CompileError, match="too many resources: LDS"):
        CodeObject(bytes(big), "lds")
    no_wave32 = bytearray(data)
    no_wave32[kd_file + 0x39] &= ~0x04
    with pytest.raises(CompileError, match="not wave32"):
        CodeObject(bytes(no_wave32), "lds")


# *** x86-64 objects for the CPU ***


@pytest.mark.skipif(not X86_64, reason="x86-64 machine code runs only on x86-64")
def test_x86_object_runs_after_relocation() -> None:
    mem, symbols = load_executable(ElfObject(_obj("x86_clang15_scale")), "scale")
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)(symbols["scale"])
    a = (ctypes.c_float * 8)(*range(8))
    out = (ctypes.c_float * 8)()
    fn(ctypes.addressof(out), ctypes.addressof(a), 8)
    k = [1.5, 2.5, 3.5, 4.5]
    assert list(out) == [i * k[i % 4] + 0.25 for i in range(8)]
    assert mem.addr <= symbols["scale"] < mem.addr + mem.size


def test_x86_undefined_symbol_is_refused() -> None:
    obj = ElfObject(_obj("x86_clang15_libm"))
    with pytest.raises(CompileError, match="kernel calls_libm references undefined symbol sinf"):
        link(obj, {1: ("R_X86_64_64", 8, False, ""), 2: ("R_X86_64_PC32", 4, True, ""),
                   4: ("R_X86_64_PLT32", 4, True, "")}, "calls_libm")  # fmt: skip


def test_unknown_relocation_type_is_refused() -> None:
    with pytest.raises(CompileError, match="unsupported relocation type 2"):
        link(ElfObject(_obj("x86_clang15_scale")), {}, "scale")
