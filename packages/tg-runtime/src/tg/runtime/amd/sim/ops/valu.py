"""VALU semantics as tables: mnemonic (without _e32/_e64) -> (dst type, source types, lane expression).

Types name the operand's width and how its bits are read: f16/f32/f64 as Python floats, u*/b* unsigned, i* signed
integers. The lane expression is Python source over the sources `{a}`, `{b}`, `{c}` in that domain, evaluated once per
lane inside the list comprehension the translator (gen_valu.py) writes for the instruction; it may call the helpers
of `LANE_HELPERS`. Integer results are the destination's bits (masked to its width); float results are Python floats
that the translator rounds to the destination's width. Ops that read or write VCC, SGPRs, other lanes or their own
destination (carries, v_cndmask, v_div_scale, readlane, fmac...) are built by gen_valu.py itself.
"""

from __future__ import annotations

import math
import re

from tg.runtime.amd.sim.ops import numerics as N

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def bfe_u(x: int, off: int, width: int) -> int:
    off, width = off & 31, width & 31
    return (x >> off) & ((1 << width) - 1) if width else 0


def bfe_i(x: int, off: int, width: int) -> int:
    off, width = off & 31, width & 31
    if not width:
        return 0
    return N.sext((x >> off) & ((1 << width) - 1), width) & M32


def perm(s0: int, s1: int, sel: int) -> int:
    data = (s0 << 32 | s1).to_bytes(8, "little")
    out = 0
    for i in range(4):
        b = sel >> (8 * i) & 0xFF
        if b < 8:
            v = data[b]
        elif b == 8:
            v = 0xFF if data[1] & 0x80 else 0
        elif b == 9:
            v = 0xFF if data[3] & 0x80 else 0
        elif b == 10:
            v = 0xFF if data[5] & 0x80 else 0
        elif b == 11:
            v = 0xFF if data[7] & 0x80 else 0
        elif b == 12:
            v = 0
        else:
            v = 0xFF
        out |= v << (8 * i)
    return out


def div_fixup(s0: float, s1: float, s2: float) -> float:
    """v_div_fixup: s0 = quotient estimate, s1 = denominator, s2 = numerator: fix the special cases."""
    if s1 != s1 or s2 != s2:
        return N.NAN
    if s1 == 0 and s2 == 0:
        return N.NAN
    if math.isinf(s1) and math.isinf(s2):
        return N.NAN
    sign = math.copysign(1.0, s1) * math.copysign(1.0, s2)
    if s1 == 0 or math.isinf(s2):
        return math.copysign(N.INF, sign)
    if math.isinf(s1) or s2 == 0:
        return math.copysign(0.0, sign)
    if s0 != s0:
        return math.copysign(N.INF, sign)  # the estimate overflowed to NaN: hardware returns inf
    return math.copysign(abs(s0), sign)


def cvt_pk_rtz(a: float, b: float) -> int:
    def rtz(x: float) -> int:
        bits = N.f16_bits(x)
        r = N.bits_f16(bits)
        if math.isfinite(x) and abs(r) > abs(x):  # rounded away from zero: step back toward zero
            bits = bits - 1 if bits & 0x7FFF else bits
        if math.isinf(r) and math.isfinite(x):
            bits = 0x7BFF | (bits & 0x8000)
        return bits

    return rtz(a) | rtz(b) << 16


def sad_u8(a: int, b: int, c: int) -> int:
    return (sum(abs((a >> s & 0xFF) - (b >> s & 0xFF)) for s in (0, 8, 16, 24)) + c) & M32


def clz(x: int) -> int:
    return 32 - x.bit_length() if x else 0xFFFFFFFF


def ctz(x: int) -> int:
    return (x & -x).bit_length() - 1 if x else 0xFFFFFFFF


def cls(x: int) -> int:
    x = N.sext(x, 32)
    if x in (0, -1):
        return 0xFFFFFFFF
    return 32 - (x if x >= 0 else ~x).bit_length()


def bfrev(x: int) -> int:
    return int(f"{x & M32:032b}"[::-1], 2)


