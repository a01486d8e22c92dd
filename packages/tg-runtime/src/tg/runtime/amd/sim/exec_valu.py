"""Compile VALU instructions (VOP1/VOP2/VOPC/VOP3/VOP3SD/VOP3P/VOPD) into closures over a `Wave`.

Each closure reads its sources for all 32 lanes, computes with the op's lane function from `ops.valu`, and writes
the active lanes (EXEC). Source modifiers (abs/neg), true16 halves, clamp and omod are applied here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from tg.runtime.amd.sim.decode import VOP3SD_NAMES, EmulatorError, Instruction, half_operands
from tg.runtime.amd.sim.ops import numerics as N
from tg.runtime.amd.sim.ops.valu import VALU, compare_spec
from tg.runtime.amd.sim.wave import (
    EXEC,
    FULL,
    VCC,
    Ctx,
    Wave,
    from_domain,
    lanes_of,
    sreader,
    swriter,
    to_domain,
    vreader,
    vwriter,
)

Step = Callable[[Wave], None]
TYPE = re.compile(r"^([fiub])(\d+)$")


def _kind_width(ty: str) -> tuple[str, int]:
    m = TYPE.match(ty)
    assert m, ty
    return m.group(1), int(m.group(2))


def base_name(name: str) -> str:
    return re.sub(r"_e(32|64)$", "", name)


class Operands:
    """Uniform view of a VALU instruction's operand fields across VOP1/VOP2/VOPC/VOP3/VOP3P."""

    def __init__(self, inst: Instruction) -> None:
        f, enc = inst.fields, inst.encoding
        self.literal = inst.literal
        dst16, src16 = half_operands(inst.name)
        self.dst16, self.src16 = dst16, src16
        self.abs = self.neg = self.opsel = self.clamp = self.omod = 0
        if enc in ("VOP3", "VOP3P"):
            self.srcs = [f["src0"], f["src1"], f["src2"]]
            self.vdst = f["vdst"]
            self.dst_half = f["opsel"] >> 3 & 1 if enc == "VOP3" and dst16 else 0
            self.halves = [f["opsel"] >> i & 1 if src16[i] else 0 for i in range(3)]
            self.neg, self.clamp = f["neg"], f["clamp"]
            if enc == "VOP3":
                self.omod = f["omod"]
                self.abs = 0 if inst.name in VOP3SD_NAMES else f["abs"]
                self.opsel = f["opsel"]
            self.sdst = f.get("sdst", 124)
        else:
            src0 = f["src0"]
            h0 = 0
            if src16[0] and src0 >= 384:
                src0, h0 = src0 - 128, 1
            self.srcs = [src0, 0, 0]
            self.halves = [h0, 0, 0]
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


def _source(ops: Operands, i: int, ty: str, ctx: Ctx) -> Callable[[Wave], list]:
    """Reader of source i converted to the lane function's domain, with abs/neg applied on the bits."""
    kind, width = _kind_width(ty)
    read = vreader(ops.srcs[i], width, ops.literal, ops.halves[i], kind)
    sign = 1 << (width - 1)
    a, n = ops.abs >> i & 1, ops.neg >> i & 1
    if kind == "f" and (a or n):
        clear = ~sign if a else -1
        flip = sign if n else 0
        raw = read

        def read(w: Wave) -> list[int]:
            return [(x & clear) ^ flip for x in raw(w)]

    elif kind != "f" and n and ops.srcs[i] < 256:
        pass  # integer neg modifiers are not defined for VOP3 integer ops
    conv = to_domain(kind, width, (ctx.flush32 if width == 32 else ctx.flush16_64) and kind == "f")
    if kind == "b" or (kind == "u"):
        return read
    return lambda w: conv(read(w))


