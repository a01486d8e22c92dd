"""Translate VALU instructions (VOP1/VOP2/VOPC/VOP3/VOP3SD/VOP3P/VOPD) into list comprehensions over the 32 lanes.

An instruction becomes `t = [<lane expression> for x0, x1 in zip(<source sequences>)]`, the lane expression being the
op's from `ops.valu` with each source substituted: a loop variable for a VGPR (with its signed / 16-bit half / f32
view form and float abs/neg), a local or a literal for an SGPR or a constant (evaluated once). Float results are
rounded to the destination width by struct packing (`b32f`, `b16s`, `b64s`) and written to the active lanes. Each op
is split in two phases, compute (sources read into locals) and write, so both halves of a VOPD read their sources
before either writes. Ops touching VCC/SGPRs, other lanes or their own destination are written out below.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tg.runtime.amd.sim.blockgen import BlockGen, unsupported
from tg.runtime.amd.sim.decode import VOP3SD_NAMES, EmulatorError, Instruction, half_operands
from tg.runtime.amd.sim.gen_scalar import constant, scalar_read
from tg.runtime.amd.sim.ops import numerics as N
from tg.runtime.amd.sim.ops.valu import VALU, compare_spec
from tg.runtime.amd.sim.wave import EXEC, M0, VCC

Writer = Callable[[], None]
_TYPE = re.compile(r"^([fiub])(\d+)$")


def _kind_width(ty: str) -> tuple[str, int]:
    m = _TYPE.match(ty)
    if not m:
        raise AssertionError(f"bad operand type {ty}")
    return m.group(1), int(m.group(2))


def base_name(name: str) -> str:
    return re.sub(r"_e(32|64)$", "", name)


class Operands:
    """Uniform view of a VALU instruction's operand fields across VOP1/VOP2/VOPC/VOP3/VOP3P."""

    def __init__(self, inst: Instruction) -> None:
        f, enc = inst.fields, inst.encoding
        self.literal = inst.literal
        dst16, src16 = half_operands(inst.name)
        self.abs = self.neg = self.clamp = self.omod = 0
        if enc in ("VOP3", "VOP3P"):
            self.srcs = [f["src0"], f["src1"], f["src2"]]
            self.vdst = f["vdst"]
            self.dst_half = f["opsel"] >> 3 & 1 if enc == "VOP3" and dst16 else 0
            self.halves = [f["opsel"] >> i & 1 if src16[i] else 0 for i in range(3)]
            self.neg, self.clamp = f["neg"], f["clamp"]
            if enc == "VOP3":
                self.omod = f["omod"]
                self.abs = 0 if inst.name in VOP3SD_NAMES else f["abs"]
            self.sdst = f.get("sdst", 124)
        else:
            src0, h0 = f["src0"], 0
            if src16[0] and src0 >= 384:
                src0, h0 = src0 - 128, 1
            self.srcs, self.halves = [src0, 0, 0], [h0, 0, 0]
            if "vsrc1" in f:
                v1, h1 = f["vsrc1"], 0
                if src16[1] and v1 >= 128:
                    v1, h1 = v1 - 128, 1
                self.srcs[1], self.halves[1] = 256 + v1, h1
            vd = f.get("vdst", 0)
            self.dst_half = 0
            if dst16 and vd >= 128:
                vd, self.dst_half = vd - 128, 1
            self.vdst = vd
            self.sdst = VCC


class Src:
    """One source of a lane expression: a value evaluated once (`scalar`) or a lane template over sequences."""

    __slots__ = ("lane", "scalar", "seqs")

    def __init__(self, scalar: str | None = None, seqs: tuple[str, ...] = (), lane: str = "{0}") -> None:
        self.scalar, self.seqs, self.lane = scalar, seqs, lane


def _atom(expr: str) -> str:
    return expr if expr.isidentifier() or expr.isdigit() else f"({expr})"


def _float_mods(lane: str, absm: int, negm: int) -> str:
    if absm:
        lane = f"abs({lane})"
    return f"(-{lane})" if negm else lane