def div_scale(s0: float, s1: float, s2: float, width: int) -> tuple[float, int]:
    """v_div_scale_f32/f64 (s0 = the value to scale, s1 = denominator, s2 = numerator): (scaled value, VCC bit).

    Follows the ISA's definition: the operands of a division are scaled by 2^+-64 (f32) or 2^+-128 (f64) when the
    quotient or the reciprocal would leave the range where the Newton steps that follow are exact; the VCC bit
    tells v_div_fmas to undo the scaling. (The reciprocal test is on 1/s1 in f64 for both widths.)"""
    ebias, lim, sc, tiny_numerator = (127, 96, 64, 23) if width == 32 else (1023, 768, 128, 53)

    def expo(x: float) -> int:  # the biased exponent field
        if x == 0 or not math.isfinite(x):
            return 0 if x == 0 else 2 * ebias + 1
        return max(math.frexp(x)[1] - 1 + ebias, 0)

    if s2 == 0 or s1 == 0:
        return N.NAN, 0
    if expo(s2) - expo(s1) >= lim:  # the quotient is near the largest float
        return (N.ldexp(s0, sc) if s0 == s1 else s0), 1
    if N.is_denormal(s1, width):
        return N.ldexp(s0, sc), 0
    inv_tiny = N.is_denormal(N.rcp(s1), 64)
    q_tiny = N.is_denormal(N.round_to(N.fdiv(s2, s1), width), width)
    if inv_tiny and q_tiny:
        return (N.ldexp(s0, sc) if s0 == s1 else s0), 1
    if inv_tiny:
        return N.ldexp(s0, -sc), 0
    if q_tiny:
        return (N.ldexp(s0, sc) if s0 == s2 else s0), 1
    if expo(s2) <= tiny_numerator:
        return N.ldexp(s0, sc), 0
    return s0, 0


def div_fmas(a: float, b: float, c: float, vcc: int, width: int) -> float:
    """v_div_fmas_f32/f64: fma(a, b, c), scaled back by 2^+-64 (f32) / 2^+-128 (f64) when the lane's VCC bit is set."""
    big, bias = (64, 127) if width == 32 else (128, 1023)
    r = N.fma_narrow(a, b, c, 32) if width == 32 else N.fma_f64(a, b, c)
    if vcc:
        e = N.frexp_exp(c) - 1 + bias if c != 0 and math.isfinite(c) else 0
        r = N.ldexp(r, big if e > bias else -big)
    return r


def dot2_f16(a: int, b: int) -> float:
    """The two products of the f16 halves of a and b, summed (v_dot2_f32_f16 adds the accumulator)."""
    al, ah, bl, bh = N.bits_f16(a & 0xFFFF), N.bits_f16(a >> 16), N.bits_f16(b & 0xFFFF), N.bits_f16(b >> 16)
    return al * bl + ah * bh


def clamp01(x: float) -> float:
    """The VOP3 clamp output modifier: to [0, 1], NaN to 0."""
    return 0.0 if x != x or x < 0 else 1.0 if x > 1 else x


