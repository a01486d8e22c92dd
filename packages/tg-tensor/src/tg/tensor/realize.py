"""Running the work behind tensors: schedule a SINK, execute it, and swap realized graphs for their buffers.

The runtime is imported inside the functions so that `import tg.tensor` stays free of work.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tg.ir import GroupOp, Ops, UOp
from tg.tensor import bounds, plans
from tg.tensor.autograd import note_realized
from tg.tensor.data import to_numpy_dtype
from tg.tensor.movement import RESHAPES, under_assigns
from tg.tensor.shapes import concrete_shape, has_symbolic

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

# names of the @function bodies being traced (innermost last): nothing may be realized or read while tracing
tracing_functions: list[str] = []
# set once an @function call node exists: realizes then inline calls before scheduling (nothing to do before)
_function_calls = False


def note_function_call() -> None:
    """Called by @function when it builds a call node."""
    global _function_calls
    _function_calls = True


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
        ref = weakref.ref(root)
        if (owner := self._owner_of(root)) is not None:  # a node of another root's graph became a tensor's root
            self._link(owner, ref)
            return
        tensors_key, owner_key = self._tensors_key, self._owner_key
        stack, seen = list(root.src), {root}
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            self.visits += 1
            if n.op in _SHARED_LEAVES or is_const_view(n):
                continue
            if n.op in (Ops.BUFFER, Ops.BUFFER_VIEW) or tensors_key in n.__dict__:
                self._link(n, ref)
            elif (owner := self._owner_of(n)) is not None:
                self._link(owner, ref)
            else:
                n.__dict__[owner_key] = ref
                stack.extend(n.src)

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


def is_const_view(n: UOp) -> bool:
    """Whether `n` is a constant under movement ops (no storage: shared by unrelated graphs)."""
    while n.op in GroupOp.Movement:
        n = n.src[0]
    return n.op is Ops.CONST


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


# Hash-cons twins: tensors made independently (`c = x + 1; d = x + 1`) hold one UOp, so realizing them gives them
# one buffer. They are noted here (id(tensor) -> (its weakref, the group's weakrefs)); a write into one of them
# first gives the others a copy of their own (copy-on-write), so only the written tensor changes, as in PyTorch.
_twins: dict[int, tuple[weakref.ref[Tensor], list[weakref.ref[Tensor]]]] = {}
# roots that several tensors share as views or wrappers of one value (no independent creation): never twins
_ALIASING_ROOTS = frozenset({Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.ASSIGN, Ops.BITCAST, Ops.MULTI})


def _note_twins(ts: list[Tensor]) -> None:
    group: list[weakref.ref[Tensor]] = []
    for t in ts:
        ref = weakref.ref(t, _forget_twin(id(t)))
        group.append(ref)
        _twins[id(t)] = (ref, group)


def _forget_twin(key: int) -> Any:
    """A weakref callback dropping a dead tensor's twin entry (unless the id was reused since)."""

    def forget(ref: weakref.ref) -> None:
        if (entry := _twins.get(key)) is not None and entry[0] is ref:
            del _twins[key]

    return forget


def separate_twins(t: Tensor) -> None:
    """Before a write into `t`'s buffer: live tensors that share it only because their graphs hash-consed
    together get a copy of their own (views of `t`, made from `t`, keep aliasing it)."""
    entry = _twins.get(id(t))
    if entry is None or entry[0]() is not t:
        return
    del _twins[id(t)]
    for ref in entry[1]:
        if (other := ref()) is None or other is t:
            continue
        if (mine := _twins.get(id(other))) is not None and mine[0] is ref:
            del _twins[id(other)]
        if other.uop is t.uop:
            other.uop = _private_copy(other)


def _private_copy(t: Tensor) -> UOp:
    """A realized copy of `t`'s value in a fresh buffer (`t` itself is left as it is)."""
    from tg.tensor.autograd import note_realized
    from tg.tensor.tensor import Tensor

    copy = Tensor.empty(*t.shape, dtype=t.dtype, device=t.device).assign(Tensor(t.uop))
    copy.realize()
    note_realized({t.uop: copy.uop})  # autograd: gradients through the copy flow to where `t` came from
    return copy.uop


