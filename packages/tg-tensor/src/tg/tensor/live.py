"""The live tensors by graph and what a graph stores: the realize index (`index`), `buffer_of`, `own_storage`.

Shared by realize.py, which keeps the index current, and by the modules realize calls (autograd, the index
checks in bounds.py), so none of them imports realize.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tg.ir import Ops, UOp
from tg.tensor.shapes import has_symbolic

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

# names of the @function bodies being traced (innermost last): nothing may be realized or read while tracing
tracing_functions: list[str] = []


class TensorIndex:
    """Which live tensors a realize affects, without scanning them all.

    Every tensor's graph (its *root* uop) is registered when the tensor's `uop` is set. Registering walks down
    from a new root over the nodes nobody owns yet (usually 1-3 per Tensor op): each becomes *owned* by the root,
    and where the walk meets a BUFFER, another root, or a node owned by another root, the new root is linked as a
    *user* of that buffer or root. Constants (and views of them) are never owned: they are shared by unrelated
    graphs and never realized alone.

    `affected(nodes)` = every root reachable from `nodes` through owners and users. Completeness: a root whose
    graph contains node x either owns x, or its walk stopped at a root/buffer whose own graph contains x (or at a
    node owned by such a root), so following users upward from x's owner finds it; links to an owner root instead
    of the exact node may add roots that do not contain x (a substitute that changes nothing), never miss one.
    `visits` counts the nodes walked (tests count work, not time).

    The entries live in the nodes themselves (in each UOp's `__dict__`, beside its cached properties, under names
    private to this index), so they go when the node goes and cost a dict lookup, not a weak-dictionary call.
    Per node: the tensors whose root it is ({id(tensor): weakref}: tensors compare elementwise, so no WeakSet), the
    root that owns it and the roots that use it (weak references: a node never keeps a root alive).
    """

    _instances = 0

    def __init__(self) -> None:
        TensorIndex._instances += 1
        tag = f"_tensor_index{TensorIndex._instances}"
        self._tensors_key, self._owner_key, self._users_key = f"{tag}_tensors", f"{tag}_owner", f"{tag}_users"
        self.by_uop = _RootTensors(self._tensors_key)
        self.visits = 0

    def register(self, t: Tensor, root: UOp, old: UOp | None = None) -> None:
        """Record that `t.uop` is `root` instead of `old` (call on every assignment of `t.uop`)."""
        key = self._tensors_key
        if old is not None and old is not root and (was := old.__dict__.get(key)) is not None:
            was.pop(id(t), None)
        if (ts := root.__dict__.get(key)) is None:
            ts = root.__dict__[key] = {}
            self._add_root(root)
        ts[id(t)] = weakref.ref(t, _forget(ts, id(t)))

    def _link(self, below: UOp, root_ref: weakref.ref[UOp]) -> None:
        if (users := below.__dict__.get(self._users_key)) is None:
            below.__dict__[self._users_key] = [root_ref]
        else:
            users.append(root_ref)

    def _owner_of(self, n: UOp) -> UOp | None:
        return None if (ref := n.__dict__.get(self._owner_key)) is None else ref()

    def _add_root(self, root: UOp) -> None:
        # the hot loop of Tensor creation (every op result registers): `_link` and `_owner_of` inlined
        ref = weakref.ref(root)
        owner_key, users_key = self._owner_key, self._users_key
        if (owner_ref := root.__dict__.get(owner_key)) is not None and (owner := owner_ref()) is not None:
            self._link(owner, ref)  # a node of another root's graph became a tensor's root
            return
        tensors_key = self._tensors_key
        stack, seen, visits = list(root.src), {root}, 0
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            visits += 1
            if (op := n.op) in _SHARED_LEAVES or n.base.op is _CONST:  # constants and views of them: never owned
                continue
            d = n.__dict__
            if op in _STORAGE or tensors_key in d:
                below = n
            elif (owner_ref := d.get(owner_key)) is not None and (below := owner_ref()) is not None:
                pass
            else:
                d[owner_key] = ref
                stack.extend(n.src)
                continue
            if (users := below.__dict__.get(users_key)) is None:
                below.__dict__[users_key] = [ref]
            else:
                users.append(ref)
        self.visits += visits

    def affected(self, nodes: Iterable[UOp]) -> list[UOp]:
        """Every registered root whose graph may contain one of `nodes` (the nodes themselves if they are roots)."""
        tensors_key, users_key = self._tensors_key, self._users_key
        out: dict[UOp, None] = {}
        stack = list(nodes)
        while stack:
            n = stack.pop()
            self.visits += 1
            if n in out:
                continue
            if tensors_key in n.__dict__:
                out[n] = None
            if (owner := self._owner_of(n)) is not None and owner not in out:
                stack.append(owner)
            for r in n.__dict__.get(users_key, ()):
                if (u := r()) is not None and u not in out:
                    stack.append(u)
        return list(out)

    def tensors(self, root: UOp) -> list[Tensor]:
        """The live tensors whose graph is `root`."""
        ts = root.__dict__.get(self._tensors_key)
        return [] if not ts else [t for r in list(ts.values()) if (t := r()) is not None and t.uop is root]


class _RootTensors:
    """`index.by_uop`: read access to each root's {id(tensor): weakref} entry (kept in the root node itself)."""

    def __init__(self, key: str) -> None:
        self._key = key

    def get(self, root: UOp, default: Any = None) -> Any:
        return root.__dict__.get(self._key, default)

    def __contains__(self, root: UOp) -> bool:
        return self._key in root.__dict__


def _forget(ts: dict[int, Any], key: int) -> Any:
    """A weakref callback dropping a dead tensor's entry."""
    return lambda _: ts.pop(key, None)


_SHARED_LEAVES = frozenset({Ops.CONST, Ops.DEVICE, Ops.UNIQUE, Ops.DEFINE_VAR, Ops.BIND})
_STORAGE = frozenset({Ops.BUFFER, Ops.BUFFER_VIEW})
_CONST = Ops.CONST


def is_const_view(n: UOp) -> bool:
    """Whether `n` is a constant under movement ops (no storage: shared by unrelated graphs)."""
    return n.base.op is Ops.CONST


index = TensorIndex()


def buffer_of(uop: UOp) -> UOp | None:
    """The BUFFER behind `uop` if `uop` is just that buffer reshaped (a realized tensor), else None. A realized value
    of symbolic shape is the first `numel` elements of a buffer of its maximum size (`BUFFER.shrink(((0, n),))`
    reshaped): that buffer."""
    base = uop.unreshaped
    if base.op is Ops.SHRINK and base.src[0].op is Ops.BUFFER and len(arg := base.arg) == 1 and arg[0][0] == 0:
        return base.src[0] if isinstance(arg[0][1], UOp) else None
    if base.op is Ops.BUFFER and not has_symbolic(uop.shape) and int(base.arg) == math.prod(uop.shape):
        return base
    return None


def own_storage(uop: UOp) -> UOp:
    """CONTIGUOUS of `uop` carrying a fresh UNIQUE: storage no other tensor's graph can hash-cons into (two equal
    lazy graphs are one node; without the marker they would be realized into one shared buffer). The schedule
    cache numbers these markers by first appearance, so equal structures still hit it."""
    return uop.contiguous(UOp.unique())
