"""Reductions (sum, prod, max, min, mean, var, std, any, all, argmax, argmin, logsumexp, softmax) and matmul.

These functions are attached to `Tensor` in tensor.py; `self` is always a Tensor. A reduction is one
REDUCE_AXIS node (reduced dims kept as 1, then reshaped away unless keepdim); matmul is a broadcast
multiply followed by a sum over the shared dim, which the scheduler fuses into one kernel.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tg.ir import DType, Ops, UOp, dtypes, least_upper_dtype, sint, sum_acc_dtype
from tg.tensor.args import dtype_arg, pick
from tg.tensor.errors import ArgumentError
from tg.tensor.shapes import simplify_dim

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
        raise ArgumentError(f"duplicate axis in {axis!r} for a {t.ndim}-d tensor")
    axes = tuple(sorted(canon))
    if t.ndim == 0 and axes:
        return ()
    return axes


def _reduce(self: Tensor, op: Ops, axis: AxisArg = None, keepdim: bool = False) -> Tensor:
    """REDUCE_AXIS `op` over `axis` (all dims if None)."""
    cls = self._tensor_class()
    axes = _axes(self, axis)
    if any(self.shape[a] == 0 for a in axes):  # nothing to reduce: the op's identity (as tinygrad, numpy's sum)
        identity = {Ops.ADD: 0, Ops.MUL: 1}.get(op, self.dtype.min)
        ret = cls.full(
            tuple(1 if i in axes else s for i, s in enumerate(self.shape)), identity, dtype=self.dtype,
            device=self.device,
        )  # fmt: skip
    else:
        ret = cls(self.uop.r(op, axes)) if axes else self
    if keepdim:
        return ret
    return ret.reshape(tuple(s for i, s in enumerate(ret.shape) if i not in axes))


def _opts(op: str, axis: AxisArg, dim: AxisArg, keepdim: bool | None, keepdims: bool | None) -> tuple[AxisArg, bool]:
    """(axis, keepdim) from either spelling of each (`dim=`, `keepdims=` are PyTorch's/numpy's)."""
    return pick(op, "axis", axis, "dim", dim), bool(pick(op, "keepdim", keepdim, "keepdims", keepdims, False))


def _accumulate(self: Tensor, op: Ops, axis: AxisArg, keepdim: bool, dtype: DType | str | None) -> Tensor:
    """The sum or product (`op` ADD or MUL) in `dtype`, else the accumulation dtype (int32 for bools and small
    ints, float32 for halves); half inputs without a `dtype` keep their dtype (like tinygrad/torch)."""
    ret = _reduce(self.cast(dtype_arg(dtype) or sum_acc_dtype(self.dtype)), op, axis, keepdim)
    return ret.cast(self.dtype) if dtype is None and dtypes.is_float(self.dtype) and self.dtype.itemsize < 4 else ret


def sum(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    dtype: DType | str | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Sum over `axis`/`dim`: `t.sum()`, `t.sum(1, keepdim=True)`; bools and small ints sum as int32, halves in
    float32 (rounded back once)."""
    axis, kd = _opts("sum", axis, dim, keepdim, keepdims)
    return _accumulate(self, Ops.ADD, axis, kd, dtype)