def read_source(g: BlockGen, ops: Operands, i: int, ty: str, bitmods: bool = False) -> Src:
    """Source i of an instruction in the domain of type `ty` (f: floats, i: signed, u/b: unsigned bits).

    Float sources take the VOP3 abs/neg modifiers on their values; with `bitmods` an integer-typed source takes them
    on its sign bit (v_cndmask, v_cmp_class)."""
    kind, width = _kind_width(ty)
    src, half, lit = ops.srcs[i], ops.halves[i], ops.literal
    absm, negm = ops.abs >> i & 1, ops.neg >> i & 1
    sign = 1 << (width - 1)
    if src >= 256:
        n = src - 256
        if kind == "f":
            if width == 32:
                seq = g.f32_view(n)
            else:
                seq = g.tmp("h")
                if width == 16:
                    raw = f"[x >> 16 for x in v[{n}]]" if half else f"[x & 0xFFFF for x in v[{n}]]"
                    g.emit(f"{seq} = {_ftz_in(g, 16, f'f16s({raw})')}")
                else:
                    g.emit(f"{seq} = {_ftz_in(g, 64, f'f64s(v[{n}], v[{n + 1}])')}")
            return Src(seqs=(seq,), lane=_float_mods("{0}", absm, negm))
        seqs: tuple[str, ...]
        if width == 64:
            seqs, lane = (f"v[{n}]", f"v[{n + 1}]"), "({0} | {1} << 32)"
        elif width == 16:
            seqs, lane = (f"v[{n}]",), "({0} >> 16)" if half else "({0} & 0xFFFF)"
        else:
            seqs, lane = (f"v[{n}]",), "{0}"
        if bitmods and (absm or negm):
            lane = (
                f"(({lane} & {~sign & ((1 << width) - 1) if absm else (1 << width) - 1:#x}) ^ {sign if negm else 0:#x})"
            )
        if kind == "i":
            lane = f"(({lane} ^ {sign:#x}) - {sign:#x})"
        return Src(seqs=seqs, lane=lane)
    # scalar operands: SGPR, special register or constant, the same for every lane
    c = constant(src, width, lit, kind == "f", signed=kind == "i")  # signed 64-bit operands sign-extend a literal
    if c is None:
        bits = scalar_read(src, 64 if width == 64 else 32, lit, kind == "f")
        if width == 16:
            bits = f"({bits} >> 16)" if half else f"({bits} & 0xFFFF)"
    if kind == "f":
        if c is not None:
            value = {16: N.bits_f16, 32: N.bits_f32, 64: N.bits_f64}[width](c)
            value = -abs(value) if absm and negm else abs(value) if absm else -value if negm else value
            return Src(scalar=g.const(value))
        name = g.tmp("k")
        g.emit(f"{name} = {_float_mods(f'bits_f{width}({bits})', absm, negm)}")
        return Src(scalar=name)
    if c is not None:
        if bitmods:
            c = (c & (~sign if absm else -1)) ^ (sign if negm else 0)
        c &= (1 << width) - 1
        return Src(scalar=_atom(str(c - (1 << width) if kind == "i" and c & sign else c)))
    name = g.tmp("k")
    if bitmods and (absm or negm):
        bits = f"(({bits} & {~sign & ((1 << width) - 1) if absm else (1 << width) - 1:#x}) ^ {sign if negm else 0:#x})"
    g.emit(f"{name} = {f'sext({bits}, {width})' if kind == 'i' else bits}")
    return Src(scalar=name)


def _ftz_in(g: BlockGen, width: int, expr: str) -> str:
    flush = g.ctx.flush32 if width == 32 else g.ctx.flush16_64
    return f"ftz({expr}, {width})" if flush else expr


def lanes(template: str, srcs: list[Src], first: tuple[str, ...] = ()) -> tuple[str, str]:
    """(lane expression, iteration clause) of a comprehension applying `template` to `srcs` ({a}, {b}, {c}, ...).

    Sequences in `first` come first in the iteration, as x0, x1... (POW2 for the lane's bit in a mask)."""
    seq_vars: dict[str, str] = {q: f"x{k}" for k, q in enumerate(first)}
    vals = []
    for s in srcs:
        if s.scalar is not None:
            vals.append(s.scalar)
            continue
        names = []
        for q in s.seqs:
            if q not in seq_vars:
                seq_vars[q] = f"x{len(seq_vars)}"
            names.append(seq_vars[q])
        vals.append(s.lane.format(*names))
    expr = template.format(**dict(zip("abcde", vals, strict=False)))
    if not seq_vars:
        return expr, ""
    if len(seq_vars) == 1:
        ((q, x),) = seq_vars.items()
        return expr, f"for {x} in {q}"
    return expr, f"for {', '.join(seq_vars.values())} in zip({', '.join(seq_vars)})"


