"""Multi-device tensors: push MULTI nodes up to the roots so that the scheduler only sees single-device graphs.

A sharded tensor is ``MULTI(shard_0, ..., shard_n-1, arg=axis)``: shard i is an ordinary graph on device i holding
the i-th equal slice of the logical tensor on ``axis``; ``axis=None`` means replicated (every device holds it all).
Constants on a device tuple are replicated. Uneven shards (an axis length that is not a multiple of n) are the
tensor padded to n ceil-size slices, shown through a SHRINK of the MULTI: ``Sharded.valid`` keeps the real length,
reductions over the axis skip the padding and gathers drop it.

``push_multi`` rewrites a graph whose leaves include MULTI nodes into one whose MULTI nodes sit only at the top:
each op becomes one op per device (the rules below, by op group), with the data movement the op needs made
explicit as COPYs:

- elementwise ops run per shard once every source is on the first sharded source's axis (a replicated source is
  sliced locally, a source sharded on another axis is resharded: all-gather, then sliced);
- reductions not over the sharded axis run per shard; over it, each device reduces its shard and an *allreduce*
  combines the partial results (naive: every device copies every other partial, n(n-1) full copies; ring:
  reduce-scatter + all-gather of n chunks, 2n(n-1) chunk copies of ~1/n the size), leaving a replicated result;
- movement ops that keep the sharded axis whole run per shard (reshape moves the axis to the output dim with the
  same prefix size); the others all-gather to replicated first;
- a COPY to one device gathers the shards (or copies device 0's replica); ASSIGN into a sharded target writes each
  shard on its device (the value resharded to the target's axis first); MSELECT(x, i) is shard i.

``ALLREDUCE`` (``auto`` | ``naive`` | ``ring``; auto: ring for more than 2 devices and more than
``RING_ALLREDUCE_THRESHOLD`` elements) picks the allreduce.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tg.ir import GroupOp, Ops, UOp, dtypes
from tg.ir.helpers import ALLREDUCE, RING_ALLREDUCE_THRESHOLD

__all__ = ["ALLREDUCE", "RING_ALLREDUCE_THRESHOLD", "Sharded", "allreduce", "push_multi"]


@dataclass(frozen=True)
class Sharded:
    """A logical tensor as one graph per device; `axis` is the sharded axis (None: each graph holds everything).

    Uneven shards (`valid` set): the shards have the same size c on `axis` (ceil(valid / n)) and hold the logical
    tensor padded to c * n there; shard i's first `clamp(valid - i * c, 0, c)` elements are real, the rest padding
    that no result ever shows (reductions over `axis` skip it, gathers drop it)."""

    shards: tuple[UOp, ...]
    axis: int | None
    valid: int | None = None

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(str(s.device) for s in self.shards)

    @property
    def n(self) -> int:
        return len(self.shards)

    @property
    def chunk(self) -> int:
        """The shards' size on the sharded axis."""
        assert self.axis is not None
        return int(self.shards[0].shape[self.axis])

    def valid_in(self, i: int) -> int:
        """How many elements of shard i on the sharded axis are real (not padding)."""
        return self.chunk if self.valid is None else max(0, min(self.chunk, self.valid - i * self.chunk))

    def to_uop(self) -> UOp:
        multi = UOp(Ops.MULTI, self.shards[0].dtype, self.shards, self.axis)
        if self.valid is None:
            return multi
        assert self.axis is not None
        return multi.shrink(
            tuple((0, self.valid) if i == self.axis else (0, int(s)) for i, s in enumerate(multi.shape))
        )


# ---- data movement between shards ------------------------------------------------------------------------------


def _concat(pieces: Sequence[UOp], axis: int) -> UOp:
    """Pieces (all on one device) side by side on `axis`, as pads summed (OR for bools)."""
    total = sum(int(p.shape[axis]) for p in pieces)
    out: UOp | None = None
    offset = 0
    for p in pieces:
        pad = [(0, 0)] * len(p.shape)
        pad[axis] = (offset, total - offset - int(p.shape[axis]))
        offset += int(p.shape[axis])
        padded = p.pad(tuple(pad))
        out = padded if out is None else out.alu(Ops.OR if p.dtype is dtypes.bool else Ops.ADD, padded)
    assert out is not None
    return out


def _to_device(u: UOp, device: str) -> UOp:
    return u if u.device == device else u.copy_to_device(device)


def _real_part(x: Sharded, i: int) -> UOp | None:
    """Shard i without its padding (None when it holds none of the tensor)."""
    s, v = x.shards[i], x.valid_in(i)
    if v == x.chunk:
        return s
    if v == 0:
        return None
    assert x.axis is not None
    return s.shrink(tuple((0, v) if j == x.axis else (0, int(d)) for j, d in enumerate(s.shape)))