def _output(ops: Operands, ty: str, ctx: Ctx) -> Callable[[Wave, list], None]:
    kind, width = _kind_width(ty)
    write = vwriter(ops.vdst, width, ops.dst_half)
    conv = from_domain(kind, width, (ctx.flush32 if width == 32 else ctx.flush16_64) and kind == "f")
    if kind == "f" and (ops.omod or ops.clamp):
        scale = {0: 1.0, 1: 2.0, 2: 4.0, 3: 0.5}[ops.omod]
        clamp = ops.clamp

        def post(x: float) -> float:
            x = x * scale
            if clamp:
                return 0.0 if x != x or x < 0 else (1.0 if x > 1 else x)
            return x

        return lambda w, vals: write(w, conv([post(x) for x in vals]))
    if kind != "f" and ops.clamp:
        pass  # integer clamp saturates add/sub; LLVM does not emit it for tg kernels
    return lambda w, vals: write(w, conv(vals))


def compile_generic(inst: Instruction, ctx: Ctx, spec: tuple) -> Step:
    dst_ty, src_tys, fn = spec
    ops = Operands(inst)
    readers = [_source(ops, i, ty, ctx) for i, ty in enumerate(src_tys)]
    out = _output(ops, dst_ty, ctx)
    if len(readers) == 1:
        r0 = readers[0]
        return lambda w: out(w, list(map(fn, r0(w))))
    if len(readers) == 2:
        r0, r1 = readers
        return lambda w: out(w, list(map(fn, r0(w), r1(w))))
    r0, r1, r2 = readers
    return lambda w: out(w, list(map(fn, r0(w), r1(w), r2(w))))


def _mask_of(bits: list, ex: int) -> int:
    m = 0
    for i in lanes_of(ex):
        if bits[i]:
            m |= 1 << i
    return m


def compile_compare(inst: Instruction, ctx: Ctx, ty: str, pred: object, cmpx: bool) -> Step:
    ops = Operands(inst)
    width = _kind_width(ty)[1]
    if isinstance(pred, tuple):  # v_cmp_class: src1 is a u32 class mask
        r0 = vreader(ops.srcs[0], width, ops.literal, ops.halves[0], "f")
        r1 = vreader(ops.srcs[1], 32, ops.literal)
        neg, ab = ops.neg, ops.abs
        sign = 1 << (width - 1)

        def compute(w: Wave) -> list:
            a = r0(w)
            if ab & 1 or neg & 1:
                a = [(x & (~sign if ab & 1 else -1)) ^ (sign if neg & 1 else 0) for x in a]
            return [m >> N.float_class(x, width) & 1 for x, m in zip(a, r1(w), strict=False)]

    else:
        s0, s1 = _source(ops, 0, ty, ctx), _source(ops, 1, ty, ctx)
        p = pred

        def compute(w: Wave) -> list:
            return list(map(p, s0(w), s1(w)))  # type: ignore[call-overload]

    if cmpx:

        def step_x(w: Wave) -> None:
            w.s[EXEC] = _mask_of(compute(w), w.s[EXEC])

        return step_x
    write = swriter(ops.sdst if inst.encoding == "VOP3" else VCC, 32)
    if inst.encoding == "VOP3":
        write = swriter(inst.fields["vdst"], 32)

    def step(w: Wave) -> None:
        write(w, _mask_of(compute(w), w.s[EXEC]))

    return step


def _sdst_writer(inst: Instruction) -> Callable[[Wave, int], None]:
    return swriter(inst.fields["sdst"] if inst.encoding == "VOP3" else VCC, 32)


def _carry_in(inst: Instruction, ops: Operands) -> Callable[[Wave], int]:
    if inst.encoding == "VOP3":
        return sreader(ops.srcs[2], 32, ops.literal)
    return lambda w: w.s[VCC]


