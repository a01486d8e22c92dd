"""VALU semantics as tables: mnemonic (without _e32/_e64) -> (dst type, source types, per-lane function).

Types name the operand's width and how its bits are read: f16/f32/f64 as floats, u*/b* unsigned, i* signed. The
per-lane function receives the sources in that domain and returns the result in the dst type's domain; the
interpreter (emu.py) reads registers, applies abs/neg/opsel/clamp/omod, rounds and writes active lanes only.
Ops that read or write VCC, SGPRs or other lanes (carries, v_cndmask, v_div_scale, readlane...) live in
`SPECIAL_VALU` and are built by emu.py.
"""

from __future__ import annotations

import math

from tg.runtime.amd.sim.ops import numerics as N

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def _bfe_u(x: int, off: int, width: int) -> int:
    off, width = off & 31, width & 31
    return (x >> off) & ((1 << width) - 1) if width else 0


def _bfe_i(x: int, off: int, width: int) -> int:
    off, width = off & 31, width & 31
    if not width:
        return 0
    return N.sext((x >> off) & ((1 << width) - 1), width) & M32


def _perm(s0: int, s1: int, sel: int) -> int:
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


def _div_fixup(s0: float, s1: float, s2: float) -> float:
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


def _cvt_pk_rtz(a: float, b: float) -> int:
    def rtz(x: float) -> int:
        bits = N.floats_to_bits([x], 16)[0]
        r = N.bits_f16(bits)
        if math.isfinite(x) and abs(r) > abs(x):  # rounded away from zero: step back toward zero
            bits = bits - 1 if bits & 0x7FFF else bits
        if math.isinf(r) and math.isfinite(x):
            bits = 0x7BFF | (bits & 0x8000)
        return bits

    return rtz(a) | rtz(b) << 16


def _sad_u8(a: int, b: int, c: int) -> int:
    return (sum(abs((a >> s & 0xFF) - (b >> s & 0xFF)) for s in (0, 8, 16, 24)) + c) & M32


def _alignbit(a: int, b: int, c: int) -> int:
    return ((a << 32 | b) >> (c & 31)) & M32


def _alignbyte(a: int, b: int, c: int) -> int:
    return ((a << 32 | b) >> (8 * (c & 3))) & M32


def _mul_hi(a: int, b: int, bits: int = 32) -> int:
    return (a * b) >> bits


def _clz(x: int) -> int:
    return 32 - x.bit_length() if x else 0xFFFFFFFF


def _ctz(x: int) -> int:
    return (x & -x).bit_length() - 1 if x else 0xFFFFFFFF


def _cls(x: int) -> int:
    x = N.sext(x, 32)
    if x in (0, -1):
        return 0xFFFFFFFF
    return 32 - (x if x >= 0 else ~x).bit_length()


def _bfrev(x: int) -> int:
    return int(f"{x & M32:032b}"[::-1], 2)