def _gather_to(x: Sharded, device: str) -> UOp:
    """The whole logical tensor of a sharded `x` on one device (the real parts of the shards, concatenated)."""
    assert x.axis is not None
    parts = [p for i in range(x.n) if (p := _real_part(x, i)) is not None]
    return _concat([_to_device(p, device) for p in parts], x.axis)


def all_gather(x: Sharded) -> Sharded:
    """Every device gets the whole tensor (n(n-1) shard copies); a replicated input is returned as is."""
    if x.axis is None:
        return x
    return Sharded(tuple(_gather_to(x, d) for d in x.devices), None)


def _slice_local(x: Sharded, axis: int, valid: int | None = None) -> Sharded:
    """A replicated tensor cut to each device's own slice on `axis` (no copies); with `valid` (the axis length),
    into ceil-size slices of the tensor padded to n slices."""
    assert x.axis is None
    shape = x.shards[0].shape
    size = int(shape[axis])
    if valid is None and size % x.n:
        raise ValueError(f"cannot shard shape {tuple(shape)} on axis {axis} over {x.n} devices: {size} % {x.n} != 0")
    chunk = -(-size // x.n)
    out = []
    for i, s in enumerate(x.shards):
        if chunk * x.n != size:
            s = s.pad(tuple((0, chunk * x.n - size) if j == axis else (0, 0) for j in range(len(shape))))
        arg = [(0, int(d)) for d in s.shape]
        arg[axis] = (i * chunk, (i + 1) * chunk)
        out.append(s.shrink(tuple(arg)))
    return Sharded(tuple(out), axis, None if chunk * x.n == size else size)


def reshard(x: Sharded, axis: int | None, valid: int | None = None) -> Sharded:
    """`x` with its shards on `axis` (None: replicated); `valid`: uneven shards of that axis length."""
    if x.axis == axis and x.valid == valid:
        return x
    gathered = all_gather(x)
    return gathered if axis is None else _slice_local(gathered, axis, valid)


# ---- allreduce -----------------------------------------------------------------------------------------------

_COMBINE = {Ops.ADD: Ops.ADD, Ops.MUL: Ops.MUL, Ops.MAX: Ops.MAX}


def _combine(op: Ops, a: UOp, b: UOp) -> UOp:
    if op is Ops.ADD and a.dtype is dtypes.bool:
        return a.alu(Ops.OR, b)
    return a.alu(_COMBINE[op], b)


def _use_ring(n: int, numel: int) -> bool:
    mode = str(ALLREDUCE.value).lower()
    if mode not in ("auto", "naive", "ring"):
        raise ValueError(f"ALLREDUCE must be auto, naive or ring, got {ALLREDUCE.value!r}")
    if mode == "auto":
        return n > 2 and numel > int(RING_ALLREDUCE_THRESHOLD.value)
    return mode == "ring" and n > 1


def allreduce(op: Ops, parts: Sequence[UOp]) -> tuple[UOp, ...]:
    """Combine per-device partial values (same shape, one per device) with `op`: every device gets the result."""
    n = len(parts)
    shape = parts[0].shape
    numel = math.prod(int(s) for s in shape)
    if n == 1:
        return tuple(parts)
    if not _use_ring(n, numel) or numel < n:
        # every device combines the parts in the same order (device 0's first): float sums then agree bit for bit
        # across the replicas, which a data-parallel step needs (own-part-first orders drift apart from 3 devices on)
        out = []
        for pj in parts:
            here = [pi if pi is pj else _to_device(pi, str(pj.device)) for pi in parts]
            acc = here[0]
            for pi in here[1:]:
                acc = _combine(op, acc, pi)
            out.append(acc)
        return tuple(out)
    # ring: flatten, split into n chunks (multiples of `factor` elements), reduce-scatter then all-gather
    factor = next(f for f in (32, 16, 8, 4, 2, 1) if numel % f == 0)
    base, left = divmod(numel // factor, n)
    sizes = [(base + 1) * factor if i < left else base * factor for i in range(n)]
    starts = [sum(sizes[:i]) for i in range(n)]
    flat = [p.reshape((numel,)) for p in parts]
    devices = [str(p.device) for p in parts]

    def chunk(i: int, dev: int) -> UOp:
        return flat[dev].shrink(((starts[i], starts[i] + sizes[i]),))

    reduced: list[tuple[UOp, int]] = []  # chunk i: (reduced value, device holding it)
    for i in range(n):
        acc, holder = chunk(i, i), i
        for s in range(n - 1):
            holder = (i + s + 1) % n
            acc = _combine(op, acc.copy_to_device(devices[holder]), chunk(i, holder))
        reduced.append((acc, holder))
    out = []
    for d in range(n):
        pieces = []
        for value, holder in reduced:
            # pass the chunk along the ring from its holder to device d
            cur, at = value, holder
            while at != d:
                at = (at + 1) % n
                cur = cur.copy_to_device(devices[at])
            pieces.append(cur)
        out.append(_concat(pieces, 0).reshape(tuple(shape)))
    return tuple(out)


# ---- the rules ---------------------------------------------------------------------------------------------------

Value = UOp | Sharded


def _as_sharded(v: Value, like: Sharded) -> Sharded:
    """A source of an op with sharded sources, as shards on `like`'s devices."""
    if isinstance(v, Sharded):
        if v.devices != like.devices:
            raise ValueError(f"tensors are on different device tuples: {v.devices} and {like.devices}")
        return v
    raise ValueError(
        f"an op mixes a tensor on {v.device} with a tensor sharded over {like.devices}; use .to() or .shard() first"
    )


def _elementwise(u: UOp, srcs: list[Value]) -> Sharded:
    sharded = [s for s in srcs if isinstance(s, Sharded)]
    first = next((s for s in sharded if s.axis is not None), None)
    axis, valid = (None, None) if first is None else (first.axis, first.valid)
    parts = [reshard(_as_sharded(s, sharded[0]), axis, valid) for s in srcs]
    n = sharded[0].n
    return Sharded(tuple(u.replace(src=tuple(p.shards[i] for p in parts)) for i in range(n)), axis, valid)


def _per_shard(u: UOp, x: Sharded, arg: object, axis: int | None, valid: int | None = None) -> Sharded:
    return Sharded(tuple(u.replace(src=(s, *u.src[1:]), arg=arg) for s in x.shards), axis, valid)


def _shard_shape(shape: tuple, axis: int | None, chunk: int) -> tuple:
    return tuple(chunk if i == axis else s for i, s in enumerate(shape))


# what a reduction of no elements gives (the shards that hold only padding contribute it)
_IDENTITY = {Ops.ADD: 0, Ops.MUL: 1}


def _reduce(u: UOp, x: Sharded) -> Sharded:
    op, axes = u.arg
    if x.axis is None or x.axis not in axes:
        return _per_shard(u, x, u.arg, x.axis, x.valid)
    partial = []
    for i, s in enumerate(x.shards):
        if (real := _real_part(x, i)) is not None:
            partial.append(real.r(op, axes))
        else:
            shape = tuple(1 if j in axes else d for j, d in enumerate(s.shape))
            ident = _IDENTITY.get(op, s.dtype.min)
            partial.append(UOp.full(shape, ident, s.dtype, str(s.device)))
    return Sharded(allreduce(op, partial), None)


def _reshape(u: UOp, x: Sharded) -> Sharded:
    if x.axis is None:
        return _per_shard(u, x, u.arg, None)
    old, new, n = [int(s) for s in u.src[0].shape], [int(s) for s in u.arg], x.n
    prefix = math.prod(old[: x.axis])
    for j in range(len(new)):
        if math.prod(new[:j]) != prefix:
            continue
        if x.valid is None and new[j] % n == 0 and new[j] >= n:
            return _per_shard(u, x, _shard_shape(tuple(new), j, new[j] // n), j)
        if x.valid is not None and new[j] == old[x.axis]:  # uneven shards: the sharded dim itself must stay
            return _per_shard(u, x, _shard_shape(tuple(new), j, x.chunk), j, x.valid)
    return _per_shard(u, all_gather(x), u.arg, None)


def _permute(u: UOp, x: Sharded) -> Sharded:
    return _per_shard(u, x, u.arg, None if x.axis is None else u.arg.index(x.axis), x.valid)


def _expand(u: UOp, x: Sharded) -> Sharded:
    if x.axis is not None and u.arg[x.axis] != u.src[0].shape[x.axis]:  # broadcasting the sharded axis itself
        x = all_gather(x)  # (a length-1 axis over several devices: uneven shards)
    if x.axis is None:
        return _per_shard(u, x, u.arg, None)
    return _per_shard(u, x, _shard_shape(u.arg, x.axis, x.chunk), x.axis, x.valid)


def _pad_shrink_flip(u: UOp, x: Sharded) -> Sharded:
    a = x.axis
    if a is None:
        return _per_shard(u, x, u.arg, None)
    size = int(u.src[0].shape[a])
    if u.op is Ops.SHRINK and u.arg[a][0] == 0 and 0 < int(u.arg[a][1]) <= size:
        # a prefix on the sharded axis (the whole axis included): the shards stay where they are, more of them
        # is padding (uneven shards)
        keep = int(u.arg[a][1])
        arg = tuple((0, x.chunk) if i == a else b for i, b in enumerate(u.arg))
        valid = None if keep == x.chunk * x.n else keep
        if all(tuple(b) == (0, int(d)) for b, d in zip(arg, x.shards[0].shape, strict=True)):
            return Sharded(x.shards, a, valid)  # nothing cut off inside the shards: they are the result as they are
        return _per_shard(u, x, arg, a, valid)
    touches = (u.op is Ops.PAD and tuple(u.arg[a]) != (0, 0)) or u.op is Ops.SHRINK or (u.op is Ops.FLIP and u.arg[a])
    if touches:
        return _per_shard(u, all_gather(x), u.arg, None)
    return _per_shard(u, x, u.arg, a, x.valid)


def _copy(u: UOp, x: Sharded) -> Value:
    target = u.src[1].arg
    if isinstance(target, tuple):
        if tuple(target) == x.devices:
            return x
        raise ValueError(f"copy between device tuples {x.devices} -> {target}: gather to one device first")
    if x.axis is None:
        return _to_device(x.shards[0], target)
    return _gather_to(x, target)


def _assign(u: UOp, srcs: list[Value]) -> Sharded:
    target, value = srcs[0], srcs[1]
    if not isinstance(target, Sharded):
        raise ValueError(f"assign of a sharded value into a tensor on {target.device}: shard the target first")
    v = reshard(_as_sharded(value, target), target.axis, target.valid)
    return Sharded(tuple(u.replace(src=(t, s, *u.src[2:])) for t, s in zip(target.shards, v.shards, strict=True)),
                   target.axis, target.valid)  # fmt: skip


_RULES: dict[Ops, Callable[[UOp, Sharded], Value]] = {
    # one source: the op's effect on the sharded axis decides between per-shard work and data movement
    Ops.REDUCE_AXIS: _reduce,
    Ops.RESHAPE: _reshape,
    Ops.PERMUTE: _permute,
    Ops.EXPAND: _expand,
    Ops.PAD: _pad_shrink_flip,
    Ops.SHRINK: _pad_shrink_flip,
    Ops.FLIP: _pad_shrink_flip,
    Ops.COPY: _copy,
    # markers: per shard, the axis unchanged
    Ops.CONTIGUOUS: lambda u, x: _per_shard(u, x, u.arg, x.axis, x.valid),
    Ops.CONTIGUOUS_BACKWARD: lambda u, x: _per_shard(u, x, u.arg, x.axis, x.valid),
    Ops.DETACH: lambda u, x: _per_shard(u, x, u.arg, x.axis, x.valid),
}


def push_multi(roots: Sequence[UOp]) -> dict[UOp, Value]:
    """For every node under `roots`: its value as a single-device graph (a UOp) or as shards (`Sharded`)."""
    done: dict[UOp, Value] = {}
    for u in UOp.sink(*roots).toposort():
        if u.op is Ops.SINK:
            continue
        srcs = [done.get(s, s) for s in u.src]
        if u.op is Ops.MULTI:
            shards = tuple(s.to_uop() if isinstance(s, Sharded) else s for s in srcs)
            done[u] = Sharded(shards, u.arg)
        elif u.op is Ops.DEVICE and isinstance(u.arg, tuple):
            done[u] = u
        elif u.op in (Ops.CONST, Ops.VCONST) and u.src and isinstance(u.src[0].arg, tuple):
            done[u] = Sharded(tuple(u.replace(src=(UOp(Ops.DEVICE, arg=d),)) for d in u.src[0].arg), None)
        elif u.op is Ops.MSELECT and isinstance(srcs[0], Sharded):
            if isinstance(u.arg, tuple):  # (i, axis): shard i after resharding to `axis`
                valid = srcs[0].valid if srcs[0].axis == u.arg[1] else None
                done[u] = reshard(srcs[0], u.arg[1], valid).shards[u.arg[0]]
            else:
                done[u] = srcs[0].shards[int(u.arg)]
        elif not any(isinstance(s, Sharded) for s in srcs):
            done[u] = u if all(a is b for a, b in zip(srcs, u.src, strict=True)) else u.replace(src=tuple(srcs))
        elif u.op is Ops.ASSIGN:
            done[u] = _assign(u, srcs)
        elif u.op in GroupOp.Elementwise:
            done[u] = _elementwise(u, srcs)
        elif (rule := _RULES.get(u.op)) is not None and isinstance(srcs[0], Sharded):
            done[u] = rule(u, srcs[0])
        else:
            raise NotImplementedError(f"{u.op} is not supported on sharded tensors")
    return done


def has_multi(root: UOp) -> bool:
    """Whether a graph holds sharded tensors or constants on a device tuple."""
    return isinstance(root.device, tuple)
