"""Indexing: basic (`t[1:3, ::2, None, ..., -1]`) as movement ops (shrink, flip, pad+reshape for strides) and
advanced (int tensors/lists of any int dtype, bool masks) as one-hot selections that fuse into one reduce; plus
`__setitem__`, gather, scatter, scatter_reduce, masked_fill, masked_select and nonzero.

Advanced indices broadcast together and follow numpy's placement rule: adjacent ones put the broadcast dims where
they stand, separated ones put them first. Out-of-range tensor indices are not checked per element (they select
nothing); a bool mask realizes to find its count (the result's shape depends on the data).

Index values are range-checked like torch (advanced indices in [-n, n), gather/scatter indices in [0, n)): values
already on hand are checked at once, computed ones in the schedule that realizes the result (`tg.tensor.bounds`);
either way an out-of-range index raises `IndexOutOfRange` (an IndexError) naming the value and the dim size.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tg.ir import UOp, dtypes
from tg.tensor import bounds
from tg.tensor.data import is_int, is_numpy
from tg.tensor.errors import ArgumentError
from tg.tensor.shapes import broadcast_shape, canonical_axis, is_symbolic, simplify_dim

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _normalize(self: Tensor, index: Any) -> list[Any]:
    """The index of `self` as a list with Ellipsis expanded to full slices."""
    cls, ndim = self._tensor_class(), self.ndim
    items = list(index) if isinstance(index, tuple) else [index]
    for it in items:
        if not (
            it is None or it is Ellipsis or isinstance(it, slice) or is_int(it) or _is_advanced(it, cls)
        ) or isinstance(it, bool):
            raise TypeError(
                f"unsupported index {it!r}: use ints, slices, None, ..., int/bool tensors or lists of ints/bools"
            )
        if isinstance(it, slice) and any(hasattr(v, "uop") for v in (it.start, it.stop, it.step)):
            raise TypeError(f"a Tensor cannot be a slice bound ({it!r}); use an int, or index with the tensor itself")
    if sum(it is Ellipsis for it in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(_dims_used(it, cls) for it in items)
    if used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}: got {used}")
    if any(it is Ellipsis for it in items):
        pos = next(i for i, it in enumerate(items) if it is Ellipsis)
        items[pos : pos + 1] = [slice(None)] * (ndim - used)
    else:
        items += [slice(None)] * (ndim - used)
    return items


def _is_advanced(it: Any, cls: type[Tensor]) -> bool:
    return isinstance(it, (cls, list)) or (is_numpy(it) and getattr(it, "ndim", 0) > 0)


def _dims_used(it: Any, cls: type[Tensor]) -> int:
    """How many dims of the indexed tensor an index item consumes (a bool mask: one per mask dim)."""
    if it is None or it is Ellipsis:
        return 0
    if isinstance(it, cls) and it.dtype is dtypes.bool:
        return max(it.ndim, 1)
    if isinstance(it, list) and _nested_bools(it):
        return _list_ndim(it)
    if is_numpy(it) and getattr(it, "dtype", None) is not None and it.dtype.kind == "b":
        return max(it.ndim, 1)
    return 1


def _nested_bools(x: Any) -> bool:
    while isinstance(x, list) and x:
        x = x[0]
    return isinstance(x, bool)


def _list_ndim(x: Any) -> int:
    n = 0
    while isinstance(x, list):
        n, x = n + 1, (x[0] if x else None)
    return n


def _index_tensors(self: Tensor, items: list[Any]) -> list[Any]:
    """Lists/arrays made Tensors, bool masks turned into int index tensors (one per mask dim; realizes the mask)."""
    cls = self._tensor_class()
    out: list[Any] = []
    dim = 0
    for it in items:
        used = _dims_used(it, cls)
        dim += used
        if isinstance(it, list) or is_numpy(it):
            it = cls(it, device=self.device)
        if isinstance(it, cls):
            if it.dtype is dtypes.bool:
                if it.ndim == 0:
                    raise IndexError("a 0-d bool index is not supported; use a bool mask with the tensor's shape")
                covered = self.shape[dim - used : dim]
                if tuple(it.shape) != tuple(covered):
                    raise IndexError(f"the bool mask {it.shape} does not match the indexed dims {covered}")
                coords = nonzero(it)  # (count, mask dims)
                out.extend(coords[:, d] for d in range(it.ndim))
                continue
            if dtypes.is_float(it.dtype):
                raise IndexError(f"tensors used as indices must be integer or bool tensors, got {it.dtype.name}")
            if it.device != self.device:
                it = it.to(self.device)
        out.append(it)
    return out


def __getitem__(self: Tensor, index: Any) -> Tensor:
    """Indexing with ints (negative ok), slices (any step), None, Ellipsis, int tensors/lists (any int dtype,
    negatives wrap, broadcast together) and bool masks.

    >>> Tensor([[1, 2, 3], [4, 5, 6]])[1, ::-1].tolist()
    [6, 5, 4]
    >>> Tensor([[1, 2, 3], [4, 5, 6]])[[1, 0], [2, 2]].tolist()
    [6, 3]
    """
    raw = [_as_list(it) for it in (index if isinstance(index, tuple) else (index,))]
    if any(_is_advanced(it, self._tensor_class()) for it in raw):
        return _advanced_get(self, _index_tensors(self, _normalize(self, tuple(raw))))
    return _basic_get(self, tuple(raw) if isinstance(index, tuple) else raw[0])


def _as_list(it: Any) -> Any:
    """A tuple inside an index is a list of indices (numpy, torch): `t[(0, 1), :]` is `t[[0, 1], :]`."""
    return [_as_list(x) for x in it] if isinstance(it, tuple) else it


def _basic_get(self: Tensor, index: Any) -> Tensor:
    items = _normalize(self, index)
    bounds: list[tuple[int, int]] = []
    flips: list[int] = []
    steps: list[int] = []
    out_shape: list[int] = []  # final shape with None dims inserted and int dims dropped
    dim = 0
    for it in items:
        if it is None:
            out_shape.append(-2)  # placeholder for a new axis
            continue
        n = self.shape[dim]
        if isinstance(it, slice) and _symbolic_slice(it, n):
            start, stop = _symbolic_bounds(it, n, dim)
            bounds.append((start, stop))
            flips.append(0)
            steps.append(1)
            out_shape.append(simplify_dim(stop - start))  # type: ignore[arg-type]
        elif isinstance(n, UOp) and is_int(it):  # checked at the bound value by shrink
            i = int(it)
            bounds.append((i, i + 1) if i >= 0 else (simplify_dim(n + i), simplify_dim(n + i + 1)))
            flips.append(0)
            steps.append(1)
        elif is_int(it):
            i = int(it)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {n}")
            i %= n
            bounds.append((i, i + 1))
            flips.append(0)
            steps.append(1)
        else:
            start, stop, step = it.indices(n)
            count = len(range(start, stop, step))
            if step > 0:
                bounds.append((start, start + (count - 1) * step + 1) if count else (0, 0))
                flips.append(0)
            else:
                # take the mirrored range, then flip it
                lo = start + (count - 1) * step if count else 0
                bounds.append((lo, start + 1) if count else (0, 0))
                flips.append(1)
            steps.append(abs(step))
            out_shape.append(count)
        dim += 1
    x = self.shrink(bounds)
    if any(flips):
        x = x.flip([i for i, f in enumerate(flips) if f])
    for d, step in enumerate(steps):
        if step > 1 and x.shape[d] > 1:
            x = _stride(x, d, step)
    it_out = iter(s for s in out_shape if s != -2)
    final = [1 if s == -2 else next(it_out) for s in out_shape]
    return x.reshape(final)


def _symbolic_slice(it: slice, n: Any) -> bool:
    """Whether a slice involves a symbolic int (in its bounds, or the dim it slices)."""
    return any(isinstance(v, UOp) for v in (it.start, it.stop, it.step, n))


def _symbolic_bounds(it: slice, n: Any, dim: int) -> tuple[Any, Any]:
    """(start, stop) of a step-1 slice with symbolic parts; negative int bounds count from the end, as Python.
    Bounds are checked at the Variables' bound values by shrink; no clamping (a symbolic bound must be in range)."""
    if it.step is not None and not (is_int(it.step) and it.step == 1):
        raise IndexError(f"a slice with a symbolic bound or dim (dim {dim}) needs step 1, got step {it.step!r}")

    def bound(v: Any, default: Any) -> Any:
        if v is None:
            return default
        if isinstance(v, UOp):
            if not is_symbolic(v):
                raise TypeError(f"slice bounds must be ints or bound Variables, got {v!r}")
            return v
        if not is_int(v):
            raise TypeError(f"slice bounds must be ints or bound Variables, got {v!r}")
        return simplify_dim(n + int(v)) if int(v) < 0 else int(v)

    return bound(it.start, 0), bound(it.stop, n)