def compile_special(inst: Instruction, ctx: Ctx, base: str) -> Step | None:
    """Ops that touch VCC/SGPRs/other lanes or their own destination; None when `base` is not one of them."""
    ops = Operands(inst)
    lit = ops.literal
    if base in ("v_cndmask_b32", "v_cndmask_b16"):
        width = 32 if base.endswith("32") else 16
        a, b = _source(ops, 0, f"b{width}", ctx), _source(ops, 1, f"b{width}", ctx)
        if inst.encoding == "VOP3":
            # abs/neg on the selected operands (float-style bit modifiers)
            a = _source(ops, 0, f"b{width}", ctx) if not (ops.abs | ops.neg) & 3 else _bitmod(ops, 0, width, a)
            b = _source(ops, 1, f"b{width}", ctx) if not (ops.abs | ops.neg) & 3 else _bitmod(ops, 1, width, b)
        mask = _carry_in(inst, ops)
        write = vwriter(ops.vdst, width, ops.dst_half)

        def cndmask(w: Wave) -> None:
            m = mask(w)
            write(w, [y if m >> i & 1 else x for i, (x, y) in enumerate(zip(a(w), b(w), strict=False))])

        return cndmask
    if base in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32",
                "v_subrev_co_ci_u32"):  # fmt: skip
        a, b = vreader(ops.srcs[0], 32, lit), vreader(ops.srcs[1], 32, lit)
        if "rev" in base:
            a, b = b, a
        cin = _carry_in(inst, ops) if "_ci_" in base else (lambda w: 0)
        sub = "sub" in base
        write, wcarry = vwriter(ops.vdst, 32), _sdst_writer(inst)

        def addsub(w: Wave) -> None:
            c = cin(w)
            xs, ys = a(w), b(w)
            if sub:
                full = [x - y - (c >> i & 1) for i, (x, y) in enumerate(zip(xs, ys, strict=False))]
                carry = [r < 0 for r in full]
            else:
                full = [x + y + (c >> i & 1) for i, (x, y) in enumerate(zip(xs, ys, strict=False))]
                carry = [r > FULL for r in full]
            ex = w.s[EXEC]
            write(w, [r & FULL for r in full])
            wcarry(w, _mask_of(carry, ex))

        return addsub
    if base in ("v_mad_u64_u32", "v_mad_i64_i32"):
        signed = base == "v_mad_i64_i32"
        a, b = vreader(ops.srcs[0], 32, lit), vreader(ops.srcs[1], 32, lit)
        c = vreader(ops.srcs[2], 64, lit)
        write, wcarry = vwriter(ops.vdst, 64), _sdst_writer(inst)

        def mad64(w: Wave) -> None:
            if signed:
                full = [
                    N.sext(x, 32) * N.sext(y, 32) + N.sext(z, 64) for x, y, z in zip(a(w), b(w), c(w), strict=False)
                ]
                carry = [not -(1 << 63) <= r < (1 << 63) for r in full]
            else:
                full = [x * y + z for x, y, z in zip(a(w), b(w), c(w), strict=False)]
                carry = [r >> 64 != 0 for r in full]
            ex = w.s[EXEC]
            write(w, [r & 0xFFFFFFFFFFFFFFFF for r in full])
            wcarry(w, _mask_of(carry, ex))

        return mad64
    if base in ("v_div_scale_f32", "v_div_scale_f64"):
        width = 32 if base.endswith("32") else 64
        srcs = [_source(ops, i, f"f{width}", ctx) for i in range(3)]
        write, wflag = vwriter(ops.vdst, width), _sdst_writer(inst)
        scale_fn = _div_scale(width)

        def div_scale(w: Wave) -> None:
            res = [scale_fn(x, y, z) for x, y, z in zip(*(s(w) for s in srcs), strict=False)]
            ex = w.s[EXEC]
            write(w, N.floats_to_bits([r[0] for r in res], width))
            wflag(w, _mask_of([r[1] for r in res], ex))

        return div_scale
    if base in ("v_div_fmas_f32", "v_div_fmas_f64"):
        width = 32 if base.endswith("32") else 64
        srcs = [_source(ops, i, f"f{width}", ctx) for i in range(3)]
        out = _output(ops, f"f{width}", ctx)
        big, bias = (64, 127) if width == 32 else (128, 1023)
        fma = (lambda x, y, z: N.fma_narrow(x, y, z, 32)) if width == 32 else N.fma_f64

        def div_fmas(w: Wave) -> None:
            vcc = w.s[VCC]
            res = []
            for i, (x, y, z) in enumerate(zip(*(s(w) for s in srcs), strict=False)):
                r = fma(x, y, z)
                if vcc >> i & 1:
                    e = N.frexp_exp(z) - 1 + bias if z != 0 and math.isfinite(z) else 0
                    r = N.ldexp(r, big if e > bias else -big)
                res.append(r)
            out(w, res)

        return div_fmas
    if base == "v_readfirstlane_b32":
        read = vreader(ops.srcs[0], 32, lit)
        wr = swriter(inst.fields["vdst"], 32)

        def readfirstlane(w: Wave) -> None:
            ex = w.s[EXEC]
            lane = (ex & -ex).bit_length() - 1 if ex else 0
            wr(w, read(w)[lane])

        return readfirstlane
    if base == "v_readlane_b32":
        read, sel = vreader(ops.srcs[0], 32, lit), sreader(ops.srcs[1], 32, lit)
        wr = swriter(inst.fields["vdst"], 32)
        return lambda w: wr(w, read(w)[sel(w) & 31])
    if base == "v_writelane_b32":
        val, sel = sreader(ops.srcs[0], 32, lit), sreader(ops.srcs[1], 32, lit)
        dst = ops.vdst

        def writelane(w: Wave) -> None:
            reg = w.v[dst] = w.v[dst][:]
            reg[sel(w) & 31] = val(w)

        return writelane
    if base in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
        m, add = vreader(ops.srcs[0], 32, lit), vreader(ops.srcs[1], 32, lit)
        write = vwriter(ops.vdst, 32)
        hi = base.startswith("v_mbcnt_hi")

        def mbcnt(w: Wave) -> None:
            write(w, [(0 if hi else bin(mm & ((1 << i) - 1)).count("1")) + x & FULL
                      for i, (mm, x) in enumerate(zip(m(w), add(w), strict=False))])  # fmt: skip

        return mbcnt
    if base in ("v_fmac_f32", "v_fmac_f16", "v_fmac_dx9_zero_f32", "v_fmaak_f32", "v_fmamk_f32", "v_fmaak_f16",
                "v_fmamk_f16"):  # fmt: skip
        width = 16 if base.endswith("f16") else 32
        s0, s1 = _source(ops, 0, f"f{width}", ctx), _source(ops, 1, f"f{width}", ctx)
        fa: Callable[[Wave], list]
        fb: Callable[[Wave], list]
        fc: Callable[[Wave], list]
        conv = to_domain("f", width, False)
        k = [N.bits_to_floats([(lit or 0) & ((1 << width) - 1)], width)[0]] * 32
        if base.startswith("v_fmac"):
            fa, fb, fc = s0, s1, _dst_as_src(ops, width, conv)  # the destination is the addend
        elif base.startswith("v_fmaak"):
            fa, fb, fc = s0, s1, (lambda w: k)
        else:
            fa, fb, fc = s0, (lambda w: k), s1
        out = _output(ops, f"f{width}", ctx)
        dx9 = "dx9" in base

        def fmac(w: Wave) -> None:
            if dx9:
                out(
                    w,
                    [
                        z if x == 0 or y == 0 else N.fma_narrow(x, y, z, width)
                        for x, y, z in zip(fa(w), fb(w), fc(w), strict=False)
                    ],
                )
            else:
                out(w, [N.fma_narrow(x, y, z, width) for x, y, z in zip(fa(w), fb(w), fc(w), strict=False)])

        return fmac
    if base in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
        return _fma_mix(inst, ops, base, ctx)
    if base.startswith("v_pk_") and base != "v_pk_fmac_f16":
        return _packed(inst, ops, base)
    if base in ("v_dot2_f32_f16", "v_dot2acc_f32_f16"):
        return _dot2(inst, ops, base)
    return None