def is_realized(uop: UOp) -> bool:
    """Whether `uop` needs no computation: a buffer reshaped, or a MULTI of such buffers (a realized sharded tensor,
    shown through a SHRINK when its shards are uneven)."""
    if uop.op is Ops.SHRINK and uop.src[0].op is Ops.MULTI:
        uop = uop.src[0]
    if uop.op is Ops.MULTI:
        return all(buffer_of(s) is not None for s in uop.src)
    return buffer_of(uop) is not None


def _lower_multi(sink: UOp) -> tuple[UOp, dict[UOp, Any]]:
    """Sharded roots become one root per shard (tg.codegen.schedule.multi); returns the new sink and root values."""
    from tg.codegen.schedule.multi import Sharded, push_multi

    done = push_multi(sink.src)
    values = {r: done[r] for r in sink.src}
    roots: list[UOp] = []
    for v in values.values():
        roots.extend(v.shards if isinstance(v, Sharded) else (v,))
    return UOp(Ops.SINK, src=tuple(dict.fromkeys(roots))), values


def _reads_buffer_raw(uop: UOp, buffers: set[UOp]) -> bool:
    """True if `uop`'s graph reads one of `buffers` directly (not through an ASSIGN of it)."""
    return any(u.op is Ops.BUFFER and u in buffers for u in uop.toposort(lambda u: u.op is not Ops.ASSIGN))


def _is_view(uop: UOp) -> bool:
    """Whether `uop` is only movement ops over a BUFFER (a view: it aliases the buffer)."""
    from tg.tensor.movement import VIEW_OPS

    while uop.op in VIEW_OPS:
        uop = uop.src[0]
    return uop.op is Ops.BUFFER


def _pending_reader(uop: UOp, buffers: set[UOp]) -> bool:
    """Whether `uop` computes a value from one of `buffers` (so it must run before they are overwritten); views of
    a buffer are not readers: they alias it and see its new contents."""
    if _is_view(uop):
        return False
    if uop.op is Ops.ASSIGN:  # a pending write whose value reads the buffer
        return _reads_buffer_raw(uop.src[1], buffers)
    return _reads_buffer_raw(uop, buffers)


def pending_readers(buffers: set[UOp], exclude: Iterable[UOp] = ()) -> list[UOp]:
    """Roots of live lazy tensors that read one of `buffers` in its current state (not through an ASSIGN of it),
    pending assigns whose value reads one included: they must be computed before an assign overwrites it. Views
    are not readers (they alias the buffer). Found through the index, not a scan."""
    skip = set(exclude)
    found = [r for r in index.affected(buffers) if r not in skip and not is_realized(r)]
    return [r for r in found if index.tensors(r) and _pending_reader(r, buffers)]


def has_value_readers(state: UOp, exclude: UOp) -> bool:
    """Whether a live lazy tensor other than `exclude` computes a value from `state` (a pending ASSIGN): views of it
    and later states of its buffer are not readers."""
    for root in index.affected([state]):
        if root is state or root is exclude or is_realized(root) or not index.tensors(root) or _is_view_of(root, state):
            continue
        if state in root.toposort(lambda u: u.op is not Ops.ASSIGN or u is state or u.src[0] is not state):
            return True
    return False


def is_whole_constant(n: UOp) -> bool:
    """Whether `n` is a constant made for its shape (reshapes and broadcasts of a CONST), not a slice of one."""
    while n.op in (Ops.RESHAPE, Ops.EXPAND):
        n = n.src[0]
    return n.op is Ops.CONST


def has_live_views(node: UOp) -> bool:
    """Whether a live tensor is a view (movement ops only) of the lazy value `node`."""
    if is_const_view(node):
        return False  # constants are shared by unrelated graphs: no tensor views one in particular
    return any(root is not node and index.tensors(root) and _is_view_of(root, node) for root in index.affected([node]))


def _is_view_of(uop: UOp, state: UOp) -> bool:
    from tg.tensor.movement import VIEW_OPS

    while uop.op in VIEW_OPS:
        uop = uop.src[0]
    return uop is state


