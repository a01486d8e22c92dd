"""Translate scalar instructions (SOP1/SOP2/SOPC/SOPK/SOPP/SMEM) into Python statements of a block function.

Sources are read into locals first (`a`, `b`), then the op's expressions from `ops.salu` give the result and SCC. A
block-ending SOPP returns the expression of the next pc (`gen_scalar` returns it; the block's return statement uses
it): a branch target or fall-through, ENDPGM, or a barrier marker.
"""

from __future__ import annotations

import struct

from tg.runtime.amd.sim.blockgen import ENDPGM, BlockGen, branch_target, unsupported
from tg.runtime.amd.sim.decode import EmulatorError, Instruction
from tg.runtime.amd.sim.ops.numerics import sext
from tg.runtime.amd.sim.ops.salu import (
    BRANCHES,
    SALU_HELPERS,
    SAVEEXEC,
    SOP1,
    SOP2,
    SOPC,
    SOPK,
    SOPK_NOPS,
    SOPP_NOPS,
)
from tg.runtime.amd.sim.wave import EXEC, LITERAL, NULL, SCC_SRC, VCC, Wave

SCALAR_ENCODINGS = frozenset({"SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM"})
INLINE_F32 = {240: 0x3F000000, 241: 0xBF000000, 242: 0x3F800000, 243: 0xBF800000, 244: 0x40000000, 245: 0xC0000000,
              246: 0x40800000, 247: 0xC0800000, 248: 0x3E22F983}  # fmt: skip
INLINE_F16 = {240: 0x3800, 241: 0xB800, 242: 0x3C00, 243: 0xBC00, 244: 0x4000, 245: 0xC000, 246: 0x4400, 247: 0xC400,
              248: 0x3118}  # fmt: skip
INLINE_F64 = {240: 0x3FE0000000000000, 241: 0xBFE0000000000000, 242: 0x3FF0000000000000, 243: 0xBFF0000000000000,
              244: 0x4000000000000000, 245: 0xC000000000000000, 246: 0x4010000000000000, 247: 0xC010000000000000,
              248: 0x3FC45F306DC9C882}  # fmt: skip
VCCZ, EXECZ = 251, 252


# SALU instructions whose 64-bit source operand is signed: a 32-bit literal there is sign-extended (LLVM's signed
# 64-bit operand types, OPERAND_REG_IMM_I64: s_ashr_i64 and s_cls_i32_i64, LLVM's S_FLBIT_I32_I64); every other
# 64-bit integer operand zero-extends its literal.
SIGNED_64BIT_SRC0 = frozenset({"s_ashr_i64", "s_cls_i32_i64"})


def constant(src: int, width: int, literal: int | None, is_float: bool = False, signed: bool = False) -> int | None:
    """Bits of a constant operand (inline integer or float, or the literal) of `width` bits; None for a register.

    Inline floats take the operand's width (f16 for 16-bit operands); a literal of a 64-bit float operand is its high
    dword, of a signed 64-bit integer operand (`signed`) its sign-extended value, of any other 64-bit operand its
    zero-extended value."""
    mask = (1 << width) - 1
    if 128 <= src <= 192:
        return src - 128
    if 193 <= src <= 208:
        return (192 - src) & mask
    if 240 <= src <= 248:
        return INLINE_F64[src] if width == 64 else INLINE_F16[src] if width == 16 else INLINE_F32[src]
    if src == LITERAL:
        lit = literal or 0
        if width == 64 and is_float:
            return lit << 32
        if width == 64 and signed and lit >> 31 & 1:
            return (lit | 0xFFFFFFFF00000000) & mask
        return lit & mask
    if src == NULL:
        return 0
    return None