def _bitmod(ops: Operands, i: int, width: int, read: Callable) -> Callable[[Wave], list]:
    sign = 1 << (width - 1)
    clear = ~sign if ops.abs >> i & 1 else -1
    flip = sign if ops.neg >> i & 1 else 0
    return lambda w: [(x & clear) ^ flip for x in read(w)]


def _dst_as_src(ops: Operands, width: int, conv: Callable) -> Callable[[Wave], list]:
    read = vreader(256 + ops.vdst, width, None, ops.dst_half, "f")
    return lambda w: conv(read(w))


def _div_scale(width: int) -> Callable[[float, float, float], tuple[float, int]]:
    ebias, mbits, lim, sc = (127, 23, 96, 64) if width == 32 else (1023, 52, 768, 128)

    def expo(x: float) -> int:  # biased exponent field
        if x == 0 or not math.isfinite(x):
            return 0 if x == 0 else 2 * ebias + 1
        e = math.frexp(x)[1] - 1 + ebias
        return max(e, 0)

    def denorm(x: float) -> bool:
        return N.is_denormal(x, width)

    def f(s0: float, s1: float, s2: float) -> tuple[float, int]:
        if s2 == 0 or s1 == 0:
            return N.NAN, 0
        if s1 != s1 or s2 != s2 or s0 != s0:
            return N.NAN, 0
        if expo(s2) - expo(s1) >= lim:
            return (N.ldexp(s0, sc) if s0 == s1 else s0), 1
        if denorm(s1):
            return N.ldexp(s0, sc), 0
        inv, q = N.round_to(N.rcp(s1), width), N.round_to(N.fdiv(s2, s1), width)
        if denorm(inv) and denorm(q):
            return (N.ldexp(s0, sc) if s0 == s1 else s0), 1
        if denorm(inv):
            return N.ldexp(s0, -sc), 0
        if denorm(q):
            return (N.ldexp(s0, sc) if s0 == s2 else s0), 1
        if expo(s2) <= mbits:
            return N.ldexp(s0, sc), 0
        return s0, 0

    return f


