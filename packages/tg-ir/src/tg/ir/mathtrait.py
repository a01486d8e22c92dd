"""Operator overloading shared by UOp (and usable by UPat): Python operators build ALU nodes.

Semantics worth knowing:
- `==` and `!=` are NOT overloaded: UOps are hash-consed and compare by identity. Use `.eq(x)` / `.ne(x)` to build
  CMPEQ / CMPNE nodes.
- `//` builds IDIV and `%` builds MOD with C semantics (truncate toward zero; the remainder takes the dividend's
  sign), which is what the C renderer emits and what constant folding computes. They differ from Python's `//`/`%`
  only for negative operands.
- `/` builds FDIV; `-x` is `x * -1`; `a - b` is `a + b * -1` (the symbolic engine works on sums of products).
"""

from __future__ import annotations

from typing import Any, Self

from tg.ir.dtype import ConstType, DType, dtypes
from tg.ir.ops import Ops


class MathMixin:
    """Arithmetic operators and named math methods on top of `alu` and `const_like`."""

    dtype: DType

    def alu(self, op: Ops, *src: Any) -> Self:  # pragma: no cover - implemented by subclasses
        """Build an ALU node with `self` as the first source."""
        raise NotImplementedError

    def const_like(self, b: ConstType) -> Self:  # pragma: no cover - implemented by subclasses
        """A constant with this node's dtype (and shape/device where it has them)."""
        raise NotImplementedError

    def ufix(self, x: Any) -> Self:
        """Turn a Python scalar into a constant of this node's dtype (a float into an int node is an error)."""
        if isinstance(x, MathMixin):
            return x  # type: ignore[return-value]
        if isinstance(x, float) and not dtypes.is_float(self.dtype) and self.dtype != dtypes.void:
            raise TypeError(f"can't combine Python float {x!r} with a {self.dtype} node; cast first")
        if not isinstance(x, (int, float, bool)):
            raise TypeError(f"can't combine {type(x).__name__} {x!r} with a UOp")
        return self.const_like(x)

    def _binop(self, op: Ops, x: Any, reverse: bool) -> Self:
        return self.ufix(x).alu(op, self) if reverse else self.alu(op, self.ufix(x))

    # arithmetic
    def __neg__(self) -> Self:
        return self.logical_not() if self.dtype.scalar() == dtypes.bool else self * (-1)

    def __add__(self, x: Any) -> Self:
        return self._binop(Ops.ADD, x, False)

    def __radd__(self, x: Any) -> Self:
        return self._binop(Ops.ADD, x, True)

    def __sub__(self, x: Any) -> Self:
        return self + (-self.ufix(x))

    def __rsub__(self, x: Any) -> Self:
        return self.ufix(x) + (-self)

    def __mul__(self, x: Any) -> Self:
        return self._binop(Ops.MUL, x, False)

    def __rmul__(self, x: Any) -> Self:
        return self._binop(Ops.MUL, x, True)

    def __truediv__(self, x: Any) -> Self:
        return self._binop(Ops.FDIV, x, False)

    def __rtruediv__(self, x: Any) -> Self:
        return self._binop(Ops.FDIV, x, True)

    def __floordiv__(self, x: Any) -> Self:
        return self._binop(Ops.IDIV, x, False)

    def __rfloordiv__(self, x: Any) -> Self:
        return self._binop(Ops.IDIV, x, True)

    def __mod__(self, x: Any) -> Self:
        return self._binop(Ops.MOD, x, False)

    def __rmod__(self, x: Any) -> Self:
        return self._binop(Ops.MOD, x, True)

    # bitwise / logical
    def __and__(self, x: Any) -> Self:
        return self._binop(Ops.AND, x, False)

    def __rand__(self, x: Any) -> Self:
        return self._binop(Ops.AND, x, True)

    def __or__(self, x: Any) -> Self:
        return self._binop(Ops.OR, x, False)

    def __ror__(self, x: Any) -> Self:
        return self._binop(Ops.OR, x, True)

    def __xor__(self, x: Any) -> Self:
        return self._binop(Ops.XOR, x, False)

    def __rxor__(self, x: Any) -> Self:
        return self._binop(Ops.XOR, x, True)

    def __lshift__(self, x: Any) -> Self:
        return self._binop(Ops.SHL, x, False)

    def __rlshift__(self, x: Any) -> Self:
        return self._binop(Ops.SHL, x, True)

    def __rshift__(self, x: Any) -> Self:
        return self._binop(Ops.SHR, x, False)

    def __rrshift__(self, x: Any) -> Self:
        return self._binop(Ops.SHR, x, True)

    def __invert__(self) -> Self:
        return self.logical_not() if self.dtype.scalar() == dtypes.bool else self ^ -1

    # comparisons (== and != stay identity-based, see module doc)
    def __lt__(self, x: Any) -> Self:
        return self._binop(Ops.CMPLT, x, False)

    def __gt__(self, x: Any) -> Self:
        return self.ufix(x).alu(Ops.CMPLT, self)

    def __ge__(self, x: Any) -> Self:
        return (self < x).logical_not()

    def __le__(self, x: Any) -> Self:
        return (self > x).logical_not()

    def eq(self, x: Any) -> Self:
        """Elementwise equality node (CMPEQ)."""
        return self._binop(Ops.CMPEQ, x, False)

    def ne(self, x: Any) -> Self:
        """Elementwise inequality node (CMPNE)."""
        return self._binop(Ops.CMPNE, x, False)

    def logical_not(self) -> Self:
        """Boolean negation (x != True)."""
        return self.ne(True)

    # named math
    def add(self, x: Any, reverse: bool = False) -> Self:
        """self + x."""
        return self._binop(Ops.ADD, x, reverse)

    def mul(self, x: Any, reverse: bool = False) -> Self:
        """self * x."""
        return self._binop(Ops.MUL, x, reverse)

    def idiv(self, x: Any, reverse: bool = False) -> Self:
        """C-style truncating integer division."""
        return self._binop(Ops.IDIV, x, reverse)

    def mod(self, x: Any, reverse: bool = False) -> Self:
        """C-style remainder (sign of the dividend)."""
        return self._binop(Ops.MOD, x, reverse)

    def maximum(self, x: Any) -> Self:
        """Elementwise max."""
        return self._binop(Ops.MAX, x, False)

    def minimum(self, x: Any) -> Self:
        """Elementwise min: -max(-a, -b) (a form the symbolic engine folds), or a select for unsigned ints."""
        if dtypes.is_unsigned(self.dtype):
            y = self.ufix(x)
            return (self < y).where(self, y)
        return -((-self).maximum(-self.ufix(x)))

    def where(self, x: Any, y: Any) -> Self:
        """`self ? x : y` (self must be bool)."""
        if isinstance(x, MathMixin):
            return self.alu(Ops.WHERE, x, x.ufix(y))
        if isinstance(y, MathMixin):
            return self.alu(Ops.WHERE, y.ufix(x), y)
        raise TypeError("where needs at least one UOp among x and y")

    def exp2(self) -> Self:
        """2**x."""
        return self.alu(Ops.EXP2)

    def log2(self) -> Self:
        """log2(x)."""
        return self.alu(Ops.LOG2)

    def sin(self) -> Self:
        """sin(x)."""
        return self.alu(Ops.SIN)

    def sqrt(self) -> Self:
        """sqrt(x)."""
        return self.alu(Ops.SQRT)

    def reciprocal(self) -> Self:
        """1/x."""
        return self.alu(Ops.RECIPROCAL)

    def trunc(self) -> Self:
        """Round toward zero."""
        return self.alu(Ops.TRUNC)

    def pow(self, x: Any) -> Self:
        """self ** x (POW node)."""
        return self._binop(Ops.POW, x, False)