def scalar_read(src: int, width: int, literal: int | None, is_float: bool = False, signed: bool = False) -> str:
    """Python expression of a scalar operand's bits (SGPR, special register, SCC, constant), 32 or 64 bits."""
    c = constant(src, width, literal, is_float, signed)
    if c is not None:
        return str(c)
    if src == SCC_SRC:
        return "scc"
    if src == VCCZ:
        return f"int(s[{VCC}] == 0)"
    if src == EXECZ:
        return "int(ex == 0)"
    if src == EXEC and width == 32:
        return "ex"
    if src > 127:
        raise EmulatorError(f"unsupported scalar operand {src}")
    if width == 64:
        return f"(s[{src}] | s[{src + 1}] << 32)"
    return f"s[{src}]"


def _width(dwords: int) -> int:
    return 64 if dwords == 2 else 32


def _bind(g: BlockGen, **exprs: str) -> dict[str, str]:
    """Bind source expressions to fresh locals (so an op may use them several times and write a source register)."""
    out = {}
    for key, expr in exprs.items():
        if expr.isidentifier() or expr.lstrip("-").isdigit():
            out[key] = expr
        else:
            out[key] = g.tmp(key)
            g.emit(f"{out[key]} = {expr}")
    return out


def gen_scalar(inst: Instruction, g: BlockGen) -> str | None:
    """Emit `inst`; returns the block's next-pc expression when the instruction ends the block, else None."""
    try:
        return _gen(inst, g)
    except EmulatorError as e:  # an operand the emulator does not model: fail when the instruction runs
        g.raise_error(f"{unsupported(inst, g.ctx)}: {e}")
        return None


def _gen(inst: Instruction, g: BlockGen) -> str | None:
    f, name, lit, enc = inst.fields, inst.name, inst.literal, inst.encoding
    nxt = inst.pc + inst.size
    g.ns.update(SALU_HELPERS)
    if enc == "SOP2":
        if name not in SOP2:
            g.raise_error(unsupported(inst, g.ctx))
            return None
        wd, w0, w1 = inst.widths
        res, scc = SOP2[name]
        a = scalar_read(f["ssrc0"], _width(w0), lit, signed=name in SIGNED_64BIT_SRC0)
        ab = _bind(g, a=a, b=scalar_read(f["ssrc1"], _width(w1), lit))
        if scc is not None:
            t = g.tmp("c")
            g.emit(f"{t} = {scc.format(**ab, c='scc')}")
        g.write_sgpr(f["sdst"], res.format(**ab, c="scc"), _width(wd))
        if scc is not None:
            g.emit(f"scc = {t}")
        return None
    if enc == "SOP1":
        _sop1(inst, g)
        return None
    if enc == "SOPC":
        if name not in SOPC:
            g.raise_error(unsupported(inst, g.ctx))
            return None
        w0, w1 = inst.widths
        ab = _bind(g, a=scalar_read(f["ssrc0"], _width(w0), lit), b=scalar_read(f["ssrc1"], _width(w1), lit))
        g.emit(f"scc = {SOPC[name].format(**ab)}")
        return None
    if enc == "SOPK":
        if name in SOPK_NOPS:
            return None
        if name not in SOPK:
            g.raise_error(unsupported(inst, g.ctx))
            return None
        kres, kscc = SOPK[name]
        d = scalar_read(f["sdst"], 32, None) if f["sdst"] != NULL else "0"
        fields = {"d": d, "k": str(f["simm16"]), "c": "scc"}
        if kscc is not None:
            g.emit(f"scc = {kscc.format(**fields)}" if kres is None else f"c_ = {kscc.format(**fields)}")
        if kres is not None:
            g.write_sgpr(f["sdst"], kres.format(**fields))
            if kscc is not None:
                g.emit("scc = c_")
        return None
    if enc == "SOPP":
        return _sopp(inst, g, nxt)
    if enc == "SMEM":
        _smem(inst, g)
        return None
    g.raise_error(unsupported(inst, g.ctx))
    return None