# mnemonic -> (dst type, (src types...), lane function)
VALU: dict[str, tuple[str, tuple[str, ...], object]] = {
    # moves and bit ops
    "v_mov_b32": ("b32", ("b32",), lambda a: a),
    "v_mov_b16": ("b16", ("b16",), lambda a: a),
    "v_not_b32": ("b32", ("b32",), lambda a: ~a & M32),
    "v_not_b16": ("b16", ("b16",), lambda a: ~a & 0xFFFF),
    "v_bfrev_b32": ("b32", ("b32",), _bfrev),
    "v_clz_i32_u32": ("b32", ("u32",), _clz),
    "v_ctz_i32_b32": ("b32", ("b32",), _ctz),
    "v_cls_i32": ("b32", ("b32",), _cls),
    "v_and_b32": ("b32", ("b32", "b32"), lambda a, b: a & b),
    "v_or_b32": ("b32", ("b32", "b32"), lambda a, b: a | b),
    "v_xor_b32": ("b32", ("b32", "b32"), lambda a, b: a ^ b),
    "v_xnor_b32": ("b32", ("b32", "b32"), lambda a, b: ~(a ^ b) & M32),
    "v_and_b16": ("b16", ("b16", "b16"), lambda a, b: a & b),
    "v_or_b16": ("b16", ("b16", "b16"), lambda a, b: a | b),
    "v_xor_b16": ("b16", ("b16", "b16"), lambda a, b: a ^ b),
    "v_lshlrev_b32": ("b32", ("u32", "b32"), lambda a, b: (b << (a & 31)) & M32),
    "v_lshrrev_b32": ("b32", ("u32", "b32"), lambda a, b: b >> (a & 31)),
    "v_ashrrev_i32": ("b32", ("u32", "i32"), lambda a, b: (b >> (a & 31)) & M32),
    "v_lshlrev_b16": ("b16", ("u16", "b16"), lambda a, b: (b << (a & 15)) & 0xFFFF),
    "v_lshrrev_b16": ("b16", ("u16", "b16"), lambda a, b: b >> (a & 15)),
    "v_ashrrev_i16": ("b16", ("u16", "i16"), lambda a, b: (b >> (a & 15)) & 0xFFFF),
    "v_lshlrev_b64": ("b64", ("u32", "b64"), lambda a, b: (b << (a & 63)) & M64),
    "v_lshrrev_b64": ("b64", ("u32", "b64"), lambda a, b: b >> (a & 63)),
    "v_ashrrev_i64": ("b64", ("u32", "i64"), lambda a, b: (b >> (a & 63)) & M64),
    "v_bfe_u32": ("b32", ("u32", "u32", "u32"), _bfe_u),
    "v_bfe_i32": ("b32", ("u32", "u32", "u32"), _bfe_i),
    "v_bfi_b32": ("b32", ("b32", "b32", "b32"), lambda a, b, c: (a & b) | (~a & c & M32)),
    "v_bfm_b32": ("b32", ("u32", "u32"), lambda a, b: (((1 << (a & 31)) - 1) << (b & 31)) & M32),
    "v_bcnt_u32_b32": ("b32", ("b32", "u32"), lambda a, b: (bin(a).count("1") + b) & M32),
    "v_alignbit_b32": ("b32", ("b32", "b32", "u32"), _alignbit),
    "v_alignbyte_b32": ("b32", ("b32", "b32", "u32"), _alignbyte),
    "v_perm_b32": ("b32", ("b32", "b32", "b32"), _perm),
    "v_lshl_add_u32": ("b32", ("u32", "u32", "u32"), lambda a, b, c: ((a << (b & 31)) + c) & M32),
    "v_add_lshl_u32": ("b32", ("u32", "u32", "u32"), lambda a, b, c: ((a + b) << (c & 31)) & M32),
    "v_lshl_or_b32": ("b32", ("u32", "u32", "u32"), lambda a, b, c: ((a << (b & 31)) | c) & M32),
    "v_and_or_b32": ("b32", ("b32", "b32", "b32"), lambda a, b, c: (a & b) | c),
    "v_or3_b32": ("b32", ("b32", "b32", "b32"), lambda a, b, c: a | b | c),
    "v_xor3_b32": ("b32", ("b32", "b32", "b32"), lambda a, b, c: a ^ b ^ c),
    "v_xad_u32": ("b32", ("u32", "u32", "u32"), lambda a, b, c: ((a ^ b) + c) & M32),
    "v_sad_u8": ("b32", ("u32", "u32", "u32"), _sad_u8),
    "v_sad_u32": ("b32", ("u32", "u32", "u32"), lambda a, b, c: (abs(a - b) + c) & M32),
    # integer arithmetic
    "v_add_nc_u32": ("b32", ("u32", "u32"), lambda a, b: (a + b) & M32),
    "v_sub_nc_u32": ("b32", ("u32", "u32"), lambda a, b: (a - b) & M32),
    "v_subrev_nc_u32": ("b32", ("u32", "u32"), lambda a, b: (b - a) & M32),
    "v_add_nc_i32": ("b32", ("i32", "i32"), lambda a, b: (a + b) & M32),
    "v_sub_nc_i32": ("b32", ("i32", "i32"), lambda a, b: (a - b) & M32),
    "v_add_nc_u16": ("b16", ("u16", "u16"), lambda a, b: (a + b) & 0xFFFF),
    "v_sub_nc_u16": ("b16", ("u16", "u16"), lambda a, b: (a - b) & 0xFFFF),
    "v_add_nc_i16": ("b16", ("i16", "i16"), lambda a, b: (a + b) & 0xFFFF),
    "v_sub_nc_i16": ("b16", ("i16", "i16"), lambda a, b: (a - b) & 0xFFFF),
    "v_mul_lo_u16": ("b16", ("u16", "u16"), lambda a, b: (a * b) & 0xFFFF),
    "v_add3_u32": ("b32", ("u32", "u32", "u32"), lambda a, b, c: (a + b + c) & M32),
    "v_mul_lo_u32": ("b32", ("u32", "u32"), lambda a, b: (a * b) & M32),
    "v_mul_hi_u32": ("b32", ("u32", "u32"), lambda a, b: (a * b) >> 32),
    "v_mul_hi_i32": ("b32", ("i32", "i32"), lambda a, b: ((a * b) >> 32) & M32),
    "v_mul_i32_i24": ("b32", ("u32", "u32"), lambda a, b: (N.sext(a, 24) * N.sext(b, 24)) & M32),
    "v_mul_hi_i32_i24": ("b32", ("u32", "u32"), lambda a, b: ((N.sext(a, 24) * N.sext(b, 24)) >> 32) & M32),
    "v_mul_u32_u24": ("b32", ("u32", "u32"), lambda a, b: ((a & 0xFFFFFF) * (b & 0xFFFFFF)) & M32),
    "v_mul_hi_u32_u24": ("b32", ("u32", "u32"), lambda a, b: ((a & 0xFFFFFF) * (b & 0xFFFFFF)) >> 32),
    "v_mad_u32_u24": ("b32", ("u32", "u32", "u32"), lambda a, b, c: ((a & 0xFFFFFF) * (b & 0xFFFFFF) + c) & M32),
    "v_mad_i32_i24": ("b32", ("u32", "u32", "i32"), lambda a, b, c: (N.sext(a, 24) * N.sext(b, 24) + c) & M32),
    "v_mad_u16": ("b16", ("u16", "u16", "u16"), lambda a, b, c: (a * b + c) & 0xFFFF),
    "v_mad_i16": ("b16", ("i16", "i16", "i16"), lambda a, b, c: (a * b + c) & 0xFFFF),
    "v_mad_u32_u16": ("b32", ("u16", "u16", "u32"), lambda a, b, c: (a * b + c) & M32),
    "v_mad_i32_i16": ("b32", ("i16", "i16", "i32"), lambda a, b, c: (a * b + c) & M32),
    "v_min_i32": ("b32", ("i32", "i32"), lambda a, b: min(a, b) & M32),
    "v_max_i32": ("b32", ("i32", "i32"), lambda a, b: max(a, b) & M32),
    "v_min_u32": ("b32", ("u32", "u32"), min),
    "v_max_u32": ("b32", ("u32", "u32"), max),
    "v_min_i16": ("b16", ("i16", "i16"), lambda a, b: min(a, b) & 0xFFFF),
    "v_max_i16": ("b16", ("i16", "i16"), lambda a, b: max(a, b) & 0xFFFF),
    "v_min_u16": ("b16", ("u16", "u16"), min),
    "v_max_u16": ("b16", ("u16", "u16"), max),
    "v_min3_i32": ("b32", ("i32", "i32", "i32"), lambda a, b, c: min(a, b, c) & M32),
    "v_max3_i32": ("b32", ("i32", "i32", "i32"), lambda a, b, c: max(a, b, c) & M32),
    "v_min3_u32": ("b32", ("u32", "u32", "u32"), min),
    "v_max3_u32": ("b32", ("u32", "u32", "u32"), max),
    "v_med3_i32": ("b32", ("i32", "i32", "i32"), lambda a, b, c: sorted((a, b, c))[1] & M32),
    "v_med3_u32": ("b32", ("u32", "u32", "u32"), lambda a, b, c: sorted((a, b, c))[1]),
    "v_maxmin_i32": ("b32", ("i32", "i32", "i32"), lambda a, b, c: min(max(a, b), c) & M32),
    "v_minmax_i32": ("b32", ("i32", "i32", "i32"), lambda a, b, c: max(min(a, b), c) & M32),
    "v_maxmin_u32": ("b32", ("u32", "u32", "u32"), lambda a, b, c: min(max(a, b), c)),
    "v_minmax_u32": ("b32", ("u32", "u32", "u32"), lambda a, b, c: max(min(a, b), c)),
    # conversions
    "v_cvt_f32_i32": ("f32", ("i32",), float),
    "v_cvt_f32_u32": ("f32", ("u32",), float),
    "v_cvt_u32_f32": ("b32", ("f32",), lambda a: N.f_to_int(a, 32, False)),
    "v_cvt_i32_f32": ("b32", ("f32",), lambda a: N.f_to_int(a, 32, True)),
    "v_cvt_f64_i32": ("f64", ("i32",), float),
    "v_cvt_f64_u32": ("f64", ("u32",), float),
    "v_cvt_i32_f64": ("b32", ("f64",), lambda a: N.f_to_int(a, 32, True)),
    "v_cvt_u32_f64": ("b32", ("f64",), lambda a: N.f_to_int(a, 32, False)),
    "v_cvt_f32_f64": ("f32", ("f64",), lambda a: a),
    "v_cvt_f64_f32": ("f64", ("f32",), lambda a: a),
    "v_cvt_f16_f32": ("f16", ("f32",), lambda a: a),
    "v_cvt_f32_f16": ("f32", ("f16",), lambda a: a),
    "v_cvt_f16_u16": ("f16", ("u16",), float),
    "v_cvt_f16_i16": ("f16", ("i16",), float),
    "v_cvt_u16_f16": ("b16", ("f16",), lambda a: N.f_to_int(a, 16, False)),
    "v_cvt_i16_f16": ("b16", ("f16",), lambda a: N.f_to_int(a, 16, True)),
    "v_cvt_i32_i16": ("b32", ("i16",), lambda a: a & M32),
    "v_cvt_u32_u16": ("b32", ("u16",), lambda a: a),
    "v_cvt_f32_ubyte0": ("f32", ("u32",), lambda a: float(a & 0xFF)),
    "v_cvt_f32_ubyte1": ("f32", ("u32",), lambda a: float(a >> 8 & 0xFF)),
    "v_cvt_f32_ubyte2": ("f32", ("u32",), lambda a: float(a >> 16 & 0xFF)),
    "v_cvt_f32_ubyte3": ("f32", ("u32",), lambda a: float(a >> 24)),
    "v_cvt_floor_i32_f32": ("b32", ("f32",), lambda a: N.f_to_int(N.ffloor(a), 32, True)),
    "v_cvt_nearest_i32_f32": ("b32", ("f32",), lambda a: N.f_to_int(N.ffloor(a + 0.5), 32, True)),
    "v_cvt_pk_rtz_f16_f32": ("b32", ("f32", "f32"), _cvt_pk_rtz),
    "v_pack_b32_f16": ("b32", ("b16", "b16"), lambda a, b: a | b << 16),
    "v_cvt_pk_u16_u32": ("b32", ("u32", "u32"), lambda a, b: min(a, 0xFFFF) | min(b, 0xFFFF) << 16),
    "v_cvt_pk_i16_i32": (
        "b32",
        ("i32", "i32"),
        lambda a, b: (max(-32768, min(32767, a)) & 0xFFFF) | (max(-32768, min(32767, b)) & 0xFFFF) << 16,
    ),
    # float arithmetic (f16/f32/f64 share the lane functions; rounding follows the dst type)
    "v_add_f32": ("f32", ("f32", "f32"), lambda a, b: a + b),
    "v_sub_f32": ("f32", ("f32", "f32"), lambda a, b: a - b),
    "v_subrev_f32": ("f32", ("f32", "f32"), lambda a, b: b - a),
    "v_mul_f32": ("f32", ("f32", "f32"), lambda a, b: a * b),
    "v_mul_dx9_zero_f32": ("f32", ("f32", "f32"), lambda a, b: 0.0 if a == 0 or b == 0 else a * b),
    "v_min_f32": ("f32", ("f32", "f32"), N.fmin),
    "v_max_f32": ("f32", ("f32", "f32"), N.fmax),
    "v_add_f16": ("f16", ("f16", "f16"), lambda a, b: a + b),
    "v_sub_f16": ("f16", ("f16", "f16"), lambda a, b: a - b),
    "v_subrev_f16": ("f16", ("f16", "f16"), lambda a, b: b - a),
    "v_mul_f16": ("f16", ("f16", "f16"), lambda a, b: a * b),
    "v_min_f16": ("f16", ("f16", "f16"), N.fmin),
    "v_max_f16": ("f16", ("f16", "f16"), N.fmax),
    "v_add_f64": ("f64", ("f64", "f64"), lambda a, b: a + b),
    "v_mul_f64": ("f64", ("f64", "f64"), lambda a, b: a * b),
    "v_min_f64": ("f64", ("f64", "f64"), N.fmin),
    "v_max_f64": ("f64", ("f64", "f64"), N.fmax),
    "v_fma_f32": ("f32", ("f32", "f32", "f32"), lambda a, b, c: N.fma_narrow(a, b, c, 32)),
    "v_fma_dx9_zero_f32": (
        "f32",
        ("f32", "f32", "f32"),
        lambda a, b, c: c if a == 0 or b == 0 else N.fma_narrow(a, b, c, 32),
    ),
    "v_fma_f16": ("f16", ("f16", "f16", "f16"), lambda a, b, c: N.fma_narrow(a, b, c, 16)),
    "v_fma_f64": ("f64", ("f64", "f64", "f64"), N.fma_f64),
    "v_min3_f32": ("f32", ("f32", "f32", "f32"), lambda a, b, c: N.fmin(N.fmin(a, b), c)),
    "v_max3_f32": ("f32", ("f32", "f32", "f32"), lambda a, b, c: N.fmax(N.fmax(a, b), c)),
    "v_med3_f32": ("f32", ("f32", "f32", "f32"), N.fmed3),
    "v_min3_f16": ("f16", ("f16", "f16", "f16"), lambda a, b, c: N.fmin(N.fmin(a, b), c)),
    "v_max3_f16": ("f16", ("f16", "f16", "f16"), lambda a, b, c: N.fmax(N.fmax(a, b), c)),
    "v_med3_f16": ("f16", ("f16", "f16", "f16"), N.fmed3),
    "v_maxmin_f32": ("f32", ("f32", "f32", "f32"), lambda a, b, c: N.fmin(N.fmax(a, b), c)),
    "v_minmax_f32": ("f32", ("f32", "f32", "f32"), lambda a, b, c: N.fmax(N.fmin(a, b), c)),
    "v_maxmin_f16": ("f16", ("f16", "f16", "f16"), lambda a, b, c: N.fmin(N.fmax(a, b), c)),
    "v_minmax_f16": ("f16", ("f16", "f16", "f16"), lambda a, b, c: N.fmax(N.fmin(a, b), c)),
    "v_ldexp_f32": ("f32", ("f32", "i32"), N.ldexp),
    "v_ldexp_f16": ("f16", ("f16", "i16"), N.ldexp),
    "v_ldexp_f64": ("f64", ("f64", "i32"), N.ldexp),
    "v_div_fixup_f32": ("f32", ("f32", "f32", "f32"), _div_fixup),
    "v_div_fixup_f16": ("f16", ("f16", "f16", "f16"), _div_fixup),
    "v_div_fixup_f64": ("f64", ("f64", "f64", "f64"), _div_fixup),
    # transcendental and rounding (one entry per width)
    **{
        f"v_{name}_f{w}": (f"f{w}", (f"f{w}",), fn)
        for name, fn in (
            ("rcp", N.rcp),
            ("rsq", N.rsq),
            ("sqrt", N.fsqrt),
            ("trunc", N.ftrunc),
            ("floor", N.ffloor),
            ("ceil", N.fceil),
            ("rndne", N.frndne),
            ("fract", N.ffract),
            ("frexp_mant", N.frexp_mant),
        )
        for w in (16, 32, 64)
    },
    "v_rcp_iflag_f32": ("f32", ("f32",), N.rcp),
    "v_exp_f32": ("f32", ("f32",), N.exp2),
    "v_log_f32": ("f32", ("f32",), N.log2),
    "v_exp_f16": ("f16", ("f16",), N.exp2),
    "v_log_f16": ("f16", ("f16",), N.log2),
    "v_sin_f32": ("f32", ("f32",), N.sin_rev),
    "v_cos_f32": ("f32", ("f32",), N.cos_rev),
    "v_sin_f16": ("f16", ("f16",), N.sin_rev),
    "v_cos_f16": ("f16", ("f16",), N.cos_rev),
    "v_frexp_exp_i32_f32": ("b32", ("f32",), lambda a: N.frexp_exp(a) & M32),
    "v_frexp_exp_i32_f64": ("b32", ("f64",), lambda a: N.frexp_exp(a) & M32),
    "v_frexp_exp_i16_f16": ("b16", ("f16",), lambda a: N.frexp_exp(a) & 0xFFFF),
}

