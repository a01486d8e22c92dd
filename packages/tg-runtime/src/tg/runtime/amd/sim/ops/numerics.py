"""Float and integer helpers shared by the RDNA3 op tables (amd.md 4.5).

Values travel as raw bits between instructions; a VALU op converts its sources to Python numbers, computes, and
rounds back to the op's width. Every helper is total: division by zero, NaN and infinities give IEEE results and
never raise, because inactive lanes are computed too.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

INF, NAN = math.inf, math.nan
F32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
F16_MAX = 65504.0
# values at or beyond these round to infinity (largest finite + half an ulp)
F32_OVERFLOW = 2.0**128 * (1 - 2.0**-25)
F16_OVERFLOW = 65520.0

_PACK = {n: (struct.Struct(f"<{n}I"), struct.Struct(f"<{n}f")) for n in (1, 32)}
_PACK_H = {n: (struct.Struct(f"<{n}H"), struct.Struct(f"<{n}e")) for n in (1, 32)}
_PACK_Q = {n: (struct.Struct(f"<{n}Q"), struct.Struct(f"<{n}d")) for n in (1, 32)}
_FMTS = {32: (_PACK, 0xFFFFFFFF), 16: (_PACK_H, 0xFFFF), 64: (_PACK_Q, 0xFFFFFFFFFFFFFFFF)}


def bits_to_floats(bits: list[int], width: int) -> list[float]:
    """Raw bit patterns (any count) to Python floats for an f16/f32/f64 operand."""
    table, _ = _FMTS[width]
    n = len(bits)
    ints, floats = table[n] if n in table else (struct.Struct(f"<{n}{table[1][0].format[-1]}"),
                                                 struct.Struct(f"<{n}{table[1][1].format[-1]}"))  # fmt: skip
    return list(floats.unpack(ints.pack(*bits)))


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
    """Round Python floats to f16/f32/f64 (nearest even, overflow to +-inf) and return their bit patterns."""
    table, _ = _FMTS[width]
    n = len(values)
    if n in table:
        ints, floats = table[n]
        try:
            return list(ints.unpack(floats.pack(*values)))
        except (OverflowError, struct.error):
            pass
    return [_round_one(x, width) for x in values]


def f32_bits(x: float) -> int:
    return _round_one(x, 32)


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
    """a*b+c with one rounding to double."""
    if hasattr(math, "fma"):
        try:
            return math.fma(a, b, c)  # type: ignore[attr-defined,unused-ignore]
        except (ValueError, OverflowError):
            pass
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    from fractions import Fraction

    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return 0.0 if (a * b == 0 and math.copysign(1, a * b) + math.copysign(1, c) > 0) else (a * b + c)
    try:
        return float(exact)
    except OverflowError:
        return INF if exact > 0 else -INF


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
    if width == 32:
        b = _round_one(x, 32)
        if x == 0:
            b = 1 if direction > 0 else 0x80000001
        elif (x > 0) == (direction > 0):
            b += 1
        else:
            b -= 1
        return bits_f32(b)
    b = _round_one(x, 16)
    if x == 0:
        b = 1 if direction > 0 else 0x8001
    elif (x > 0) == (direction > 0):
        b += 1
    else:
        b -= 1
    return bits_f16(b)


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
    if x != x:
        return x
    if math.isinf(x):
        return NAN
    return x - math.floor(x)


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
    if a != a:
        return b
    if b != b:
        return a
    if a == b == 0:
        return a if math.copysign(1, a) < 0 else b
    return a if a < b else b


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
