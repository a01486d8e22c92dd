"""Reductions (sum, max, min, mean, prod, argmax, softmax) and matmul as Tensor methods.

These functions are attached to `Tensor` in tensor.py; `self` is always a Tensor. A reduction is one
REDUCE_AXIS node (reduced dims kept as 1, then reshaped away unless keepdim); matmul is a broadcast
multiply followed by a sum over the shared dim, which the scheduler fuses into one kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tg.ir import DType, Ops, dtypes, least_upper_dtype, sum_acc_dtype, to_dtype

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

AxisArg = int | Sequence[int] | None


def _axes(t: Tensor, axis: AxisArg) -> tuple[int, ...]:
    from tg.tensor.shapes import canonical_axis as _canon_axis

    if axis is None:
        return tuple(range(t.ndim))
    raw = [axis] if isinstance(axis, int) else list(axis)
    canon = [_canon_axis(a, t.ndim) for a in raw]
    if len(set(canon)) != len(canon):
        raise ValueError(f"duplicate axis in {axis!r} for a {t.ndim}-d tensor")
    axes = tuple(sorted(canon))
    if t.ndim == 0 and axes:
        return ()
    return axes


def _reduce(self: Tensor, op: Ops, axis: AxisArg = None, keepdim: bool = False) -> Tensor:
    """REDUCE_AXIS `op` over `axis` (all dims if None)."""
    from tg.tensor.tensor import Tensor

    axes = _axes(self, axis)
    if any(self.shape[a] == 0 for a in axes):
        if op is not Ops.ADD:
            raise ValueError(f"cannot reduce over a zero-size dim with {op} (shape {self.shape}, axes {axes})")
        ret = Tensor.zeros(
            *[1 if i in axes else s for i, s in enumerate(self.shape)], dtype=self.dtype, device=self.device
        )
    else:
        ret = Tensor(self.uop.r(op, axes)) if axes else self
    if keepdim:
        return ret
    return ret.reshape(tuple(s for i, s in enumerate(ret.shape) if i not in axes))


def sum(self: Tensor, axis: AxisArg = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Sum over `axis`: `t.sum()`, `t.sum(1, keepdim=True)`; bools and small ints sum as int32, halves in float32."""
    acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
    ret = _reduce(self.cast(acc), Ops.ADD, axis, keepdim)
    # half inputs accumulate in float32 but keep their dtype (like tinygrad/torch)
    return ret.cast(self.dtype) if dtype is None and dtypes.is_float(self.dtype) and self.dtype.itemsize < 4 else ret


def prod(self: Tensor, axis: AxisArg = None, keepdim: bool = False) -> Tensor:
    """Product over `axis`."""
    return _reduce(self.cast(sum_acc_dtype(self.dtype)), Ops.MUL, axis, keepdim)


def max(self: Tensor, axis: AxisArg = None, keepdim: bool = False) -> Tensor:
    """Maximum over `axis`: `t.max(0)`."""
    if self.dtype is dtypes.bool:
        return _reduce(self.cast(dtypes.int32), Ops.MAX, axis, keepdim).cast(dtypes.bool)
    return _reduce(self, Ops.MAX, axis, keepdim)


def min(self: Tensor, axis: AxisArg = None, keepdim: bool = False) -> Tensor:
    """Minimum over `axis`, computed as a max of the negated (or inverted) values; NaN propagates."""
    if self.dtype is dtypes.bool:
        return max(self.logical_not(), axis, keepdim).logical_not()
    if dtypes.is_unsigned(self.dtype):
        top = self.dtype.max
        return top - max(top - self, axis, keepdim)
    if dtypes.is_int(self.dtype):  # ~x = -x - 1 reverses the order without overflowing at INT_MIN
        return ~max(~self, axis, keepdim)
    return -max(-self, axis, keepdim)


def mean(self: Tensor, axis: AxisArg = None, keepdim: bool = False) -> Tensor:
    """Arithmetic mean over `axis` (integer inputs give the default float)."""
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    axes = _axes(self, axis)
    count = 1
    for a in axes:
        count *= self.shape[a]
    s = sum(x, axis, keepdim)
    return s.div(count) if count else s * float("nan")


def _arg_extreme(self: Tensor, extreme: Tensor, a: int, keepdim: bool) -> Tensor:
    """Index of the first element equal to `extreme` (or the first NaN) along axis `a`."""
    from tg.tensor.tensor import Tensor

    n = self.shape[a]
    hit = self == extreme
    if dtypes.is_float(self.dtype):
        hit = hit | self.isnan()  # NaN wins, as in PyTorch: the max/min is then NaN and equals nothing
    # count down from n so the first hit wins the max-reduction
    shape = [1] * self.ndim
    shape[a] = n
    idx = Tensor.arange(n, 0, -1, dtype=dtypes.int32, device=self.device).reshape(shape)
    found = max(hit.where(idx, 0), a, keepdim)
    return (n - found).cast(dtypes.int32)


def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the (first) maximum along `axis` (of the flattened tensor if None); the first NaN if any."""
    from tg.tensor.shapes import canonical_axis as _canon_axis

    if axis is None:
        return argmax(self.flatten(), 0)
    a = _canon_axis(axis, self.ndim)
    return _arg_extreme(self, max(self, a, keepdim=True), a, keepdim)


def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the (first) minimum along `axis` (of the flattened tensor if None); the first NaN if any."""
    from tg.tensor.shapes import canonical_axis as _canon_axis

    if axis is None:
        return argmin(self.flatten(), 0)
    a = _canon_axis(axis, self.ndim)
    return _arg_extreme(self, min(self, a, keepdim=True), a, keepdim)


def softmax(self: Tensor, axis: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis`."""
    e = (self - max(self, axis, keepdim=True)).exp()
    return e / sum(e, axis, keepdim=True)


def log_softmax(self: Tensor, axis: int = -1) -> Tensor:
    """x - max - log(sum(exp(x - max))) along `axis`."""
    m = self - max(self, axis, keepdim=True)
    return m - sum(m.exp(), axis, keepdim=True).log()


def matmul(self: Tensor, w: Tensor) -> Tensor:
    """Matrix product with numpy's rules for 1-D and batched operands: `a @ b`."""
    from tg.tensor.tensor import Tensor

    if not isinstance(w, Tensor):
        raise TypeError(f"matmul needs a Tensor, got {type(w).__name__}")
    if self.ndim == 0 or w.ndim == 0:
        raise ValueError(f"matmul needs at least 1-d operands, got shapes {self.shape} and {w.shape}")
    k = self.shape[-1]
    kw = w.shape[-2] if w.ndim >= 2 else w.shape[0]
    if k != kw:
        raise ValueError(f"matmul shape mismatch: {self.shape} @ {w.shape} ({k} != {kw})")
    dt = least_upper_dtype(self.dtype, w.dtype)
    x, w = self.cast(dt), w.cast(dt)
    if w.ndim == 1:
        return sum(x * w, -1)
    if x.ndim == 1:
        return sum(x.reshape(k, 1) * w, -2)
    # (..., n, 1, k) * (..., 1, m, k) summed over k
    return sum(x.unsqueeze(-2) * w.transpose(-1, -2).unsqueeze(-3), -1)


def dot(self: Tensor, w: Tensor) -> Tensor:
    """Alias of matmul."""
    return matmul(self, w)