def _sop1(inst: Instruction, g: BlockGen) -> None:
    f, name, lit = inst.fields, inst.name, inst.literal
    wd, w0 = inst.widths
    if name == "s_getpc_b64":
        g.write_sgpr(f["sdst"], str(inst.pc + inst.size), 64)
        return None
    if name.endswith(("_saveexec_b32", "_wrexec_b32")):
        op = name[2:].rsplit("_", 2)[0]
        if op not in SAVEEXEC:
            g.raise_error(unsupported(inst, g.ctx))
            return None
        a = _bind(g, a=scalar_read(f["ssrc0"], 32, lit))["a"]
        old = g.tmp("e")
        g.emit(f"{old} = ex")
        g.emit(f"ex = s[{EXEC}] = {SAVEEXEC[op].format(a=a, e=old)}")
        g.emit("scc = int(ex != 0)")
        g.write_sgpr(f["sdst"], old if name.endswith("_saveexec_b32") else "ex")
        return None
    if name not in SOP1:
        g.raise_error(unsupported(inst, g.ctx))
        return None
    res, scc = SOP1[name]
    fields = _bind(g, a=scalar_read(f["ssrc0"], _width(w0), lit, signed=name in SIGNED_64BIT_SRC0))
    t = ""
    if "{d}" in res:
        fields["d"] = scalar_read(f["sdst"], _width(wd), None) if f["sdst"] != NULL else "0"
    fields["c"] = "scc"
    if scc is not None:
        t = g.tmp("c")
        g.emit(f"{t} = {scc.format(**fields)}")
    g.write_sgpr(f["sdst"], res.format(**fields), _width(wd))
    if scc is not None:
        g.emit(f"scc = {t}")
    return None


def _sopp(inst: Instruction, g: BlockGen, nxt: int) -> str | None:
    name = inst.name
    if name in SOPP_NOPS or name == "s_code_end":
        if name == "s_code_end":
            g.raise_error(f"execution ran into s_code_end padding at pc=0x{inst.pc:x} in {g.ctx.kernel or 'kernel'}")
        return None
    if name == "s_endpgm":
        return str(ENDPGM)
    if name == "s_barrier":
        return str(-(nxt + 2))
    if name in BRANCHES:
        target = branch_target(inst)
        cond = BRANCHES[name]
        return f"{target:#x}" if cond == "True" else f"{target:#x} if {cond} else {nxt:#x}"
    g.raise_error(unsupported(inst, g.ctx))
    return f"{nxt:#x}"


_DWORDS = {n: struct.Struct(f"<{n}I") for n in (1, 2, 4, 8, 16)}


def s_load(w: Wave, addr: int, ndw: int, name: str) -> tuple[int, ...]:
    """The dwords an SMEM load reads (the address aligned down to 4 bytes)."""
    addr &= 0xFFFFFFFFFFFFFFFC
    try:
        data = w.mem.read(addr, 4 * ndw)
    except EmulatorError as e:
        raise EmulatorError(f"wave {w.wave_id} read {4 * ndw} bytes at 0x{addr:x}: {e}: pc=0x{w.pc:x} {name} in "
                            f"{w.kernel}") from None  # fmt: skip
    return _DWORDS[ndw].unpack(data)


def _smem(inst: Instruction, g: BlockGen) -> None:
    f = inst.fields
    if not inst.name.startswith("s_load_b"):
        g.raise_error(unsupported(inst, g.ctx))
        return
    (ndw,) = inst.widths
    offset = sext(f["offset"], 21)
    base = scalar_read(f["sbase"], 64, None)
    soff = f" + s[{f['soffset']}]" if f["soffset"] != 0x7C else ""
    g.ns["s_load"] = s_load
    dst = f["sdata"]
    if dst + ndw > 106:
        g.raise_error(unsupported(inst, g.ctx, "destination beyond s105"))
        return
    g.emit(f"s[{dst}:{dst + ndw}] = s_load(w, {base} + {offset}{soff}, {ndw}, {inst.name!r})")
