"""RDNA3 (gfx1100) instruction decoder: machine code -> `Instruction`s and a listing in LLVM's syntax.

The encoding is identified from the first dword (amd.md 4.3); opcode names and operand widths come from the
generated tables in `isa_tables`. `Instruction.text` prints the instruction as LLVM 22 does (true16 halves as
`v0.l`/`v0.h`, branch targets as the signed dword offset that llvm-objdump prints), so a listing can be compared
with LLVM's own, instruction for instruction.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from tg.runtime.amd.sim import isa_tables as T


class EmulatorError(RuntimeError):
    """An instruction the emulator cannot decode or run, a runaway wave or a bad memory access."""


@dataclass(frozen=True, eq=False)
class Instruction:
    """One decoded instruction: where it is, its words, encoding, opcode, mnemonic and raw fields."""

    pc: int
    words: tuple[int, ...]
    encoding: str
    op: int
    name: str
    fields: dict[str, int]
    literal: int | None = None
    widths: tuple[int, ...] = ()
    text: str = field(default="", compare=False)

    @property
    def size(self) -> int:
        return 4 * len(self.words)


@dataclass(frozen=True, eq=False)
class Program:
    """All instructions of a code object's text, by address."""

    base: int
    instructions: tuple[Instruction, ...]
    by_pc: dict[int, Instruction]

    def listing(self) -> str:
        """One line per instruction, in LLVM's syntax."""
        return "\n".join(i.text for i in self.instructions)


def _bits(word: int, hi: int, lo: int) -> int:
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


def _unknown(word: int, pc: int, kernel: str = "", why: str = "") -> EmulatorError:
    where = f" in {kernel}" if kernel else ""
    return EmulatorError(
        f"unknown rdna3 instruction word=0x{word:08x} at pc=0x{pc:x}{where}{': ' + why if why else ''}"
    )


def encoding_of(word: int) -> str:
    """The encoding family of an instruction from its first dword (amd.md 4.3), or '' when unknown."""
    if word >> 31 == 0:
        if word >> 25 == 0x3F:
            return "VOP1"
        if word >> 25 == 0x3E:
            return "VOPC"
        return "VOP2"
    top9 = word >> 23
    if top9 == 0x17D:
        return "SOP1"
    if top9 == 0x17E:
        return "SOPC"
    if top9 == 0x17F:
        return "SOPP"
    if word >> 28 == 0xB:
        return "SOPK"
    if word >> 30 == 0b10:
        return "SOP2"
    top6 = word >> 26
    return {0x32: "VOPD", 0x35: "VOP3", 0x36: "DS", 0x37: "FLAT", 0x3D: "SMEM", 0x38: "MUBUF"}.get(top6) or (
        "VOP3P" if word >> 24 == 0xCC else ""
    )


# VOP3 opcodes whose bits [14:8] hold a scalar destination (carry out / VCC-like) instead of abs/opsel
VOP3SD_NAMES = frozenset(
    {
        "v_add_co_u32",
        "v_sub_co_u32",
        "v_subrev_co_u32",
        "v_add_co_ci_u32_e64",
        "v_sub_co_ci_u32_e64",
        "v_subrev_co_ci_u32_e64",
        "v_div_scale_f32",
        "v_div_scale_f64",
        "v_mad_u64_u32",
        "v_mad_i64_i32",
    }
)
# 9-bit source fields: which need a trailing 32-bit literal
LITERAL = 255


def _field_uses_literal(enc: str, f: dict[str, int]) -> bool:
    if enc in ("SOP1", "SOP2", "SOPC"):
        return f.get("ssrc0") == LITERAL or f.get("ssrc1") == LITERAL
    if enc in ("VOP1", "VOP2", "VOPC"):
        return f["src0"] == LITERAL
    if enc in ("VOP3", "VOP3P"):
        return LITERAL in (f["src0"], f["src1"], f["src2"])
    if enc == "VOPD":
        return LITERAL in (f["srcx0"], f["srcy0"])
    return False


