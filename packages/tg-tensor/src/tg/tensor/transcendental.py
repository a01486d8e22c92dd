"""Accurate elementwise math (exp, cos, tan, tanh, sigmoid, erf, expm1, log1p, softplus, pow).

Each function is built from the IR's few math ops (EXP2, LOG2, SIN, SQRT, POW: libm on the CPU, polynomials where
a target lacks them or `TRANSCENDENTAL=2` forces them) in formulations that keep float32 results within about
2 ulp of the correctly rounded value over the whole input range, never overflow in an intermediate, and keep
precision near 0 (`tanh(1e-8) == 1e-8`). The measured errors are in the package README. float16/bfloat16 inputs
are computed in float32 and rounded once. These functions are attached to `Tensor` in tensor.py.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeVar

from tg.ir import DType, Ops, UOp, dtypes
from tg.tensor.uopmath import Ew

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

# Cody-Waite split of ln(2): n * hi is exact for every n the exponent range allows, lo carries the rest
_LN2_HI = {dtypes.float32: 0.693145751953125, dtypes.float64: 6.93147180369123816490e-01}
_LN2_LO = {dtypes.float32: 1.428606765330187e-06, dtypes.float64: 1.90821492927058770002e-10}
# (int type of the same width, mantissa bits, exponent bias)
_BITS = {dtypes.float32: (dtypes.int32, 23, 127), dtypes.float64: (dtypes.int64, 52, 1023)}
# exp(x) is inf above HI and rounds to 0 below LO
_EXP_RANGE = {dtypes.float32: (-104.0, 89.0), dtypes.float64: (-746.0, 710.0)}

# the helpers shared by Tensor-level formulas and the `Ew` (UOp-level) ones take either and return the same kind
V = TypeVar("V", "Tensor", Ew)


def _narrow(x: Tensor) -> bool:
    return dtypes.is_float(x.dtype) and x.dtype.itemsize < 4


def _in_float32(fn: Any) -> Any:
    """Decorator: float16/bfloat16/fp8 inputs computed in float32 and rounded once; ints become the default float."""

    @functools.wraps(fn)
    def wrapper(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if _narrow(self):
            return fn(self.cast(dtypes.float32), *args, **kwargs).cast(self.dtype)
        return fn(self._float(), *args, **kwargs)

    return wrapper


def _wide(x: Tensor) -> DType:
    """float64 where x's device computes it natively (CPU, PYTHON), else x's own dtype (a GPU without float64 gets
    the same formulas in float32, a little less accurate)."""
    from tg.runtime.device import Device

    try:
        native = Device[x.device].renderer.native_float_dtypes
    except Exception:  # a device without a renderer runs no kernels: the question does not arise
        return dtypes.float64
    return dtypes.float64 if dtypes.float64 in native else x.dtype


def _pow2(n: V, dt: DType) -> V:
    """2**n for an int tensor n inside the normal exponent range, from the exponent bits."""
    mant, bias = _BITS[dt][1:]
    return ((n + bias) << mant).bitcast(dt)


def _reduce_ln2(x: V) -> tuple[V, V]:
    """(n, r) with x = n*ln2 + r, |r| <= ln2/2 (n an int tensor; x must be finite and inside exp's range)."""
    dt = x.dtype
    if dt is dtypes.float32:
        # round to nearest by adding 1.5 * 2**23 (the integer lands in the low mantissa bits): no float->int
        # conversion, which C vectors on AVX2 can only do one lane at a time (through int64)
        shifted = (x * (1 / math.log(2)) + 12582912.0).detach()  # n is piecewise constant: no gradient
        nf = shifted - 12582912.0
        n = shifted.bitcast(dtypes.int32) - 0x4B400000
    else:
        nf = (x * (1 / math.log(2)) + 0.5).floor()
        n = nf.cast(_BITS[dt][0])
    r = (x - nf * _LN2_HI[dt]) - nf * _LN2_LO[dt]
    return n, r


@_in_float32
def exp(self: Tensor) -> Tensor:
    """e ** x: x = n*ln2 + r (exact Cody-Waite split), exp2(r*log2(e)) scaled by 2**n in two exact steps."""
    return self._tensor_class()(_exp(Ew.of(self)).uop)


# e**r for |r| <= ln2/2 in float32: Taylor to degree 7, truncated below 6e-9 relative (0.1 ulp)
_EXP_TAYLOR_F32 = tuple(1 / math.factorial(k) for k in range(8))


def _exp(self: Ew) -> Ew:
    """`exp` of a float32/float64 value, built on UOps (uopmath.py): the same nodes the Tensor operators build.

    float32 evaluates e**r by its Taylor polynomial, not as EXP2(r/ln2): a target without EXP2 (vector lanes on the
    CPU) would reduce the argument a second time and check its range, NaN and overflow again (~45 vector ops per exp
    in a softmax instead of ~25). Its gradient is then the rule g * exp(x), not the polynomial's derivative."""
    dt = self.dtype
    lo, hi = _EXP_RANGE[dt]
    xc = self.maximum(lo).minimum(hi)
    n, r = _reduce_ln2(xc)
    half = n >> 1
    if dt is dtypes.float32:
        er = r * _EXP_TAYLOR_F32[-1] + _EXP_TAYLOR_F32[-2]
        for c in reversed(_EXP_TAYLOR_F32[:-2]):
            er = er * r + c
    else:
        er = (r * (1 / math.log(2))).exp2()
    ret = self.isnan().where(self, er * _pow2(half, dt) * _pow2(n - half, dt))
    if dt is dtypes.float32:
        from tg.tensor.gradient import set_custom_gradient

        set_custom_gradient(ret.uop, (self.uop,), _exp_gradient)
    return ret


def _exp_gradient(g_u: UOp, needed: tuple[bool, ...], exp_u: UOp) -> tuple[UOp | None]:
    """d exp(x) = g * exp(x): the node itself (a custom gradient of `_exp`)."""
    return (g_u.alu(Ops.MUL, exp_u) if needed[0] else None,)


def _expm1_small(r: Tensor) -> Tensor:
    """expm1(r) for |r| <= ln2/2 by its Taylor series (11 terms: below half an ulp of float64 truncation)."""
    terms = 9 if r.dtype is dtypes.float32 else 16
    acc = r * 0.0 + 1 / math.factorial(terms + 1)
    for k in range(terms, 0, -1):
        acc = acc * r + 1 / math.factorial(k)
    return acc * r


@_in_float32
def expm1(self: Tensor) -> Tensor:
    """e ** x - 1, accurate near 0: 2**n * expm1(r) + (2**n - 1) with x = n*ln2 + r."""
    dt = self.dtype
    big = 40.0 if dt is dtypes.float64 else 20.0  # beyond: exp(x) - 1 rounds to exp(x) or to -1
    xc = self.maximum(-big).minimum(big)
    n, r = _reduce_ln2(xc)
    s = _pow2(n, dt)
    ret = s * _expm1_small(r) + (s - 1.0)
    return (self.abs() < big).where(ret, self.exp() - 1.0)


def _one_plus(x: Tensor, one: float) -> tuple[Tensor, Tensor]:
    """(d, err) with d = one + x rounded and one + x == d + err exactly (Fast2Sum: needs |x| <= one)."""
    d = x + one
    return d, (one - d) + x


def _log1p_small(x: Tensor) -> Tensor:
    """log1p(x) for -0.5 < x < 1: 2 atanh(s) with s = x / (2 + x) (|s| <= 1/3), the rounding of 2 + x compensated."""
    d, err = _one_plus(x, 2.0)
    q = x / d
    s = q - q * (err / d)
    s2 = s * s
    terms = 10 if x.dtype is dtypes.float32 else 24
    acc = s2 * 0.0 + 1 / (2 * terms + 1)
    for k in range(terms - 1, 0, -1):
        acc = acc * s2 + 1 / (2 * k + 1)
    return s * 2.0 + s * s2 * acc * 2.0


@_in_float32
def log1p(self: Tensor) -> Tensor:
    """log(1 + x), accurate near 0: an atanh series for -0.5 < x < 1, elsewhere log(u) + err / u where u = 1 + x
    rounded and err the rounding error (exact by Fast2Sum)."""
    small = _log1p_small(self.maximum(-0.49).minimum(0.99))
    u = self + 1.0
    err = (self > 1.0).where((self - u) + 1.0, (1.0 - u) + self)
    large = u.log() + ((err == 0) | (u.abs() == math.inf)).where(0.0, err / u)
    return ((self > -0.49) & (self < 0.99)).where(small, large)


@_in_float32
def sigmoid(self: Tensor) -> Tensor:
    """1 / (1 + e^-x) with e = exp(-|x|) so nothing overflows: 1/(1+e) for x >= 0, e/(1+e) below; the rounding
    error of d = 1 + e is compensated (n/(d + err) ~ n/d - (n/d) * err/d)."""
    e = (-self.abs()).exp()
    d, err = _one_plus(e, 1.0)
    q = (self >= 0).where(1.0, e) / d
    return q - q * (err / d)


@functools.cache
def _tanh_series(terms: int) -> tuple[float, ...]:
    """Taylor coefficients of tanh(x)/x in x**2: 2**2n (2**2n - 1) B_2n / (2n)! from the Bernoulli numbers."""
    bern: list[Fraction] = [Fraction(1)]
    for m in range(1, 2 * terms + 1):
        bern.append(-sum((math.comb(m + 1, k) * bern[k] for k in range(m)), Fraction(0)) / (m + 1))
    return tuple(float(4**n * (4**n - 1) * bern[2 * n] / math.factorial(2 * n)) for n in range(1, terms + 1))


@_in_float32
def tanh(self: Tensor) -> Tensor:
    """tanh(x): its odd Taylor series below 0.55 (exact near 0), (1 - e) / (1 + e) with e = exp(-2|x|) above (no
    cancellation there, no overflow: exactly 1 far out, with a zero gradient there), with the sign restored.
    float32 where the device computes float64: (1 - e) / (1 + e) in float64 throughout (x itself below 2**-12),
    rounded once (~20 nodes instead of ~75: a deep tanh chain schedules and builds that much less)."""
    wide = self.dtype is dtypes.float32 and _wide(self) is dtypes.float64
    y_u, e_u, small_u = _tanh_wide(Ew.of(self)) if wide else _tanh(Ew.of(self))
    cls = self._tensor_class()
    y = cls(y_u)
    # gradient from the result, not node by node through the series and exp: 4e / (1 + e)^2 (no cancellation as
    # y -> 1; 0 where e underflows), in float64 for the wide form; 1 - y^2 where |y| < 0.5 for the narrow one
    from tg.tensor.gradient import set_custom_gradient

    device = y.device

    def rule(g_u: UOp, needed: tuple[bool, ...], tanh_u: UOp) -> tuple[UOp | None, ...]:
        # tanh_u is y's node, passed in (captured, it would be a reference cycle through the node's rule)
        if not needed[0]:
            return (None,)
        et = Ew(e_u, device)
        ope = 1.0 + et
        d = et * 4.0 / (ope * ope)
        if small_u is None:
            d = d.cast(tanh_u.dtype)
        else:
            yt = Ew(tanh_u, device)
            d = Ew(small_u, device).where(1.0 - yt * yt, d)
        return (g_u.alu(Ops.MUL, d.uop),)

    set_custom_gradient(y.uop, (self.uop,), rule)
    return y


def _tanh_wide(self: Ew) -> tuple[UOp, UOp, None]:
    """(tanh(x), e = exp(-2|x|) in float64, None) of a float32 value: sign(x) (1 - e) / (1 + e) in float64 (1 - e
    keeps ~42 bits from |x| = 2**-12 on), x itself below (tanh(x) = x (1 - x**2/3 + ...): < 1/3 ulp off)."""
    x = self.cast(dtypes.float64)
    a = x.maximum(-x)
    e = (a * (-2 / math.log(2))).exp2()
    t = (1.0 - e) / (1.0 + e)
    y = (a < 2.0**-12).where(x, (x < 0).where(-t, t))
    return y.cast(dtypes.float32).uop, e.uop, None


def _tanh(self: Ew) -> tuple[UOp, UOp, UOp]:
    """(tanh(x), e, |x| < 0.55) of a float32/float64 value as UOps, e = exp(-2|x|) where |x| >= 0.55."""
    a = self.abs()
    small = a < 0.55
    xs = small.where(self, 0.0)  # the series only sees its own range: no overflow (and no NaN gradient) elsewhere
    x2 = xs * xs
    c = _tanh_series(11 if self.dtype is dtypes.float32 else 22)
    acc = x2 * 0.0 + c[-1]
    for ck in reversed(c[:-1]):
        acc = acc * x2 + ck
    e = _exp(small.where(1.0, a) * -2.0)  # <= 1/3 here and never overflows: finite gradients for huge |x|
    t = (1.0 - e) / (1.0 + e)
    y = small.where(xs * acc, (self < 0).where(-t, t))
    return y.uop, e.uop, small.uop


@_in_float32
def softplus(self: Tensor, beta: float = 1.0) -> Tensor:
    """log(1 + e^(beta*x)) / beta, as max(bx, 0) + log1p(exp(-|bx|)): no overflow for any x. float32 is computed
    in float64 and rounded once (the float32 exp and log1p errors would add up to just over 2 ulp)."""
    if self.dtype is dtypes.float32 and _wide(self) is dtypes.float64:
        return softplus(self.cast(dtypes.float64), beta).cast(dtypes.float32)
    bx = self * beta
    return (bx.maximum(0.0) + (-bx.abs()).exp().log1p()) * (1.0 / beta)


@_in_float32
def cos(self: Tensor) -> Tensor:
    """Cosine as sin(2x) / (2 sin x) computed in float64 (2x is exact there and both sines are accurate at any
    argument), rounded once: float32 results are correctly rounded but for rare ties. float64 inputs get the
    same formula in float64 (about 1.5 ulp); 2x overflowing (|x| >= 2**1023) falls back to 1 - 2 sin(x/2)**2."""
    x = self.cast(_wide(self))
    s = x.sin()
    two_x = x * 2.0
    ret = two_x.sin() / (s * 2.0)
    half_s = (x * 0.5).sin()
    ret = (two_x.abs() == math.inf).where(1.0 - 2.0 * half_s * half_s, ret)
    return (s == 0).where(1.0, ret).cast(self.dtype)


@_in_float32
def tan(self: Tensor) -> Tensor:
    """Tangent, sin(x) / cos(x) in float64 (see `cos`), rounded once."""
    x = self.cast(_wide(self))
    return (x.sin() / cos(x)).cast(self.dtype)


@_in_float32
def pow_(self: Tensor, exponent: Tensor) -> Tensor:
    """x ** y elementwise on floats (the POW op: C's pow semantics, libm's powf on the CPU)."""
    cls = self._tensor_class()
    return cls(self.uop.alu(Ops.POW, exponent.cast(self.dtype).uop))


# erf: Taylor series of x*P(x^2) below 0.75; above, 1 - exp(-x^2) * g(x) with g = erfc(x)*exp(x^2) as a Chebyshev
# series on [0.75, 4] (coefficients computed once from math.erfc); beyond 4, erf rounds to +-1 in float32. float32
# switches at 1 instead: the float32 Clenshaw sum of g carries a few ulp, which 1 - erfc scales down by erfc (0.16
# at 1, 0.29 at 0.75), and the Taylor series still converges fast there.
_ERF_SPLIT, _ERF_END, _CHEB_DEGREE = 0.75, 4.0, 20
_ERF_SPLIT_F32 = 1.0


@functools.cache
def _erfc_scaled_chebyshev() -> tuple[float, ...]:
    n = 64
    nodes = [math.cos(math.pi * (j + 0.5) / n) for j in range(n)]
    mid, half = (_ERF_END + _ERF_SPLIT) / 2, (_ERF_END - _ERF_SPLIT) / 2
    vals = [math.erfc(x) * math.exp(x * x) for x in (mid + half * t for t in nodes)]
    return tuple(2 / n * math.fsum(v * math.cos(math.pi * k * (j + 0.5) / n) for j, v in enumerate(vals))
                 for k in range(_CHEB_DEGREE + 1))  # fmt: skip


def _split12(x: Tensor) -> tuple[Tensor, Tensor]:
    """(hi, lo) with x = hi + lo exactly and hi keeping x's top 12 significant bits (float32): a product of two such
    his is exact. hi carries no gradient; lo = x - hi does, so expressions of (hi, lo) differentiate like x."""
    hi = (x.detach().bitcast(dtypes.int32) & -(1 << 12)).bitcast(dtypes.float32)
    return hi, x - hi


def _exp_neg_square(v: Tensor, scale: float) -> Tensor:
    """exp(-scale * v**2) in float32 for scale 1 or 1/2, with v**2 never rounded: v = hi + lo, exp(-scale*hi**2)
    (hi**2 exact) times exp(-d) with d = scale*lo*(v + hi) < 2**-6 by its Taylor series. A rounded v**2 would
    cost v**2 * 2**-24 relative error: 12 ulp of erfc at 3.5."""
    hi, lo = _split12(v)
    d = lo * (v + hi) * scale
    tail = 1.0 - d * (1.0 - d * (0.5 - d * (1 / 6 - d * (1 / 24))))
    return (hi * hi * -scale).exp() * tail


_ERF_C0 = 2 / math.sqrt(math.pi)
_ERF_C0_HI = round(_ERF_C0 * 2048) / 2048  # 12 significant bits
_ERF_C0_LO = _ERF_C0 - _ERF_C0_HI


def _erf_small(x: Tensor) -> Tensor:
    """erf(x) for |x| < 0.75: its Taylor series, the leading 2x/sqrt(pi) from exact pieces (x's top 12 bits times
    the constant's) so that only the small corrections round."""
    x2 = x * x
    coeffs = [_ERF_C0 * (-1) ** k / (math.factorial(k) * (2 * k + 1)) for k in range(12)]
    acc = x2 * 0.0 + coeffs[-1]
    for c in reversed(coeffs[1:-1]):
        acc = acc * x2 + c
    if x.dtype is not dtypes.float32:
        return x * coeffs[0] + x * x2 * acc
    hi, lo = _split12(x)
    return hi * _ERF_C0_HI + (lo * _ERF_C0_HI + x * _ERF_C0_LO + x * x2 * acc)


def _erfc_scaled(a: Tensor) -> Tensor:
    """g(a) = erfc(a) * exp(a**2) for 0.75 <= a <= 4 (clamped), by its Chebyshev series (Clenshaw)."""
    mid, half = (_ERF_END + _ERF_SPLIT) / 2, (_ERF_END - _ERF_SPLIT) / 2
    t = (a.minimum(_ERF_END).maximum(_ERF_SPLIT) - mid) * (1 / half)
    c = _erfc_scaled_chebyshev()
    b1, b2 = t * 0.0, t * 0.0
    for ck in reversed(c[1:]):
        b1, b2 = t * 2.0 * b1 - b2 + ck, b1
    return t * b1 - b2 + c[0] * 0.5


@_in_float32
def erf(self: Tensor) -> Tensor:
    """The error function: x*P(x**2) below 0.75, 1 - exp(-x**2) * g(|x|) above (g = erfc * exp(x**2) as a Chebyshev
    series), +-1 from 4 on. float32 is computed in float32 (vector lanes on the CPU), x**2 and the leading term
    without rounding: within 1 ulp (measured in tests/test_numerics_math.py); float64 gets about 1e-10."""
    a = self.abs()
    split = _ERF_SPLIT_F32 if self.dtype is dtypes.float32 else _ERF_SPLIT
    small = _erf_small((a < split).where(self, 0.0))  # the series sees only its range (finite unused gradients)
    if self.dtype is dtypes.float32:
        decay = _exp_neg_square(a.minimum(_ERF_END), 1.0)
    else:
        decay = (-(a.minimum(30.0) * a.minimum(30.0))).exp()
    large = 1.0 - decay * _erfc_scaled(a)
    large = (a < _ERF_END).where(large, 1.0)
    large = (self < 0).where(-large, large)
    return (a < split).where(small, self.isnan().where(self, large))


# erfc(z) = exp(-z**2) * t * Q(u) for 0 <= z <= 4, t = 1 / (1 + P z), u = P z t = 1 - t in [0, 5/7]: Q(0) = 1
# exactly, so Q keeps full precision near x = 0 where 1 - t would lose it. Coefficients: Lawson-weighted least
# squares (relative error of erfc) on 3,000 Chebyshev nodes of u in float64, rounded to float32; truncation 7.7e-9
# relative. P = 5/8 gave the smallest float32 error of gelu among P in [0.5, 0.8] in a numpy emulation of this float32
# evaluation (4.2 ulp): t's rounding reaches erfc with factor ~1, the rest is the exp and the products.
_PHI_P = 0.625
_PHI_Q = (1.0, -0.8054078, -0.05075881, 0.18166107, 0.097344555, -0.041580155, 0.038948823, -0.13778408, 0.07044447)


def _decay_and_half_erfc(x: Tensor) -> tuple[Tensor, Tensor]:
    """(exp(-x**2/2) for |x| < 10 (clamped there), erfc(|x|/sqrt2)/2) of float32 x, the second 0 from |x| = 4 sqrt2
    on (below 8e-9: gelu is -0 there, as torch's float32 gelu): one exp, one division and 8 multiply-adds, within a
    few ulp everywhere (the negative tail keeps its relative accuracy: no 1 + erf cancels)."""
    a = x.abs()
    decay = _exp_neg_square(a.minimum(10.0), 0.5)
    pz = a * (_PHI_P / math.sqrt(2))
    t = 1.0 / (1.0 + pz)
    u = pz * t
    q = u * _PHI_Q[-1] + _PHI_Q[-2]
    for c in reversed(_PHI_Q[:-2]):
        q = q * u + c
    return decay, (pz < 4 * _PHI_P).where(decay * (t * q) * 0.5, 0.0)


def _phi_f32(x: Tensor) -> tuple[Tensor, Tensor]:
    """(Phi(x), exp(-x**2/2)) of float32 x: Phi = erfc(|z|)/2 below 0, 1 - erfc(|z|)/2 above (z = x/sqrt2)."""
    decay, half_erfc = _decay_and_half_erfc(x)
    return (x < 0).where(half_erfc, 1.0 - half_erfc), decay


def gelu_erf(x: Tensor) -> Tensor:
    """GELU with erf, x * Phi(x), in x's float dtype. float32: Phi from erfc(|z|) = exp(-x**2/2) t Q(u) (z = x/sqrt2,
    `_decay_and_half_erfc`: ~60 vector ops), x**2 unrounded, so the negative tail keeps its relative accuracy where
    1 + erf(z) would cancel (gelu(-5) = -1.4e-6: the erf formula is off by 6e5 ulp there); within 5 ulp (4.7 measured
    in tests/test_transcendental_f32.py's sample, worst near x = -2.6). Other dtypes: 1 - erfc(|z|)/2 or erfc(|z|)/2
    from erf's Chebyshev series of erfc * exp(z**2), Taylor series of erf below |z| = 0.75."""
    if x.dtype is dtypes.float32:
        phi, _ = _phi_f32(x)
    else:
        z = x * (1 / math.sqrt(2))
        a = z.abs()
        tail = (a < _ERF_END).where((-(a * a)).exp() * _erfc_scaled(a), 0.0) * 0.5  # erfc(|z|) / 2
        near = a < _ERF_SPLIT
        # switches at 0.75: below x = -1.06, 0.5 + erf/2 cancels; the series sees only its range (its powers of a
        # large z would overflow and turn the unused branch's gradient into NaN)
        small = 0.5 + _erf_small(near.where(z, 0.0)) * 0.5
        phi = near.where(small, (x < 0).where(tail, 1.0 - tail))
    y = x * phi
    # gradient Phi(x) + x * pdf(x), not node by node through the erfc polynomial or the erf series (their
    # derivatives are chains of powers of x, recomputed in the backward matmul's epilogue: 13-17 ms of a char GPT's
    # ~80 ms step); float32 shares exp(-x**2/2) between Phi and pdf (one exp), other dtypes take the forward's Phi;
    # the pdf term is 0 from |x| = 10 on (x * pdf(x) < 1e-21 there; inf * 0 would be NaN) and NaN at NaN
    from tg.tensor.gradient import set_custom_gradient

    cls, x_u, phi_u = x._tensor_class(), x.uop, phi.uop

    def rule(g_u: UOp, needed: tuple[bool, ...], _gelu_u: UOp) -> tuple[UOp | None, ...]:
        if not needed[0]:
            return (None,)
        xt = cls(x_u)
        inside = xt.abs() < 10.0
        xc = inside.where(xt, 0.0)
        if xt.dtype is dtypes.float32:
            phi, decay = _phi_f32(xt)
        else:
            phi, decay = cls(phi_u), (xc * xc * -0.5).exp()
        pdf = decay * (1 / math.sqrt(2 * math.pi))
        return ((cls(g_u) * (phi + inside.where(xc * pdf, xt.isnan().where(xt, 0.0)))).uop,)

    set_custom_gradient(y.uop, (x.uop,), rule)
    return y
