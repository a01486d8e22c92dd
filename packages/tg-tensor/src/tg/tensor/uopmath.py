"""Elementwise formulas built straight on UOps: `Ew` wraps one lazy value and its operators build exactly the nodes
the Tensor operators would build (the same constants, the same node for node graph: UOps are hash-consed), without
a Tensor, a dtype promotion, a broadcast or an autograd check per intermediate.

For the long formulas of transcendental.py (tanh and exp are ~80 nodes): a deep chain of `x = (x * w).tanh()`
spent ~5 ms a layer building Tensors for the intermediates, ~0.5 ms on the nodes themselves. Every operand of an
`Ew` operator is an `Ew` of the same dtype, shape and device or a Python scalar that keeps the dtype (a weak
scalar); anything else is a TypeError (the formulas are written so that this never happens). The caller wraps the
final node in a Tensor, which sets up autograd for it as for any op result.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from tg.ir import ConstType, DType, Ops, UOp, dtypes, sint, weak_promote
from tg.tensor.data import checked_scalar_value, scalar_value

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def scalar_view(dt: DType, value: ConstType, device: str | tuple[str, ...], shape: tuple[sint, ...]) -> UOp:
    """The constant `value` of `dt` on `device` viewed as `shape` (a weak scalar operand: Tensor's and Ew's)."""
    sign = math.copysign(1.0, value) if value.__class__ is float else 1.0  # -0.0 and 0.0 are one key otherwise
    return _cached_scalar_view(dt, value, sign, device, shape)


@functools.lru_cache(maxsize=1024, typed=True)
def _cached_scalar_view(
    dt: DType, value: ConstType, sign: float, device: str | tuple[str, ...], shape: tuple[sint, ...]
) -> UOp:
    """Kept alive for reuse: an eager loop (`x = (x + 1).realize()`) builds its constant once, not every step
    (typed: 1, 1.0 and True stay apart)."""
    return UOp.const(dt, value, device, shape)


class Ew:
    """One lazy elementwise value (`uop`) on `device`; operators as Tensor's for same-shape operands."""

    __slots__ = ("device", "uop")

    def __init__(self, uop: UOp, device: str | tuple[str, ...]) -> None:
        self.uop, self.device = uop, device

    @staticmethod
    def of(t: Tensor) -> Ew:
        """The value of tensor `t`."""
        return Ew(t.uop, t.device)

    @property
    def dtype(self) -> DType:
        """The element dtype."""
        return self.uop.dtype

    def _new(self, u: UOp) -> Ew:
        return Ew(u, self.device)

    def _view(self, dt: DType, value: bool | int | float) -> UOp:
        return scalar_view(dt, value, self.device, self.uop.shape)

    def _operand(self, x: Ew | float | int) -> UOp:
        """The other operand's node: an Ew of this dtype, or a weak scalar as a constant view of this shape."""
        if isinstance(x, Ew):
            if x.dtype is not self.dtype:
                raise TypeError(f"Ew operands must share a dtype, got {self.dtype.name} and {x.dtype.name}")
            return x.uop
        if x.__class__ not in (int, float, bool) or weak_promote(self.dtype, x) is not self.dtype:
            raise TypeError(f"Ew needs an Ew or a weak scalar of {self.dtype.name}, got {x!r}")
        return self._view(self.dtype, checked_scalar_value(x, self.dtype))

    def _binary(self, op: Ops, x: Ew | float | int, reverse: bool = False) -> Ew:
        o = self._operand(x)
        return self._new(o.alu(op, self.uop) if reverse else self.uop.alu(op, o))

    def _minus_one(self) -> UOp:
        return self._view(self.dtype, scalar_value(-1, self.dtype))

    def __add__(self, x: Ew | float | int) -> Ew:
        return self._binary(Ops.ADD, x)

    def __radd__(self, x: float | int) -> Ew:
        return self._binary(Ops.ADD, x, True)

    def __mul__(self, x: Ew | float | int) -> Ew:
        return self._binary(Ops.MUL, x)

    def __rmul__(self, x: float | int) -> Ew:
        return self._binary(Ops.MUL, x, True)

    def __neg__(self) -> Ew:
        return self._new(self.uop.alu(Ops.MUL, self._minus_one()))

    def __sub__(self, x: Ew | float | int) -> Ew:
        # Tensor.sub: a + b * -1 (a scalar b is a constant view times -1, as its fast path builds it)
        return self._new(self.uop.alu(Ops.ADD, self._operand(x).alu(Ops.MUL, self._minus_one())))

    def __rsub__(self, x: float | int) -> Ew:
        return self._new(self._operand(x).alu(Ops.ADD, self.uop.alu(Ops.MUL, self._minus_one())))

    def __truediv__(self, x: Ew | float | int) -> Ew:
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"Ew division needs floats, got {self.dtype.name}")
        return self._binary(Ops.FDIV, x)

    def __lt__(self, x: Ew | float | int) -> Ew:
        return self._binary(Ops.CMPLT, x)

    def __gt__(self, x: Ew | float | int) -> Ew:
        return self._binary(Ops.CMPLT, x, True)

    def __ne__(self, x: object) -> Ew:  # type: ignore[override]
        return self._binary(Ops.CMPNE, x)  # type: ignore[arg-type]

    def __or__(self, x: Ew) -> Ew:
        return self._binary(Ops.OR, x)

    def __rshift__(self, x: int) -> Ew:
        return self._binary(Ops.SHR, x)

    def __lshift__(self, x: int) -> Ew:
        return self._binary(Ops.SHL, x)

    __hash__ = None  # type: ignore[assignment]  # (== is not defined: an Ew is no dict key)

    def where(self, x: Ew | float | int, y: Ew | float | int) -> Ew:
        """`self ? x : y` for a bool self; one of x and y is an Ew (the other may be a weak scalar of its dtype)."""
        if self.dtype is not dtypes.bool:
            raise TypeError(f"Ew.where needs a bool condition, got {self.dtype.name}")
        if isinstance(x, Ew):
            xu, yu = x.uop, x._operand(y)
        elif isinstance(y, Ew):
            xu, yu = y._operand(x), y.uop
        else:
            raise TypeError("Ew.where needs an Ew value on one side")
        return self._new(self.uop.alu(Ops.WHERE, xu, yu))

    def maximum(self, x: Ew | float | int) -> Ew:
        """Elementwise max (NaN propagates)."""
        return self._binary(Ops.MAX, x)

    def minimum(self, x: Ew | float | int) -> Ew:
        """Elementwise min: -max(-a, -b) for floats (Tensor.minimum)."""
        b = self._new(self._operand(x))
        if dtypes.is_float(self.dtype):
            return -((-self).maximum(-b))
        return (self < b).where(self, b)

    def abs(self) -> Ew:
        """|x| for floats: +0 for zeros, NaN stays NaN (Tensor.abs)."""
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"Ew.abs needs floats, got {self.dtype.name}")
        return (self < 0).where(-self, ((self > 0) | (self != self)).where(self, 0.0))

    def isnan(self) -> Ew:
        """True where the value is NaN (x != x)."""
        return self != self

    def cast(self, dt: DType) -> Ew:
        """Convert to `dt`."""
        return self if dt is self.dtype else self._new(self.uop.cast(dt))

    def bitcast(self, dt: DType) -> Ew:
        """Reinterpret the bits as `dt` (same itemsize)."""
        if dt.itemsize != self.dtype.itemsize:
            raise TypeError(f"Ew.bitcast keeps the itemsize: {self.dtype.name} to {dt.name}")
        return self if dt is self.dtype else self._new(self.uop.bitcast(dt))

    def detach(self) -> Ew:
        """The same value, cut off from gradients."""
        return self._new(self.uop.detach())

    def exp2(self) -> Ew:
        """2 ** x."""
        return self._new(self.uop.alu(Ops.EXP2))

    def trunc(self) -> Ew:
        """Round toward zero."""
        return self._new(self.uop.alu(Ops.TRUNC))

    def floor(self) -> Ew:
        """Round toward minus infinity (floats)."""
        t = self.trunc()
        return (self < t).where(t - 1, t)