def _fields(enc: str, w0: int, w1: int) -> tuple[int, dict[str, int]]:
    """(opcode, raw fields) of one instruction; w1 is the second dword (0 when absent)."""
    b = _bits
    if enc == "SOP2":
        return b(w0, 29, 23), {"ssrc0": b(w0, 7, 0), "ssrc1": b(w0, 15, 8), "sdst": b(w0, 22, 16)}
    if enc == "SOP1":
        return b(w0, 15, 8), {"ssrc0": b(w0, 7, 0), "sdst": b(w0, 22, 16)}
    if enc == "SOPC":
        return b(w0, 22, 16), {"ssrc0": b(w0, 7, 0), "ssrc1": b(w0, 15, 8)}
    if enc == "SOPK":
        return b(w0, 27, 23), {"simm16": b(w0, 15, 0), "sdst": b(w0, 22, 16)}
    if enc == "SOPP":
        return b(w0, 22, 16), {"simm16": b(w0, 15, 0)}
    if enc == "SMEM":
        return b(w0, 25, 18), {
            "sbase": b(w0, 5, 0) * 2,
            "sdata": b(w0, 12, 6),
            "glc": b(w0, 14, 14),
            "dlc": b(w0, 13, 13),
            "offset": b(w1, 20, 0),
            "soffset": b(w1, 31, 25),
        }
    if enc == "VOP1":
        return b(w0, 16, 9), {"src0": b(w0, 8, 0), "vdst": b(w0, 24, 17)}
    if enc == "VOPC":
        return b(w0, 24, 17), {"src0": b(w0, 8, 0), "vsrc1": b(w0, 16, 9)}
    if enc == "VOP2":
        return b(w0, 30, 25), {"src0": b(w0, 8, 0), "vsrc1": b(w0, 16, 9), "vdst": b(w0, 24, 17)}
    if enc == "VOP3":
        return b(w0, 25, 16), {
            "vdst": b(w0, 7, 0),
            "abs": b(w0, 10, 8),
            "sdst": b(w0, 14, 8),
            "opsel": b(w0, 14, 11),
            "clamp": b(w0, 15, 15),
            "src0": b(w1, 8, 0),
            "src1": b(w1, 17, 9),
            "src2": b(w1, 26, 18),
            "omod": b(w1, 28, 27),
            "neg": b(w1, 31, 29),
        }
    if enc == "VOP3P":
        return b(w0, 22, 16), {
            "vdst": b(w0, 7, 0),
            "neg_hi": b(w0, 10, 8),
            "opsel": b(w0, 13, 11),
            "opsel_hi": b(w0, 14, 14) << 2 | b(w1, 28, 27),
            "clamp": b(w0, 15, 15),
            "src0": b(w1, 8, 0),
            "src1": b(w1, 17, 9),
            "src2": b(w1, 26, 18),
            "neg": b(w1, 31, 29),
        }
    if enc == "VOPD":
        vdstx = b(w1, 31, 24)
        return b(w0, 25, 22), {
            "opy": b(w0, 21, 17),
            "srcx0": b(w0, 8, 0),
            "vsrcx1": b(w0, 16, 9),
            "srcy0": b(w1, 8, 0),
            "vsrcy1": b(w1, 16, 9),
            "vdsty": b(w1, 23, 17) << 1 | ((vdstx & 1) ^ 1),
            "vdstx": vdstx,
        }
    if enc == "DS":
        return b(w0, 25, 18), {
            "offset0": b(w0, 7, 0),
            "offset1": b(w0, 15, 8),
            "gds": b(w0, 17, 17),
            "addr": b(w1, 7, 0),
            "data0": b(w1, 15, 8),
            "data1": b(w1, 23, 16),
            "vdst": b(w1, 31, 24),
        }
    if enc == "FLAT":
        off = b(w0, 12, 0)
        return b(w0, 24, 18), {
            "offset": off - (1 << 13) if off & 0x1000 else off,
            "dlc": b(w0, 13, 13),
            "glc": b(w0, 14, 14),
            "slc": b(w0, 15, 15),
            "seg": b(w0, 17, 16),
            "addr": b(w1, 7, 0),
            "data": b(w1, 15, 8),
            "saddr": b(w1, 22, 16),
            "sve": b(w1, 23, 23),
            "vdst": b(w1, 31, 24),
        }
    if enc == "MUBUF":
        return b(w0, 25, 18), {}
    raise AssertionError(enc)