def prod(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    dtype: DType | str | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Product over `axis`/`dim`."""
    axis, kd = _opts("prod", axis, dim, keepdim, keepdims)
    return _accumulate(self, Ops.MUL, axis, kd, dtype)


def max(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Maximum over `axis`/`dim`: `t.max(0)` (values only; `argmax` gives the indices)."""
    axis, kd = _opts("max", axis, dim, keepdim, keepdims)
    if self.dtype is dtypes.bool:  # `> 0`, not a cast: an empty axis (int32 min) is False
        return _reduce(self.cast(dtypes.int32), Ops.MAX, axis, kd) > 0
    return _reduce(self, Ops.MAX, axis, kd)


def min(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Minimum over `axis`/`dim`, computed as a max of the negated (or inverted) values; NaN propagates."""
    axis, kd = _opts("min", axis, dim, keepdim, keepdims)
    if self.dtype is dtypes.bool:
        return max(self.logical_not(), axis, kd).logical_not()
    if dtypes.is_unsigned(self.dtype):
        top = self.dtype.max
        return top - max(top - self, axis, kd)
    if dtypes.is_int(self.dtype):  # ~x = -x - 1 reverses the order without overflowing at INT_MIN
        return ~max(~self, axis, kd)
    return -max(-self, axis, kd)


def mean(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    dtype: DType | str | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Arithmetic mean over `axis`/`dim` (integer inputs give the default float)."""
    axis, kd = _opts("mean", axis, dim, keepdim, keepdims)
    x = self.cast(dtype) if dtype is not None else self
    x = x if dtypes.is_float(x.dtype) else x.cast(dtypes.default_float)
    count = _count(self, axis)
    if x.dtype.itemsize < 4:  # float16/bfloat16: sum and divide in float32, round once (no overflow at 65504)
        return mean(x.cast(dtypes.float32), axis, kd).cast(x.dtype)
    s = sum(x, axis, kd)
    if isinstance(count, UOp):  # a symbolic count: divided by its value at run time (a kernel argument)
        return s.div(count)
    return s.div(count) if count else s * float("nan")


def _count(t: Tensor, axis: AxisArg) -> int:
    """Elements per output of a reduction over `axis` (a symbolic int when a reduced dim is symbolic)."""
    count = 1
    for a in _axes(t, axis):
        count *= t.shape[a]
    return simplify_dim(count)  # type: ignore[return-value]


def var(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    correction: float | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
    unbiased: bool | None = None,
) -> Tensor:
    """Variance over `axis`/`dim` with `correction` (1 = Bessel's, the default; torch's `unbiased=False` is 0),
    computed in two passes (mean first)."""
    axis, kd = _opts("var", axis, dim, keepdim, keepdims)
    corr = pick("var", "correction", correction, "unbiased", None if unbiased is None else int(unbiased), 1)
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    if x.dtype.itemsize < 4:  # float16/bfloat16: computed in float32, rounded once
        return var(x.cast(dtypes.float32), axis, kd, corr).cast(x.dtype)
    squares = (x - mean(x, axis, keepdim=True)).square()
    n = _count(self, axis)
    if isinstance(n, UOp):  # symbolic: n - corr <= 0 divides 0 by <= 0 at run time (nan or inf, no error)
        cls = self._tensor_class()
        return sum(squares, axis, kd).div(cls(n, device=x.device).cast(x.dtype) - corr)
    return sum(squares, axis, kd).div(builtins.max(n - corr, 0))  # torch: <= 0 degrees of freedom divide by 0


def std(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    correction: float | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
    unbiased: bool | None = None,
) -> Tensor:
    """Standard deviation: `sqrt(var(...))` with the same arguments."""
    return var(self, axis, keepdim, correction, dim=dim, keepdims=keepdims, unbiased=unbiased).sqrt()


def var_mean(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    correction: float | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
    unbiased: bool | None = None,
) -> tuple[Tensor, Tensor]:
    """(var, mean) over `axis`/`dim`."""
    v = var(self, axis, keepdim, correction, dim=dim, keepdims=keepdims, unbiased=unbiased)
    return v, mean(self, axis, keepdim, dim=dim, keepdims=keepdims)


def std_mean(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    correction: float | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
    unbiased: bool | None = None,
) -> tuple[Tensor, Tensor]:
    """(std, mean) over `axis`/`dim`."""
    v, m = var_mean(self, axis, keepdim, correction, dim=dim, keepdims=keepdims, unbiased=unbiased)
    return v.sqrt(), m


def any_(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
) -> Tensor:
    """True where any element along `axis`/`dim` is nonzero."""
    axis, kd = _opts("any", axis, dim, keepdim, keepdims)
    return max(self.cast(dtypes.bool), axis, kd)


def all_(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
) -> Tensor:
    """True where every element along `axis`/`dim` is nonzero."""
    axis, kd = _opts("all", axis, dim, keepdim, keepdims)
    return any_(self.logical_not(), axis, kd).logical_not()


def _arg_extreme(self: Tensor, extreme: Tensor, a: int, keepdim: bool) -> Tensor:
    """Index of the first element equal to `extreme` (or the first NaN) along axis `a`."""
    cls = self._tensor_class()
    n = self.shape[a]
    hit = self == extreme
    if dtypes.is_float(self.dtype):
        hit = hit | self.isnan()  # NaN wins, as in PyTorch: the max/min is then NaN and equals nothing
    # count down from n so the first hit wins the max-reduction
    shape = [1] * self.ndim
    shape[a] = n
    idx = cls.arange(n, 0, -1, dtype=dtypes.int32, device=self.device).reshape(shape)
    found = max(hit.where(idx, 0), a, keepdim)
    return found.sub(n, reverse=True).cast(dtypes.int32)  # n - found (n may be a symbolic int)


def _arg(
    op: str, self: Tensor, axis: int | None, dim: int | None, keepdim: bool | None, keepdims: bool | None
) -> Tensor:
    from tg.tensor.shapes import canonical_axis as _canon_axis

    cls = self._tensor_class()
    ax = pick(op, "axis", axis, "dim", dim)
    kd = bool(pick(op, "keepdim", keepdim, "keepdims", keepdims, False))
    if ax is None:
        ret = _arg(op, self.flatten(), 0, None, False, None)
        return ret.reshape((1,) * self.ndim) if kd else ret
    if not isinstance(ax, int):
        raise TypeError(f"{op} takes one axis, got {ax!r}")
    a = _canon_axis(ax, self.ndim)
    if self.ndim == 0:
        return cls.zeros((), dtype=dtypes.int32, device=self.device)
    if self.shape[a] == 0:
        raise ArgumentError(f"{op} of an empty dim (shape {self.shape}, dim {a})")
    extreme = max(self, a, keepdim=True) if op == "argmax" else min(self, a, keepdim=True)
    return _arg_extreme(self, extreme, a, kd)


def argmax(
    self: Tensor, axis: int | None = None, keepdim: bool | None = None, *, dim: int | None = None,
    keepdims: bool | None = None,
) -> Tensor:  # fmt: skip
    """Index of the (first) maximum along `axis`/`dim` (of the flattened tensor if None), as int32; the first NaN
    if any (PyTorch)."""
    return _arg("argmax", self, axis, dim, keepdim, keepdims)


def argmin(
    self: Tensor, axis: int | None = None, keepdim: bool | None = None, *, dim: int | None = None,
    keepdims: bool | None = None,
) -> Tensor:  # fmt: skip
    """Index of the (first) minimum along `axis`/`dim`, as int32; the first NaN if any."""
    return _arg("argmin", self, axis, dim, keepdim, keepdims)


def logsumexp(
    self: Tensor,
    axis: AxisArg = None,
    keepdim: bool | None = None,
    *,
    dim: AxisArg = None,
    keepdims: bool | None = None,
) -> Tensor:
    """log(sum(exp(x))) along `axis`/`dim`, shifted by the (detached) max: -inf for all -inf, inf with an inf."""
    axis, kd = _opts("logsumexp", axis, dim, keepdim, keepdims)
    x, out = _exp_dtype(self)
    m = max(x.detach(), axis, keepdim=True)
    shift = (m.abs() == float("inf")).where(0.0, m)  # all -inf stays -inf, an inf stays inf (no inf - inf)
    ret = (sum((x - shift).exp(), axis, keepdim=True).log() + shift).cast(out)
    return ret if kd else ret.reshape(tuple(s for i, s in enumerate(ret.shape) if i not in _axes(x, axis)))


def _exp_dtype(x: Tensor) -> tuple[Tensor, DType]:
    """(x in the dtype the exp-sum ops compute in, their result dtype): half/bfloat16 compute in float32 and round
    once at the end (torch's accumulate type), ints give the default float."""
    if not dtypes.is_float(x.dtype):
        return x.cast(dtypes.default_float), dtypes.default_float
    return (x.cast(dtypes.float32) if x.dtype.itemsize < 4 else x), x.dtype


def _softmax_axis(op: str, axis: int | None, dim: int | None) -> int:
    ax = pick(op, "axis", axis, "dim", dim, -1)
    if not isinstance(ax, int):
        raise TypeError(f"{op} takes one axis, got {ax!r}")
    return ax


def softmax(
    self: Tensor, axis: int | None = None, dtype: DType | str | None = None, *, dim: int | None = None
) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis`/`dim` (default -1); the max is detached."""
    ax = _softmax_axis("softmax", axis, dim)
    x, out = _exp_dtype(self.cast(dtype) if dtype is not None else self)
    e = (x - max(x.detach(), ax, keepdim=True)).exp()
    return (e / sum(e, ax, keepdim=True)).cast(out)


def log_softmax(
    self: Tensor, axis: int | None = None, dtype: DType | str | None = None, *, dim: int | None = None
) -> Tensor:
    """(x - max) - log(sum(exp(x - max))) along `axis`/`dim` (default -1); the max is detached."""
    ax = _softmax_axis("log_softmax", axis, dim)
    x, out = _exp_dtype(self.cast(dtype) if dtype is not None else self)
    m = x - max(x.detach(), ax, keepdim=True)
    return (m - sum(m.exp(), ax, keepdim=True).log()).cast(out)


def softmin(
    self: Tensor, axis: int | None = None, dtype: DType | str | None = None, *, dim: int | None = None
) -> Tensor:
    """softmax(-x) along `axis`/`dim`."""
    return softmax(-self, _softmax_axis("softmin", axis, dim), dtype)


def matmul(self: Tensor, w: Tensor, reverse: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Matrix product with numpy's rules for 1-D and batched operands: `a @ b` (`dtype=` accumulates in it)."""
    from tg.tensor.shapes import broadcast_shape

    cls = self._tensor_class()
    if not isinstance(w, cls):
        raise TypeError(f"matmul needs a Tensor, got {type(w).__name__}")
    if reverse:
        return matmul(w, self, dtype=dtype)
    if self.ndim == 0 or w.ndim == 0:
        raise ArgumentError(f"matmul needs at least 1-d operands, got shapes {self.shape} and {w.shape}")
    k = self.shape[-1]
    kw = w.shape[-2] if w.ndim >= 2 else w.shape[0]
    if k != kw:
        raise ArgumentError(f"matmul shape mismatch: {self.shape} @ {w.shape} ({k} != {kw})")
    try:
        batch = broadcast_shape(self.shape[:-2], w.shape[:-2])
    except ValueError:
        raise ArgumentError(
            f"matmul: batch dims {self.shape[:-2]} and {w.shape[:-2]} of {self.shape} @ {w.shape} do not broadcast"
        ) from None
    dt = dtype_arg(dtype) or least_upper_dtype(self.dtype, w.dtype)
    if self.ndim > 2 and w.ndim == 2 and all(isinstance(d, int) for d in self.shape):
        # (..., n, k) @ (k, m) is one (rows, k) @ (k, m) product: w's gradient is then one reduction over every row
        # (a kernel the matmul heuristic tiles) instead of a reduction over each batch axis
        rows = math.prod(self.shape[:-1])
        return matmul(self.reshape(rows, k), w, dtype=dt).reshape(*self.shape[:-1], w.shape[1])
    x, w = self.cast(dt), w.cast(dt)
    if (fast := _matmul_uop(x.uop, w.uop, batch)) is not None:
        return cls(fast)
    if w.ndim == 1:
        return sum(x * w, -1)
    if x.ndim == 1:
        return sum(x.reshape(k, 1) * w, -2)
    # (..., n, 1, k) * (..., 1, m, k) summed over k
    return sum(x.unsqueeze(-2) * w.transpose(-1, -2).unsqueeze(-3), -1)


def _matmul_uop(x: UOp, w: UOp, batch: tuple[int, ...]) -> UOp | None:
    """The graph `matmul` builds for >= 2-d operands (`x` (..., n, k), `w` (..., k, m), one dtype that sums in
    itself, concrete shapes, one device), made from UOps directly: the same nodes as the composition of tensor
    methods below (unsqueeze, transpose, broadcast, multiply, sum), without the eight intermediate Tensors and
    their argument checks (a 256x256 matmul spent ~160 us of Python there). None: take the general path."""
    xs, ws = x.shape, w.shape
    if (
        len(xs) < 2
        or len(ws) < 2
        or sum_acc_dtype(x.dtype) is not x.dtype
        or x.device.__class__ is not str
        or x.device != w.device
        or not all(d.__class__ is int for d in xs + ws)
    ):
        return None
    n, k, m = xs[-2], xs[-1], ws[-1]
    full = (*batch, n, m, k)
    perm = (*range(len(ws) - 2), len(ws) - 1, len(ws) - 2)
    a = _broadcast_uop(x.reshape((*xs[:-1], 1, k)), full)
    b = _broadcast_uop(w.permute(perm).reshape((*ws[:-2], 1, m, k)), full)
    return a.alu(Ops.MUL, b).r(Ops.ADD, (len(full) - 1,)).reshape(full[:-1])


def _broadcast_uop(u: UOp, shape: tuple[sint, ...]) -> UOp:
    """`u` broadcast to `shape` as Tensor.broadcast_to does it: leading 1-dims by a RESHAPE, then an EXPAND."""
    if u.shape == shape:
        return u
    if len(u.shape) != len(shape):
        u = u.reshape((1,) * (len(shape) - len(u.shape)) + u.shape)
    return u if u.shape == shape else u.expand(shape)


def dot(self: Tensor, w: Tensor, dtype: DType | str | None = None) -> Tensor:
    """Alias of matmul."""
    return matmul(self, w, dtype=dtype)