def _fma_mix(inst: Instruction, ops: Operands, base: str, ctx: Ctx) -> Step:
    """v_fma_mix*: each source is f32, or the f16 half chosen by op_sel when its op_sel_hi bit is set."""
    f = inst.fields
    readers = []
    for i in range(3):
        is16, hi = f["opsel_hi"] >> i & 1, f["opsel"] >> i & 1
        raw = vreader(ops.srcs[i], 16 if is16 else 32, ops.literal, hi, "f")
        width = 16 if is16 else 32
        sign = 1 << (width - 1)
        clear = ~sign if f["neg_hi"] >> i & 1 else -1
        flip = sign if f["neg"] >> i & 1 else 0
        readers.append((raw, width, clear, flip))

    def src(w: Wave, r: tuple) -> list[float]:
        raw, width, clear, flip = r
        return N.bits_to_floats([(x & clear) ^ flip for x in raw(w)], width)

    if base == "v_fma_mix_f32":
        write = vwriter(ops.vdst, 32)
        out_w = 32
    else:
        write = vwriter(ops.vdst, 16, 1 if base.endswith("hi_f16") else 0)
        out_w = 16
    clamp = ops.clamp

    def mix(w: Wave) -> None:
        a, b, c = (src(w, r) for r in readers)
        res = [N.fma_narrow(x, y, z, out_w) for x, y, z in zip(a, b, c, strict=False)]
        if clamp:
            res = [0.0 if x != x or x < 0 else min(x, 1.0) for x in res]
        write(w, N.floats_to_bits(res, out_w))

    return mix


_PK = {
    "v_pk_add_f16": ("f", lambda a, b, c: a + b),
    "v_pk_mul_f16": ("f", lambda a, b, c: a * b),
    "v_pk_fma_f16": ("f", lambda a, b, c: N.fma_narrow(a, b, c, 16)),
    "v_pk_min_f16": ("f", lambda a, b, c: N.fmin(a, b)),
    "v_pk_max_f16": ("f", lambda a, b, c: N.fmax(a, b)),
    "v_pk_add_u16": ("u", lambda a, b, c: a + b),
    "v_pk_sub_u16": ("u", lambda a, b, c: a - b),
    "v_pk_mul_lo_u16": ("u", lambda a, b, c: a * b),
    "v_pk_lshlrev_b16": ("u", lambda a, b, c: b << (a & 15)),
    "v_pk_lshrrev_b16": ("u", lambda a, b, c: b >> (a & 15)),
}