def _stride(x: Tensor, d: int, step: int) -> Tensor:
    """Every `step`-th element along dim `d` (starting with the first): pad, split the dim, keep column 0."""
    n = x.shape[d]
    count = (n - 1) // step + 1
    pad = [(0, 0)] * x.ndim
    pad[d] = (0, count * step - n)
    x = x.pad(pad)
    x = x.reshape(*x.shape[:d], count, step, *x.shape[d + 1 :])
    keep: list[tuple[int, int] | None] = [None] * x.ndim
    keep[d + 1] = (0, 1)
    x = x.shrink(keep)
    return x.reshape(*x.shape[: d + 1], *x.shape[d + 2 :])


def __setitem__(self: Tensor, index: Any, value: Any) -> None:
    """`t[index] = value`: write into the indexed elements of t's buffer (realized at once); advanced indices
    work too (with repeated indices the last write wins, as numpy).

    `value` (a Tensor or Python data) is cast to t's dtype and broadcast to the indexed shape. A lazy `t` is
    realized first; a `t` that is itself a view of another tensor's buffer writes into that buffer.

    >>> t = Tensor.zeros(2, 3)
    >>> t[1, ::2] = 5.0
    >>> t.tolist()
    [[0.0, 0.0, 0.0], [5.0, 0.0, 5.0]]
    """
    from tg.ir import Ops
    from tg.tensor.movement import assign_into_view, view_base
    from tg.tensor.realize import realize_tensors, separate_twins

    cls = self._tensor_class()
    if view_base(self.uop).op not in (Ops.BUFFER, Ops.ASSIGN):
        self.realize()  # the write needs a buffer to go to
    separate_twins(self)  # an equal tensor made independently must not see this write
    v = value if isinstance(value, cls) else cls(value, device=self.device, dtype=self.dtype)
    if v.device != self.device:
        raise ArgumentError(f"setitem device mismatch: target {self.device} vs value {v.device}")
    raw = list(index) if isinstance(index, tuple) else [index]
    if any(_is_advanced(it, cls) for it in raw):
        mask = raw[0] if len(raw) == 1 and isinstance(raw[0], cls) and raw[0].dtype is dtypes.bool else None
        if mask is not None and mask.shape == self.shape[: mask.ndim] and v.numel() == 1:
            # x[mask] = scalar: a where over the whole tensor, no need to count the mask
            view = self
            m = mask.reshape(*mask.shape, *[1] * (self.ndim - mask.ndim))
            v = m.where(v.cast(self.dtype).reshape(()), self)
        else:
            view, v = _advanced_set(self, _index_tensors(self, _normalize(self, tuple(raw))), v)
    else:
        view = self[index]
        v = v.cast(self.dtype)
        if v.ndim > view.ndim:
            raise ArgumentError(f"setitem: cannot broadcast value of shape {v.shape} to the indexed shape {view.shape}")
        v = v.reshape((1,) * (view.ndim - v.ndim) + v.shape)._broadcast_to(view.shape)
    written = view_base(assign_into_view(view.uop, v.uop))
    # self reads through the write (it is the tensor being written, not an earlier read of the buffer)
    self.uop = self.uop.substitute({view_base(self.uop): written})
    realize_tensors([cls(written)])