def comprehension(template: str, srcs: list[Src]) -> str:
    """Python expression of the 32 lane results of `template` over `srcs`."""
    expr, loop = lanes(template, srcs)
    return f"[{expr} {loop}]" if loop else f"({expr},) * 32"


def lane_mask(predicate: str, srcs: list[Src]) -> str:
    """Python expression of the mask of the active lanes where `predicate` holds (VOPC results)."""
    expr, loop = lanes(predicate, srcs)
    if not loop:
        return f"(ex if {expr} else 0)"
    expr, loop = lanes(predicate, srcs, first=("POW2",))
    return f"sum(x0 {loop} if {expr}) & ex"


def sequence(g: BlockGen, src: Src) -> str:
    """A local holding the 32 values of a source (for the vector helpers such as fma32v)."""
    if src.scalar is None and len(src.seqs) == 1 and src.lane == "{0}":
        return src.seqs[0]
    t = g.tmp("q")
    g.emit(f"{t} = {comprehension('{a}', [src])}")
    return t


# ---------------------------------------------------------------- results


def _then(*steps: Writer) -> Writer:
    """A writer running `steps` in order."""

    def run() -> None:
        for step in steps:
            step()

    return run


def compute_result(g: BlockGen, ops: Operands, ty: str, values: str) -> Writer:
    """Emit the rounding of lane `values` (an expression) to type `ty`; return the writer of the destination."""
    kind, width = _kind_width(ty)
    d = ops.vdst
    t = g.tmp()
    if kind == "f":
        if width == 32:
            tf = g.tmp("r")
            g.emit(f"{t}, {tf} = {'b32f_ftz' if g.ctx.flush32 else 'b32f'}({values})")
            return lambda: g.write_f32(d, t, tf)
        if width == 16:
            g.emit(f"{t} = {'b16s_ftz' if g.ctx.flush16_64 else 'b16s'}({values})")
            return lambda: _write_half(g, d, ops.dst_half, t)
        th = g.tmp()
        g.emit(f"{t}, {th} = {'b64s_ftz' if g.ctx.flush16_64 else 'b64s'}({values})")
        return _then(lambda: g.write(d, t), lambda: g.write(d + 1, th))
    g.emit(f"{t} = {values}")
    if width == 16:
        return lambda: _write_half(g, d, ops.dst_half, t)
    if width == 64:
        lo, hi = g.tmp(), g.tmp()
        g.emit(f"{lo} = [x & 0xFFFFFFFF for x in {t}]; {hi} = [x >> 32 for x in {t}]")
        return _then(lambda: g.write(d, lo), lambda: g.write(d + 1, hi))
    return lambda: g.write(d, t)


def _write_half(g: BlockGen, d: int, half: int, vals: str) -> None:
    t = g.tmp()
    if half:
        g.emit(f"{t} = [(o & 0xFFFF) | r << 16 for o, r in zip(v[{d}], {vals})]")
    else:
        g.emit(f"{t} = [(o & 0xFFFF0000) | r for o, r in zip(v[{d}], {vals})]")
    g.write(d, t)


def _float_post(ops: Operands, template: str) -> str:
    """The op's lane expression with the VOP3 output modifiers (omod scale, then clamp to [0, 1])."""
    if ops.omod:
        template = f"({template}) * {(1.0, 2.0, 4.0, 0.5)[ops.omod]}"
    if ops.clamp:
        template = f"clamp01({template})"
    return template


# ---------------------------------------------------------------- the ops


def _generic(inst: Instruction, g: BlockGen, ops: Operands, spec: tuple[str, tuple[str, ...], str]) -> Writer:
    dst, src_types, template = spec
    if dst[0] == "f":
        template = _float_post(ops, template)
    elif ops.clamp:
        raise EmulatorError("clamp (saturation) on an integer op is not implemented")
    srcs = [read_source(g, ops, i, ty) for i, ty in enumerate(src_types)]
    return compute_result(g, ops, dst, comprehension(template, srcs))