# mnemonic -> (dst type, (src types...), lane expression)
VALU: dict[str, tuple[str, tuple[str, ...], str]] = {
    # moves and bit ops
    "v_mov_b32": ("b32", ("b32",), "{a}"),
    "v_mov_b16": ("b16", ("b16",), "{a}"),
    "v_not_b32": ("b32", ("b32",), "~{a} & M32"),
    "v_not_b16": ("b16", ("b16",), "~{a} & 0xFFFF"),
    "v_bfrev_b32": ("b32", ("b32",), "bfrev({a})"),
    "v_clz_i32_u32": ("b32", ("u32",), "clz({a})"),
    "v_ctz_i32_b32": ("b32", ("b32",), "ctz({a})"),
    "v_cls_i32": ("b32", ("b32",), "cls({a})"),
    "v_and_b32": ("b32", ("b32", "b32"), "{a} & {b}"),
    "v_or_b32": ("b32", ("b32", "b32"), "{a} | {b}"),
    "v_xor_b32": ("b32", ("b32", "b32"), "{a} ^ {b}"),
    "v_xnor_b32": ("b32", ("b32", "b32"), "~({a} ^ {b}) & M32"),
    "v_and_b16": ("b16", ("b16", "b16"), "{a} & {b}"),
    "v_or_b16": ("b16", ("b16", "b16"), "{a} | {b}"),
    "v_xor_b16": ("b16", ("b16", "b16"), "{a} ^ {b}"),
    "v_lshlrev_b32": ("b32", ("u32", "b32"), "({b} << ({a} & 31)) & M32"),
    "v_lshrrev_b32": ("b32", ("u32", "b32"), "{b} >> ({a} & 31)"),
    "v_ashrrev_i32": ("b32", ("u32", "i32"), "({b} >> ({a} & 31)) & M32"),
    "v_lshlrev_b16": ("b16", ("u16", "b16"), "({b} << ({a} & 15)) & 0xFFFF"),
    "v_lshrrev_b16": ("b16", ("u16", "b16"), "{b} >> ({a} & 15)"),
    "v_ashrrev_i16": ("b16", ("u16", "i16"), "({b} >> ({a} & 15)) & 0xFFFF"),
    "v_lshlrev_b64": ("b64", ("u32", "b64"), "({b} << ({a} & 63)) & M64"),
    "v_lshrrev_b64": ("b64", ("u32", "b64"), "{b} >> ({a} & 63)"),
    "v_ashrrev_i64": ("b64", ("u32", "i64"), "({b} >> ({a} & 63)) & M64"),
    "v_bfe_u32": ("b32", ("u32", "u32", "u32"), "bfe_u({a}, {b}, {c})"),
    "v_bfe_i32": ("b32", ("u32", "u32", "u32"), "bfe_i({a}, {b}, {c})"),
    "v_bfi_b32": ("b32", ("b32", "b32", "b32"), "({a} & {b}) | (~{a} & {c} & M32)"),
    "v_bfm_b32": ("b32", ("u32", "u32"), "(((1 << ({a} & 31)) - 1) << ({b} & 31)) & M32"),
    "v_bcnt_u32_b32": ("b32", ("b32", "u32"), "(bin({a}).count('1') + {b}) & M32"),
    "v_alignbit_b32": ("b32", ("b32", "b32", "u32"), "(({a} << 32 | {b}) >> ({c} & 31)) & M32"),
    "v_alignbyte_b32": ("b32", ("b32", "b32", "u32"), "(({a} << 32 | {b}) >> (8 * ({c} & 3))) & M32"),
    "v_perm_b32": ("b32", ("b32", "b32", "b32"), "perm({a}, {b}, {c})"),
    "v_lshl_add_u32": ("b32", ("u32", "u32", "u32"), "(({a} << ({b} & 31)) + {c}) & M32"),
    "v_add_lshl_u32": ("b32", ("u32", "u32", "u32"), "(({a} + {b}) << ({c} & 31)) & M32"),
    "v_lshl_or_b32": ("b32", ("u32", "u32", "u32"), "(({a} << ({b} & 31)) | {c}) & M32"),
    "v_and_or_b32": ("b32", ("b32", "b32", "b32"), "({a} & {b}) | {c}"),
    "v_or3_b32": ("b32", ("b32", "b32", "b32"), "{a} | {b} | {c}"),
    "v_xor3_b32": ("b32", ("b32", "b32", "b32"), "{a} ^ {b} ^ {c}"),
    "v_xad_u32": ("b32", ("u32", "u32", "u32"), "(({a} ^ {b}) + {c}) & M32"),
    "v_sad_u8": ("b32", ("u32", "u32", "u32"), "sad_u8({a}, {b}, {c})"),
    "v_sad_u32": ("b32", ("u32", "u32", "u32"), "(abs({a} - {b}) + {c}) & M32"),
    # integer arithmetic
    "v_add_nc_u32": ("b32", ("u32", "u32"), "({a} + {b}) & M32"),
    "v_sub_nc_u32": ("b32", ("u32", "u32"), "({a} - {b}) & M32"),
    "v_subrev_nc_u32": ("b32", ("u32", "u32"), "({b} - {a}) & M32"),
    "v_add_nc_i32": ("b32", ("u32", "u32"), "({a} + {b}) & M32"),
    "v_sub_nc_i32": ("b32", ("u32", "u32"), "({a} - {b}) & M32"),
    "v_add_nc_u16": ("b16", ("u16", "u16"), "({a} + {b}) & 0xFFFF"),
    "v_sub_nc_u16": ("b16", ("u16", "u16"), "({a} - {b}) & 0xFFFF"),
    "v_add_nc_i16": ("b16", ("u16", "u16"), "({a} + {b}) & 0xFFFF"),
    "v_sub_nc_i16": ("b16", ("u16", "u16"), "({a} - {b}) & 0xFFFF"),
    "v_mul_lo_u16": ("b16", ("u16", "u16"), "({a} * {b}) & 0xFFFF"),
    "v_add3_u32": ("b32", ("u32", "u32", "u32"), "({a} + {b} + {c}) & M32"),
    "v_mul_lo_u32": ("b32", ("u32", "u32"), "({a} * {b}) & M32"),
    "v_mul_hi_u32": ("b32", ("u32", "u32"), "({a} * {b}) >> 32"),
    "v_mul_hi_i32": ("b32", ("i32", "i32"), "(({a} * {b}) >> 32) & M32"),
    "v_mul_i32_i24": ("b32", ("u32", "u32"), "(sext({a}, 24) * sext({b}, 24)) & M32"),
    "v_mul_hi_i32_i24": ("b32", ("u32", "u32"), "((sext({a}, 24) * sext({b}, 24)) >> 32) & M32"),
    "v_mul_u32_u24": ("b32", ("u32", "u32"), "(({a} & 0xFFFFFF) * ({b} & 0xFFFFFF)) & M32"),
    "v_mul_hi_u32_u24": ("b32", ("u32", "u32"), "(({a} & 0xFFFFFF) * ({b} & 0xFFFFFF)) >> 32"),
    "v_mad_u32_u24": ("b32", ("u32", "u32", "u32"), "(({a} & 0xFFFFFF) * ({b} & 0xFFFFFF) + {c}) & M32"),
    "v_mad_i32_i24": ("b32", ("u32", "u32", "i32"), "(sext({a}, 24) * sext({b}, 24) + {c}) & M32"),
    "v_mad_u16": ("b16", ("u16", "u16", "u16"), "({a} * {b} + {c}) & 0xFFFF"),
    "v_mad_i16": ("b16", ("i16", "i16", "i16"), "({a} * {b} + {c}) & 0xFFFF"),
    "v_mad_u32_u16": ("b32", ("u16", "u16", "u32"), "({a} * {b} + {c}) & M32"),
    "v_mad_i32_i16": ("b32", ("i16", "i16", "i32"), "({a} * {b} + {c}) & M32"),
    "v_min_i32": ("b32", ("i32", "i32"), "({a} if {a} < {b} else {b}) & M32"),
    "v_max_i32": ("b32", ("i32", "i32"), "({a} if {a} > {b} else {b}) & M32"),
    "v_min_u32": ("b32", ("u32", "u32"), "{a} if {a} < {b} else {b}"),
    "v_max_u32": ("b32", ("u32", "u32"), "{a} if {a} > {b} else {b}"),
    "v_min_i16": ("b16", ("i16", "i16"), "min({a}, {b}) & 0xFFFF"),
    "v_max_i16": ("b16", ("i16", "i16"), "max({a}, {b}) & 0xFFFF"),
    "v_min_u16": ("b16", ("u16", "u16"), "min({a}, {b})"),
    "v_max_u16": ("b16", ("u16", "u16"), "max({a}, {b})"),
    "v_min3_i32": ("b32", ("i32", "i32", "i32"), "min({a}, {b}, {c}) & M32"),
    "v_max3_i32": ("b32", ("i32", "i32", "i32"), "max({a}, {b}, {c}) & M32"),
    "v_min3_u32": ("b32", ("u32", "u32", "u32"), "min({a}, {b}, {c})"),
    "v_max3_u32": ("b32", ("u32", "u32", "u32"), "max({a}, {b}, {c})"),
    "v_med3_i32": ("b32", ("i32", "i32", "i32"), "sorted(({a}, {b}, {c}))[1] & M32"),
    "v_med3_u32": ("b32", ("u32", "u32", "u32"), "sorted(({a}, {b}, {c}))[1]"),
    "v_maxmin_i32": ("b32", ("i32", "i32", "i32"), "min(max({a}, {b}), {c}) & M32"),
    "v_minmax_i32": ("b32", ("i32", "i32", "i32"), "max(min({a}, {b}), {c}) & M32"),
    "v_maxmin_u32": ("b32", ("u32", "u32", "u32"), "min(max({a}, {b}), {c})"),
    "v_minmax_u32": ("b32", ("u32", "u32", "u32"), "max(min({a}, {b}), {c})"),
    # conversions (float to int saturates, NaN gives 0)
    "v_cvt_f32_i32": ("f32", ("i32",), "float({a})"),
    "v_cvt_f32_u32": ("f32", ("u32",), "float({a})"),
    "v_cvt_u32_f32": ("b32", ("f32",), "(int({a}) if -1.0 < {a} < 4294967296.0 else M32 if {a} > 0 else 0)"),
    "v_cvt_i32_f32": (
        "b32",
        ("f32",),
        "(int({a}) & M32 if -2147483649.0 < {a} < 2147483648.0 else 0x7FFFFFFF "
        "if {a} > 0 else 0x80000000 if {a} < 0 else 0)",
    ),
    "v_cvt_f64_i32": ("f64", ("i32",), "float({a})"),
    "v_cvt_f64_u32": ("f64", ("u32",), "float({a})"),
    "v_cvt_i32_f64": ("b32", ("f64",), "f_to_int({a}, 32, True)"),
    "v_cvt_u32_f64": ("b32", ("f64",), "f_to_int({a}, 32, False)"),
    "v_cvt_f32_f64": ("f32", ("f64",), "{a}"),
    "v_cvt_f64_f32": ("f64", ("f32",), "{a}"),
    "v_cvt_f16_f32": ("f16", ("f32",), "{a}"),
    "v_cvt_f32_f16": ("f32", ("f16",), "{a}"),
    "v_cvt_f16_u16": ("f16", ("u16",), "float({a})"),
    "v_cvt_f16_i16": ("f16", ("i16",), "float({a})"),
    "v_cvt_u16_f16": ("b16", ("f16",), "f_to_int({a}, 16, False)"),
    "v_cvt_i16_f16": ("b16", ("f16",), "f_to_int({a}, 16, True)"),
    "v_cvt_i32_i16": ("b32", ("i16",), "{a} & M32"),
    "v_cvt_u32_u16": ("b32", ("u16",), "{a}"),
    "v_cvt_f32_ubyte0": ("f32", ("u32",), "float({a} & 0xFF)"),
    "v_cvt_f32_ubyte1": ("f32", ("u32",), "float({a} >> 8 & 0xFF)"),
    "v_cvt_f32_ubyte2": ("f32", ("u32",), "float({a} >> 16 & 0xFF)"),
    "v_cvt_f32_ubyte3": ("f32", ("u32",), "float({a} >> 24)"),
    "v_cvt_floor_i32_f32": ("b32", ("f32",), "f_to_int(ffloor({a}), 32, True)"),
    "v_cvt_nearest_i32_f32": ("b32", ("f32",), "f_to_int(ffloor({a} + 0.5), 32, True)"),
    "v_cvt_pk_rtz_f16_f32": ("b32", ("f32", "f32"), "cvt_pk_rtz({a}, {b})"),
    "v_pack_b32_f16": ("b32", ("b16", "b16"), "{a} | {b} << 16"),
    "v_cvt_pk_u16_u32": ("b32", ("u32", "u32"), "min({a}, 0xFFFF) | min({b}, 0xFFFF) << 16"),
    "v_cvt_pk_i16_i32": (
        "b32",
        ("i32", "i32"),
        "(max(-32768, min(32767, {a})) & 0xFFFF) | (max(-32768, min(32767, {b})) & 0xFFFF) << 16",
    ),
    # float arithmetic (the translator rounds to the destination's width)
    "v_add_f32": ("f32", ("f32", "f32"), "{a} + {b}"),
    "v_sub_f32": ("f32", ("f32", "f32"), "{a} - {b}"),
    "v_subrev_f32": ("f32", ("f32", "f32"), "{b} - {a}"),
    "v_mul_f32": ("f32", ("f32", "f32"), "{a} * {b}"),
    "v_mul_dx9_zero_f32": ("f32", ("f32", "f32"), "(0.0 if {a} == 0 or {b} == 0 else {a} * {b})"),
    "v_min_f32": ("f32", ("f32", "f32"), "fmin({a}, {b})"),
    "v_max_f32": ("f32", ("f32", "f32"), "fmax({a}, {b})"),
    "v_add_f16": ("f16", ("f16", "f16"), "{a} + {b}"),
    "v_sub_f16": ("f16", ("f16", "f16"), "{a} - {b}"),
    "v_subrev_f16": ("f16", ("f16", "f16"), "{b} - {a}"),
    "v_mul_f16": ("f16", ("f16", "f16"), "{a} * {b}"),
    "v_min_f16": ("f16", ("f16", "f16"), "fmin({a}, {b})"),
    "v_max_f16": ("f16", ("f16", "f16"), "fmax({a}, {b})"),
    "v_add_f64": ("f64", ("f64", "f64"), "{a} + {b}"),
    "v_mul_f64": ("f64", ("f64", "f64"), "{a} * {b}"),
    "v_min_f64": ("f64", ("f64", "f64"), "fmin({a}, {b})"),
    "v_max_f64": ("f64", ("f64", "f64"), "fmax({a}, {b})"),
    "v_fma_dx9_zero_f32": (
        "f32",
        ("f32", "f32", "f32"),
        "({c} if {a} == 0 or {b} == 0 else fma_narrow({a}, {b}, {c}, 32))",
    ),
    "v_fma_f16": ("f16", ("f16", "f16", "f16"), "fma_narrow({a}, {b}, {c}, 16)"),
    "v_fma_f64": ("f64", ("f64", "f64", "f64"), "fma_f64({a}, {b}, {c})"),
    "v_min3_f32": ("f32", ("f32", "f32", "f32"), "fmin(fmin({a}, {b}), {c})"),
    "v_max3_f32": ("f32", ("f32", "f32", "f32"), "fmax(fmax({a}, {b}), {c})"),
    "v_med3_f32": ("f32", ("f32", "f32", "f32"), "fmed3({a}, {b}, {c})"),
    "v_min3_f16": ("f16", ("f16", "f16", "f16"), "fmin(fmin({a}, {b}), {c})"),
    "v_max3_f16": ("f16", ("f16", "f16", "f16"), "fmax(fmax({a}, {b}), {c})"),
    "v_med3_f16": ("f16", ("f16", "f16", "f16"), "fmed3({a}, {b}, {c})"),
    "v_maxmin_f32": ("f32", ("f32", "f32", "f32"), "fmin(fmax({a}, {b}), {c})"),
    "v_minmax_f32": ("f32", ("f32", "f32", "f32"), "fmax(fmin({a}, {b}), {c})"),
    "v_maxmin_f16": ("f16", ("f16", "f16", "f16"), "fmin(fmax({a}, {b}), {c})"),
    "v_minmax_f16": ("f16", ("f16", "f16", "f16"), "fmax(fmin({a}, {b}), {c})"),
    "v_ldexp_f32": ("f32", ("f32", "i32"), "ldexp({a}, {b})"),
    "v_ldexp_f16": ("f16", ("f16", "i16"), "ldexp({a}, {b})"),
    "v_ldexp_f64": ("f64", ("f64", "i32"), "ldexp({a}, {b})"),
    "v_div_fixup_f32": ("f32", ("f32", "f32", "f32"), "div_fixup({a}, {b}, {c})"),
    "v_div_fixup_f16": ("f16", ("f16", "f16", "f16"), "div_fixup({a}, {b}, {c})"),
    "v_div_fixup_f64": ("f64", ("f64", "f64", "f64"), "div_fixup({a}, {b}, {c})"),
    # transcendental and rounding (one entry per width)
    **{
        f"v_{name}_f{w}": (f"f{w}", (f"f{w}",), f"{fn}({{a}})")
        for name, fn in (
            ("rcp", "rcp"),
            ("rsq", "rsq"),
            ("sqrt", "fsqrt"),
            ("trunc", "ftrunc"),
            ("floor", "ffloor"),
            ("ceil", "fceil"),
            ("rndne", "frndne"),
            ("fract", "ffract"),
            ("frexp_mant", "frexp_mant"),
        )
        for w in (16, 32, 64)
    },
    "v_rcp_iflag_f32": ("f32", ("f32",), "rcp({a})"),
    "v_exp_f32": ("f32", ("f32",), "exp2({a})"),
    "v_log_f32": ("f32", ("f32",), "log2({a})"),
    "v_exp_f16": ("f16", ("f16",), "exp2({a})"),
    "v_log_f16": ("f16", ("f16",), "log2({a})"),
    "v_sin_f32": ("f32", ("f32",), "sin_rev({a})"),
    "v_cos_f32": ("f32", ("f32",), "cos_rev({a})"),
    "v_sin_f16": ("f16", ("f16",), "sin_rev({a})"),
    "v_cos_f16": ("f16", ("f16",), "cos_rev({a})"),
    "v_frexp_exp_i32_f32": ("b32", ("f32",), "frexp_exp({a}) & M32"),
    "v_frexp_exp_i32_f64": ("b32", ("f64",), "frexp_exp({a}) & M32"),
    "v_frexp_exp_i16_f16": ("b16", ("f16",), "frexp_exp({a}) & 0xFFFF"),
}