# ---- advanced indexing ---------------------------------------------------------------------------------------


_Pending = list[tuple["Tensor", int, int]]  # (index tensor, size of its dim, that dim of the indexed tensor)


def _plan(self: Tensor, items: list[Any], op: str) -> tuple[Tensor, list[int], list[Tensor], int, _Pending]:
    """Apply the basic part of an index and describe the advanced part: (view, advanced dims of the view, their
    index tensors broadcast together and wrapped, their position in the result, the range checks that must wait
    for the selection: see `tg.tensor.bounds`)."""
    cls = self._tensor_class()
    # with any tensor index, ints are 0-d index tensors too (numpy's rule; it matters for the placement)
    items = [cls(int(it), device=self.device, dtype=dtypes.int32) if is_int(it) else it for it in items]
    basic = [slice(None) if isinstance(it, cls) else it for it in items]
    view = _basic_get(self, tuple(basic))
    adv_dims, adv_items, positions, self_dims, out_dim = [], [], [], [], 0
    for pos, it in enumerate(items):
        if isinstance(it, cls):
            adv_dims.append(out_dim)
            adv_items.append(it)
            positions.append(pos)
            self_dims.append(sum(1 for x in items[:pos] if x is not None))
        out_dim += 1
    shape = broadcast_shape(*[t.shape for t in adv_items])
    idx, pending = [], []
    for t, d, sd in zip(adv_items, adv_dims, self_dims, strict=True):
        n = view.shape[d]
        if not bounds.check_now(t, n, op=op, dim=sd, negative_ok=True):
            if op == "setitem":  # an eager write: know the indices are good before anything is written
                bounds.check_now(t.realize(), n, op=op, dim=sd, negative_ok=True)
            else:
                pending.append((t, n, sd))
        t = t.cast(dtypes.int32) if t.dtype.itemsize < 4 or dtypes.is_unsigned(t.dtype) else t
        idx.append(
            (t < 0).where(t + n, t)._broadcast_to(shape) if not dtypes.is_unsigned(t.dtype) else t._broadcast_to(shape)
        )
    adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
    rest_before = sum(1 for d in range(view.ndim) if d not in adv_dims and d < adv_dims[0])
    return view, adv_dims, idx, rest_before if adjacent else 0, pending