TWO_DWORD = frozenset({"SMEM", "VOP3", "VOP3P", "VOPD", "DS", "FLAT", "MUBUF"})
FLAT_SEGMENTS = {0: "FLAT", 1: "SCRATCH", 2: "GLOBAL"}


def decode_one(code: bytes, offset: int, pc: int, kernel: str = "") -> Instruction:
    """Decode the instruction at byte `offset` of `code` (its address is `pc`)."""
    if offset + 4 > len(code):
        raise EmulatorError(f"truncated rdna3 instruction at pc=0x{pc:x}{' in ' + kernel if kernel else ''}")
    w0 = struct.unpack_from("<I", code, offset)[0]
    enc = encoding_of(w0)
    if not enc:
        raise _unknown(w0, pc, kernel)
    n = 2 if enc in TWO_DWORD else 1
    if offset + 4 * n > len(code):
        raise EmulatorError(f"truncated rdna3 instruction word=0x{w0:08x} at pc=0x{pc:x}")
    w1 = struct.unpack_from("<I", code, offset + 4)[0] if n == 2 else 0
    op, f = _fields(enc, w0, w1)
    if enc == "FLAT":
        table = getattr(T, FLAT_SEGMENTS.get(f["seg"], "FLAT")) if f["seg"] in FLAT_SEGMENTS else {}
    elif enc == "VOPD":
        x, y = T.VOPDX.get(op), T.VOPDY.get(f["opy"])
        if x is None or y is None:
            raise _unknown(w0, pc, kernel)
        table = {op: (x[0] + " :: " + y[0],)}
    else:
        table = getattr(T, enc)
    entry = table.get(op)
    if entry is None:
        raise _unknown(w0, pc, kernel)
    name, *widths = entry
    words = [w0] + ([w1] if n == 2 else [])
    literal = None
    needs_k = name.startswith(("v_fmaak", "v_fmamk")) or (enc == "VOPD" and any(k in name for k in ("fmaak", "fmamk")))
    if _field_uses_literal(enc, f) or needs_k:
        lo = offset + 4 * n
        if lo + 4 > len(code):
            raise EmulatorError(f"truncated literal of rdna3 instruction word=0x{w0:08x} at pc=0x{pc:x}")
        literal = struct.unpack_from("<I", code, lo)[0]
        words.append(literal)
    inst = Instruction(pc, tuple(words), enc, op, name, f, literal, tuple(widths))
    object.__setattr__(inst, "text", render(inst))
    return inst


def decode(code: bytes, base: int = 0, kernel: str = "") -> Program:
    """Decode a whole text section; `base` is the address of its first byte. Raises EmulatorError at once for a
    word that is not a gfx1100 instruction. Trailing `s_code_end` padding is kept (it is decoded, never run)."""
    out: list[Instruction] = []
    off = 0
    while off < len(code):
        inst = decode_one(code, off, base + off, kernel)
        out.append(inst)
        off += inst.size
    return Program(base, tuple(out), {i.pc: i for i in out})


# ---------------------------------------------------------------- listing (LLVM 22 syntax)

INLINE_FLOATS = {240: "0.5", 241: "-0.5", 242: "1.0", 243: "-1.0", 244: "2.0", 245: "-2.0", 246: "4.0", 247: "-4.0"}
SPECIAL_SCALARS = {106: "vcc_lo", 107: "vcc_hi", 124: "null", 125: "m0", 126: "exec_lo", 127: "exec_hi", 253: "src_scc"}
SPECIAL_PAIRS = {106: "vcc", 126: "exec"}

# type suffixes in a VALU mnemonic: which operands are 16-bit (printed as .l/.h halves under true16)
_TYPE = re.compile(r"_([fiub])(16|32|64)(?=_|$)")