# ops whose results are hardware approximations (amd.md 4.5: 1 ulp allowed against the CPU); v_ldexp is exact
APPROXIMATE = frozenset(n for n in VALU if re.fullmatch(r"v_(rcp|rcp_iflag|rsq|sqrt|exp|log|sin|cos)_f(16|32|64)", n))

# VOPC predicates: name -> expression of the two sources {a}, {b} in the compared type's domain
FLOAT_PREDICATES = {
    "f": "False",
    "lt": "{a} < {b}",
    "eq": "{a} == {b}",
    "le": "{a} <= {b}",
    "gt": "{a} > {b}",
    "lg": "({a} < {b} or {a} > {b})",
    "ge": "{a} >= {b}",
    "o": "({a} == {a} and {b} == {b})",
    "u": "({a} != {a} or {b} != {b})",
    "nge": "not {a} >= {b}",
    "nlg": "not ({a} < {b} or {a} > {b})",
    "ngt": "not {a} > {b}",
    "nle": "not {a} <= {b}",
    "neq": "not {a} == {b}",
    "nlt": "not {a} < {b}",
    "t": "True",
}
INT_PREDICATES = {
    "f": "False",
    "lt": "{a} < {b}",
    "eq": "{a} == {b}",
    "le": "{a} <= {b}",
    "gt": "{a} > {b}",
    "ne": "{a} != {b}",
    "ge": "{a} >= {b}",
    "t": "True",
}


