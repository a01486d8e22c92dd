"""Movement ops as Tensor methods: reshape, permute, expand, pad, shrink, flip and friends, cat and stack.

They only change the view: the scheduler turns them into index arithmetic, never into copies. These functions
are attached to `Tensor` in tensor.py; `self` is always a Tensor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tg.ir import Ops, UOp, argsort, dtypes, least_upper_dtype
from tg.tensor.shapes import canonical_axis, shape_arg

if TYPE_CHECKING:
    from tg.tensor.tensor import Scalar, Tensor


def _new(uop: UOp) -> Tensor:
    from tg.tensor.tensor import Tensor

    return Tensor(uop)


def reshape(self: Tensor, *shape: Any) -> Tensor:
    """Same data, new shape; one entry may be -1: `t.reshape(2, -1)`."""
    new = list(shape_arg(shape)) if shape else []
    if new.count(-1) > 1:
        raise ValueError(f"reshape: only one dimension can be -1, got {tuple(new)}")
    if any(s < -1 for s in new):
        raise ValueError(f"reshape: negative dimension in {tuple(new)}")
    if -1 in new:
        rest = int(math.prod([s for s in new if s != -1]))
        if rest == 0 or self.numel() % rest:
            raise ValueError(f"cannot reshape tensor of shape {self.shape} into shape {tuple(new)}")
        new[new.index(-1)] = self.numel() // rest
    if int(math.prod(new)) != self.numel():
        raise ValueError(f"cannot reshape tensor of shape {self.shape} into shape {tuple(new)}")
    return self if tuple(new) == self.shape else _new(self.uop.reshape(tuple(new)))


def view(self: Tensor, *shape: Any) -> Tensor:
    """Alias of reshape."""
    return self.reshape(*shape)


def permute(self: Tensor, *order: Any) -> Tensor:
    """Reorder the dimensions: `t.permute(2, 0, 1)`."""
    perm = [canonical_axis(a, self.ndim) for a in shape_arg(order)] if order else []
    if sorted(perm) != list(range(self.ndim)):
        raise ValueError(f"permute: {tuple(order)} is not a permutation of the {self.ndim} dims of {self.shape}")
    return self if perm == list(range(self.ndim)) else _new(self.uop.permute(tuple(perm)))


def expand(self: Tensor, *shape: Any) -> Tensor:
    """Broadcast size-1 dims to `shape` (-1 keeps a dim): `t.expand(4, -1)`."""
    new = shape_arg(shape)
    if len(new) < self.ndim:
        raise ValueError(f"expand: cannot expand shape {self.shape} to {new} (fewer dims)")
    old = (1,) * (len(new) - self.ndim) + self.shape
    target = tuple(o if n == -1 else n for o, n in zip(old, new, strict=True))
    for o, n in zip(old, target, strict=True):
        if o != n and o != 1:
            raise ValueError(f"expand: cannot expand shape {self.shape} to {new}")
    x = self.reshape(old) if old != self.shape else self
    return x if target == x.shape else _new(x.uop.expand(target))


def broadcast_to(self: Tensor, shape: tuple[int, ...]) -> Tensor:
    if self.shape == shape:
        return self
    if len(shape) < self.ndim:
        raise ValueError(f"cannot broadcast shape {self.shape} to {shape}")
    return self.expand(shape)


def pad(self: Tensor, padding: Sequence[tuple[int, int] | None], value: Scalar = 0) -> Tensor:
    """Pad each dim with (before, after) elements of `value` (negative amounts crop): `t.pad(((1, 1), None))`."""
    if len(padding) != self.ndim:
        raise ValueError(f"pad: need one (before, after) per dim of {self.shape}, got {tuple(padding)}")
    pads = [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]
    x = self
    if any(b < 0 or a < 0 for b, a in pads):
        x = x.shrink([(-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pads, self.shape, strict=True)])
        pads = [(max(b, 0), max(a, 0)) for b, a in pads]
    if all(b == 0 and a == 0 for b, a in pads):
        return x
    padded = _new(x.uop.pad(tuple(pads)))
    if value == 0:
        return padded
    mask = _new(UOp.full(x.shape, True, dtypes.bool, x.device).pad(tuple(pads)))
    return mask.where(padded, value)


def shrink(self: Tensor, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    """Keep [start, end) of each dim: `t.shrink(((1, 3), None))`."""
    if len(arg) != self.ndim:
        raise ValueError(f"shrink: need one (start, end) per dim of {self.shape}, got {tuple(arg)}")
    bounds = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape, strict=True))
    for (b, e), s in zip(bounds, self.shape, strict=True):
        if not 0 <= b <= e <= s:
            raise ValueError(f"shrink: bounds {bounds} out of range for shape {self.shape}")
    if all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape, strict=True)):
        return self
    return _new(self.uop.shrink(bounds))


def flip(self: Tensor, axis: int | Sequence[int]) -> Tensor:
    """Reverse the order along `axis`: `t.flip(0)`."""
    axes = {canonical_axis(a, self.ndim) for a in ([axis] if isinstance(axis, int) else axis)}
    if not axes:
        return self
    return _new(self.uop.flip(tuple(i in axes for i in range(self.ndim))))


def transpose(self: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:
    """Swap two dims (default: the first two)."""
    order = list(range(self.ndim))
    a, b = canonical_axis(dim0, self.ndim), canonical_axis(dim1, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)


def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dims start_dim..end_dim into one."""
    if self.ndim == 0:
        return self.reshape(1)
    s, e = canonical_axis(start_dim, self.ndim), canonical_axis(end_dim, self.ndim)
    return self.reshape(*self.shape[:s], int(math.prod(self.shape[s : e + 1])), *self.shape[e + 1 :])