def _compare(inst: Instruction, g: BlockGen, ops: Operands, ty: str, pred: str) -> Writer:
    width = _kind_width(ty)[1]
    if pred == "class":  # src1 is a per-lane mask of float classes, src0 is read as raw bits (sign modifiers apply)
        srcs = [read_source(g, ops, 0, f"b{width}", bitmods=True), read_source(g, ops, 1, "u32")]
        pred = f"{{b}} >> fclass({{a}}, {width}) & 1"
    else:
        srcs = [read_source(g, ops, 0, ty), read_source(g, ops, 1, ty)]
    m = g.tmp("c")
    g.emit(f"{m} = {lane_mask(pred, srcs)}")
    if base_name(inst.name).startswith("v_cmpx"):
        return lambda: g.emit(f"ex = s[{EXEC}] = {m}")
    dst = inst.fields["vdst"] if inst.encoding == "VOP3" else VCC
    return lambda: g.write_sgpr(dst, m)


def _carry_in(g: BlockGen, inst: Instruction, ops: Operands) -> str:
    if inst.encoding == "VOP3":
        return scalar_read(ops.srcs[2], 32, ops.literal)
    return f"s[{VCC}]"


def _mask_bits(g: BlockGen, mask_expr: str) -> Src:
    k = g.tmp("k")
    g.emit(f"{k} = lane_bits({mask_expr})")
    return Src(seqs=(k,))


def _cndmask(inst: Instruction, g: BlockGen, ops: Operands, width: int) -> Writer:
    srcs = [read_source(g, ops, i, f"b{width}", bitmods=True) for i in (0, 1)]
    cond = _mask_bits(g, _carry_in(g, inst, ops))
    return compute_result(g, ops, f"b{width}", comprehension("{b} if {c} else {a}", [*srcs, cond]))


def _add_sub_carry(inst: Instruction, g: BlockGen, ops: Operands, base: str) -> Writer:
    a, b = read_source(g, ops, 0, "u32"), read_source(g, ops, 1, "u32")
    if "rev" in base:
        a, b = b, a
    sub = "sub" in base
    full = g.tmp()
    g.emit(f"{full} = {comprehension('{a} - {b}' if sub else '{a} + {b}', [a, b])}")
    if "_ci_" in base:  # the carry (borrow) in: most often none
        cin = g.tmp("k")
        g.emit(f"{cin} = {_carry_in(g, inst, ops)}")
        g.emit(f"if {cin}: {full} = [x {'-' if sub else '+'} c for x, c in zip({full}, lane_bits({cin}))]")
    res, carry = g.tmp(), g.tmp("c")
    g.emit(f"{res} = [x & 0xFFFFFFFF for x in {full}]")
    if sub:
        g.emit(f"{carry} = 0 if min({full}) >= 0 else sum(p for p, x in zip(POW2, {full}) if x < 0) & ex")
    else:
        g.emit(f"{carry} = 0 if max({full}) <= 0xFFFFFFFF else sum(p for p, x in zip(POW2, {full}) if x >> 32) & ex")
    sdst = inst.fields["sdst"] if inst.encoding == "VOP3" else VCC
    return _then(lambda: g.write(ops.vdst, res), lambda: g.write_sgpr(sdst, carry))


def _mad64(inst: Instruction, g: BlockGen, ops: Operands, signed: bool) -> Writer:
    k = "i" if signed else "u"
    srcs = [read_source(g, ops, 0, f"{k}32"), read_source(g, ops, 1, f"{k}32"), read_source(g, ops, 2, f"{k}64")]
    full = g.tmp()
    g.emit(f"{full} = {comprehension('{a} * {b} + {c}', srcs)}")
    lo, hi, carry = g.tmp(), g.tmp(), g.tmp("c")
    g.emit(f"{lo} = [x & 0xFFFFFFFF for x in {full}]; {hi} = [x >> 32 & 0xFFFFFFFF for x in {full}]")
    test = "not -0x8000000000000000 <= x < 0x8000000000000000" if signed else "x >> 64"
    g.emit(f"{carry} = sum(p for p, x in zip(POW2, {full}) if {test}) & ex")
    d = ops.vdst
    return _then(lambda: g.write(d, lo), lambda: g.write(d + 1, hi), lambda: g.write_sgpr(inst.fields["sdst"], carry))


