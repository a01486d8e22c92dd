"""Cumulative ops (cumsum, cumprod, cummax, cummin, logcumsumexp) and sorting (sort, argsort, topk).

A scan along a dim of size n is a masked reduce over a lower-triangular (n, n) mask, which fuses into one kernel;
above `_BLOCK` elements it runs per block plus a scan of the block totals, so the work grows as n*sqrt(n).
Sorting orders integer keys (floats by their bits, torch's NaN placement) with the position as tie-break: short
rows rank every element by counting the ones before it (one kernel, O(n^2)), longer rows run a bitonic sorting
network (O(n log^2 n)); values stay differentiable.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from tg.ir import dtypes
from tg.tensor.args import pick
from tg.tensor.errors import ArgumentError
from tg.tensor.shapes import canonical_axis

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

_BLOCK = 256


def _axis(op: str, self: Tensor, axis: int | None, dim: int | None, default: int = 0) -> int:
    return canonical_axis(pick(op, "axis", axis, "dim", dim, default), self.ndim)


def _scan_last(x: Tensor, op: str) -> Tensor:
    """Inclusive scan of `op` ('sum', 'prod', 'max', 'min') along the last dim."""
    cls = x._tensor_class()
    n = x.shape[-1]
    if n > _BLOCK:
        return _scan_blocked(x, op)
    rows = cls.arange(n, device=x.device).reshape(n, 1)
    cols = cls.arange(n, device=x.device).reshape(1, n)
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


class ValuesIndices(NamedTuple):
    """(values, indices) of cummax/cummin (torch's return type; tinygrad returns the same pair)."""

    values: Tensor
    indices: Tensor


def _cum_extreme(self: Tensor, axis: int, op: str) -> ValuesIndices:
    """Running max/min and, for each position, the index of the last element equal to it (torch's ties; a NaN
    carries on with its own index)."""
    cls = self._tensor_class()
    values = _scan(self, axis, op)
    if self.ndim == 0:
        return ValuesIndices(values, cls.zeros((), dtype=dtypes.int32, device=self.device))
    hit = self == values  # a position where the running extreme is reached: its index carries on from there
    if dtypes.is_float(self.dtype):
        hit = hit | self.isnan()
    shape = [1] * self.ndim
    shape[axis] = self.shape[axis]
    pos = cls.arange(self.shape[axis], dtype=dtypes.int32, device=self.device).reshape(shape)
    return ValuesIndices(values, _scan(hit.where(pos, -1), axis, "max"))


def cummax(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> ValuesIndices:
    """Running maximum along `axis`/`dim` (default 0) and its indices: `values, indices = t.cummax(0)`."""
    return _cum_extreme(self, _axis("cummax", self, axis, dim), "max")


def cummin(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> ValuesIndices:
    """Running minimum along `axis`/`dim` (default 0) and its indices."""
    return _cum_extreme(self, _axis("cummin", self, axis, dim), "min")


def logcumsumexp(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """log(cumsum(exp(x))) along `axis`/`dim`, shifted by the (detached) max of the dim."""
    a = _axis("logcumsumexp", self, axis, dim)
    out = self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float
    x = self.cast(dtypes.float32) if dtypes.is_float(out) and out.itemsize < 4 else self.cast(out)  # half: in float32
    if x.ndim == 0:
        return x.cast(out)
    n = x.shape[a]
    if isinstance(n, int) and n <= _BLOCK:  # each output shifted by its own prefix's max: exact at any spread
        cls = self._tensor_class()
        moved = x.transpose(a, -1)
        mask = cls.arange(n, device=x.device).reshape(1, n) <= cls.arange(n, device=x.device).reshape(n, 1)
        prefixes = mask.where(moved.unsqueeze(-2), float("-inf"))  # (..., i, j): x_j for j <= i
        return prefixes.logsumexp(-1).transpose(a, -1).cast(out)
    m = x.detach().max(a, keepdim=True)  # long rows: one shift per row (outputs far below the max lose digits)
    m = (m.abs() == float("inf")).where(0.0, m)
    return (cumsum((x - m).exp(), a).log() + m).cast(out)


# sorting: small rows compare all pairs in one kernel, longer ones run a bitonic network (n log^2 n work)
_SORT_ALL_PAIRS_MAX = 64


def _sort_keys(x: Tensor, descending: bool) -> Tensor:
    """Integer keys whose ascending order is the wanted order of `x` (torch's: -0 equals 0, NaN above +inf, so
    NaNs go last ascending and first descending): floats by their bits with the negative half mirrored."""
    if x.dtype is dtypes.bool:
        key = x.cast(dtypes.int32)
    elif dtypes.is_float(x.dtype):
        f = x.cast(dtypes.float64 if x.dtype is dtypes.float64 else dtypes.float32)
        f = (f == 0).where(0.0, f)  # -0 sorts as +0 (ties keep their order)
        f = f.isnan().where(float("nan"), f)  # one positive NaN: above +inf
        bits_dt = dtypes.int64 if f.dtype is dtypes.float64 else dtypes.int32
        bits = f.bitcast(bits_dt)
        key = bits ^ ((bits >> (bits_dt.itemsize * 8 - 1)) & bits_dt.max)
    else:
        key = x
    return ~key if descending else key


def _sort_all_pairs(x: Tensor, key: Tensor) -> tuple[Tensor, Tensor]:
    """Rank each element by counting the ones before it (ties by position), place it with a one-hot select."""
    cls = x._tensor_class()
    n = x.shape[-1]
    idx = cls.arange(n, device=x.device, dtype=dtypes.int32)
    a, b = key.unsqueeze(-1), key.unsqueeze(-2)  # a: element i (rows), b: element j (cols)
    before = (b < a) | ((b == a) & (idx.reshape(1, n) < idx.reshape(n, 1)))
    rank = before.sum(-1, dtype=dtypes.int32)  # (..., n): where element i goes
    place = rank.unsqueeze(-1) == idx  # (..., i, k): element i lands at position k
    zero = False if x.dtype is dtypes.bool else 0
    picked = place.where(x.unsqueeze(-1), zero)
    values = picked.max(-2) if x.dtype is dtypes.bool else picked.sum(-2, dtype=x.dtype)
    return values, place.where(idx.reshape(n, 1), 0).sum(-2, dtype=dtypes.int32)


def _sort_bitonic(x: Tensor, key: Tensor) -> tuple[Tensor, Tensor]:
    """Bitonic sorting network over the last dim padded to a power of two P: log2(P) merge stages of compare-
    exchange steps. Each step is one elementwise pass in which element i looks at its partner i ^ j (a flipped
    view) and keeps the smaller or the larger of the two.
    Elements carry (key, position), all distinct, so ties keep their order; padding sorts last. The values ride
    along through `where`s, so their gradient flows back to where each value came from."""
    cls = x._tensor_class()
    n, batch = x.shape[-1], x.shape[:-1]
    size = 1 << (n - 1).bit_length()
    pad = [(0, 0)] * len(batch) + [(0, size - n)]
    pos = cls.arange(size, device=x.device, dtype=dtypes.int64)
    key = key.pad(pad, value=key.dtype.max)
    # keys of 64 bits (or uint32): (key, position) as two lanes, else one int64 packing key above position
    wide = key.dtype.itemsize > 4 or (key.dtype.itemsize == 4 and dtypes.is_unsigned(key.dtype))
    if wide:
        lanes = [key, pos._broadcast_to((*batch, size)), x.pad(pad)]
    else:
        lanes = [(key.cast(dtypes.int64) << 32) | pos, x.pad(pad)]

    def exchange(lanes: list[Tensor], j: int, keeps_min: Tensor) -> list[Tensor]:
        """Each element against its partner i ^ j: keep the smaller where `keeps_min`, else the larger."""
        other = [t.reshape(*batch, size // (2 * j), 2, j).flip(-2).reshape(*batch, size) for t in lanes]
        partner_first = other[0] < lanes[0]
        if wide:
            partner_first = partner_first | ((other[0] == lanes[0]) & (other[1] < lanes[1]))
        take = keeps_min.where(partner_first, partner_first.logical_not())
        return [take.where(o, t).contiguous() for t, o in zip(lanes, other, strict=True)]

    block = 2
    while block <= size:
        # block k sorts ascending where bit k of the position is clear, descending elsewhere; k is read from a
        # buffer, so the pass for partner distance j is one kernel shared by every stage (log2(P) kernels)
        k = cls([block], device=x.device, dtype=dtypes.int64).reshape(())
        ascending = (pos & k) == 0
        step = block // 2
        while step >= 1:  # element i against i ^ step
            lanes = exchange(lanes, step, ((pos & step) == 0) == ascending)
            step //= 2
        block *= 2
    positions = lanes[1] if wide else (lanes[0] & 0xFFFFFFFF)
    keep = [(0, s) for s in batch] + [(0, n)]
    return lanes[-1].shrink(keep), positions.shrink(keep).cast(dtypes.int32)


def sort(
    self: Tensor, dim: int = -1, descending: bool = False, *, axis: int | None = None, stable: bool = True
) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along `dim`, as torch's `sort(stable=True)`: ties keep their order, NaNs go last
    (first when descending), -0 equals 0. Indices are int32. Rows longer than 64 run a bitonic sorting network
    (O(n log^2 n) work, log^2 n passes); the values are differentiable."""
    cls = self._tensor_class()
    d = canonical_axis(pick("sort", "dim", None if dim == -1 and axis is not None else dim, "axis", axis, -1),
                       max(self.ndim, 1))  # fmt: skip
    if self.ndim == 0:
        return self, cls.zeros((), dtype=dtypes.int32, device=self.device)
    x = self.transpose(d, -1)
    if x.shape[-1] <= 1:
        return self, cls.zeros(self.shape, dtype=dtypes.int32, device=self.device)
    key = _sort_keys(x, descending)
    values, indices = (_sort_all_pairs if x.shape[-1] <= _SORT_ALL_PAIRS_MAX else _sort_bitonic)(x, key)
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
        raise ArgumentError(f"topk: k={k} is out of range for dim {d} of size {n}")
    values, indices = sort(self, d, descending=largest)
    bounds: list[tuple[int, int] | None] = [None] * self.ndim
    if self.ndim:
        bounds[d] = (0, k)
        return values.shrink(bounds), indices.shrink(bounds)
    return values, indices