def compare_spec(base: str) -> tuple[str, str] | None:
    """For 'v_cmp_lt_f32' / 'v_cmpx_class_f16': (source type, predicate expression or 'class'); None if not a
    compare."""
    parts = base.split("_")
    if len(parts) != 4 or parts[1] not in ("cmp", "cmpx"):
        return None
    pred, ty = parts[2], parts[3]
    if pred == "class":
        return ty, "class"
    table = FLOAT_PREDICATES if ty[0] == "f" else INT_PREDICATES
    if pred not in table:
        return None
    return ty, table[pred]


# the names lane expressions may use (the translator's generated code sees them as globals)
LANE_HELPERS: dict[str, object] = {
    "M32": M32, "M64": M64, "sext": N.sext, "f_to_int": N.f_to_int, "fma_narrow": N.fma_narrow, "fma_f64": N.fma_f64,
    "fmin": N.fmin, "fmax": N.fmax, "fmed3": N.fmed3, "ldexp": N.ldexp, "rcp": N.rcp, "rsq": N.rsq, "fsqrt": N.fsqrt,
    "ftrunc": N.ftrunc, "ffloor": N.ffloor, "fceil": N.fceil, "frndne": N.frndne, "ffract": N.ffract,
    "frexp_mant": N.frexp_mant, "frexp_exp": N.frexp_exp, "exp2": N.exp2, "log2": N.log2, "sin_rev": N.sin_rev,
    "cos_rev": N.cos_rev, "bfe_u": bfe_u, "bfe_i": bfe_i, "perm": perm, "div_fixup": div_fixup,
    "cvt_pk_rtz": cvt_pk_rtz, "sad_u8": sad_u8, "clz": clz, "ctz": ctz, "cls": cls, "bfrev": bfrev,
    "div_scale": div_scale, "div_fmas": div_fmas, "dot2_f16": dot2_f16, "clamp01": clamp01, "fclass": N.float_class,
    "LANE_MASKS": tuple((1 << i) - 1 for i in range(32)),
}  # fmt: skip
