"""Float and integer helpers shared by the RDNA3 op tables (amd.md 4.5).

Values travel as raw bits between instructions; a VALU op converts its sources to Python numbers, computes, and
rounds back to the op's width. Every helper is total: division by zero, NaN and infinities give IEEE results and
never raise, because inactive lanes are computed too.
"""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Callable, Sequence
from itertools import chain

INF, NAN = math.inf, math.nan
F32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
F16_MAX = 65504.0
# values at or beyond these round to infinity (largest finite + half an ulp)
F32_OVERFLOW = 2.0**128 * (1 - 2.0**-25)
F16_OVERFLOW = 65520.0

# whole-register conversions (32 lanes) between raw bits and Python floats, at C speed through struct
_U16, _U32, _U64x2 = struct.Struct("<32H"), struct.Struct("<32I"), struct.Struct("<64I")
_F16, _F32, _F64 = struct.Struct("<32e"), struct.Struct("<32f"), struct.Struct("<32d")


def f32s(bits: Sequence[int]) -> tuple[float, ...]:
    """32 lanes of f32 bit patterns as Python floats."""
    return _F32.unpack(_U32.pack(*bits))


def f16s(bits: Sequence[int]) -> tuple[float, ...]:
    """32 lanes of f16 bit patterns (16-bit values) as Python floats."""
    return _F16.unpack(_U16.pack(*bits))


def f64s(lo: Sequence[int], hi: Sequence[int]) -> tuple[float, ...]:
    """32 lanes of f64 values held in a register pair (low and high dwords) as Python floats."""
    return _F64.unpack(_U64x2.pack(*chain.from_iterable(zip(lo, hi, strict=False))))