def half_operands(name: str) -> tuple[bool, tuple[bool, bool, bool]]:
    """(dst is 16-bit, (src0, src1, src2) are 16-bit) for a true16 VALU op; non-16-bit ops give all False."""
    base = re.sub(r"_e(32|64)$", "", name)
    if base.startswith(("v_pk_", "v_fma_mix", "v_dot2", "v_cvt_pk_", "v_cvt_pknorm", "v_wmma", "v_sat_pk")):
        return False, (False, False, False)
    types = [int(m.group(2)) for m in _TYPE.finditer(base)]
    if not types or 16 not in types:
        return False, (False, False, False)
    if base.startswith("v_cmp"):
        is16 = types[0] == 16
        return False, (is16, is16 and "class" not in base, False)
    if base in ("v_mad_u32_u16", "v_mad_i32_i16"):
        return False, (True, True, False)
    if base == "v_pack_b32_f16":
        return False, (True, True, False)
    if base.startswith("v_sad_u16"):
        return False, (True, True, False)
    if base == "v_cndmask_b16":
        return True, (True, True, False)
    if len(types) >= 2:  # conversions: dst type first, source type second
        return types[0] == 16, (types[1] == 16, types[1] == 16, types[1] == 16)
    return True, (True, True, True)


def _sreg(n: int, width: int) -> str:
    if n <= 105:
        return f"s{n}" if width <= 1 else f"s[{n}:{n + width - 1}]"
    if width >= 2 and n in SPECIAL_PAIRS:
        return SPECIAL_PAIRS[n]
    return SPECIAL_SCALARS.get(n, f"ttmp{n - 108}" if 108 <= n <= 123 else f"s{n}")


def _vreg(n: int, width: int, half: int = -1) -> str:
    if half >= 0:
        return f"v{n}.{'h' if half else 'l'}"
    return f"v{n}" if width <= 1 else f"v[{n}:{n + width - 1}]"


def operand(src: int, width: int, literal: int | None, half: int = -1, is16: bool = False, int64: bool = False) -> str:
    """Text of a 9-bit source operand (VGPRs from 256); `half` selects a true16 half (-1: whole register).

    A literal of a 64-bit integer operand (`int64`) with bit 31 set prints sign-extended, as LLVM's code generator
    only encodes such values as 32-bit literals when they are (isInt<32>)."""
    if src >= 256:
        return _vreg(src - 256, width, half)
    if src == LITERAL:
        lit = (literal or 0) & (0xFFFF if is16 else 0xFFFFFFFF)
        return f"0x{lit | 0xFFFFFFFF00000000 if int64 and width == 2 and lit >> 31 else lit:x}"
    if 128 <= src <= 192:
        return str(src - 128)
    if 193 <= src <= 208:
        return str(192 - src)
    if src in INLINE_FLOATS:
        return INLINE_FLOATS[src]
    if src == 248:
        return "0.15915494309189532" if width == 2 else "0.15915494"
    return _sreg(src, width)


def _signed16(v: int) -> int:
    return v - 0x10000 if v & 0x8000 else v


DELAY_IDS = ["NO_DEP", "VALU_DEP_1", "VALU_DEP_2", "VALU_DEP_3", "VALU_DEP_4", "TRANS32_DEP_1", "TRANS32_DEP_2",
             "TRANS32_DEP_3", "FMA_ACCUM_CYCLE_1", "SALU_CYCLE_1", "SALU_CYCLE_2", "SALU_CYCLE_3"]  # fmt: skip
DELAY_SKIPS = ["SAME", "NEXT", "SKIP_1", "SKIP_2", "SKIP_3", "SKIP_4"]
# s_waitcnt_depctr fields: (name, lsb, bits) in LLVM's printing order; each is printed when not all ones
DEPCTR = [("depctr_hold_cnt", 7, 1), ("depctr_sa_sdst", 0, 1), ("depctr_va_vdst", 12, 4), ("depctr_va_sdst", 9, 3),
          ("depctr_va_ssrc", 8, 1), ("depctr_va_vcc", 1, 1), ("depctr_vm_vsrc", 2, 3)]  # fmt: skip
SENDMSG = {3: "MSG_DEALLOC_VGPRS", 1: "MSG_INTERRUPT", 2: "MSG_HS_TESSFACTOR"}


