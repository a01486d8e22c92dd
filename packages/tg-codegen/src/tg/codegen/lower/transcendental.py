"""Polynomial decompositions of EXP2, LOG2, SIN, SQRT and POW for targets without them (or all targets under
TRANSCENDENTAL=2), and float32 EXP2/LOG2 in float32 for vector lanes (`vector_transcendental_rules`).

The C and PYTHON targets have these ops natively (libm / math); these rules are for targets that don't. They work
on float32 and float64 (narrower floats are computed in float32 by the float emulation rules first).
Accuracy: a few ulp for EXP2, LOG2 and SQRT over the whole range; SIN reduces its argument with a three-part
pi/2 (Cody-Waite), accurate for |x| up to about 4e3 (float32) / 2e7 (float64); float64 SIN reduces arguments from
2**24 to 2**130 by Payne-Hanek (absolute error ~1e-15), so float32 SIN computed through float64 (`_widened`, what
targets with float64 get) is accurate over the whole float32 range. float64 arguments beyond 2**130 lose it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from tg.ir.dtype import DType, dtypes
from tg.ir.ops import Ops
from tg.ir.pattern import PatternMatcher, UPat
from tg.ir.uop import UOp

# pi/2 to 60 digits, split into pieces with few significant bits so that k * piece is exact in the float type
_HALF_PI = Fraction("1.57079632679489661923132169163975144209858469968755291048747229615")


def _split(value: Fraction, bits: int, parts: int) -> list[float]:
    ret: list[float] = []
    rest = value
    for _ in range(parts - 1):
        exp = math.floor(math.log2(float(rest)))
        scale = Fraction(2) ** (bits - 1 - exp)
        piece = Fraction(math.floor(rest * scale)) / scale
        ret.append(float(piece))
        rest -= piece
    ret.append(float(rest))
    return ret


_PIO2 = {dtypes.float32: _split(_HALF_PI, 12, 3), dtypes.float64: _split(_HALF_PI, 26, 3)}
# (int type, mantissa bits, exponent bias, degree of the series) per float type
_FMT = {dtypes.float32: (dtypes.int32, 23, 127), dtypes.float64: (dtypes.int64, 52, 1023)}


def _c(dt: DType, v: float) -> UOp:
    return UOp.const(dt, v)


def _where(c: UOp, a: UOp, b: UOp) -> UOp:
    return UOp(Ops.WHERE, a.dtype, (c, a, b))


def _bools(x: UOp) -> DType:
    return dtypes.bool.vec(x.dtype.count) if x.dtype.count > 1 else dtypes.bool


def _lt(a: UOp, b: UOp) -> UOp:
    return UOp(Ops.CMPLT, _bools(a), (a, b))


def _isnan(x: UOp) -> UOp:
    return UOp(Ops.CMPNE, _bools(x), (x, x))


def _horner(x: UOp, coeffs: list[float]) -> UOp:
    """coeffs[0] + coeffs[1]*x + ... evaluated by Horner's rule."""
    acc = _c(x.dtype, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = acc * x + _c(x.dtype, c)
    return acc


def _pow2i(n: UOp, dt: DType, it: DType | None = None) -> UOp:
    """2**n for an integer n inside the normal exponent range, built from its bits (`it`: the int dtype of n, for
    vectors)."""
    scalar_it, mant, bias = _FMT[dt.scalar()]
    it = it or scalar_it
    return ((n + UOp.const(it, bias)) << UOp.const(it, mant)).bitcast(dt)


def _floor_int(x: UOp, it: DType) -> UOp:
    t = x.cast(it)
    return _where(_lt(x, t.cast(x.dtype)), t - UOp.const(it, 1), t)


def exp2_poly(x: UOp) -> UOp:
    """2**x: split x = n + f with f in [0, 1), 2**f by its Taylor series, scale by 2**n through the exponent bits."""
    dt = x.dtype
    it, _, bias = _FMT[dt]
    hi, lo = float(bias + 1), -float(bias + _FMT[dt][1] + 2)
    xc = _where(_lt(x, _c(dt, lo)), _c(dt, lo), _where(_lt(_c(dt, hi), x), _c(dt, hi), _where(_isnan(x), _c(dt, 0), x)))
    n = _floor_int(xc, it)
    f = (xc - n.cast(dt)) * _c(dt, math.log(2))
    degree = 11 if dt is dtypes.float32 else 19
    p = _horner(f, [1 / math.factorial(i) for i in range(degree + 1)])
    half = n >> UOp.const(it, 1)
    r = p * _pow2i(half, dt) * _pow2i(n - half, dt)
    r = _where(_lt(x, _c(dt, lo + 1)), _c(dt, 0.0), r)
    r = _where(_lt(x, _c(dt, hi)), r, _c(dt, math.inf))
    return _where(_isnan(x), x, r)


def log2_poly(x: UOp) -> UOp:
    """log2(x): exponent from the bits, mantissa m in [sqrt(1/2), sqrt(2)), log via the atanh series of (m-1)/(m+1)."""
    dt = x.dtype
    it, mant, bias = _FMT[dt]
    tiny = _lt(x, _c(dt, 2.0 ** (1 - bias)))
    scaled = _where(tiny, x * _c(dt, 2.0**64), x)
    bits = scaled.bitcast(it)
    e = (bits >> UOp.const(it, mant)) - UOp.const(it, bias)
    m = ((bits & UOp.const(it, (1 << mant) - 1)) | UOp.const(it, bias << mant)).bitcast(dt)
    big = _lt(_c(dt, math.sqrt(2)), m)
    m = _where(big, m * _c(dt, 0.5), m)
    e = _where(big, e + UOp.const(it, 1), e)
    s = (m - _c(dt, 1.0)) / (m + _c(dt, 1.0))
    terms = 6 if dt is dtypes.float32 else 12
    series = s * _horner(s * s, [1 / (2 * k + 1) for k in range(terms)])
    r = e.cast(dt) + series * _c(dt, 2 / math.log(2))
    r = _where(tiny, r - _c(dt, 64.0), r)
    r = _where(x.ne(_c(dt, math.inf)), r, x)
    r = _where(x.ne(_c(dt, 0.0)), r, _c(dt, -math.inf))
    return _where(_lt(x, _c(dt, 0.0)) | _isnan(x), _c(dt, math.nan), r)


# 2/pi to 200 decimal digits, as 24-bit chunks: 2/pi = sum_j _TWO_OVER_PI[j] * 2**(-24 * (j + 1))
_PI = Fraction(
    "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803482534211706"
    "798214808651328230664709384460955058223172535940812848111745028410270193852110555964462294895493038196"
)
_TWO_OVER_PI = [math.floor(2 / _PI * 2 ** (24 * (j + 1))) % (1 << 24) for j in range(10)]
_PH_MIN, _PH_MAX = 2.0**24, 2.0**130  # float64 SIN arguments reduced by Payne-Hanek (below: Cody-Waite)


def _payne_hanek(ax: UOp) -> tuple[UOp, UOp]:
    """(q, r) with ax = (4m + q) * pi/2 + r, |r| <= pi/4, for float64 2**24 <= ax < 2**130: the product of ax's
    53-bit mantissa (two halves) with the 24-bit chunks of 2/pi that matter at its exponent, each taken mod 4."""
    f64, i64 = dtypes.float64, dtypes.int64
    ax = _where(_lt(ax, _c(f64, _PH_MIN)), _c(f64, _PH_MIN), _where(_lt(ax, _c(f64, _PH_MAX)), ax, _c(f64, _PH_MIN)))
    bits = ax.bitcast(i64)
    e = (bits >> UOp.const(i64, 52)) - UOp.const(i64, 1023)
    mant = (bits & UOp.const(i64, (1 << 52) - 1)) | UOp.const(i64, 1 << 52)
    total = _c(f64, 0.0)
    for part, shift in ((mant >> UOp.const(i64, 26), 26), (mant & UOp.const(i64, (1 << 26) - 1), 52)):
        s = e - UOp.const(i64, shift)  # ax = sum over parts of part * 2**s
        j0 = (s - UOp.const(i64, 2)) // UOp.const(i64, 24)  # chunks before j0 give multiples of 4: dropped
        j0 = _where(_lt(j0, UOp.const(i64, 0)), UOp.const(i64, 0), j0)
        pf = part.cast(f64)
        for i in range(5):
            chunk = _c(f64, float(_TWO_OVER_PI[i]))
            for v in range(1, 5):
                chunk = _where(j0.alu(Ops.CMPEQ, UOp.const(i64, v)), _c(f64, float(_TWO_OVER_PI[v + i])), chunk)
            scale = _pow2i(s - UOp.const(i64, 24) * (j0 + UOp.const(i64, 1 + i)), f64)
            term = pf * chunk * scale  # exact: 27 x 24 bits, times a power of two
            total = total + (term - _floor_int(term * _c(f64, 0.25), i64).cast(f64) * _c(f64, 4.0))
    total = total - _floor_int(total * _c(f64, 0.25), i64).cast(f64) * _c(f64, 4.0)
    k = _floor_int(total + _c(f64, 0.5), i64)
    return k & UOp.const(i64, 3), (total - k.cast(f64)) * _c(f64, math.pi / 2)


def sin_poly(x: UOp) -> UOp:
    """sin(x): x = k*pi/2 + r with |r| <= pi/4 (three-part Cody-Waite; float64 arguments from 2**24 to 2**130 by
    Payne-Hanek, so float32 sin computed in float64 is accurate over its whole range), then the sin or cos series
    of r by k mod 4."""
    dt = x.dtype
    it = _FMT[dt][0]
    finite = _lt(x - x, _c(dt, 1.0))  # false for inf and nan
    xs = _where(finite, x, _c(dt, 0.0))
    kf = xs * _c(dt, 2 / math.pi)
    k = _floor_int(kf + _c(dt, 0.5), it)
    kd = k.cast(dt)
    r = xs
    for piece in _PIO2[dt]:
        r = r - kd * _c(dt, piece)
    if dt is dtypes.float64:
        neg = _lt(xs, _c(dt, 0.0))
        ax = _where(neg, xs * _c(dt, -1.0), xs)
        q_big, r_big = _payne_hanek(ax)
        big = _lt(_c(dt, _PH_MIN), ax) & _lt(ax, _c(dt, _PH_MAX))
        # sin(-x) = -sin(x): the quadrant and remainder of -ax are -q and -r
        q_big = _where(neg, (UOp.const(it, 4) - q_big) & UOp.const(it, 3), q_big)
        r_big = _where(neg, r_big * _c(dt, -1.0), r_big)
        k = _where(big, q_big, k)
        r = _where(big, r_big, r)
    r2 = r * r
    n = 6 if dt is dtypes.float32 else 10
    sin_r = r * _horner(r2, [(-1) ** i / math.factorial(2 * i + 1) for i in range(n)])
    cos_r = _horner(r2, [(-1) ** i / math.factorial(2 * i) for i in range(n + 1)])
    q = k & UOp.const(it, 3)
    val = _where(q.ne(UOp.const(it, 0)), _where(q.ne(UOp.const(it, 1)),
                 _where(q.ne(UOp.const(it, 2)), -cos_r, -sin_r), cos_r), sin_r)  # fmt: skip
    return _where(finite, val, _c(dt, math.nan))


def sqrt_poly(x: UOp) -> UOp:
    """sqrt(x): an estimate from halving the exponent bits, then Newton steps y = (y + x/y) / 2."""
    dt = x.dtype
    it, _, bias = _FMT[dt]
    tiny = _lt(x, _c(dt, 2.0 ** (1 - bias)))
    xs = _where(tiny, x * _c(dt, 2.0**64), x)
    magic = 0x1FBD1DF5 if dt is dtypes.float32 else 0x1FF7A3BEA91D9B1B
    y = ((xs.bitcast(it) >> UOp.const(it, 1)) + UOp.const(it, magic)).bitcast(dt)
    for _ in range(4 if dt is dtypes.float32 else 6):
        y = (y + xs / y) * _c(dt, 0.5)
    y = _where(tiny, y * _c(dt, 2.0**-32), y)
    y = _where(x.ne(_c(dt, math.inf)), y, x)
    y = _where(x.ne(_c(dt, 0.0)), y, x)
    return _where(_lt(x, _c(dt, 0.0)) | _isnan(x), _c(dt, math.nan), y)


def pow_poly(x: UOp, y: UOp) -> UOp:
    """x**y with C's pow semantics: exp2(y * log2|x|), the sign of a negative base from an odd integer y, NaN for a
    negative base with a fractional y, 1 for y == 0 and for x == 1 (and x == -1 with an infinite y)."""
    dt = x.dtype
    ax = _where(_lt(x, _c(dt, 0.0)), x * _c(dt, -1.0), x)
    mag = exp2_poly(y * log2_poly(ax))
    ty = UOp(Ops.TRUNC, dt, (y,))
    y_int = UOp(Ops.CMPEQ, dtypes.bool, (ty, y))
    half = UOp(Ops.TRUNC, dt, (y * _c(dt, 0.5),))
    y_odd = y_int & UOp(Ops.CMPNE, dtypes.bool, (half * _c(dt, 2.0), y))
    neg = _lt(x, _c(dt, 0.0))
    r = _where(neg & y_odd, mag * _c(dt, -1.0), mag)
    finite_neg = neg & UOp(Ops.CMPNE, dtypes.bool, (x, _c(dt, -math.inf)))  # (-inf) ** 0.5 is inf, not nan
    r = _where(finite_neg & UOp(Ops.CMPNE, dtypes.bool, (y_int, UOp.const(dtypes.bool, True))), _c(dt, math.nan), r)
    y_inf = UOp(Ops.CMPEQ, dtypes.bool, (y * y, _c(dt, math.inf)))
    one = UOp(Ops.CMPEQ, dtypes.bool, (x, _c(dt, 1.0))) | (UOp(Ops.CMPEQ, dtypes.bool, (x, _c(dt, -1.0))) & y_inf)
    return _where(one | UOp(Ops.CMPEQ, dtypes.bool, (y, _c(dt, 0.0))), _c(dt, 1.0), r)


# ---- float32 EXP2 / LOG2 in float32 arithmetic, for vector lanes ----------------------------------------------------
# libm's exp2f/log2f take one lane at a time: a vectorised kernel would split every vector into scalar calls. These
# stay vectors (multiplies, adds, selects, int shifts and bit operations). Coefficients: near-minimax fits (Lawson-
# weighted least squares in float64 on Chebyshev nodes, relative error), rounded to float32. Measured on a sample of
# every float32 (tg-tensor tests/test_transcendental_f32.py): exp2 within 1.1 ulp, log2 within 1.2 ulp.
# 2**f on [-1/2, 1/2], relative error 2.8e-9:
_EXP2_F32 = (1.0, 0.6931471824645996, 0.24022650718688965, 0.055504102259874344, 0.00961802713572979,
             0.0013333950191736221, 0.00015469235950149596, 1.5195579180726781e-05)  # fmt: skip
_LOG2_F32 = (1.4426950216293335, -0.7213473320007324, 0.48089852929115295, -0.3606965243816376, 0.28855130076408386,
             -0.23960720002651215, 0.20487944781780243, -0.1914171427488327, 0.184640035033226,
             -0.10728625953197479)  # log2(1+t)/t on [sqrt(1/2)-1, sqrt(2)-1]: relative error 2e-8  # fmt: skip


_ROUND_MAGIC, _ROUND_MAGIC_BITS = 12582912.0, 0x4B400000  # 1.5 * 2**23 and its float32 bits


def _ints_like(x: UOp) -> DType:
    return dtypes.int32.vec(x.dtype.count) if x.dtype.count > 1 else dtypes.int32


def exp2_f32(x: UOp) -> UOp:
    """2**x for float32 (scalar or vector): n = round(x), f = x - n in [-1/2, 1/2] (exact), 2**f by a degree-7
    polynomial, times 2**n in two exact steps (so results down to the subnormals are right)."""
    dt, it = x.dtype, _ints_like(x)
    lo, hi = -150.0, 128.0  # below: rounds to 0; from hi up: overflows to inf
    xc = _where(_lt(x, _c(dt, lo)), _c(dt, lo), _where(_lt(_c(dt, hi), x), _c(dt, hi), _where(_isnan(x), _c(dt, 0), x)))
    # round to the nearest integer without a float->int conversion (a scalar loop on AVX2 through int64): adding
    # 1.5 * 2**23 leaves the integer in the low mantissa bits
    shifted = xc + _c(dt, _ROUND_MAGIC)
    n = shifted.bitcast(it) - UOp.const(it, _ROUND_MAGIC_BITS)
    f = xc - (shifted - _c(dt, _ROUND_MAGIC))
    p = _horner(f, list(_EXP2_F32))
    half = n >> UOp.const(it, 1)
    r = p * _pow2i(half, dt, it) * _pow2i(n - half, dt, it)
    r = _where(_lt(x, _c(dt, lo)), _c(dt, 0.0), r)
    r = _where(_lt(x, _c(dt, hi)), r, _c(dt, math.inf))
    return _where(_isnan(x), x, r)


_INV_LN2_HI = 2955 / 2048  # 1/ln2 to 12 significant bits: its product with a 12-bit number is exact in float32
_INV_LN2_LO = 1 / math.log(2) - _INV_LN2_HI


def log2_f32(x: UOp) -> UOp:
    """log2(x) for float32 (scalar or vector): x = 2**e * m with m in [sqrt(1/2), sqrt(2)), t = m - 1 (exact),
    log2(1+t) = t/ln2 + t**2 * Q(t) with Q of degree 8. The leading term is computed in pieces that are exact (t's
    top 12 bits times 1/ln2's top 12 bits, added to e by Fast2Sum), so only the small corrections round: e + log2(m)
    cancels for e = +-1, where a rounded t/ln2 alone cost 1.6 ulp. Subnormals are scaled by 2**64 first."""
    dt, it = x.dtype, _ints_like(x)
    tiny = _lt(x, _c(dt, 2.0**-126))
    scaled = _where(tiny, x * _c(dt, 2.0**64), x)
    bits = scaled.bitcast(it)
    e = (bits >> UOp.const(it, 23)) - UOp.const(it, 127)
    m = ((bits & UOp.const(it, (1 << 23) - 1)) | UOp.const(it, 127 << 23)).bitcast(dt)
    big = _lt(_c(dt, math.sqrt(2)), m)
    m = _where(big, m * _c(dt, 0.5), m)
    e = _where(big, e + UOp.const(it, 1), e)
    t = m - _c(dt, 1.0)
    t_hi = (t.bitcast(it) & UOp.const(it, -(1 << 12))).bitcast(dt)
    t_lo = t - t_hi
    ef = e.cast(dt)
    lead = t_hi * _c(dt, _INV_LN2_HI)  # exact
    hi = ef + lead
    err = (ef - hi) + lead  # exact (Fast2Sum: e is 0 or |e| >= 1 > |lead|)
    lo = t_lo * _c(dt, _INV_LN2_HI) + t * _c(dt, _INV_LN2_LO) + t * t * _horner(t, list(_LOG2_F32[1:]))
    r = hi + (lo + err)
    r = _where(tiny, r - _c(dt, 64.0), r)
    r = _where(x.ne(_c(dt, math.inf)), r, x)
    r = _where(x.ne(_c(dt, 0.0)), r, _c(dt, -math.inf))
    return _where(_lt(x, _c(dt, 0.0)) | _isnan(x), _c(dt, math.nan), r)


def _vector_f32(x: UOp) -> bool:
    return x.dtype.count > 1 and x.dtype.scalar() is dtypes.float32


# float32 vectors: EXP2 and LOG2 computed in float32 lanes instead of one libm call per lane
pm_vector_transcendentals = PatternMatcher([
    (UPat(Ops.EXP2, name="x"), lambda x: exp2_f32(x.src[0]) if _vector_f32(x) else None),
    (UPat(Ops.LOG2, name="x"), lambda x: log2_f32(x.src[0]) if _vector_f32(x) else None),
])  # fmt: skip


_POLY: dict[Ops, Callable[..., UOp]] = {Ops.EXP2: exp2_poly, Ops.LOG2: log2_poly, Ops.SIN: sin_poly,
                                        Ops.SQRT: sqrt_poly, Ops.POW: pow_poly}  # fmt: skip
# the ops these rules can replace; TRANSCENDENTAL=2 takes them out of every target's supported set
POLY_OPS = frozenset(_POLY)


def _widened(fn: Callable[..., UOp]) -> Callable[..., UOp]:
    """fn computed in float64 and rounded once to float32: the float64 polynomials and argument reductions leave
    float32 results within an ulp (and SIN's reduction exact up to |x| ~ 1e8 instead of ~4e3)."""

    def wide(*srcs: UOp) -> UOp:
        return fn(*(s.cast(dtypes.float64) for s in srcs)).cast(dtypes.float32)

    return wide


def transcendental_rules(supported: frozenset[Ops], native: frozenset[DType] = frozenset()) -> PatternMatcher:
    """Rules replacing each of EXP2/LOG2/SIN/SQRT/POW missing from `supported` (float32/float64 only); float32 is
    computed through float64 when the target has it natively (`native`)."""
    rules: list[tuple[UPat, Callable[..., Any]]] = []
    for op, fn in _POLY.items():
        if op in supported:
            continue
        if dtypes.float64 in native:
            rules.append((UPat(op, dtype=dtypes.float32, name="x"), lambda x, fn=fn: _widened(fn)(*x.src)))
            rules.append((UPat(op, dtype=dtypes.float64, name="x"), lambda x, fn=fn: fn(*x.src)))
        else:
            rules.append((UPat(op, dtype=(dtypes.float32, dtypes.float64), name="x"), lambda x, fn=fn: fn(*x.src)))
    return PatternMatcher(rules)
