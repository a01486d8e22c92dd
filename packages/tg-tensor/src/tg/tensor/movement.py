"""Movement ops as Tensor methods: reshape, permute, expand, pad, shrink, flip and friends, cat and stack.

They only change the view: the scheduler turns them into index arithmetic, never into copies. These functions
are attached to `Tensor` in tensor.py; `self` is always a Tensor.
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from tg.ir import Ops, UOp, argsort, dtypes, least_upper_dtype
from tg.ir.uop import resolve, sint_to_uop
from tg.tensor.errors import ArgumentError, DimError, UnsupportedMode
from tg.tensor.shapes import (
    broadcast_shape,
    canonical_axis,
    concrete_dim,
    fmt_shape,
    is_symbolic,
    render_dim,
    same_dim,
    same_shape,
    shape_arg,
    simplify_dim,
)

if TYPE_CHECKING:
    from tg.tensor.tensor import Scalar, Tensor


def _new(like: Tensor, uop: UOp) -> Tensor:
    """A Tensor of `uop` (of `like`'s Tensor class)."""
    return like._tensor_class()(uop)


def reshape(self: Tensor, *shape: Any) -> Tensor:
    """Same data, new shape; one entry may be -1: `t.reshape(2, -1)`. Symbolic dims are allowed when the element
    counts agree symbolically (`t.reshape(v, 4)` for a tensor of `v*4` elements)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    old = self.uop.shape
    if all(s.__class__ is int and s >= 0 for s in (*shape, *old)) and math.prod(shape) == math.prod(old):
        return self if shape == old else _new(self, self.uop.reshape(shape))  # plain ints: nothing to canonicalise
    if any(s is None for s in shape):  # None keeps the dim at that position (tinygrad)
        if len(shape) > self.ndim:
            raise ArgumentError(f"reshape: None at a position past the {self.ndim} dims of {self.shape}")
        shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
    new: list[Any] = list(shape_arg(shape)) if shape else []
    ints = [s for s in new if isinstance(s, int)]
    if ints.count(-1) > 1:
        raise ArgumentError(f"reshape: only one dimension can be -1, got {fmt_shape(tuple(new))}")
    if any(s < -1 for s in ints):
        raise ArgumentError(f"reshape: negative dimension in {fmt_shape(tuple(new))}")
    numel = self.numel()
    if -1 in ints:
        rest = math.prod([s for s in new if not (isinstance(s, int) and s == -1)])
        if isinstance(rest, int) and isinstance(numel, int):
            if rest == 0 or numel % rest:
                raise ArgumentError(f"cannot reshape tensor of shape {self.shape} into shape {tuple(new)}")
            inferred: Any = numel // rest
        else:
            inferred = simplify_dim(numel // rest)
        new[next(i for i, s in enumerate(new) if isinstance(s, int) and s == -1)] = inferred
    if not same_dim(simplify_dim(math.prod(new)), numel):
        raise ArgumentError(
            f"cannot reshape tensor of shape {fmt_shape(self.shape)} into shape {fmt_shape(tuple(new))}"
        )
    return self if same_shape(tuple(new), self.shape) else _new(self, self.uop.reshape(tuple(new)))


def view(self: Tensor, *shape: Any) -> Tensor:
    """Alias of reshape; `t.view(dtype)` is a bitcast, as torch."""
    from tg.ir import DType

    if len(shape) == 1 and (isinstance(shape[0], (DType, str)) or type(shape[0]).__module__.split(".")[0] in (
        "numpy", "torch"
    ) or isinstance(shape[0], type)):  # fmt: skip
        return self.bitcast(shape[0])
    return self.reshape(*shape)


def permute(self: Tensor, *order: Any) -> Tensor:
    """Reorder the dimensions: `t.permute(2, 0, 1)`."""
    perm = [canonical_axis(a, self.ndim) for a in shape_arg(order)] if order else []
    if sorted(perm) != list(range(self.ndim)):
        raise ArgumentError(f"permute: {tuple(order)} is not a permutation of the {self.ndim} dims of {self.shape}")
    return self if perm == list(range(self.ndim)) else _new(self, self.uop.permute(tuple(perm)))


def expand(self: Tensor, *shape: Any) -> Tensor:
    """Broadcast size-1 dims to `shape` (-1 keeps a dim): `t.expand(4, -1)`."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if len(shape) >= len(have := self.uop.shape) and all(s.__class__ is int and s >= 0 for s in (*shape, *have)):
        # plain ints (the broadcasts of binary ops): nothing to canonicalise
        old = (1,) * (len(shape) - len(have)) + have
        if all(o == n or o == 1 for o, n in zip(old, shape, strict=True)):
            x = self.reshape(old) if len(old) != len(have) else self
            return x if shape == old else _new(x, x.uop.expand(shape))
    new = shape_arg(shape)
    if len(new) < self.ndim:
        raise ArgumentError(f"expand: cannot expand shape {self.shape} to {new} (fewer dims)")
    old = (1,) * (len(new) - self.ndim) + self.shape
    target = tuple(o if isinstance(n, int) and n == -1 else n for o, n in zip(old, new, strict=True))
    for o, n in zip(old, target, strict=True):
        if not same_dim(o, n) and not same_dim(o, 1):
            raise ArgumentError(f"expand: cannot expand shape {fmt_shape(self.shape)} to {fmt_shape(new)}")
    x = self.reshape(old) if len(old) != self.ndim else self
    return x if same_shape(target, x.shape) else _new(x, x.uop.expand(target))


def broadcast_uops(a: UOp, b: UOp) -> tuple[UOp, UOp] | None:
    """`a` and `b` broadcast to one shape, the nodes `broadcast_to` gives, when every dim is a plain int (else None;
    shapes that do not broadcast raise as in `broadcast_shape`)."""
    if not all(d.__class__ is int for d in (*a.shape, *b.shape)):
        return None
    shape = broadcast_shape(cast(tuple[int, ...], a.shape), cast(tuple[int, ...], b.shape))
    return _broadcast_uop(a, shape), _broadcast_uop(b, shape)


def _broadcast_uop(u: UOp, shape: tuple[int, ...]) -> UOp:
    if (have := cast(tuple[int, ...], u.shape)) == shape:
        return u
    if len(old := (1,) * (len(shape) - len(have)) + have) != len(have):
        u = u.reshape(old)
    return u if old == shape else u.expand(shape)


def broadcast_to(self: Tensor, shape: tuple[int, ...]) -> Tensor:
    if same_shape(self.shape, shape):
        return self
    if len(shape) < self.ndim:
        raise ArgumentError(f"cannot broadcast shape {self.shape} to {shape}")
    return self.expand(shape)


def _pad_pairs(self: Tensor, padding: Any) -> list[tuple[int, int]]:
    """Per-dim (before, after) pairs from either form: pairs/None per dim, or torch's flat tuple (last dim first)."""
    items = list(padding)
    if items and all(isinstance(p, int) for p in items):
        if len(items) % 2 or len(items) // 2 > self.ndim:
            raise ArgumentError(f"pad: a flat padding needs an even count of at most 2*{self.ndim} ints, got {padding}")
        flat = [(int(items[i]), int(items[i + 1])) for i in range(0, len(items), 2)]
        return [(0, 0)] * (self.ndim - len(flat)) + flat[::-1]
    if len(items) != self.ndim:
        raise ArgumentError(f"pad: need one (before, after) per dim of {self.shape}, got {tuple(padding)}")
    return [(0, 0) if p is None else (_amount(p[0]), _amount(p[1])) for p in items]


def _amount(x: Any) -> int:
    """A pad/shrink amount: an int, or a symbolic int kept as it is."""
    return simplify_dim(x) if is_symbolic(x) else int(x)  # type: ignore[return-value]


def pad(self: Tensor, padding: Any, mode: str = "constant", value: Scalar = 0) -> Tensor:
    """Pad each dim: `t.pad(((1, 1), None))` or torch's flat form `t.pad((left, right, top, bottom))`.

    `mode` is 'constant' (with `value`), 'reflect', 'replicate' or 'circular'; negative amounts crop.
    """
    pads = _pad_pairs(self, padding)
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise UnsupportedMode(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    if any(isinstance(p, UOp) for pair in pads for p in pair):  # a Variable amount: a gate in the kernel
        if mode != "constant":
            raise NotImplementedError(f"pad: mode={mode!r} by a symbolic amount; only 'constant' padding is symbolic")
        return _pad_constant(self, [(_resolved(b), _resolved(a)) for b, a in pads], value)
    if mode != "constant":  # the positive amounts pad the whole input (torch), then the negative ones crop
        grown = [(max(b, 0), max(a, 0)) for b, a in pads]
        x = _pad_mode(self, grown, mode) if any(b or a for b, a in grown) else self
        crop = [(-min(b, 0), s - max(-a, 0)) for (b, a), s in zip(pads, x.shape, strict=True)]
        if any(lo > hi for lo, hi in crop):
            raise ArgumentError(f"pad: negative padding {tuple(pads)} crops more than the dims of {self.shape}")
        return x.shrink(crop) if any(b < 0 or a < 0 for b, a in pads) else x
    x = self
    if any(b < 0 or a < 0 for b, a in pads):
        x = x.shrink([(-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pads, self.shape, strict=True)])
        pads = [(max(b, 0), max(a, 0)) for b, a in pads]
    if all(b == 0 and a == 0 for b, a in pads):
        return x
    return _pad_constant(x, pads, value)


def _resolved(x: Any) -> Any:
    """A symbolic pad amount that must not be negative for any bound value (checked with its bounds)."""
    if isinstance(x, UOp) and x.vmin < 0:
        raise ArgumentError(f"pad: the symbolic amount {x.render()} can be negative (down to {x.vmin})")
    return x


def _pad_constant(x: Tensor, pads: list[tuple[Any, Any]], value: Scalar) -> Tensor:
    padded = _new(x, x.uop.pad(tuple(pads)))
    if value == 0:
        return padded
    mask = _new(x, UOp.full(x.shape, True, dtypes.bool, x.device).pad(tuple(pads)))
    return mask.where(padded, value)


def _pad_mode(x: Tensor, pads: list[tuple[int, int]], mode: str) -> Tensor:
    """reflect / replicate / circular padding, one dim at a time, out of slices of x."""
    for d, (before, after) in enumerate(pads):
        n = x.shape[d]
        if not before and not after:
            continue
        if mode == "reflect" and (before >= n or after >= n):
            raise ArgumentError(f"pad: reflect padding ({before}, {after}) must be smaller than dim {d} of size {n}")
        if mode == "circular" and (before > n or after > n):
            raise ArgumentError(f"pad: circular padding ({before}, {after}) is larger than dim {d} of size {n}")
        if n == 0:
            raise ArgumentError(f"pad: cannot {mode}-pad the empty dim {d}")

        def part(lo: int, hi: int, d: int = d, src: Tensor = x) -> Tensor:
            bounds: list[tuple[int, int] | None] = [None] * src.ndim
            bounds[d] = (lo, hi)
            return src.shrink(bounds)

        pieces = []
        if mode == "reflect":
            pieces = [part(1, before + 1).flip(d), x, part(n - after - 1, n - 1).flip(d)]
        elif mode == "replicate":
            pieces = [part(0, 1).expand(*[before if i == d else -1 for i in range(x.ndim)]), x,
                      part(n - 1, n).expand(*[after if i == d else -1 for i in range(x.ndim)])]  # fmt: skip
        else:
            pieces = [part(n - before, n), x, part(0, after)]
        x = cat(*[p for p in pieces if p.shape[d] > 0], dim=d)
    return x


def shrink(self: Tensor, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    """Keep [start, end) of each dim: `t.shrink(((1, 3), None))`."""
    if len(arg) == len(shape := self.uop.shape):  # plain ints in range (windows, slices): nothing to canonicalise
        ints = tuple((0, s) if a is None else (a[0], a[1]) for a, s in zip(arg, shape, strict=True))
        if all(b.__class__ is int and e.__class__ is int and s.__class__ is int and 0 <= b <= e <= s
               for (b, e), s in zip(ints, shape, strict=True)):  # fmt: skip
            same = all(b == 0 and e == s for (b, e), s in zip(ints, shape, strict=True))
            return self if same else _new(self, self.uop.shrink(ints))
    if len(arg) != self.ndim:
        raise ArgumentError(f"shrink: need one (start, end) per dim of {self.shape}, got {tuple(arg)}")
    bounds = tuple(
        (0, s) if a is None else (_amount(a[0]), _amount(a[1])) for a, s in zip(arg, self.shape, strict=True)
    )
    for (b, e), s in zip(bounds, self.shape, strict=True):
        if not _in_order(0, b, e, s):
            raise ArgumentError(f"shrink: bounds {_fmt_bounds(bounds)} out of range for shape {fmt_shape(self.shape)}")
    if all(same_dim(b, 0) and same_dim(e, s) for (b, e), s in zip(bounds, self.shape, strict=True)):
        return self
    return _new(self, self.uop.shrink(bounds))


def _in_order(*xs: Any) -> bool:
    """0 <= start <= end <= size, symbolic entries evaluated at their bound values (and, where every value of the
    Variables is known to break it, refused too)."""
    if all(isinstance(x, int) for x in xs):
        return all(a <= b for a, b in itertools.pairwise(xs))
    vals = [concrete_dim(x) for x in xs]
    if not all(a <= b for a, b in itertools.pairwise(vals)):
        return False
    return all((not isinstance(b, UOp) and not isinstance(a, UOp)) or resolve(sint_to_uop(a) <= b)
               for a, b in itertools.pairwise(xs))  # fmt: skip


def _fmt_bounds(bounds: Any) -> str:
    return "(" + ", ".join(f"({render_dim(b)}, {render_dim(e)})" for b, e in bounds) + ")"


def flip(self: Tensor, axis: int | Sequence[int]) -> Tensor:
    """Reverse the order along `axis`: `t.flip(0)`."""
    given = [canonical_axis(a, self.ndim) for a in ([axis] if isinstance(axis, int) else axis)]
    axes = set(given)
    if len(axes) != len(given):
        raise ArgumentError(f"flip: dim {axis} repeats a dim of a {self.ndim}-d tensor")
    if not axes:
        return self
    return _new(self, self.uop.flip(tuple(i in axes for i in range(self.ndim))))


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
    return self.reshape(*self.shape[:s], simplify_dim(math.prod(self.shape[s : e + 1])), *self.shape[e + 1 :])


def squeeze(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """Remove size-1 dims (all, or those of `dim` (an int or a tuple) that have size 1)."""
    if dim is None:
        return self.reshape(tuple(s for s in self.shape if not same_dim(s, 1)))
    if self.ndim == 0:
        for d in [dim] if isinstance(dim, int) else dim:
            if d not in (0, -1):
                raise DimError(f"dimension {d} out of range for a 0-d tensor (valid: -1, 0)")
        return self
    dims = {canonical_axis(d, self.ndim) for d in ([dim] if isinstance(dim, int) else dim)}
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and same_dim(s, 1))))


def unsqueeze(self: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dim at `dim`: `t.unsqueeze(0)`."""
    d = canonical_axis(dim, self.ndim + 1)
    return self.reshape((*self.shape[:d], 1, *self.shape[d:]))


def _tensor_list(op: str, first: Any, rest: tuple[Any, ...]) -> list[Tensor]:
    """The tensors of `cat`/`stack` from any of: a.cat(b, c), Tensor.cat(a, b), Tensor.cat([a, b]), a.cat([b, c])."""
    items: list[Any] = []
    given = (first, *rest)
    for i, x in enumerate(given):
        if isinstance(x, (list, tuple)) and i != len(given) - 1:
            raise ArgumentError(f"{op}: a list of tensors must be the last argument (dim is a keyword: dim=...)")
        items.extend(x if isinstance(x, (list, tuple)) else [x])
    if not items:
        raise ArgumentError(f"{op} needs at least one tensor")
    tensors = [x for x in items if hasattr(x, "_tensor_class")]
    cls = tensors[0]._tensor_class() if tensors else None
    for x in items:
        if cls is None or not isinstance(x, cls):
            raise TypeError(f"{op} needs Tensors, got {type(x).__name__}")
    return items


def cat(self: Any, *others: Any, dim: int | None = None, axis: int | None = None) -> Tensor:
    """Concatenate along `dim`: `a.cat(b, dim=1)`, `Tensor.cat([a, b])`; other dims must match."""
    from tg.tensor.args import pick

    ts = _tensor_list("cat", self, others)
    first = ts[0]
    if first.ndim == 0:
        raise DimError("cat: zero-dimensional tensors cannot be concatenated (use stack)")
    d = canonical_axis(pick("cat", "dim", dim, "axis", axis, 0), first.ndim)
    for t in ts:
        if t.ndim != first.ndim or any(
            i != d and a != b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True))
        ):
            raise ArgumentError(f"cat: shapes {' and '.join(str(x.shape) for x in ts)} differ outside dim {d}")
        if t.device != first.device:
            raise RuntimeError(f"cat: tensors are on different devices: {first.device} and {t.device}")
    dt = least_upper_dtype(*[t.dtype for t in ts])
    ts = [t.cast(dt) for t in ts if t.shape[d] > 0] or [ts[0].cast(dt)]
    if len(ts) == 1:
        return ts[0]
    total, offset, out = sum(t.shape[d] for t in ts), 0, None
    for t in ts:
        pad = [(0, 0)] * first.ndim
        pad[d] = (offset, total - offset - t.shape[d])
        offset += t.shape[d]
        piece = t.pad(pad)
        out = piece if out is None else (out | piece if dt is dtypes.bool else out + piece)
    assert out is not None
    return out


def stack(self: Any, *others: Any, dim: int | None = None, axis: int | None = None) -> Tensor:
    """Stack same-shaped tensors along a new `dim`: `Tensor.stack(a, b)`, `Tensor.stack([a, b], dim=1)`."""
    from tg.tensor.args import pick

    tensors = _tensor_list("stack", self, others)
    where = pick("stack", "dim", dim, "axis", axis, 0)
    if not isinstance(where, int):
        raise ArgumentError(f"stack: dim must be an int, got {type(where).__name__}")
    d = canonical_axis(where, tensors[0].ndim + 1)
    for t in tensors:
        if t.shape != tensors[0].shape:
            raise ArgumentError(f"stack: shapes {' and '.join(str(x.shape) for x in tensors)} differ")
    return cat(*[t.unsqueeze(d) for t in tensors], dim=d)


# views a write can go through: each view element is at most one element of the source (PAD: padding is
# backed by nothing, so writes there are dropped; strided slices pad and then shrink the padding away)
_WRITABLE_VIEWS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.PAD})
_VIEWS = _WRITABLE_VIEWS | {Ops.EXPAND}
VIEW_OPS = _VIEWS  # movement ops: a tensor made only of these over a buffer is a view that aliases it


def view_base(target: UOp) -> UOp:
    """The node under the movement ops of `target` (a BUFFER or pending ASSIGN when target views storage)."""
    return target.base


def storage_base(target: UOp) -> UOp:
    """The node under the movement ops and pending assigns of `target` (a BUFFER or MULTI when it is storage)."""
    return under_assigns(target, _VIEWS)


RESHAPES = frozenset({Ops.RESHAPE})
# views -> pending ASSIGN -> the node under it (weak keys: an assign chain lives as long as its tensors)
_under_memo: dict[frozenset[Ops], weakref.WeakKeyDictionary[UOp, UOp]] = {}


def under_assigns(target: UOp, views: frozenset[Ops]) -> UOp:
    """The node under the ops `views` and the pending ASSIGNs of `target`. Each ASSIGN's answer is remembered, so
    a tensor assigned thousands of times (an ASSIGN chain as deep) is walked once, not once per assign."""
    if (memo := _under_memo.get(views)) is None:
        memo = _under_memo[views] = weakref.WeakKeyDictionary()
    passed: list[UOp] = []
    while target.op in views or target.op is Ops.ASSIGN:
        if target.op is Ops.ASSIGN:
            if (known := memo.get(target)) is not None:
                target = known
                break
            passed.append(target)
        target = target.src[0]
    for a in passed:
        memo[a] = target
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
        raise ArgumentError(f"assign target has no device: {node.op}")
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


# ---- composite movement: repeat, split, roll, windows, triangles --------------------------------------------------


def repeat(self: Tensor, repeats: Any, *more: int) -> Tensor:
    """Tile the tensor `repeats[i]` times along dim i (torch's `repeat`, numpy's `tile`): `t.repeat(2, 1)`."""
    reps = shape_arg((repeats, *more))
    if len(reps) < self.ndim:
        raise ArgumentError(f"repeat: need at least {self.ndim} repeat counts for shape {self.shape}, got {reps}")
    if any(r < 0 for r in reps):
        raise ArgumentError(f"repeat: repeat counts must be non-negative, got {reps}")
    base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
    paired = base.reshape(tuple(d for s in base.shape for d in (1, s)))
    expanded = paired.expand(tuple(d for r, s in zip(reps, base.shape, strict=True) for d in (r, s)))
    return expanded.reshape(tuple(r * s for r, s in zip(reps, base.shape, strict=True)))


def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along `dim` (the flattened tensor if None): [1, 2] -> [1, 1, 2, 2]."""
    if not isinstance(repeats, int) or repeats < 0:
        raise ArgumentError(f"repeat_interleave: repeats must be a non-negative int, got {repeats!r}")
    x = self.flatten() if dim is None else self
    d = canonical_axis(0 if dim is None else dim, x.ndim)
    x = x.unsqueeze(d + 1)
    x = x.expand(*[repeats if i == d + 1 else -1 for i in range(x.ndim)])
    return x.flatten(d, d + 1)


def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces of `sizes` elements along `dim` (an int: equal pieces, the last may be smaller)."""
    d = canonical_axis(dim, self.ndim)
    n = self.shape[d]
    if isinstance(sizes, int):
        if sizes <= 0:
            raise ArgumentError(f"split: the piece size must be positive, got {sizes}")
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    sizes = list(sizes)
    if sum(sizes) != n or any(s < 0 for s in sizes):
        raise ArgumentError(f"split: sizes {sizes} do not add up to {n}, the size of dim {d} of {self.shape}")
    out, start = [], 0
    for s in sizes:
        bounds: list[tuple[int, int] | None] = [None] * self.ndim
        bounds[d] = (start, start + s)
        out.append(self.shrink(bounds))
        start += s
    return tuple(out)


def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """At most `chunks` pieces of equal size (the last may be smaller) along `dim`, as torch."""
    if not isinstance(chunks, int) or chunks <= 0:
        raise ArgumentError(f"chunk: chunks must be a positive int, got {chunks!r}")
    d = canonical_axis(dim, self.ndim)
    n = self.shape[d]
    return split(self, max(1, math.ceil(n / chunks)), d) if n else (self,) * chunks


def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    """Split dim `dim` into `sizes` (one may be -1): `t.unflatten(1, (2, -1))`."""
    d = canonical_axis(dim, self.ndim)
    return self.reshape(*self.shape[:d], *sizes, *self.shape[d + 1 :])


def roll(self: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Rotate elements by `shifts` along `dims` (the flattened tensor if None), as torch.roll."""
    if dims is None:  # the flattened tensor (one shift, also as a 1-sequence)
        if not isinstance(shifts, int) and len(shifts) != 1:
            raise ArgumentError(f"roll: {len(shifts)} shifts need as many dims=, got none")
        return roll(self.flatten(), shifts if isinstance(shifts, int) else shifts[0], 0).reshape(self.shape)
    shift_list = [shifts] if isinstance(shifts, int) else list(shifts)
    dim_list = [dims] if isinstance(dims, int) else list(dims)
    if len(shift_list) != len(dim_list):
        raise ArgumentError(f"roll: {len(shift_list)} shifts for {len(dim_list)} dims")
    x = self
    for s, dim in zip(shift_list, dim_list, strict=True):
        d = canonical_axis(dim, x.ndim)
        n = x.shape[d]
        if n == 0 or s % n == 0:
            continue
        head, tail = split(x, [n - s % n, s % n], d)
        x = cat(tail, head, dim=d)
    return x


def windows(self: Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Tensor:
    """Sliding windows over the last len(kernel) dims: (..., i1, i2) -> (..., o1, o2, k1, k2), movement ops only.

    Row j of a window is found by repeating the dim and reshaping rows of length L = i*f + d: row j then starts at
    element j*d (mod i), so window element (o, j) is element o*stride + j*dilation with no arithmetic.
    """
    n = len(kernel)
    lead, sizes = self.shape[:-n], self.shape[-n:]
    outs = []
    for i, k, s, d in zip(sizes, kernel, stride, dilation, strict=True):
        if d * (k - 1) + 1 > i:
            raise ArgumentError(f"window of size {k} (dilation {d}) is larger than the input size {i}")
        outs.append((i - d * (k - 1) - 1) // s + 1)
    nl = len(lead)
    if all(d == 1 and k <= s for k, s, d in zip(kernel, stride, dilation, strict=True)):
        # windows that do not overlap (a 2x2 pool of stride 2): rows of `s` elements cut to `k`, no repeat, so the
        # indices stay affine and a gradient through them is a plain reshape (the repeat's modulo indexing made a
        # max pool's backward one scalar kernel of divisions and remainders)
        x = self.shrink([None] * nl + [(0, o * s) for o, s in zip(outs, stride, strict=True)])
        x = x.reshape(*lead, *[v for o, s in zip(outs, stride, strict=True) for v in (o, s)])
        x = x.shrink([None] * nl + [(0, v) for o, k in zip(outs, kernel, strict=True) for v in (o, k)])
        return x.permute(*range(nl), *[nl + 2 * j for j in range(n)], *[nl + 2 * j + 1 for j in range(n)])
    rows = [
        i * max(1, math.ceil((o * s - d) / i)) + d for i, o, s, d in zip(sizes, outs, stride, dilation, strict=True)
    ]
    x = self.repeat(*[1] * len(lead), *[math.ceil(k * L / i) for k, L, i in zip(kernel, rows, sizes, strict=True)])
    x = x.shrink([None] * len(lead) + [(0, k * L) for k, L in zip(kernel, rows, strict=True)])
    x = x.reshape(*lead, *[v for k, L in zip(kernel, rows, strict=True) for v in (k, L)])
    x = x.shrink(
        [None] * len(lead) + [(0, v) for k, o, s in zip(kernel, outs, stride, strict=True) for v in (k, o * s)]
    )
    x = x.reshape(*lead, *[v for k, o, s in zip(kernel, outs, stride, strict=True) for v in (k, o, s)])
    x = x.shrink([None] * len(lead) + [(0, v) for k, o in zip(kernel, outs, strict=True) for v in (k, o, 1)])
    x = x.reshape(*lead, *[v for k, o in zip(kernel, outs, strict=True) for v in (k, o)])
    return x.permute(*range(nl), *[nl + 2 * j + 1 for j in range(n)], *[nl + 2 * j for j in range(n)])


def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:
    """Windows of `size` every `step` along `dim`: dim becomes the window count, the window is a new last dim."""
    d = canonical_axis(dim, self.ndim)
    if size < 0 or step <= 0:
        raise ArgumentError(f"unfold: size must be >= 0 and step > 0, got size={size}, step={step}")
    if size > self.shape[d]:
        raise ArgumentError(f"unfold: size {size} is larger than dim {d} of {self.shape}")
    x = self.transpose(d, -1) if d != self.ndim - 1 else self
    if size == 0:  # (n - 0) // step + 1 empty windows
        w = x[..., : (self.shape[d] // step + 1)].unsqueeze(-1)[..., :0]
        return w.transpose(d, -2) if d != self.ndim - 1 else w
    w = windows(x, (size,), (step,), (1,))  # (..., o, size) with dim d's other dims permuted
    if d != self.ndim - 1:
        w = w.transpose(d, -2)
    return w


def _triangle(self: Tensor, diagonal: int, lower: bool) -> Tensor:
    cls = self._tensor_class()
    if self.ndim < 2:
        raise ArgumentError(f"{'tril' if lower else 'triu'} needs at least 2 dims, got shape {self.shape}")
    r, c = self.shape[-2:]
    rows = cls.arange(r, device=self.device).reshape(r, 1)
    cols = cls.arange(c, device=self.device).reshape(1, c)
    keep = (cols <= rows + diagonal) if lower else (cols >= rows + diagonal)
    return keep.where(self, self.zeros_like() if self.dtype is not dtypes.bool else False)


def tril(self: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (elements above `diagonal` zeroed)."""
    return _triangle(self, diagonal, True)


def triu(self: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (elements below `diagonal` zeroed)."""
    return _triangle(self, diagonal, False)


def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of dims (dim1, dim2) as a new last dim, as torch.diagonal."""
    a, b = canonical_axis(dim1, self.ndim), canonical_axis(dim2, self.ndim)
    if a == b:
        raise ArgumentError(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2}")
    rest = [i for i in range(self.ndim) if i not in (a, b)]
    x = self.permute(*rest, a, b)
    r, c = x.shape[-2:]
    x = x.shrink([None] * len(rest) + [(max(0, -offset), r), (max(0, offset), c)]) if r and c else x
    n = max(0, min(x.shape[-2], x.shape[-1]))
    x = x.shrink([None] * len(rest) + [(0, n), (0, n)])
    # element (i, i) of an n x n matrix is every (n+1)-th element of the flattened matrix
    flat = x.reshape(*x.shape[:-2], n * n)
    if n == 0:
        return flat
    flat = flat.pad([(0, 0)] * len(rest) + [(0, n)]).reshape(*x.shape[:-2], n, n + 1)
    return flat.shrink([None] * len(rest) + [None, (0, 1)]).reshape(*x.shape[:-2], n)


def diag(self: Tensor, diagonal: int = 0) -> Tensor:
    """1-D: a square matrix with self on `diagonal`; 2-D: the diagonal (torch.diag)."""
    cls = self._tensor_class()
    if self.ndim == 2:
        return self.diagonal(diagonal)
    if self.ndim != 1:
        raise ArgumentError(f"diag needs a 1-d or 2-d tensor, got shape {self.shape}")
    n = self.shape[0] + abs(diagonal)
    eye = cls.eye(self.shape[0], dtype=dtypes.bool, device=self.device)
    m = eye.where(self.reshape(1, -1), self.zeros_like().reshape(1, -1))
    return m.pad(((max(0, -diagonal), max(0, diagonal)), (max(0, diagonal), max(0, -diagonal))))[:n, :n]


def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 1-D tensors: `x.meshgrid(y)`, indexing 'ij' (matrix) or 'xy' (Cartesian)."""
    if indexing not in ("ij", "xy"):
        raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = [t.reshape(1) if t.ndim == 0 else t for t in _tensor_list("meshgrid", self, args)]  # a scalar: 1 element
    for t in ts:
        if t.ndim != 1:
            raise ArgumentError(f"meshgrid needs 1-d tensors, got shape {t.shape}")
    shape = tuple(t.shape[0] for t in ts)
    grids = [t.reshape(*[-1 if i == j else 1 for i in range(len(ts))]).expand(shape) for j, t in enumerate(ts)]
    if indexing == "xy" and len(ts) >= 2:  # Cartesian: the first two output dims swap
        grids = [g.transpose(0, 1) for g in grids]
    return tuple(grids)