def _selection(view: Tensor, adv_dims: list[int], idx: list[Tensor], pending: _Pending, op: str) -> Tensor:
    """bool (B..., n1, ..., nk): True where broadcast index position b selects element (i1, ..., ik); index
    range checks in `pending` run when it is realized."""
    cls = view._tensor_class()
    k, nb = len(adv_dims), idx[0].ndim
    mask = None
    for j, (d, t) in enumerate(zip(adv_dims, idx, strict=True)):
        n = view.shape[d]
        onehot = t.unsqueeze(-1) == cls.arange(n, device=view.device, dtype=t.dtype)
        onehot = onehot.reshape(*t.shape, *[n if i == j else 1 for i in range(k)])
        mask = onehot if mask is None else mask & onehot
    assert mask is not None and mask.ndim == nb + k
    for t, n, sd in pending:
        bounds.defer(t, n, op=op, dim=sd, negative_ok=True, selection=mask)
    return mask


def _advanced_get(self: Tensor, items: list[Any]) -> Tensor:
    view, adv_dims, idx, at, pending = _plan(self, items, "index")
    rest = [d for d in range(view.ndim) if d not in adv_dims]
    k, shape_b = len(adv_dims), idx[0].shape
    mask = _selection(view, adv_dims, idx, pending, "index")  # (B..., n1..nk)
    moved = view.permute(*rest, *adv_dims)  # (R..., n1..nk)
    moved = moved.reshape(*[view.shape[d] for d in rest], *[1] * len(shape_b), *[view.shape[d] for d in adv_dims])
    zero = False if view.dtype is dtypes.bool else 0
    picked = mask.where(moved, zero)
    picked = (
        picked.max(tuple(range(picked.ndim - k, picked.ndim)))
        if view.dtype is dtypes.bool
        else picked.sum(tuple(range(picked.ndim - k, picked.ndim)), dtype=view.dtype)
    )  # (R..., B...)
    nr, nb = len(rest), len(shape_b)
    order = [*range(at), *range(nr, nr + nb), *range(at, nr)]
    return picked.permute(*order)