def _sopp_text(inst: Instruction) -> str:
    name, imm = inst.name, inst.fields["simm16"]
    if name in ("s_endpgm", "s_code_end", "s_barrier", "s_icache_inv", "s_ttracedata", "s_wait_idle", "s_endpgm_saved",
                "s_endpgm_ordered_ps_done") or name.startswith("s_set_vskip"):  # fmt: skip
        return name if imm == 0 or name == "s_code_end" else f"{name} {imm}"
    if name.startswith(("s_branch", "s_cbranch")):
        return f"{name} {_signed16(imm)}"
    if name == "s_waitcnt":
        vm, exp, lgkm = imm >> 10 & 0x3F, imm & 7, imm >> 4 & 0x3F
        parts = [f"vmcnt({vm})" if vm != 0x3F else "", f"expcnt({exp})" if exp != 7 else "",
                 f"lgkmcnt({lgkm})" if lgkm != 0x3F else ""]  # fmt: skip
        parts = [p for p in parts if p] or [f"vmcnt({vm})", f"expcnt({exp})", f"lgkmcnt({lgkm})"]
        return f"{name} {' '.join(parts)}"
    if name == "s_delay_alu":
        id0, skip, id1 = imm & 0xF, imm >> 4 & 7, imm >> 7 & 0xF
        parts = []
        if id0:
            parts.append(f"instid0({DELAY_IDS[id0] if id0 < len(DELAY_IDS) else id0})")
        if skip:
            parts.append(f"instskip({DELAY_SKIPS[skip] if skip < len(DELAY_SKIPS) else skip})")
        if id1:
            parts.append(f"instid1({DELAY_IDS[id1] if id1 < len(DELAY_IDS) else id1})")
        return f"{name} {' | '.join(parts) if parts else '0'}"
    if name == "s_waitcnt_depctr":
        parts = [f"{n}({imm >> lsb & ((1 << bits) - 1)})" for n, lsb, bits in DEPCTR
                 if imm >> lsb & ((1 << bits) - 1) != (1 << bits) - 1]  # fmt: skip
        return f"{name} {' '.join(parts)}" if parts else f"{name} 0x{imm:x}"
    if name in ("s_sendmsg", "s_sendmsghalt"):
        return f"{name} sendmsg({SENDMSG[imm]})" if imm in SENDMSG else f"{name} {imm}"
    if name in ("s_clause", "s_set_inst_prefetch_distance", "s_round_mode", "s_wait_event", "s_ttracedata_imm"):
        return f"{name} 0x{imm:x}"
    return f"{name} {imm}"


def _vop3_src(inst: Instruction, i: int, width: int, half16: bool) -> str:
    f = inst.fields
    src = f[f"src{i}"]
    sd = inst.name in VOP3SD_NAMES
    half = (f["opsel"] >> i & 1) if half16 and src >= 256 else -1
    text = operand(src, width, inst.literal, half, half16, int64="f64" not in inst.name)
    if inst.encoding == "VOP3P" and inst.name.startswith("v_fma_mix"):
        if f["neg_hi"] >> i & 1:
            text = f"|{text}|"
        return f"-{text}" if f["neg"] >> i & 1 else text
    if inst.encoding == "VOP3P":
        return text
    if not sd and f["abs"] >> i & 1:
        text = f"|{text}|"
    if f["neg"] >> i & 1:
        text = f"-{text}"
    return text