def squeeze(self: Tensor, dim: int | None = None) -> Tensor:
    """Remove size-1 dims (all, or just `dim` if it has size 1)."""
    if dim is None:
        return self.reshape(tuple(s for s in self.shape if s != 1))
    if self.ndim == 0:
        return self
    d = canonical_axis(dim, self.ndim)
    return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1 :])


def unsqueeze(self: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dim at `dim`: `t.unsqueeze(0)`."""
    d = canonical_axis(dim, self.ndim + 1)
    return self.reshape((*self.shape[:d], 1, *self.shape[d:]))


def cat(self: Tensor, *others: Tensor, dim: int = 0) -> Tensor:
    """Concatenate along `dim`: `a.cat(b, dim=1)`; other dims must match."""
    ts = [self, *others]
    d = canonical_axis(dim, self.ndim)
    for t in ts:
        if t.ndim != self.ndim or any(
            i != d and a != b for i, (a, b) in enumerate(zip(t.shape, self.shape, strict=True))
        ):
            raise ValueError(f"cat: shapes {' and '.join(str(x.shape) for x in ts)} differ outside dim {d}")
    dt = least_upper_dtype(*[t.dtype for t in ts])
    ts = [t.cast(dt) for t in ts]
    total, offset, out = sum(t.shape[d] for t in ts), 0, None
    for t in ts:
        pad = [(0, 0)] * self.ndim
        pad[d] = (offset, total - offset - t.shape[d])
        offset += t.shape[d]
        piece = t.pad(pad)
        out = piece if out is None else (out | piece if dt is dtypes.bool else out + piece)
    assert out is not None
    return out


def stack(*tensors: Tensor, dim: int = 0) -> Tensor:
    """Stack same-shaped tensors along a new `dim`: `Tensor.stack(a, b)`."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise ValueError("stack needs at least one tensor")
    d = canonical_axis(dim, tensors[0].ndim + 1)
    for t in tensors:
        if t.shape != tensors[0].shape:
            raise ValueError(f"stack: shapes {' and '.join(str(x.shape) for x in tensors)} differ")
    return tensors[0].unsqueeze(d).cat(*[t.unsqueeze(d) for t in tensors[1:]], dim=d)


# views a write can go through: each view element is at most one element of the source (PAD: padding is
# backed by nothing, so writes there are dropped; strided slices pad and then shrink the padding away)
_WRITABLE_VIEWS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.PAD})
_VIEWS = _WRITABLE_VIEWS | {Ops.EXPAND}


def view_base(target: UOp) -> UOp:
    """The node under the movement ops of `target` (a BUFFER or pending ASSIGN when target views storage)."""
    while target.op in _VIEWS:
        target = target.src[0]
    return target


def assign_into_view(target: UOp, value: UOp) -> UOp:
    """`target` (movement ops over a BUFFER or a pending ASSIGN of one) after writing `value` into the elements
    it views: `value` and a mask of the written positions are mapped back through each movement op, the whole
    base is assigned `mask.where(value, old)`, and the movement ops are replayed on that ASSIGN."""
    views: list[UOp] = []
    node = target
    while node.op in _VIEWS:
        if node.op not in _WRITABLE_VIEWS:
            raise NotImplementedError(
                f"assign into an expanded (broadcast) view of shape {node.shape} is not supported: "
                "several of its elements are one element of the buffer"
            )
        views.append(node)
        node = node.src[0]
    if (device := node.device) is None:
        raise ValueError(f"assign target has no device: {node.op}")
    mask = UOp.full(target.shape, True, dtypes.bool, device)
    for v in views:  # from the view down to the base: undo each op
        src_shape = v.src[0].shape
        if v.op is Ops.RESHAPE:
            value, mask = value.reshape(src_shape), mask.reshape(src_shape)
        elif v.op is Ops.PERMUTE:
            inverse = tuple(argsort(v.arg))
            value, mask = value.permute(inverse), mask.permute(inverse)
        elif v.op is Ops.FLIP:
            value, mask = value.flip(v.arg), mask.flip(v.arg)
        elif v.op is Ops.PAD:  # what was written into the padding has nowhere to go
            bounds = tuple((b, b + s) for (b, _), s in zip(v.arg, src_shape, strict=True))
            value, mask = value.shrink(bounds), mask.shrink(bounds)
        else:  # SHRINK: the rest of the source is padding, masked off
            padding = tuple((b, s - e) for (b, e), s in zip(v.arg, src_shape, strict=True))
            value, mask = value.pad(padding), mask.pad(padding)
    out = node.assign(mask.where(value, node))
    for v in reversed(views):
        out = v.replace(src=(out, *v.src[1:]))
    return out
