"""Activation functions and composite elementwise math as Tensor methods (attached in tensor.py).

Formulations avoid cancellation and overflow at the extremes: clamps instead of differences of relus
(`relu6(1e8) == 6`), `where` forms whose unused branch cannot produce inf/NaN in the gradient, and
log1p-style forms for `softplus`/`logsigmoid`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tg.ir import dtypes
from tg.tensor import transcendental as _transcendental
from tg.tensor.errors import ArgumentError

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

# torch's exact SELU constants
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _f(x: Tensor) -> Tensor:
    return x if dtypes.is_float(x.dtype) else x.cast(dtypes.default_float)


# composites whose half intermediates would round several times or overflow (x * 6, e^x): computed in float32 and
# rounded once, as torch does
_in_float32 = _transcendental._in_float32


def relu(self: Tensor) -> Tensor:
    """max(x, 0), with gradient 0 at 0 and NaN passed through (torch)."""
    return (self <= 0).where(self.zeros_like(), self)


def relu6(self: Tensor) -> Tensor:
    """min(max(x, 0), 6)."""
    return relu(self).minimum(6)


def leaky_relu(self: Tensor, neg_slope: float = 0.01, *, negative_slope: float | None = None) -> Tensor:
    """x for x > 0, slope * x otherwise (torch's `negative_slope=` accepted)."""
    slope = neg_slope if negative_slope is None else negative_slope
    return (self > 0).where(self, self * slope)


def _expm1_neg(x: Tensor) -> Tensor:
    """exp(x) - 1 for x <= 0 (masked to 0 for x > 0, so the unused branch never overflows; NaN passes)."""
    safe = (x > 0).where(0.0, x)
    return safe.expm1()


@_in_float32
def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x) - 1) otherwise (NaN stays NaN)."""
    return (self > 0).where(self, alpha * _expm1_neg(self))


@_in_float32
def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    return (self > 0).where(self, alpha * _expm1_neg(self / alpha))


def selu(self: Tensor, alpha: float = _SELU_ALPHA, gamma: float = _SELU_SCALE) -> Tensor:
    """gamma * elu(x, alpha) with torch's exact constants."""
    return gamma * elu(self, alpha)


def softplus(self: Tensor, beta: float = 1.0, threshold: float | None = None) -> Tensor:
    """log(1 + exp(beta x)) / beta as (relu(bx) + log(1 + exp(-|bx|))) / beta: no overflow anywhere."""
    ret = _transcendental.softplus(self, beta)  # within 2 ulp in float32, no overflow
    return ret if threshold is None else (_f(self) * beta > threshold).where(_f(self), ret)


def logsigmoid(self: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x)."""
    return -softplus(-self)


def silu(self: Tensor) -> Tensor:
    """x * sigmoid(x)."""
    return self * _f(self).sigmoid()


def swish(self: Tensor) -> Tensor:
    """Alias of silu."""
    return silu(self)


def mish(self: Tensor) -> Tensor:
    """x * tanh(softplus(x))."""
    return self * softplus(self).tanh()


def quick_gelu(self: Tensor) -> Tensor:
    """x * sigmoid(1.702 x)."""
    return self * (_f(self) * 1.702).sigmoid()


@_in_float32
def gelu(self: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit; torch's default `'none'` uses erf, `'tanh'` the tanh approximation."""
    x = self
    if approximate == "tanh":
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
    if approximate != "none":
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _transcendental.gelu_erf(x)