def b32f(values: Sequence[float]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """32 Python floats rounded to f32 (nearest even, overflow to +-inf): (their bits, their values)."""
    try:
        packed = _F32.pack(*values)
    except OverflowError:  # struct refuses finite values beyond the f32 range; array's C cast rounds them to inf
        packed = array("f", values).tobytes()
    return _U32.unpack(packed), _F32.unpack(packed)


def b32s(values: Sequence[float]) -> tuple[int, ...]:
    """32 Python floats rounded to f32: their bits."""
    try:
        return _U32.unpack(_F32.pack(*values))
    except OverflowError:
        return _U32.unpack(array("f", values).tobytes())


def b16s(values: Sequence[float]) -> tuple[int, ...]:
    """32 Python floats rounded to f16 (nearest even, overflow to +-inf): their 16-bit patterns."""
    try:
        return _U16.unpack(_F16.pack(*values))
    except (OverflowError, struct.error):
        return tuple(_round_one(x, 16) for x in values)


def b64s(values: Sequence[float]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """32 Python floats as f64 bit patterns split into (low dwords, high dwords)."""
    words = _U64x2.unpack(_F64.pack(*values))
    return words[0::2], words[1::2]


_TINY = {16: 2.0**-14, 32: 2.0**-126, 64: 2.0**-1022}


def ftz(values: Sequence[float], width: int) -> tuple[float, ...]:
    """Denormal inputs flushed to zero of their sign (float_mode without denormals)."""
    tiny = _TINY[width]
    return tuple(x * 0.0 if x != 0 and abs(x) < tiny else x for x in values)


def b32f_ftz(values: Sequence[float]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """b32f with denormal results flushed to zero."""
    return b32f(ftz(b32f(values)[1], 32))


def b16s_ftz(values: Sequence[float]) -> tuple[int, ...]:
    return b16s(ftz(f16s(b16s(values)), 16))


def b64s_ftz(values: Sequence[float]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return b64s(ftz(values, 64))


def bits_to_floats(bits: list[int], width: int) -> list[float]:
    """Raw bit patterns (any count) to Python floats for an f16/f32/f64 operand."""
    fmt = {16: ("H", "e"), 32: ("I", "f"), 64: ("Q", "d")}[width]
    return list(struct.unpack(f"<{len(bits)}{fmt[1]}", struct.pack(f"<{len(bits)}{fmt[0]}", *bits)))


def _round_one(x: float, width: int) -> int:
    if width == 64:
        return struct.unpack("<Q", struct.pack("<d", x))[0]
    limit = F32_OVERFLOW if width == 32 else F16_OVERFLOW
    if x != x:
        return 0x7FC00000 if width == 32 else 0x7E00
    if abs(x) >= limit:
        inf = 0x7F800000 if width == 32 else 0x7C00
        return inf | (0x80000000 if width == 32 else 0x8000) if x < 0 else inf
    return struct.unpack("<I" if width == 32 else "<H", struct.pack("<f" if width == 32 else "<e", x))[0]


def floats_to_bits(values: list[float], width: int) -> list[int]:
    """Round Python floats (any count) to f16/f32/f64 (nearest even, overflow to +-inf): their bit patterns."""
    return [_round_one(x, width) for x in values]


def f32_bits(x: float) -> int:
    return _round_one(x, 32)


def f16_bits(x: float) -> int:
    return _round_one(x, 16)


def bits_f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def bits_f64(b: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", b & 0xFFFFFFFFFFFFFFFF))[0]


def f64_bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def bits_f16(b: int) -> float:
    return struct.unpack("<e", struct.pack("<H", b & 0xFFFF))[0]


def round_to(x: float, width: int) -> float:
    """The value of `x` rounded to an f16/f32 (f64 unchanged)."""
    if width == 64 or x != x or x in (INF, -INF):
        return x
    b = _round_one(x, width)
    return bits_f32(b) if width == 32 else bits_f16(b)


# ---------------------------------------------------------------- exact fused multiply-add


def _two_sum(a: float, b: float) -> tuple[float, float]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fma_f64(a: float, b: float, c: float) -> float:
    """a*b+c with one rounding to double: the exact sum as a ratio of integers, divided once (Python's int / int is
    correctly rounded, subnormals included)."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    (na, da), (nb, db), (nc, dc) = a.as_integer_ratio(), b.as_integer_ratio(), c.as_integer_ratio()
    num = na * nb * dc + nc * da * db
    if num == 0:  # an exact zero: a*b is exactly -c, so double arithmetic gives it with IEEE's sign rules
        return a * b + c
    try:
        return num / (da * db * dc)
    except OverflowError:
        return INF if num > 0 else -INF


# f32 FMA of 32 lanes: a*b is exact in double, so a*b+c is one double rounding away from exact; rounding that double
# to f32 again is wrong only when it lands exactly on an f32 midpoint (low 29 mantissa bits 0x10000000) or in the
# f32 subnormal range. Both are found at C speed on the packed doubles (bytes 0-3: the low mantissa bits; byte 7:
# sign and exponent, |x| < 2^-112 when its low 7 bits are <= 0x38) and only those lanes are redone by fma_narrow.
_MIDPOINT_BYTE3 = bytes(0 if b & 0x1F == 0x10 else 1 for b in range(256))  # 0: byte 3 of a possible midpoint
_SMALL_BYTE7 = bytes(0 if b & 0x7F <= 0x38 else 1 for b in range(256))  # 0: byte 7 of a small (or zero) double
_F32_TINY = 2.0**-126


def fma32v(xs: Sequence[float], ys: Sequence[float], zs: Sequence[float]) -> list[float]:
    """Lane-wise fma(x, y, z) of f32 values as doubles whose rounding to f32 is the correctly rounded FMA."""
    sums = [x * y + z for x, y, z in zip(xs, ys, zs, strict=False)]
    d = _F64.pack(*sums)
    frm = int.from_bytes
    low = frm(d[0::8], "little") | frm(d[1::8], "little") | frm(d[2::8], "little")
    mid = (low | frm(d[3::8].translate(_MIDPOINT_BYTE3), "little")).to_bytes(32, "little")
    small = d[7::8].translate(_SMALL_BYTE7)
    if 0 in mid or 0 in small:
        for i in range(32):
            if mid[i] == 0 or (small[i] == 0 and 0 < abs(sums[i]) < _F32_TINY):
                sums[i] = fma_narrow(xs[i], ys[i], zs[i], 32)
    return sums


def fma_narrow(a: float, b: float, c: float, width: int) -> float:
    """a*b+c with one rounding to f32 or f16 (the product of two narrow floats is exact in double)."""
    p = a * b
    if not (math.isfinite(p) and math.isfinite(c)):
        return round_to(p + c, width)
    s, err = _two_sum(p, c)
    r = round_to(s, width)
    if err == 0 or r != r:
        return r if s != 0 or err != 0 else round_to(p + c, width)
    # s is inexact: rounding s to the narrow width may double-round only when s lies exactly halfway
    lo, hi = (r, _next_toward(r, INF, width)) if r < s else (_next_toward(r, -INF, width), r)
    if lo + (hi - lo) / 2 == s:
        return hi if err > 0 else lo
    return r


def _next_toward(x: float, direction: float, width: int) -> float:
    """The float32 (`width` 32, else float16) next to `x` toward the sign of `direction` (the smallest subnormal from
    zero): one step of the bit pattern, up when moving away from zero, down when moving toward it."""
    width = 32 if width == 32 else 16
    b = _round_one(x, width)
    if x == 0:
        b = 1 if direction > 0 else (1 << (width - 1)) | 1
    elif (x > 0) == (direction > 0):
        b += 1
    else:
        b -= 1
    return bits_f32(b) if width == 32 else bits_f16(b)


# ---------------------------------------------------------------- IEEE-style helpers that never raise


def fdiv(a: float, b: float) -> float:
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0:
            return NAN
        return math.copysign(INF, a) * math.copysign(1.0, b)


def rcp(x: float) -> float:
    return fdiv(1.0, x)


def fsqrt(x: float) -> float:
    if x != x or x < 0:
        return NAN if x != 0 else x
    return math.sqrt(x) if x != INF else INF


def rsq(x: float) -> float:
    if x == 0:
        return math.copysign(INF, x)
    return fdiv(1.0, fsqrt(x))


def exp2(x: float) -> float:
    if x != x:
        return x
    try:
        return 2.0**x
    except OverflowError:
        return INF


def log2(x: float) -> float:
    if x != x or x < 0:
        return NAN
    if x == 0:
        return -INF
    return math.log2(x) if x != INF else INF


def sin_rev(x: float) -> float:
    """v_sin_f32: sin of x revolutions."""
    if not math.isfinite(x):
        return NAN
    return math.sin(2 * math.pi * math.fmod(x, 1.0))


def cos_rev(x: float) -> float:
    if not math.isfinite(x):
        return NAN
    return math.cos(2 * math.pi * math.fmod(x, 1.0))


def ftrunc(x: float) -> float:
    return math.copysign(float(math.trunc(x)), x) if math.isfinite(x) else x


def ffloor(x: float) -> float:
    return float(math.floor(x)) if math.isfinite(x) and x != 0 else x


def fceil(x: float) -> float:
    if not math.isfinite(x) or x == 0:
        return x
    r = float(math.ceil(x))
    return -0.0 if r == 0 and x < 0 else r


def frndne(x: float) -> float:
    if not math.isfinite(x) or x == 0:
        return x
    r = float(round(x))
    return math.copysign(r, x) if r == 0 else r


def ffract(x: float) -> float:
    """v_fract: x + -floor(x) (so fract(-0) = +0, fract(+-inf) = NaN)."""
    if x != x:
        return x
    if math.isinf(x):
        return NAN
    return x + -ffloor(x)


def ldexp(x: float, e: int) -> float:
    if not math.isfinite(x) or x == 0:
        return x
    e = max(-2000, min(2000, e))
    try:
        return math.ldexp(x, e)
    except OverflowError:
        return math.copysign(INF, x)


def frexp_mant(x: float) -> float:
    if not math.isfinite(x):
        return x
    return math.frexp(x)[0]


def frexp_exp(x: float) -> int:
    if not math.isfinite(x):
        return 0
    return math.frexp(x)[1]


def fmax(a: float, b: float) -> float:
    """IEEE maxNum (a NaN input gives the other operand), +0 > -0 as the hardware orders them."""
    if a != a:
        return b
    if b != b:
        return a
    if a == b == 0:
        return a if math.copysign(1, a) > 0 else b
    return a if a > b else b


def fmin(a: float, b: float) -> float:
    """IEEE minNum, -0 < +0: fmax of the negated operands, negated (exact; a NaN input gives the other operand)."""
    return -fmax(-a, -b)


def fmed3(a: float, b: float, c: float) -> float:
    if a != a or b != b or c != c:
        return fmin(fmin(a, b), c)
    return fmax(fmin(a, b), fmin(fmax(a, b), c))


def f_to_int(x: float, bits: int, signed: bool) -> int:
    """Float to integer conversion with the hardware's saturation (NaN gives 0), as bits."""
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if x != x:
        return 0
    if x >= hi:
        v = hi
    elif x <= lo:
        v = lo
    else:
        v = int(x)
    return v & ((1 << bits) - 1)


def sext(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


# classes of v_cmp_class: bit 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf
def float_class(bits: int, width: int) -> int:
    ebits, mbits = {16: (5, 10), 32: (8, 23), 64: (11, 52)}[width]
    sign = bits >> (width - 1) & 1
    exp = bits >> mbits & ((1 << ebits) - 1)
    mant = bits & ((1 << mbits) - 1)
    if exp == (1 << ebits) - 1:
        if mant == 0:
            return 2 if sign else 9
        return 1 if mant >> (mbits - 1) else 0
    if exp == 0:
        if mant == 0:
            return 5 if sign else 6
        return 4 if sign else 7
    return 3 if sign else 8


def is_denormal(x: float, width: int) -> bool:
    tiny = {16: 2.0**-14, 32: 2.0**-126, 64: 2.0**-1022}[width]
    return x != 0 and abs(x) < tiny


LaneFn = Callable[..., object]