def _div_scale(inst: Instruction, g: BlockGen, ops: Operands, width: int) -> Writer:
    srcs = [read_source(g, ops, i, f"f{width}") for i in range(3)]
    pairs = g.tmp()
    g.emit(f"{pairs} = {comprehension(f'div_scale({{a}}, {{b}}, {{c}}, {width})', srcs)}")
    write = compute_result(g, ops, f"f{width}", f"[r[0] for r in {pairs}]")
    flag = g.tmp("c")
    g.emit(f"{flag} = sum(p for p, r in zip(POW2, {pairs}) if r[1]) & ex")
    return _then(write, lambda: g.write_sgpr(inst.fields["sdst"], flag))


def _div_fmas(inst: Instruction, g: BlockGen, ops: Operands, width: int) -> Writer:
    srcs = [read_source(g, ops, i, f"f{width}") for i in range(3)]
    template = _float_post(ops, f"div_fmas({{a}}, {{b}}, {{c}}, {{d}}, {width})")
    return compute_result(g, ops, f"f{width}", comprehension(template, [*srcs, _mask_bits(g, f"s[{VCC}]")]))


def _fma(inst: Instruction, g: BlockGen, ops: Operands, base: str) -> Writer:
    """v_fma_f32/f16 and the forms with an implied operand: fmac (the destination is the addend), fmaak/fmamk (a
    literal K), dx9 (0 * anything = 0)."""
    width = 16 if base.endswith("f16") else 32
    ty = f"f{width}"
    if base.startswith(("v_fmaak", "v_fmamk")):
        k = Src(scalar=g.const({16: N.bits_f16, 32: N.bits_f32}[width]((ops.literal or 0) & ((1 << width) - 1))))
        a, b = read_source(g, ops, 0, ty), read_source(g, ops, 1, ty)
        srcs = [a, b, k] if base.startswith("v_fmaak") else [a, k, b]
    elif base.startswith("v_fmac"):
        dst = Operands.__new__(Operands)
        dst.srcs, dst.halves, dst.literal, dst.abs, dst.neg = [256 + ops.vdst], [ops.dst_half], None, 0, 0
        srcs = [read_source(g, ops, 0, ty), read_source(g, ops, 1, ty), read_source(g, dst, 0, ty)]
    else:
        srcs = [read_source(g, ops, i, ty) for i in range(3)]
    if "dx9" in base:
        template = _float_post(ops, "({c} if {a} == 0 or {b} == 0 else fma_narrow({a}, {b}, {c}, 32))")
        return compute_result(g, ops, ty, comprehension(template, srcs))
    if width == 16 or ops.omod or ops.clamp:
        template = _float_post(ops, f"fma_narrow({{a}}, {{b}}, {{c}}, {width})")
        return compute_result(g, ops, ty, comprehension(template, srcs))
    seqs = [sequence(g, s) for s in srcs]
    return compute_result(g, ops, ty, f"fma32v({', '.join(seqs)})")