def repoint_views(state: UOp, new: UOp, owner: Tensor) -> None:
    """After an assign made `new` the next state of the buffer that `state` (a BUFFER or pending ASSIGN) held,
    every live view of `state` views `new` instead (views alias; value readers keep the old state)."""
    from tg.tensor.movement import VIEW_OPS

    replacement = new if new.shape == state.shape else new.reshape(state.shape)
    for root in index.affected([state]):
        u = root
        while u.op in VIEW_OPS:
            u = u.src[0]
        if u is not state:
            continue
        for t in index.tensors(root):
            if t is not owner:
                t.uop = root.substitute({state: replacement})


def realize_tensors(tensors: Iterable[Tensor]) -> None:
    """Compute every tensor in `tensors` that is not yet a buffer, in one schedule.

    Only the tensors the realize affects are touched: the outputs, and the lazy tensors whose graphs read the new
    buffers (found through `index`); they get the buffers in one `substitute` over all of them.
    """
    todo = [t for t in tensors if not is_realized(t._uop)]
    if not todo:
        return
    for t in todo:  # a realized constant (zeros, full, ...) is storage of its own, like a creation function's result
        if is_const_view(t._uop):
            t.uop = own_storage(t._uop)
    if tracing_functions:
        raise RuntimeError(
            f"cannot realize inside @function {tracing_functions[-1]}: its body is traced once and reused; return the "
            "tensors instead"
        )
    roots = list(dict.fromkeys([t._uop for t in todo]))
    called: dict[UOp, UOp] = {}  # root with @function calls -> the same value with the calls inlined
    if _function_calls:
        from tg.tensor.function import inline_calls

        called = {r: i for r, i in zip(roots, inline_calls(roots), strict=True) if i is not r}
        roots = list(dict.fromkeys(called.get(r, r) for r in roots))
    sink = UOp(Ops.SINK, src=tuple(roots))
    st = plans.Structure(sink)
    # a pending read of a buffer that an assign in this schedule overwrites must be computed now, before the write
    if st.assigns:
        targets: set[UOp] = set()
        for t_uop in {n.src[0] for n in st.assigns}:
            base = under_assigns(t_uop, RESHAPES)  # remembered per ASSIGN: chains of assigns are walked once
            if base.op is Ops.BUFFER:
                targets.add(base)
            elif base.op is Ops.MULTI:  # a sharded target: every shard's buffer is overwritten
                for shard in base.src:
                    shard = under_assigns(shard, RESHAPES)
                    if shard.op is Ops.BUFFER:
                        targets.add(shard)
        if extra := pending_readers(targets, roots):
            if _binds_conflict([*roots, *extra]):  # a reader bound a Variable to another value: its own schedule first
                realize_tensors([t for r in extra for t in index.tensors(r)])
                return realize_tensors(todo)
            sink = UOp(Ops.SINK, src=tuple(dict.fromkeys([*roots, *extra])))
            st = plans.Structure(sink)
    sink, index_checks = bounds.add_checks(sink, st.order)  # deferred index range checks ride along
    if index_checks:
        st = plans.Structure(sink)
    if st.sharded:
        becomes = _realize_sharded(sink)
    else:  # a stored plan when this structure ran before, else the scheduler
        becomes = plans.realize(sink, st)
    for root, inlined in called.items():
        if inlined in becomes:
            becomes[root] = becomes[inlined]
    if index_checks:
        bounds.verify(index_checks, becomes)  # raises before any tensor takes an out-of-range result
    note_realized(becomes)  # autograd: realized values that required grad keep their forward graph
    affected = [(r, ts) for r in index.affected(becomes) if (ts := index.tensors(r)) and not is_realized(r)]
    if not affected:
        return
    if all(r in becomes for r, _ in affected):  # the usual case: only the realized roots themselves
        new_roots: tuple[UOp, ...] = tuple(becomes[r] for r, _ in affected)
    else:  # one substitute for every affected graph: shared nodes are rebuilt once
        new_roots = UOp(Ops.SINK, src=tuple(r for r, _ in affected)).substitute(becomes).src
    for (old, ts), new in zip(affected, new_roots, strict=True):
        if new is not old:
            for t in ts:
                t.uop = new
            if len(ts) > 1 and old.op not in _ALIASING_ROOTS and not _is_view(old) and buffer_of(new) is not None:
                _note_twins(ts)  # one value computed for independently made tensors: copy on write


