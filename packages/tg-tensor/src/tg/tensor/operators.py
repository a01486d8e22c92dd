"""Python's operators on Tensor: `a + b`, `2 - a`, `a @ b`, `a & b`, `a < b`, `a == b` ... as functions with
`self: Tensor` first, attached as dunder methods in methods.py.

Each forwards to the named method (`add`, `sub`, `matmul`, ...) or to a single elementwise ALU op; operators with
logic of their own (`-a`, `~a`, `<=`, `>=`) and the in-place forms (`a += b`, in aliases.py) live elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg.ir import Ops, dtypes
from tg.tensor.errors import DTypeError

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


# ---- arithmetic: the named methods, `reverse=True` for the reflected forms (`2 - t`) ----


def __floordiv__(self: Tensor, x: Any) -> Tensor:
    return self.floordiv(x)


def __rfloordiv__(self: Tensor, x: Any) -> Tensor:
    return self.floordiv(x, True)


def __mod__(self: Tensor, x: Any) -> Tensor:
    return self.mod(x)


def __rmod__(self: Tensor, x: Any) -> Tensor:
    return self.mod(x, True)


def __add__(self: Tensor, x: Any) -> Tensor:
    return self.add(x)


def __radd__(self: Tensor, x: Any) -> Tensor:
    return self.add(x, True)


def __sub__(self: Tensor, x: Any) -> Tensor:
    return self.sub(x)


def __rsub__(self: Tensor, x: Any) -> Tensor:
    return self.sub(x, True)


def __mul__(self: Tensor, x: Any) -> Tensor:
    return self.mul(x)


def __rmul__(self: Tensor, x: Any) -> Tensor:
    return self.mul(x, True)


def __truediv__(self: Tensor, x: Any) -> Tensor:
    return self.div(x)


def __rtruediv__(self: Tensor, x: Any) -> Tensor:
    return self.div(x, True)


def __pow__(self: Tensor, x: Any) -> Tensor:
    return self.pow(x)


def __rpow__(self: Tensor, x: Any) -> Tensor:
    return self.pow(x, True)


def __matmul__(self: Tensor, x: Tensor) -> Tensor:
    return self.matmul(x)


def __rmatmul__(self: Tensor, x: Tensor) -> Tensor:
    return x.matmul(self)


# ---- bitwise: one ALU op each ----


def _bitwise(self: Tensor, op: Ops, name: str, x: Any, reverse: bool = False) -> Tensor:
    """A bitwise op of ints or bools (Python ints on either side are weak); floats raise (torch raises too)."""
    other_dtype = getattr(x, "dtype", None) if hasattr(x, "uop") else None
    for dt in (self.dtype, other_dtype):
        if dt is not None and not (dtypes.is_int(dt) or dt is dtypes.bool):
            raise DTypeError(f"{name}: needs integer or bool tensors, got {dt.name}")
    if isinstance(x, float):
        raise DTypeError(f"{name}: needs an integer or bool operand, got the float {x!r}")
    masks = op in (Ops.AND, Ops.OR, Ops.XOR)
    if masks and isinstance(x, int) and not isinstance(x, bool) and dtypes.is_int(self.dtype):
        bits = 8 * self.dtype.itemsize  # a bit mask written unsigned (0xFFFFFFFF for int32) is its bit pattern
        if self.dtype.max < x < 1 << bits:
            x -= 1 << bits
    return self._binary(op, x, reverse)


def __and__(self: Tensor, x: Any) -> Tensor:
    return _bitwise(self, Ops.AND, "&", x)


def __rand__(self: Tensor, x: Any) -> Tensor:
    return _bitwise(self, Ops.AND, "&", x, True)


def __or__(self: Tensor, x: Any) -> Tensor:
    return _bitwise(self, Ops.OR, "|", x)


def __ror__(self: Tensor, x: Any) -> Tensor:
    return _bitwise(self, Ops.OR, "|", x, True)


def __xor__(self: Tensor, x: Any) -> Tensor:
    return _bitwise(self, Ops.XOR, "^", x)


def __rxor__(self: Tensor, x: Any) -> Tensor:
    return _bitwise(self, Ops.XOR, "^", x, True)


def __lshift__(self: Tensor, x: int) -> Tensor:
    return _bitwise(self, Ops.SHL, "<<", x)


def __rlshift__(self: Tensor, x: int) -> Tensor:
    return _bitwise(self, Ops.SHL, "<<", x, True)


def __rshift__(self: Tensor, x: int) -> Tensor:
    return _bitwise(self, Ops.SHR, ">>", x)


def __rrshift__(self: Tensor, x: int) -> Tensor:
    return _bitwise(self, Ops.SHR, ">>", x, True)


# ---- comparisons: one ALU op each (`<=` and `>=` handle NaN in tensor.py) ----


def __lt__(self: Tensor, x: Any) -> Tensor:
    return self._binary(Ops.CMPLT, x)


def __gt__(self: Tensor, x: Any) -> Tensor:
    return self._binary(Ops.CMPLT, x, True)


def __eq__(self: Tensor, x: Any) -> Tensor:
    return self._binary(Ops.CMPEQ, x)


def __ne__(self: Tensor, x: Any) -> Tensor:
    return self._binary(Ops.CMPNE, x)