def _lane_ops(inst: Instruction, g: BlockGen, ops: Operands, base: str) -> Writer | None:
    """Ops that read or write single lanes or use the lane number."""
    lit, f = ops.literal, inst.fields
    if base == "v_readfirstlane_b32":
        if ops.srcs[0] >= 256:
            value = f"v[{ops.srcs[0] - 256}][(ex & -ex).bit_length() - 1 if ex else 0]"
        else:
            value = scalar_read(ops.srcs[0], 32, lit)
        t = g.tmp()
        g.emit(f"{t} = {value}")
        return lambda: g.write_sgpr(f["vdst"], t)
    if base == "v_readlane_b32":
        sel = scalar_read(ops.srcs[1], 32, lit)
        value = f"v[{ops.srcs[0] - 256}][{sel} & 31]" if ops.srcs[0] >= 256 else scalar_read(ops.srcs[0], 32, lit)
        t = g.tmp()
        g.emit(f"{t} = {value}")
        return lambda: g.write_sgpr(f["vdst"], t)
    if base == "v_writelane_b32":  # writes one lane whatever EXEC is
        val, sel, d = scalar_read(ops.srcs[0], 32, lit), scalar_read(ops.srcs[1], 32, lit), ops.vdst
        t, k = g.tmp(), g.tmp("k")
        g.emit(f"{k} = {val}; {t} = list(v[{d}])")

        def write_lane() -> None:
            g.emit(f"{t}[{sel} & 31] = {k}; v[{d}] = {t}")
            g.changed(d)

        return write_lane
    if base in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
        srcs = [read_source(g, ops, 0, "u32"), read_source(g, ops, 1, "u32"), Src(seqs=("LANE_MASKS",))]
        template = "{b}" if base.startswith("v_mbcnt_hi") else "(bin({a} & {c}).count('1') + {b}) & M32"
        return compute_result(g, ops, "b32", comprehension(template, srcs))
    if base in ("v_movrels_b32", "v_movreld_b32", "v_movrelsd_b32"):  # VGPR index + M0
        src, d = ops.srcs[0], ops.vdst
        if src < 256 and base != "v_movreld_b32":
            raise EmulatorError("v_movrels needs a VGPR source")
        read = f"v[{src - 256} + s[{M0}]]" if base != "v_movreld_b32" else (
            f"v[{src - 256}]" if src >= 256 else comprehension("{a}", [read_source(g, ops, 0, "b32")]))  # fmt: skip
        dest = f"{d} + s[{M0}]" if base != "v_movrels_b32" else str(d)
        t, r = g.tmp(), g.tmp("r")
        g.emit(f"{t} = {read}")

        def write_rel() -> None:
            g.emit(f"{r} = {dest}")
            g.emit(f"v[{r}] = {t} if ex == FULL else merge({t}, v[{r}], ex)")
            g.f32_views.clear()  # the register written is known only at run time

        return write_rel
    if base == "v_swap_b32":
        a, d = ops.srcs[0] - 256, ops.vdst
        ta, td = g.tmp(), g.tmp()
        g.emit(f"{ta} = v[{a}]; {td} = v[{d}]")
        return _then(lambda: g.write(d, ta), lambda: g.write(a, td))
    return None


# packed 16-bit ops (VOP3P): per half, the lane expression over the halves selected by op_sel / op_sel_hi
PACKED = {
    "v_pk_add_f16": ("f", "{a} + {b}"),
    "v_pk_mul_f16": ("f", "{a} * {b}"),
    "v_pk_fma_f16": ("f", "fma_narrow({a}, {b}, {c}, 16)"),
    "v_pk_min_f16": ("f", "fmin({a}, {b})"),
    "v_pk_max_f16": ("f", "fmax({a}, {b})"),
    "v_pk_add_u16": ("u", "({a} + {b}) & 0xFFFF"),
    "v_pk_sub_u16": ("u", "({a} - {b}) & 0xFFFF"),
    "v_pk_mul_lo_u16": ("u", "({a} * {b}) & 0xFFFF"),
    "v_pk_lshlrev_b16": ("u", "({b} << ({a} & 15)) & 0xFFFF"),
    "v_pk_lshrrev_b16": ("u", "{b} >> ({a} & 15)"),
    "v_pk_ashrrev_i16": ("u", "(sext({b}, 16) >> ({a} & 15)) & 0xFFFF"),
    "v_pk_add_i16": ("u", "({a} + {b}) & 0xFFFF"),
    "v_pk_sub_i16": ("u", "({a} - {b}) & 0xFFFF"),
    "v_pk_max_i16": ("u", "max(sext({a}, 16), sext({b}, 16)) & 0xFFFF"),
    "v_pk_min_i16": ("u", "min(sext({a}, 16), sext({b}, 16)) & 0xFFFF"),
    "v_pk_max_u16": ("u", "max({a}, {b})"),
    "v_pk_min_u16": ("u", "min({a}, {b})"),
    "v_pk_mad_u16": ("u", "({a} * {b} + {c}) & 0xFFFF"),
    "v_pk_mad_i16": ("u", "({a} * {b} + {c}) & 0xFFFF"),
}


