"""Where realized values came from: the forward graphs autograd differentiates through after a realize.

A realized value that required grad keeps the graph it was computed from (its *origin*), so gradients flow through
values realized before the backward pass, and the gradient reads the stored value instead of recomputing it.

Buffers are written in place by assigns, so an origin describes one *state* of a buffer. When an assign overwrites
buffer B, B's previous state gets a *placeholder* P (a BUFFER node that never holds memory):

- B's origins move to the same nodes over P (the old state keeps its history); a grad leaf's old state routes its
  gradient to the leaf itself (its old value is gone);
- an origin recorded before the write that reads B reads P instead (resolved at the next backward by comparing
  realize counters);
- a gradient that needs the value of a placeholder recomputes it from P's origin; without one (plain data that was
  overwritten, or a leaf's old value) the backward raises, as torch does for a saved tensor modified in place.

So no origin reads its own buffer (a cycle made backward loop forever) and no gradient silently reads a value that
was overwritten.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterator, Mapping

from tg.ir import Ops, UOp


class Origin:
    """Where a realized value (or an overwritten state) came from: its forward `graph`, the realize counter when it
    was recorded (`epoch`: reads of buffers written in that realize or later mean their earlier state), and whether
    its value can be recomputed from the graph (False for a grad leaf's overwritten state: the gradient reaches the
    leaf, but the old value is gone)."""

    __slots__ = ("epoch", "graph", "reads_old", "recomputable")

    def __init__(self, graph: UOp, epoch: int, recomputable: bool = True, reads_old: bool = False) -> None:
        self.graph, self.epoch, self.recomputable = graph, epoch, recomputable
        self.reads_old = reads_old  # the graph reads placeholders (states overwritten in the realize recording it)


# realized value (a buffer, a reshape of one, or the same over a placeholder) -> its Origin
origins: weakref.WeakKeyDictionary[UOp, Origin] = weakref.WeakKeyDictionary()
_epoch = 0  # realizes seen by note_realized while something was tracked
_last_write = -1  # the epoch of the latest buffer write seen
# in a buffer's __dict__: the writes seen, [(epoch, placeholder of the state that write replaced)]; and weak
# references to the nodes over it (itself or a reshape) that are origins or grad leaves. In a placeholder's: the
# nodes over it that carry origins (strong: the placeholder lives only inside graphs)
_WRITES, _KEYS = "_origins_writes", "_origins_keys"
_placeholder_ids = itertools.count()


def base_buffer(u: UOp) -> UOp | None:
    """The BUFFER under reshapes of `u`, else None."""
    u = u.unreshaped
    return u if u.op is Ops.BUFFER else None


def is_placeholder(u: UOp | None) -> bool:
    """Whether `u` is a placeholder for an overwritten buffer state."""
    if u is None or u.op is not Ops.BUFFER:
        return False
    arg = u.src[0].arg
    return isinstance(arg, tuple) and len(arg) == 2 and arg[0] == "overwritten"


def remember_key(node: UOp) -> None:
    """Note `node` (an origin key or a grad leaf over a buffer) on its buffer: it moves when the buffer is written."""
    if (buf := base_buffer(node)) is not None and not is_placeholder(buf):
        buf.__dict__.setdefault(_KEYS, []).append(weakref.ref(node))


def _placeholder(buf: UOp) -> UOp:
    """A BUFFER node standing for a state of `buf` that was overwritten (never allocated)."""
    unique = UOp(Ops.UNIQUE, arg=("overwritten", next(_placeholder_ids)))
    return UOp(Ops.BUFFER, buf.dtype, (unique, buf.src[1]), buf.arg)


def retire_state(buf: UOp, epoch: int, is_marked: Callable[[UOp], bool]) -> tuple[UOp, bool]:
    """`buf` is overwritten in realize `epoch`: its current state becomes a placeholder, which takes over the origins
    of the nodes over `buf`. Returns the placeholder and whether the state was a grad leaf (`is_marked` tells which
    nodes require grad)."""
    global _last_write
    ph = _placeholder(buf)
    buf.__dict__.setdefault(_WRITES, []).append((epoch, ph))
    _last_write = epoch
    moved_keys: list[UOp] = []
    was_leaf = False
    for key in dict.fromkeys(k for r in buf.__dict__.pop(_KEYS, []) if (k := r()) is not None):
        moved = key.substitute({buf: ph})
        if (rec := origins.pop(key, None)) is not None:
            origins[moved] = rec  # the overwritten state keeps its own history
        elif is_marked(key):  # a grad leaf: its old state sends gradients to the leaf; it stays a leaf
            origins[moved] = Origin(key, epoch, recomputable=False)
            remember_key(key)
            was_leaf = True
        else:
            continue
        moved_keys.append(moved)
    ph.__dict__[_KEYS] = moved_keys
    return ph, was_leaf


def record(node: UOp, graph: UOp, reads_old: bool) -> None:
    """`node` (a realized value) was computed by `graph` in the current realize (`reads_old`: `graph` reads
    placeholders)."""
    origins[node] = Origin(graph, _epoch, reads_old=reads_old)
    remember_key(node)


def new_epoch() -> int:
    """Start a realize: its counter."""
    global _epoch
    _epoch += 1
    return _epoch


def drop_assigns_into(graph: UOp, placeholders: set[UOp]) -> UOp:
    """An ASSIGN into a placeholder is, as a value, the value it wrote (the state it made is gone too)."""
    found = {u: u.src[1] for u in graph.toposort() if u.op is Ops.ASSIGN and base_buffer(u.src[0]) in placeholders}
    return graph.substitute(found) if found else graph


class ResolvedOrigins(Mapping[UOp, UOp]):
    """The origins as one backward reads them: key -> forward graph, with reads of buffers overwritten since the
    origin was recorded pointing at the placeholders of the states they read. Made per backward pass."""

    def __init__(self) -> None:
        self._cache: dict[UOp, UOp] = {}
        self._old_states = False  # some graph handed out reads a placeholder

    def __getitem__(self, key: UOp) -> UOp:
        if (got := self._cache.get(key)) is not None:
            return got
        rec = origins[key]
        graph = rec.graph
        if rec.reads_old or not rec.recomputable or is_placeholder(base_buffer(key)):
            self._old_states = True
        if rec.epoch <= _last_write:  # something was written since: reads of it mean the state before the write
            swap: dict[UOp, UOp] = {}
            for u in graph.toposort():
                if u.op is Ops.BUFFER and (writes := u.__dict__.get(_WRITES)):
                    if (ph := next((p for e, p in writes if e >= rec.epoch), None)) is not None:
                        swap[u] = ph
            if swap:
                graph = drop_assigns_into(graph.substitute(swap), set(swap.values()))
                self._old_states = True
        self._cache[key] = graph
        return graph

    def __contains__(self, key: object) -> bool:
        return key in origins

    def __iter__(self) -> Iterator[UOp]:
        return iter(list(origins.keys()))

    def __len__(self) -> int:
        return len(origins)

    @staticmethod
    def stored(key: UOp) -> bool:
        """Whether `key` holds its value in memory, so a gradient may read it instead of recomputing its graph."""
        rec = origins.get(key)
        return not is_placeholder(base_buffer(key)) and (rec is None or rec.recomputable)

    def restore_values(self, grads: dict[UOp, UOp]) -> dict[UOp, UOp]:
        """Gradients that read an overwritten state recompute it from its origin; without one this raises."""
        if not self._old_states:
            return grads
        out: dict[UOp, UOp] = {}
        for k, g in grads.items():
            while found := [u for u in g.toposort() if is_placeholder(u)]:  # each pass undoes one write
                g = g.substitute({ph: self._recompute(ph) for ph in found})
            out[k] = g
        return out

    def _recompute(self, ph: UOp) -> UOp:
        for key in ph.__dict__.get(_KEYS, ()):
            rec = origins.get(key)
            if rec is not None and rec.recomputable:
                return self[key].reshape(ph.shape) if key is not ph else self[key]
        raise RuntimeError(
            f"backward: a gradient needs the value a tensor ({ph.dtype.name}, {ph.arg} elements on {ph.device}) held "
            "before an assign overwrote it in place; realize a copy first (`old = t.clone().realize()` before "
            "`t.assign(...)`), or compute the loss again after the assign"
        )