def _vop3_text(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    wd, w0, w1, w2 = inst.widths
    dst16, src16 = half_operands(name)
    ops: list[str] = []
    base = re.sub(r"_e64$", "", name)
    if (
        inst.encoding == "VOP3" and inst.op < 256
    ):  # VOPC in VOP3: the destination is a scalar register (none for v_cmpx)
        if not base.startswith("v_cmpx"):
            ops.append(_sreg(f["vdst"], 1))
    elif name in ("v_readlane_b32", "v_readfirstlane_b32_e64"):
        ops.append(_sreg(f["vdst"], 1))
    elif wd:
        ops.append(_vreg(f["vdst"], wd, (f["opsel"] >> 3 & 1) if dst16 and inst.encoding == "VOP3" else -1))
    if name in VOP3SD_NAMES:
        ops.append(_sreg(f["sdst"], 1))
    for i, w in enumerate((w0, w1, w2)):
        if w:
            ops.append(_vop3_src(inst, i, w, src16[i]))
    text = f"{name} {', '.join(ops)}"
    if inst.encoding == "VOP3P":
        nsrc = sum(1 for w in (w0, w1, w2) if w)
        mix = name.startswith("v_fma_mix")
        default_hi = 0 if mix else (1 << nsrc) - 1
        if f["opsel"] & ((1 << nsrc) - 1):
            text += f" op_sel:[{','.join(str(f['opsel'] >> i & 1) for i in range(nsrc))}]"
        if (f["opsel_hi"] & ((1 << nsrc) - 1)) != default_hi:
            text += f" op_sel_hi:[{','.join(str(f['opsel_hi'] >> i & 1) for i in range(nsrc))}]"
        if not mix and f["neg"]:
            text += f" neg_lo:[{','.join(str(f['neg'] >> i & 1) for i in range(nsrc))}]"
        if not mix and f["neg_hi"]:
            text += f" neg_hi:[{','.join(str(f['neg_hi'] >> i & 1) for i in range(nsrc))}]"
    elif name not in VOP3SD_NAMES and not (dst16 or any(src16)) and f["opsel"]:
        text += f" op_sel:[{','.join(str(f['opsel'] >> i & 1) for i in range(4))}]"
    if f["clamp"]:
        text += " clamp"
    if inst.encoding == "VOP3" and f["omod"]:
        text += {1: " mul:2", 2: " mul:4", 3: " div:2"}[f["omod"]]
    return text


def _half_of(field_value: int, is16: bool, vgpr_base: int = 0) -> tuple[int, int]:
    """Register number and half (-1 whole) of an 8-bit VGPR field (or 9-bit src with vgpr_base=256)."""
    n = field_value - vgpr_base
    if is16 and n >= 128:
        return n - 128, 1
    return n, 0 if is16 else -1


def _vop12c_src0(inst: Instruction, width: int, is16: bool) -> str:
    src = inst.fields["src0"]
    if src >= 256:
        n, h = _half_of(src, is16, 256)
        return _vreg(n, width, h)
    return operand(src, width, inst.literal, -1, is16, int64="f64" not in inst.name)


def _valu_text(inst: Instruction) -> str:
    f, name, enc = inst.fields, inst.name, inst.encoding
    dst16, src16 = half_operands(name)
    if enc == "VOP1":
        wd, w0 = inst.widths
        if not wd and not w0:
            return name
        if name.startswith("v_readfirstlane"):
            return f"{name} {_sreg(f['vdst'], 1)}, {_vop12c_src0(inst, w0, False)}"
        n, h = _half_of(f["vdst"], dst16)
        return f"{name} {_vreg(n, wd, h)}, {_vop12c_src0(inst, w0, src16[0])}"
    if enc == "VOP2":
        wd, w0, w1 = inst.widths
        n, h = _half_of(f["vdst"], dst16)
        m, hm = _half_of(f["vsrc1"], src16[1])
        dst, s0, s1 = _vreg(n, wd, h), _vop12c_src0(inst, w0, src16[0]), _vreg(m, w1, hm)
        k = f"0x{(inst.literal or 0) & (0xFFFF if dst16 else 0xFFFFFFFF):x}"
        if name.startswith("v_fmaak"):
            return f"{name} {dst}, {s0}, {s1}, {k}"
        if name.startswith("v_fmamk"):
            return f"{name} {dst}, {s0}, {k}, {s1}"
        if name.startswith("v_cndmask"):
            return f"{name} {dst}, {s0}, {s1}, vcc_lo"
        if "_co_ci_" in name:
            return f"{name} {dst}, vcc_lo, {s0}, {s1}, vcc_lo"
        return f"{name} {dst}, {s0}, {s1}"
    if enc == "VOPC":
        w0, w1 = inst.widths
        m, hm = _half_of(f["vsrc1"], src16[1])
        srcs = f"{_vop12c_src0(inst, w0, src16[0])}, {_vreg(m, w1, hm)}"
        return f"{name} {srcs}" if name.startswith("v_cmpx") else f"{name} vcc_lo, {srcs}"
    return _vop3_text(inst)


def _vopd_half(name: str, dst: int, src0: int, vsrc1: int, literal: int | None) -> str:
    s0 = operand(src0, 1, literal)
    s1 = _vreg(vsrc1, 1)
    k = f"0x{(literal or 0):x}"
    if name == "v_dual_mov_b32":
        return f"{name} v{dst}, {s0}"
    if name == "v_dual_fmaak_f32":
        return f"{name} v{dst}, {s0}, {s1}, {k}"
    if name == "v_dual_fmamk_f32":
        return f"{name} v{dst}, {s0}, {k}, {s1}"
    return f"{name} v{dst}, {s0}, {s1}"


def _ds_text(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    wd, wa, wd0, wd1 = inst.widths
    ops = []
    if wd:
        ops.append(_vreg(f["vdst"], wd))
    if wa:
        ops.append(_vreg(f["addr"], 1))
    if wd0:
        ops.append(_vreg(f["data0"], wd0))
    if wd1:
        ops.append(_vreg(f["data1"], wd1))
    text = f"{name} {', '.join(ops)}" if ops else name
    if "2addr" in name:
        if f["offset0"]:
            text += f" offset0:{f['offset0']}"
        if f["offset1"]:
            text += f" offset1:{f['offset1']}"
    else:
        off = f["offset1"] << 8 | f["offset0"]
        if off:
            text += f" offset:{off}"
    if f["gds"]:
        text += " gds"
    return text


def _flat_text(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    wd, wdata = inst.widths
    seg = f["seg"]
    ops = []
    if wd:
        ops.append(_vreg(f["vdst"], wd))
    saddr_off = f["saddr"] in (0x7C, 0x7D) if seg else True
    if seg == 1:  # scratch: a VGPR address only when sve is set
        ops.append(_vreg(f["addr"], 1) if f["sve"] else "off")
    else:
        ops.append(_vreg(f["addr"], 2 if saddr_off else 1))
    if wdata:
        ops.append(_vreg(f["data"], wdata))
    if seg:
        ops.append("off" if saddr_off else _sreg(f["saddr"], 1 if seg == 1 else 2))
    text = f"{name} {', '.join(ops)}"
    if f["offset"]:
        text += f" offset:{f['offset']}"
    for flag in ("glc", "slc", "dlc"):
        if f[flag]:
            text += f" {flag}"
    return text


def render(inst: Instruction) -> str:
    """The instruction's text in LLVM 22's syntax."""
    f, name, enc = inst.fields, inst.name, inst.encoding
    if enc == "SOPP":
        return _sopp_text(inst)
    if enc == "SOP2":
        wd, w0, w1 = inst.widths
        srcs = (
            f"{operand(f['ssrc0'], w0, inst.literal, int64=True)}, {operand(f['ssrc1'], w1, inst.literal, int64=True)}"
        )
        return f"{name} {_sreg(f['sdst'], wd)}, {srcs}"
    if enc == "SOP1":
        wd, w0 = inst.widths
        ops = ([_sreg(f["sdst"], wd)] if wd else []) + (
            [operand(f["ssrc0"], w0, inst.literal, int64=True)] if w0 else []
        )
        return f"{name} {', '.join(ops)}"
    if enc == "SOPC":
        w0, w1 = inst.widths
        a, b = operand(f["ssrc0"], w0, inst.literal, int64=True), operand(f["ssrc1"], w1, inst.literal, int64=True)
        return f"{name} {a}, {b}"
    if enc == "SOPK":
        (wd,) = inst.widths
        return f"{name} {_sreg(f['sdst'], wd)}, 0x{f['simm16']:x}"
    if enc == "SMEM":
        (wd,) = inst.widths
        text = f"{name} {_sreg(f['sdata'], wd)}, {_sreg(f['sbase'], 2)}, "
        if f["soffset"] != 0x7C:
            text += _sreg(f["soffset"], 1) + (f" offset:0x{f['offset']:x}" if f["offset"] else "")
        else:
            text += f"0x{f['offset']:x}"
        return text + (" glc" if f["glc"] else "") + (" dlc" if f["dlc"] else "")
    if enc in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P"):
        return _valu_text(inst)
    if enc == "VOPD":
        xname, yname = name.split(" :: ")
        x = _vopd_half(xname, f["vdstx"], f["srcx0"], f["vsrcx1"], inst.literal)
        y = _vopd_half(yname, f["vdsty"], f["srcy0"], f["vsrcy1"], inst.literal)
        return f"{x} :: {y}"
    if enc == "DS":
        return _ds_text(inst)
    if enc == "FLAT":
        return _flat_text(inst)
    return name