def _packed(inst: Instruction, g: BlockGen, ops: Operands, base: str) -> Writer:
    if base not in PACKED:
        raise EmulatorError("packed op not implemented")
    kind, template = PACKED[base]
    f = inst.fields
    nsrc = sum(1 for w in inst.widths[1:] if w)
    raw = [read_source(g, ops, i, "b32") for i in range(nsrc)]
    halves = []
    for sel, neg in ((f["opsel"], f["neg"]), (f["opsel_hi"], f["neg_hi"])):
        srcs = []
        for i, r in enumerate(raw):
            pick = "({} >> 16)" if sel >> i & 1 else "({} & 0xFFFF)"
            s = Src(r.scalar, r.seqs, pick.format(r.lane)) if r.scalar is None else Src(
                scalar=_atom(pick.format(r.scalar)))  # fmt: skip
            if kind == "f":
                t = g.tmp("h")
                g.emit(f"{t} = f16s({comprehension('{a}', [s])})")
                s = Src(seqs=(t,), lane="(-{0})" if neg >> i & 1 else "{0}")
            srcs.append(s)
        t = g.tmp()
        values = comprehension(template, srcs)
        g.emit(f"{t} = b16s({values})" if kind == "f" else f"{t} = {values}")
        halves.append(t)
    res = g.tmp()
    g.emit(f"{res} = [lo | hi << 16 for lo, hi in zip({halves[0]}, {halves[1]})]")
    return lambda: g.write(ops.vdst, res)


def _fma_mix(inst: Instruction, g: BlockGen, ops: Operands, base: str) -> Writer:
    """v_fma_mix*: each source is f32, or the f16 half chosen by op_sel when its op_sel_hi bit is set; neg_hi is abs."""
    f = inst.fields
    srcs = []
    for i in range(3):
        is16, hi = f["opsel_hi"] >> i & 1, f["opsel"] >> i & 1
        r = read_source(g, ops, i, "b32")
        lane = r.lane if r.scalar is None else "{0}"
        seq = r.seqs if r.scalar is None else (f"({r.scalar},) * 32",)
        t = g.tmp("h")
        if is16:
            pick = f"({lane} >> 16)" if hi else f"({lane} & 0xFFFF)"
            g.emit(f"{t} = f16s({comprehension('{a}', [Src(seqs=seq, lane=pick)])})")
        else:
            g.emit(f"{t} = f32s({comprehension('{a}', [Src(seqs=seq, lane=lane)])})")
        srcs.append(Src(seqs=(t,), lane=_float_mods("{0}", f["neg_hi"] >> i & 1, f["neg"] >> i & 1)))
    width = 32 if base == "v_fma_mix_f32" else 16
    mix_ops = ops
    if width == 16:
        mix_ops = Operands.__new__(Operands)
        mix_ops.__dict__.update(ops.__dict__)
        mix_ops.dst_half = 1 if base.endswith("hi_f16") else 0
    template = f"fma_narrow({{a}}, {{b}}, {{c}}, {width})"
    if ops.clamp:
        template = f"clamp01({template})"
    return compute_result(g, mix_ops, f"f{width}", comprehension(template, srcs))


def _dot2(inst: Instruction, g: BlockGen, ops: Operands) -> Writer:
    a, b = read_source(g, ops, 0, "b32"), read_source(g, ops, 1, "b32")
    if inst.encoding == "VOP3P":
        c = read_source(g, ops, 2, "f32")
    else:
        dst = Operands.__new__(Operands)
        dst.srcs, dst.halves, dst.literal, dst.abs, dst.neg = [256 + ops.vdst], [0], None, 0, 0
        c = read_source(g, dst, 0, "f32")
    t = g.tmp("h")
    g.emit(f"{t} = {comprehension('dot2_f16({a}, {b})', [a, b])}")
    return compute_result(g, ops, "f32", comprehension("{a} + {b}", [Src(seqs=(t,)), c]))