def _binds_conflict(roots: list[UOp]) -> bool:
    """Whether the graphs of `roots` bind one Variable to two values (they cannot share one schedule)."""
    seen: dict[UOp, UOp] = {}
    for u in UOp(Ops.SINK, src=tuple(dict.fromkeys(roots))).toposort():
        for b in _binds(u):
            if seen.setdefault(b.src[0], b) is not b:
                return True
    return False


def _binds(u: UOp) -> list[UOp]:
    """The BINDs node `u` holds: itself, or inside its movement arguments (symbolic shapes)."""
    if u.op is Ops.BIND:
        return [u]
    if u.op not in (Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK) or not isinstance(u.arg, tuple):
        return []
    flat = [x for a in u.arg for x in (a if isinstance(a, tuple) else (a,))]
    return [b for x in flat if isinstance(x, UOp) for b in x.toposort() if b.op is Ops.BIND]


def _realize_sharded(sink: UOp) -> dict[UOp, UOp]:
    """Schedule and run a SINK with sharded nodes (one root per shard); the storage of each observable node."""
    from tg.codegen.schedule import create_schedule
    from tg.codegen.schedule.multi import Sharded
    from tg.runtime.engine import run_linear

    sink, multi_values = _lower_multi(sink)
    linear, var_vals, becomes = create_schedule(sink)
    run_linear(linear, var_vals)
    for root, v in multi_values.items():
        if isinstance(v, Sharded):
            shards = tuple(becomes.get(s, s) for s in v.shards)
            becomes[root] = type(v)(shards, v.axis, v.valid).to_uop()  # uneven shards: a SHRINK of the MULTI
        else:
            becomes[root] = becomes.get(v, v)
    return becomes


def host_bytes(t: Tensor) -> bytearray:
    """The raw bytes of tensor `t` (realizes it)."""
    from tg.runtime.engine import buffer_for, capturing

    if tracing_functions:
        raise RuntimeError(f"cannot read tensor data inside @function {tracing_functions[-1]}")
    if capturing:
        from tg.runtime.jit import JitError

        name = getattr(capturing[0], "name", "?")
        raise JitError(
            f"cannot read tensor data while TinyJit({name}) captures (its 2nd call): the value would be fixed into "
            "every replay; read it outside the function"
        )

    data = bytearray(math.prod(concrete_shape(t.shape)) * t.dtype.itemsize)  # symbolic dims at their bound values
    if not data:
        return data
    if isinstance(t.uop.device, tuple):  # sharded: gather to the first device
        from tg.tensor.tensor import Tensor

        t = Tensor(t.uop.copy_to_device(t.uop.device[0]))
    elif buffer_of(t.uop) is None and t.device.startswith("DISK"):
        # DISK runs no kernels: a view of a file (e.g. a contiguous slice) is read through a copy to the host
        from tg.tensor.tensor import Tensor

        t = Tensor(t.uop.copy_to_device("CPU"))
    t.realize()
    buf = buffer_of(t.uop)
    if buf is None:
        raise RuntimeError(f"tensor was not realized into a buffer: {t.uop.op}")
    if len(data) == buf.arg * t.dtype.itemsize:
        buffer_for(buf).copyout(memoryview(data))
        return data
    whole = bytearray(buf.arg * t.dtype.itemsize)  # a symbolic shape: the leading part of a maximum-size buffer
    buffer_for(buf).copyout(memoryview(whole))
    return whole[: len(data)]


def to_numpy(t: Tensor) -> Any:
    """The values of `t` as a fresh numpy array (realizes it; imports numpy)."""
    import numpy as np

    return np.frombuffer(host_bytes(t), dtype=to_numpy_dtype(t.dtype)).reshape(concrete_shape(t.shape))


def upload(data: bytes, buffer: UOp) -> None:
    """Copy host bytes into the device buffer behind BUFFER uop `buffer`."""
    from tg.runtime.engine import buffer_for

    if data:
        buffer_for(buffer).copyin(data)