def _advanced_set(self: Tensor, items: list[Any], value: Tensor) -> tuple[Tensor, Tensor]:
    """(basic view, its new contents) for `self[items] = value`; with repeated indices the last write wins."""
    cls = self._tensor_class()
    view, adv_dims, idx, at, pending = _plan(self, items, "setitem")
    rest = [d for d in range(view.ndim) if d not in adv_dims]
    k, shape_b = len(adv_dims), idx[0].shape
    nr, nb = len(rest), len(shape_b)
    result_shape = [view.shape[d] for d in rest]
    result_shape[at:at] = list(shape_b)
    v = value.cast(view.dtype)
    if v.ndim > len(result_shape):
        raise ArgumentError(
            f"setitem: cannot broadcast value of shape {value.shape} to the indexed shape {tuple(result_shape)}"
        )
    v = v.reshape((1,) * (len(result_shape) - v.ndim) + v.shape)._broadcast_to(tuple(result_shape))
    v = v.permute(*range(at), *range(at + nb, nr + nb), *range(at, at + nb))  # (R..., B...)
    mask = _selection(view, adv_dims, idx, pending, "setitem")  # (B..., n1..nk)
    # which broadcast position writes each element: the last one that selects it (1-based, 0 = untouched)
    order = cls.arange(1, math.prod(shape_b) + 1, device=self.device, dtype=dtypes.int32).reshape(*shape_b, *[1] * k)
    last = mask.where(order, 0).max(tuple(range(nb))) if nb else mask.cast(dtypes.int32)  # (n1..nk)
    chosen = mask & (order == last.reshape(*[1] * nb, *last.shape))
    v = v.reshape(*v.shape, *[1] * k)
    zero = False if view.dtype is dtypes.bool else 0
    written = chosen.where(v, zero)
    written = (
        written.max(tuple(range(nr, nr + nb)))
        if view.dtype is dtypes.bool
        else written.sum(tuple(range(nr, nr + nb)), dtype=view.dtype)
    )  # (R..., n1..nk)
    moved = view.permute(*rest, *adv_dims)
    new = (last > 0).where(written, moved)
    inverse = [0] * view.ndim
    for i, d in enumerate([*rest, *adv_dims]):
        inverse[d] = i
    return view, new.permute(*inverse)