# VOPD: both halves read their sources before either writes
VOPD_OPS = {
    "v_dual_fmac_f32": "v_fmac_f32",
    "v_dual_fmaak_f32": "v_fmaak_f32",
    "v_dual_fmamk_f32": "v_fmamk_f32",
    "v_dual_mul_f32": "v_mul_f32",
    "v_dual_add_f32": "v_add_f32",
    "v_dual_sub_f32": "v_sub_f32",
    "v_dual_subrev_f32": "v_subrev_f32",
    "v_dual_mul_dx9_zero_f32": "v_mul_dx9_zero_f32",
    "v_dual_mov_b32": "v_mov_b32",
    "v_dual_cndmask_b32": "v_cndmask_b32",
    "v_dual_max_f32": "v_max_f32",
    "v_dual_min_f32": "v_min_f32",
    "v_dual_dot2acc_f32_f16": "v_dot2acc_f32_f16",
    "v_dual_add_nc_u32": "v_add_nc_u32",
    "v_dual_lshlrev_b32": "v_lshlrev_b32",
    "v_dual_and_b32": "v_and_b32",
}


def _vopd(inst: Instruction, g: BlockGen) -> list[Writer]:
    f = inst.fields
    writers = []
    for name, dst, src0, vsrc1 in zip(inst.name.split(" :: "), (f["vdstx"], f["vdsty"]), (f["srcx0"], f["srcy0"]),
                                      (f["vsrcx1"], f["vsrcy1"]), strict=False):  # fmt: skip
        op = VOPD_OPS[name]
        half = Instruction(inst.pc, inst.words, "VOP2", 0, op + ("" if "fma" in op else "_e32"),
                           {"src0": src0, "vsrc1": vsrc1, "vdst": dst}, inst.literal)  # fmt: skip
        writers += _compute(half, g)
    return writers


def _compute(inst: Instruction, g: BlockGen) -> list[Writer]:
    """Emit the compute phase of a VALU instruction; return the writers of its results."""
    if inst.encoding == "VOPD":
        return _vopd(inst, g)
    base = base_name(inst.name)
    if base in ("v_nop", "v_pipeflush"):
        return []
    ops = Operands(inst)
    if (w := _lane_ops(inst, g, ops, base)) is not None:
        return [w]
    if base in ("v_cndmask_b32", "v_cndmask_b16"):
        return [_cndmask(inst, g, ops, 32 if base.endswith("32") else 16)]
    if base in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32",
                "v_subrev_co_ci_u32"):  # fmt: skip
        return [_add_sub_carry(inst, g, ops, base)]
    if base in ("v_mad_u64_u32", "v_mad_i64_i32"):
        return [_mad64(inst, g, ops, base == "v_mad_i64_i32")]
    if base in ("v_div_scale_f32", "v_div_scale_f64"):
        return [_div_scale(inst, g, ops, 32 if base.endswith("32") else 64)]
    if base in ("v_div_fmas_f32", "v_div_fmas_f64"):
        return [_div_fmas(inst, g, ops, 32 if base.endswith("32") else 64)]
    if base in ("v_fma_f32", "v_fmac_f32", "v_fmac_f16", "v_fmac_dx9_zero_f32", "v_fma_dx9_zero_f32", "v_fmaak_f32",
                "v_fmamk_f32", "v_fmaak_f16", "v_fmamk_f16"):  # fmt: skip
        return [_fma(inst, g, ops, base)]
    if base in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
        return [_fma_mix(inst, g, ops, base)]
    if base.startswith("v_pk_"):
        return [_packed(inst, g, ops, base)]
    if base in ("v_dot2_f32_f16", "v_dot2acc_f32_f16"):
        return [_dot2(inst, g, ops)]
    if (cmp := compare_spec(base)) is not None:
        return [_compare(inst, g, ops, *cmp)]
    spec = VALU.get(base)
    if spec is None:
        raise EmulatorError("not implemented")
    return [_generic(inst, g, ops, spec)]


def gen_valu(inst: Instruction, g: BlockGen) -> None:
    """Emit a VALU instruction (an op the emulator does not implement raises when it runs)."""
    mark = len(g.lines)
    try:
        writers = _compute(inst, g)
    except EmulatorError as e:
        del g.lines[mark:]
        g.raise_error(unsupported(inst, g.ctx, str(e)))
        return
    for write in writers:
        write()