def _packed(inst: Instruction, ops: Operands, base: str) -> Step:
    if base not in _PK:
        raise EmulatorError(f"unsupported rdna3 instruction {inst.name} word=0x{inst.words[0]:08x} at pc=0x{inst.pc:x}")
    kind, fn = _PK[base]
    f = inst.fields
    reads = [vreader(ops.srcs[i], 32, ops.literal) for i in range(3)]

    def half(x: int, hi: int, neg: int) -> int:
        h = x >> 16 if hi else x & 0xFFFF
        return h ^ 0x8000 if neg and kind == "f" else h

    write = vwriter(ops.vdst, 32)

    def step(w: Wave) -> None:
        srcs = [r(w) for r in reads]
        out = []
        for sel, neg in ((f["opsel"], f["neg"]), (f["opsel_hi"], f["neg_hi"])):
            args: list[list] = [[half(x, sel >> i & 1, neg >> i & 1) for x in srcs[i]] for i in range(3)]
            if kind == "f":
                args = [N.bits_to_floats(a, 16) for a in args]
                res = N.floats_to_bits([fn(a, b, c) for a, b, c in zip(*args, strict=False)], 16)
            else:
                res = [fn(a, b, c) & 0xFFFF for a, b, c in zip(*args, strict=False)]
            out.append(res)
        write(w, [lo | hi << 16 for lo, hi in zip(*out, strict=False)])

    return step


def _dot2(inst: Instruction, ops: Operands, base: str) -> Step:
    a, b = vreader(ops.srcs[0], 32, ops.literal), vreader(ops.srcs[1], 32, ops.literal)
    c = vreader(ops.srcs[2], 32, ops.literal) if inst.encoding == "VOP3P" else vreader(256 + ops.vdst, 32, None)
    write = vwriter(ops.vdst, 32)

    def dot2(w: Wave) -> None:
        res = []
        for x, y, z in zip(a(w), b(w), c(w), strict=False):
            xl, xh = N.bits_to_floats([x & 0xFFFF, x >> 16], 16)
            yl, yh = N.bits_to_floats([y & 0xFFFF, y >> 16], 16)
            res.append(N.round_to(xl * yl + xh * yh + N.bits_f32(z), 32))
        write(w, N.floats_to_bits(res, 32))

    return dot2


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


def _vopd_half(inst: Instruction, ctx: Ctx, name: str, dst: int, src0: int, vsrc1: int) -> Step:
    vop2 = VOPD_OPS[name]
    # express the half as a VOP2 instruction so the ordinary compilers build it
    half = Instruction(inst.pc, inst.words, "VOP2", 0, vop2 + ("" if "fma" in vop2 else "_e32"),
                       {"src0": src0, "vsrc1": vsrc1, "vdst": dst}, inst.literal)  # fmt: skip
    return compile_valu(half, ctx)


def compile_vopd(inst: Instruction, ctx: Ctx) -> Step:
    f = inst.fields
    xname, yname = inst.name.split(" :: ")
    x = _vopd_half(inst, ctx, xname, f["vdstx"], f["srcx0"], f["vsrcx1"])
    y = _vopd_half(inst, ctx, yname, f["vdsty"], f["srcy0"], f["vsrcy1"])
    dx, dy = f["vdstx"], f["vdsty"]

    def dual(w: Wave) -> None:
        # Y must see X's sources unchanged: run Y on a view where X's destination still holds its old value
        old_x = w.v[dx]
        x(w)
        new_x = w.v[dx]
        w.v[dx] = old_x
        y(w)
        if dy != dx:
            w.v[dx] = new_x

    return dual


def compile_valu(inst: Instruction, ctx: Ctx) -> Step:
    """Closure executing one VALU instruction on a wave."""
    if inst.encoding == "VOPD":
        return compile_vopd(inst, ctx)
    base = base_name(inst.name)
    step = compile_special(inst, ctx, base)
    if step is not None:
        return step
    cmp = compare_spec(base)
    if cmp is not None:
        ty, pred = cmp
        return compile_compare(inst, ctx, ty, pred, base.startswith("v_cmpx"))
    spec = VALU.get(base)
    if spec is None or base in ("v_nop", "v_pipeflush"):
        if base in ("v_nop", "v_pipeflush"):
            return lambda w: None
        raise EmulatorError(
            f"unsupported rdna3 instruction {inst.name} word=0x{inst.words[0]:08x} at pc=0x{inst.pc:x}"
            + (f" in {ctx.kernel}" if ctx.kernel else "")
        )
    return compile_generic(inst, ctx, spec)