def softsign(self: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    return self / (1 + self.abs())


@_in_float32
def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    """clip(alpha x + beta, 0, 1)."""
    return (alpha * self + beta).clip(0, 1)


@_in_float32
def hardswish(self: Tensor) -> Tensor:
    """x * (clip(x + 3, 0, 6) / 6): the factor is at most 1, so nothing overflows for finite x."""
    return self * ((self + 3).clip(0, 6) * (1 / 6))


def hardtanh(self: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """clip(x, min_val, max_val)."""
    return self.clip(min_val, max_val)


# ---- composite math -------------------------------------------------------------------------------------------


def log10(self: Tensor) -> Tensor:
    """Base-10 logarithm."""
    return _f(self).log2() * (1 / math.log2(10))


# above this |x|, e^-|x| is below half an ulp of e^|x| (float32 and float64 alike for the formulas below)
_HYPERBOLIC_BIG = 20.0


def _half_exp(a: Tensor) -> Tensor:
    """e^a / 2 for a >= 0 as (e^(a/2) / 2) * e^(a/2): finite wherever the result is (e^a alone overflows first)."""
    h = (a * 0.5).exp()
    return (h * 0.5) * h


@_in_float32
def sinh(self: Tensor) -> Tensor:
    """(e^x - e^-x) / 2 as sign(x) (u + u/(u+1)) / 2 with u = expm1(|x|): no cancellation near 0 (sinh(1e-30) is
    1e-30), no overflow before the result overflows."""
    a = self.abs()
    small = a.minimum(_HYPERBOLIC_BIG)
    u = small.expm1()
    mag = (a < _HYPERBOLIC_BIG).where((u + u / (u + 1)) * 0.5, _half_exp(a.maximum(_HYPERBOLIC_BIG)))
    return (self < 0).where(-mag, mag)


@_in_float32
def cosh(self: Tensor) -> Tensor:
    """(e^x + e^-x) / 2, without overflow before the result overflows."""
    a = self.abs()
    e = a.minimum(_HYPERBOLIC_BIG).exp()
    return (a < _HYPERBOLIC_BIG).where((e + 1 / e) * 0.5, _half_exp(a.maximum(_HYPERBOLIC_BIG)))


@_in_float32
def asinh(self: Tensor) -> Tensor:
    """sign(x) * log1p(|x| + x^2 / (1 + sqrt(1 + x^2))): exact for tiny x; log(|x|) + log(2) above 1e18 (x^2
    would overflow)."""
    a = self.abs()
    moderate = a.minimum(1e18)
    sq = moderate * moderate
    mag = (a < 1e18).where((moderate + sq / (1 + (1 + sq).sqrt())).log1p(), a.maximum(1e18).log() + math.log(2))
    return (self < 0).where(-mag, mag)


@_in_float32
def acosh(self: Tensor) -> Tensor:
    """log(x + sqrt(x^2 - 1)) for x >= 1."""
    x = self
    return (x + (x * x - 1).sqrt()).log()


@_in_float32
def atanh(self: Tensor) -> Tensor:
    """log((1 + x) / (1 - x)) / 2 as log1p(2x / (1 - x)) / 2: no cancellation near 0."""
    return (2 * self / (1 - self)).log1p() * 0.5


@_in_float32
def atan(self: Tensor) -> Tensor:
    """Arc tangent: range-reduced to |x| <= tan(pi/8) and a minimax polynomial (float32 accuracy)."""
    x = self
    a = x.abs()
    big = a > 2.414213562373095  # tan(3pi/8)
    mid = (a > 0.4142135623730950) & big.logical_not()  # tan(pi/8)
    safe_a = big.where(a, 1.0)  # keep 1/a finite in the unused branch
    t = big.where(-1 / safe_a, mid.where((a - 1) / (a + 1), a))
    base = big.where(math.pi / 2, mid.where(math.pi / 4, 0.0))
    z = t * t
    poly = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
    return x.sign() * (base + poly)


@_in_float32
def asin(self: Tensor) -> Tensor:
    """Arc sine as atan(x / sqrt(1 - x^2)) (NaN outside [-1, 1])."""
    x = self
    inside = x.abs() < 1
    safe = inside.where(x, 0.0)
    ret = atan(safe / (1 - safe * safe).sqrt())
    edge = (x.abs() == 1).where(x.sign() * (math.pi / 2), math.nan)
    return inside.where(ret, edge)


@_in_float32
def acos(self: Tensor) -> Tensor:
    """Arc cosine as pi/2 - asin(x)."""
    return math.pi / 2 - asin(self)


def lerp(self: Tensor, end: Any, weight: Any) -> Tensor:
    """self + weight * (end - self)."""
    return self + (end - self) * weight


def copysign(self: Tensor, other: Any) -> Tensor:
    """|self| with the sign of `other` (negative zero counts as negative)."""
    cls = self._tensor_class()
    o = other if isinstance(other, cls) else cls(other, device=self.device, dtype=_f(self).dtype)
    negative = (o < 0) | ((o == 0) & (1 / _f(o) < 0))
    a = _f(self).abs()
    return negative.where(-a, a)


def logaddexp(self: Tensor, other: Any) -> Tensor:
    """log(exp(a) + exp(b)) as max + log(1 + exp(-|a - b|)); equal infinities give that infinity."""
    a, b = _f(self)._operands(other)
    m = a.maximum(b)
    both_inf = (a == b) & (a.abs() == math.inf)
    diff = both_inf.where(0.0, (a - b).abs())
    return both_inf.where(a, m + (-diff).exp().log1p())


def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """True at +inf (and/or -inf)."""
    pos = (self == math.inf) if detect_positive else self.zeros_like(dtype=dtypes.bool)
    return (pos | (self == -math.inf)) if detect_negative else pos


def isfinite(self: Tensor) -> Tensor:
    """True where neither inf nor NaN."""
    return (self == self) & isinf(self).logical_not()


def isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|a - b| <= atol + rtol * |b| elementwise (equal infinities are close; NaNs only with equal_nan)."""
    a, b = self._operands(other)
    finite = isfinite(a) & isfinite(b) if dtypes.is_float(a.dtype) else a == a  # inf - -inf is no closeness
    close = (finite & ((a - b).abs() <= atol + rtol * b.abs())) | (a == b)
    if equal_nan:
        close = close | ((a != a) & (b != b))
    return close


def allclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """True if every element is close (a Python bool, as torch)."""
    return bool(isclose(self, other, rtol, atol, equal_nan).all().item())


def clamp(self: Tensor, min_: Any = None, max_: Any = None, *, min: Any = None, max: Any = None) -> Tensor:
    """Alias of clip (tinygrad's `min_`/`max_` and torch's `min`/`max` keywords)."""
    return self.clip(min_, max_, min=min, max=max)