# ops whose results are hardware approximations (amd.md 4.5: 1 ulp allowed against the CPU)
APPROXIMATE = frozenset(n for n in VALU if any(t in n for t in ("rcp", "rsq", "exp_f", "log_f", "sin", "cos")))

# VOPC predicates: name -> function of (a, b) in the compared type's domain
FLOAT_PREDICATES = {
    "f": lambda a, b: False,
    "lt": lambda a, b: a < b,
    "eq": lambda a, b: a == b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "lg": lambda a, b: a < b or a > b,
    "ge": lambda a, b: a >= b,
    "o": lambda a, b: a == a and b == b,
    "u": lambda a, b: a != a or b != b,
    "nge": lambda a, b: not a >= b,
    "nlg": lambda a, b: not (a < b or a > b),
    "ngt": lambda a, b: not a > b,
    "nle": lambda a, b: not a <= b,
    "neq": lambda a, b: not a == b,
    "nlt": lambda a, b: not a < b,
    "t": lambda a, b: True,
}
INT_PREDICATES = {
    "f": lambda a, b: False,
    "lt": lambda a, b: a < b,
    "eq": lambda a, b: a == b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ne": lambda a, b: a != b,
    "ge": lambda a, b: a >= b,
    "t": lambda a, b: True,
}


def compare_spec(base: str) -> tuple[str, object] | None:
    """For 'v_cmp_lt_f32' / 'v_cmpx_class_f16': (source type, predicate on the two sources); None if not a compare."""
    parts = base.split("_")
    if len(parts) != 4 or parts[1] not in ("cmp", "cmpx"):
        return None
    pred, ty = parts[2], parts[3]
    if pred == "class":
        width = int(ty[1:])
        return ty, ("class", width)
    table = FLOAT_PREDICATES if ty[0] == "f" else INT_PREDICATES
    if pred not in table:
        return None
    return ty, table[pred]
