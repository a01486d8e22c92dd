"""Cumulative ops (cumsum, cumprod, cummax, cummin, logcumsumexp) and sorting (sort, argsort, topk).

A scan along a dim of size n is a masked reduce over a lower-triangular (n, n) mask, which fuses into one kernel;
above `_BLOCK` elements it runs per block plus a scan of the block totals, so the work grows as n*sqrt(n).
Sorting ranks every element by counting smaller ones (stable for ties) and places it with a one-hot select;
both are O(n^2) per row, fine for the sizes sort/topk see in models (vocabularies, beams), and differentiable.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tg.ir import dtypes
from tg.tensor.args import pick
from tg.tensor.shapes import canonical_axis

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

_BLOCK = 256


def _axis(op: str, self: Tensor, axis: int | None, dim: int | None, default: int = 0) -> int:
    return canonical_axis(pick(op, "axis", axis, "dim", dim, default), self.ndim)


def _scan_last(x: Tensor, op: str) -> Tensor:
    """Inclusive scan of `op` ('sum', 'prod', 'max', 'min') along the last dim."""
    from tg.tensor.tensor import Tensor

    n = x.shape[-1]
    if n > _BLOCK:
        return _scan_blocked(x, op)
    rows = Tensor.arange(n, device=x.device).reshape(n, 1)
    cols = Tensor.arange(n, device=x.device).reshape(1, n)
    mask = cols <= rows  # (n, n): output i sees inputs j <= i
    identity = {
        "sum": 0,
        "prod": 1,
        "max": float("-inf") if dtypes.is_float(x.dtype) else x.dtype.min,
        "min": float("inf") if dtypes.is_float(x.dtype) else x.dtype.max,
    }[op]
    masked = mask.where(x.unsqueeze(-2), identity)
    if op == "sum":
        return masked.sum(-1, dtype=x.dtype)
    if op == "prod":
        return masked.prod(-1).cast(x.dtype)
    return masked.max(-1) if op == "max" else masked.min(-1)


def _scan_blocked(x: Tensor, op: str) -> Tensor:
    n = x.shape[-1]
    block = max(_BLOCK, math.isqrt(n) + 1)
    nb = math.ceil(n / block)
    pad_value = {"sum": 0, "prod": 1, "max": x.dtype.min if not dtypes.is_float(x.dtype) else float("-inf"),
                 "min": x.dtype.max if not dtypes.is_float(x.dtype) else float("inf")}[op]  # fmt: skip
    xb = x.pad([(0, 0)] * (x.ndim - 1) + [(0, nb * block - n)], value=pad_value).reshape(*x.shape[:-1], nb, block)
    inner = _scan_last(xb, op)  # within each block
    totals = inner[..., -1]  # (..., nb)
    carried = _scan_last(totals, op)
    # exclusive: block b adds the scan of blocks < b
    prev = carried.pad([(0, 0)] * (carried.ndim - 1) + [(1, 0)], value=pad_value)[..., :-1].unsqueeze(-1)
    if op == "sum":
        out = inner + prev
    elif op == "prod":
        out = inner * prev
    else:
        out = inner.maximum(prev) if op == "max" else inner.minimum(prev)
    return out.reshape(*x.shape[:-1], nb * block)[..., :n]


def _scan(self: Tensor, axis: int, op: str) -> Tensor:
    if self.ndim == 0:
        return self
    moved = self.transpose(axis, -1)
    return _scan_last(moved, op).transpose(axis, -1)


def cumsum(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """Running sum along `axis`/`dim` (default 0); bools and small ints sum as int32, as sum()."""
    from tg.ir import sum_acc_dtype

    a = _axis("cumsum", self, axis, dim)
    return _scan(self.cast(sum_acc_dtype(self.dtype)) if not dtypes.is_float(self.dtype) else self, a, "sum")


def cumprod(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """Running product along `axis`/`dim` (default 0)."""
    return _scan(self, _axis("cumprod", self, axis, dim), "prod")


def cummax(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """Running maximum along `axis`/`dim` (default 0); values only, as tinygrad (torch also gives indices)."""
    return _scan(self, _axis("cummax", self, axis, dim), "max")


def cummin(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """Running minimum along `axis`/`dim` (default 0); values only."""
    return _scan(self, _axis("cummin", self, axis, dim), "min")


def logcumsumexp(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """log(cumsum(exp(x))) along `axis`/`dim`, shifted by the (detached) max of the dim."""
    a = _axis("logcumsumexp", self, axis, dim)
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    if x.ndim == 0:
        return x
    m = x.detach().max(a, keepdim=True)
    m = (m.abs() == float("inf")).where(0.0, m)
    return cumsum((x - m).exp(), a).log() + m


def sort(
    self: Tensor, dim: int = -1, descending: bool = False, *, axis: int | None = None, stable: bool = True
) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along `dim`; ties keep their order (stable). Indices are int32."""
    from tg.tensor.tensor import Tensor

    d = canonical_axis(pick("sort", "dim", None if dim == -1 and axis is not None else dim, "axis", axis, -1),
                       max(self.ndim, 1))  # fmt: skip
    if self.ndim == 0:
        return self, Tensor.zeros((), dtype=dtypes.int32, device=self.device)
    x = self.transpose(d, -1)
    n = x.shape[-1]
    a, b = x.unsqueeze(-1), x.unsqueeze(-2)  # a: element i (rows), b: element j (cols)
    before = (b > a) if descending else (b < a)
    idx = Tensor.arange(n, device=self.device, dtype=dtypes.int32)
    earlier_tie = (b == a) & (idx.reshape(1, n) < idx.reshape(n, 1))
    rank = (before | earlier_tie).sum(-1, dtype=dtypes.int32)  # (..., n): where element i goes
    place = rank.unsqueeze(-1) == idx  # (..., i, k): element i lands at position k
    zero = False if self.dtype is dtypes.bool else 0
    picked = place.where(x.unsqueeze(-1), zero)
    values = picked.max(-2) if self.dtype is dtypes.bool else picked.sum(-2, dtype=self.dtype)
    indices = place.where(idx.reshape(n, 1), 0).sum(-2, dtype=dtypes.int32)
    return values.transpose(d, -1), indices.transpose(d, -1)


def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """Indices that sort self along `dim` (stable), int32."""
    return sort(self, dim, descending)[1]


def topk(
    self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True, *, sorted: bool | None = None
) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest (or smallest) elements along `dim` (torch's `sorted=` accepted)."""
    d = canonical_axis(dim, max(self.ndim, 1))
    n = self.shape[d] if self.ndim else 1
    if not 0 <= k <= n:
        raise ValueError(f"topk: k={k} is out of range for dim {d} of size {n}")
    values, indices = sort(self, d, descending=largest)
    bounds: list[tuple[int, int] | None] = [None] * self.ndim
    if self.ndim:
        bounds[d] = (0, k)
        return values.shrink(bounds), indices.shrink(bounds)
    return values, indices