def _first_hits(mask: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """For a flat bool `mask` (n,): the (size, n) one-hot of the first `size` True positions in order, and which of
    the `size` rows found one (lazy: the count is never read)."""
    cls = mask._tensor_class()
    if not isinstance(size, int) or size < 0:
        raise ArgumentError(f"size must be a non-negative int, got {size!r}")
    rank = mask.cast(dtypes.int32).cumsum(0) - 1 if mask.shape[0] else mask.cast(dtypes.int32)
    rows = cls.arange(size, dtype=dtypes.int32, device=mask.device).reshape(size, 1)
    sel = (rank.reshape(1, -1) == rows) & mask.reshape(1, -1)
    return sel, sel.any(1)


def nonzero(self: Tensor, size: int | None = None, fill_value: int = 0) -> Tensor:
    """Coordinates of the nonzero elements, shape (count, ndim) int32, in row-major order (realizes self). With
    `size=` the shape is (size, ndim) without reading any data: the first `size` hits, rows past the count
    `fill_value` (torch, tinygrad)."""
    cls = self._tensor_class()
    if size is not None:
        mask = self.cast(dtypes.bool).flatten()
        n = mask.shape[0]
        sel, valid = _first_hits(mask, size)
        index = sel.where(cls.arange(n, dtype=dtypes.int32, device=self.device).reshape(1, -1), 0).sum(1)
        parts: list[Tensor] = []
        rest = index
        for s in reversed(self.shape):
            parts.append(rest % s if s else rest)
            rest = rest // s if s else rest
        if not parts:
            return cls.zeros(size, 0, dtype=dtypes.int32, device=self.device)
        out = cls.stack(*parts[::-1], dim=1).cast(dtypes.int32)
        return valid.reshape(size, 1).where(out, int(fill_value)).cast(dtypes.int32)

    flat = self.cast(dtypes.bool).flatten().tolist() if self.ndim else [bool(self.item())]
    coords = []
    for i, hit in enumerate(flat):
        if hit:
            c, rem = [], i
            for s in reversed(self.shape):
                c.append(rem % s)
                rem //= s
            coords.append(c[::-1])
    if not coords:
        return cls.zeros(0, self.ndim, dtype=dtypes.int32, device=self.device)
    return cls(coords, dtype=dtypes.int32, device=self.device)


def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:
    """`value` where `mask` is True, self elsewhere (mask broadcasts)."""
    return mask.cast(dtypes.bool).where(value, self)


def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """The elements where `mask` (broadcast to self) is True, as a 1-d tensor (realizes the mask). With `size=` the
    result has `size` elements without reading any data: the first hits, then `fill_value` (in self's dtype)."""
    m = mask.cast(dtypes.bool)._broadcast_to(broadcast_shape(self.shape, mask.shape))
    x = self._broadcast_to(m.shape)
    if size is not None:
        sel, valid = _first_hits(m.flatten(), size)
        picked = sel.where(x.flatten().reshape(1, -1), 0).sum(1, dtype=self.dtype)
        return valid.where(picked, _fill_of(self, fill_value))
    return x.flatten()[m.flatten()] if x.ndim else x.reshape(1)[m.reshape(1)]


def _fill_of(like: Tensor, value: Any) -> Tensor:
    """`value` as a 0-d tensor of `like`'s dtype and device (a fill value never promotes the result)."""
    cls = like._tensor_class()
    return cls(value, dtype=like.dtype, device=like.device) if not isinstance(value, cls) else value


# ---- gather / scatter along one dim ------------------------------------------------------------------------------


def _onehot_along(self: Tensor, dim: int, index: Tensor, op: str) -> tuple[int, Tensor, Tensor]:
    """(dim, self with dim moved last and cut to index's other sizes, one-hot (..., m, n) of index along dim)."""
    cls = self._tensor_class()
    d = canonical_axis(dim, self.ndim)
    if index.ndim != self.ndim:
        raise ArgumentError(f"{op}: index {index.shape} needs as many dims as the input {self.shape}")
    if dtypes.is_float(index.dtype) or index.dtype is dtypes.bool:
        raise TypeError(f"{op}: index must be an integer tensor, got {index.dtype.name}")
    for i, (a, b) in enumerate(zip(index.shape, self.shape, strict=True)):
        if i != d and a > b:
            raise ArgumentError(f"{op}: index {index.shape} is larger than the input {self.shape} in dim {i}")
    x = self.transpose(d, -1)
    ix = index.transpose(d, -1)
    x = x.shrink([(0, s) for s in ix.shape[:-1]] + [None])
    n = self.shape[d]
    onehot = ix.unsqueeze(-1) == cls.arange(n, device=self.device, dtype=ix.dtype)
    bounds.check_index(index, n, op=op, dim=d, negative_ok=False, selection=onehot)
    return d, x, onehot


def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
    """out[i][j] = self[i][index[i][j]] for dim=1 (torch.gather): index has self's rank, any smaller sizes."""
    d, x, onehot = _onehot_along(self, dim, index, "gather")
    zero = False if self.dtype is dtypes.bool else 0
    picked = onehot.where(x.unsqueeze(-2), zero)
    out = picked.max(-1) if self.dtype is dtypes.bool else picked.sum(-1, dtype=self.dtype)
    return out.transpose(d, -1)


def _scatter_parts(self: Tensor, dim: int, index: Tensor, src: Any, op: str) -> tuple[int, Tensor, Tensor, Tensor]:
    """(dim, self with dim last, one-hot (..., m, n) padded to self's other sizes, src as (..., m, 1))."""
    cls = self._tensor_class()
    d, _, onehot = _onehot_along(self, dim, index, op)
    s = src if isinstance(src, cls) else cls.full(index.shape, src, dtype=self.dtype, device=self.device)
    if isinstance(src, cls):
        if src.ndim != index.ndim or any(a < b for a, b in zip(src.shape, index.shape, strict=True)):
            raise ArgumentError(f"{op}: src {src.shape} must be at least as large as index {index.shape} in every dim")
        s = src.shrink([(0, n) for n in index.shape]).cast(self.dtype)
    s = s.transpose(d, -1).unsqueeze(-1)
    x = self.transpose(d, -1)
    pads = [(0, a - b) for a, b in zip(x.shape[:-1], onehot.shape[:-2], strict=True)]
    onehot = onehot.pad([*pads, (0, 0), (0, 0)])
    s = s.pad([*pads, (0, 0), (0, 0)])
    return d, x, onehot, s


def scatter(self: Tensor, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:
    """Write `src` into self at `index` along `dim` (torch.scatter; repeated indices: the last write wins);
    `reduce='add'` or `'multiply'` combines with the existing value instead."""
    d, x, onehot, s = _scatter_parts(self, dim, index, src, "scatter")
    if reduce == "add":
        return (x + onehot.where(s, 0).sum(-2, dtype=self.dtype)).transpose(d, -1)
    if reduce == "multiply":
        return (x * onehot.where(s, 1).prod(-2).cast(self.dtype)).transpose(d, -1)
    if reduce is not None:
        raise ArgumentError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
    return _scatter_last(x, onehot, s).transpose(d, -1)


def _scatter_last(x: Tensor, onehot: Tensor, s: Tensor) -> Tensor:
    cls = x._tensor_class()
    m = onehot.shape[-2]
    order = cls.arange(1, m + 1, device=x.device, dtype=dtypes.int32).reshape(m, 1)
    last = onehot.where(order, 0).max(-2, keepdim=True)  # (..., 1, n)
    chosen = onehot & (order == last)
    zero = False if x.dtype is dtypes.bool else 0
    written = chosen.where(s, zero)
    written = written.max(-2) if x.dtype is dtypes.bool else written.sum(-2, dtype=x.dtype)
    return (last.squeeze(-2) > 0).where(written, x)


def scatter_reduce(
    self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True
) -> Tensor:
    """Combine `src` into self at `index` along `dim` with reduce 'sum', 'prod', 'mean', 'amax' or 'amin'
    (torch.scatter_reduce); with include_self=False the existing values of written elements are left out."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise ArgumentError(f"scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', got {reduce!r}")
    d, x, onehot, s = _scatter_parts(self, dim, index, src, "scatter_reduce")
    hit = onehot.any(-2)
    if reduce in ("sum", "mean"):
        total = onehot.where(s, 0).sum(-2, dtype=self.dtype)
        if reduce == "sum":
            out = total + x if include_self else hit.where(total, x)
        else:
            count = onehot.sum(-2) + (1 if include_self else 0)
            acc = total + x if include_self else total
            mean = acc / count.maximum(1)
            mean = mean if dtypes.is_float(self.dtype) else (acc // count.maximum(1)).cast(self.dtype)
            out = hit.where(mean.cast(self.dtype), x)
    elif reduce == "prod":
        p = onehot.where(s, 1).prod(-2).cast(self.dtype)
        out = p * x if include_self else hit.where(p, x)
    else:
        lowest = float("-inf") if dtypes.is_float(self.dtype) else self.dtype.min
        if reduce == "amax":
            m = onehot.where(s, lowest).max(-2)
            out = hit.where(m.maximum(x) if include_self else m, x)
        else:
            highest = float("inf") if dtypes.is_float(self.dtype) else self.dtype.max
            m = onehot.where(s, highest).min(-2)
            out = hit.where(m.minimum(x) if include_self else m, x)
    return out.transpose(d, -1)
