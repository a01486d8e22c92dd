"""Running the work behind tensors: schedule a SINK, execute it, and swap realized graphs for their buffers.

The runtime is imported inside the functions so that `import tg.tensor` stays free of work.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tg.ir import DType, Ops, PatternMatcher, UOp, UPat, graph_rewrite
from tg.tensor import bounds, plans
from tg.tensor.autograd import note_realized
from tg.tensor.data import to_numpy_dtype
from tg.tensor.live import buffer_of, index, is_const_view, own_storage, tracing_functions
from tg.tensor.movement import RESHAPES, under_assigns
from tg.tensor.shapes import concrete_shape

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

# set once an @function call node exists: realizes then inline calls before scheduling (nothing to do before)
_function_calls = False


def note_function_call() -> None:
    """Called by @function when it builds a call node."""
    global _function_calls
    _function_calls = True


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
    cls = t._tensor_class()
    copy = cls.empty(*t.shape, dtype=t.dtype, device=t.device).assign(cls(t.uop))
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
    """True if `uop`'s graph reads one of `buffers` directly (not through an ASSIGN of it). A depth-first search that
    stops at the first such read (the usual answer for a reader: a whole forward graph is not walked to find it)."""
    seen: set[UOp] = set()
    stack = [uop]
    while stack:
        u = stack.pop()
        if u.op is Ops.BUFFER and u in buffers:
            return True
        if u.op is not Ops.ASSIGN and u not in seen:
            seen.add(u)
            stack.extend(u.src)
    return False


def _is_view(uop: UOp) -> bool:
    """Whether `uop` is only movement ops over a BUFFER (a view: it aliases the buffer)."""
    return uop.base.op is Ops.BUFFER


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
    skip = set(exclude)  # most affected roots are nodes of graphs whose tensors are gone: asked about first
    return [r for r in index.affected(buffers)
            if r not in skip and index.tensors(r) and not is_realized(r) and _pending_reader(r, buffers)]  # fmt: skip


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
    return n.under((Ops.RESHAPE, Ops.EXPAND)).op is Ops.CONST


def has_live_views(node: UOp) -> bool:
    """Whether a live tensor is a view (movement ops only) of the lazy value `node`."""
    if is_const_view(node):
        return False  # constants are shared by unrelated graphs: no tensor views one in particular
    return any(root is not node and index.tensors(root) and _is_view_of(root, node) for root in index.affected([node]))


def _is_view_of(uop: UOp, state: UOp) -> bool:
    return uop.base is state


def repoint_views(state: UOp, new: UOp, owner: Tensor) -> None:
    """After an assign made `new` the next state of the buffer that `state` (a BUFFER or pending ASSIGN) held,
    every live view of `state` views `new` instead (views alias; value readers keep the old state)."""
    replacement = new if new.shape == state.shape else new.reshape(state.shape)
    for root in index.affected([state]):
        if root.base is not state:
            continue
        for t in index.tensors(root):
            if t is not owner:
                t.uop = root.substitute({state: replacement})


def _inline_output(ctx: dict[UOp, UOp], g: UOp) -> UOp:
    """GETTUPLE(FUNCTION(body, *args), k) -> output k of the body over the call's arguments (the substituted body is
    memoised per call, so a call's outputs share it)."""
    fn = g.src[0]
    if (body := ctx.get(fn)) is None:
        body = ctx[fn] = fn.src[0].substitute(dict(zip(fn.arg[1], fn.src[1:], strict=True)))
    return body.src[g.arg]


# a call's outputs become its body over its arguments; graph_rewrite inlines the arguments first (sources first) and
# rewrites each inlined body again, so calls inside bodies are inlined in the same pass
pm_inline_calls = PatternMatcher([(UPat(Ops.GETTUPLE, src=(UPat(Ops.FUNCTION),), name="g"), _inline_output)])


def inline_calls(roots: list[UOp]) -> list[UOp]:
    """`roots` with every function call replaced by its body over the call's arguments (before scheduling: the call
    boundary never blocks fusion). One memoised rewrite: linear in the graph, however many calls are chained."""
    return list(graph_rewrite(UOp.sink(*roots), pm_inline_calls, ctx={}, name="inline calls").src)


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
    fresh_from = UOp.unique().arg  # buffers this realize makes have this UNIQUE number or a later one
    called: dict[UOp, UOp] = {}  # root with @function calls -> the same value with the calls inlined
    if _function_calls:
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
            st = plans.Structure(sink, st)
    sink, index_checks = bounds.add_checks(sink, st.order)  # deferred index range checks ride along
    if index_checks:
        st = plans.Structure(sink, st)
    if st.sharded:
        becomes = _realize_sharded(sink)
    else:  # a stored plan when this structure ran before, else the scheduler
        becomes = plans.realize(sink, st)
    for root, inlined in called.items():
        if inlined in becomes:
            becomes[root] = becomes[inlined]
    if index_checks:
        bounds.verify(index_checks, becomes)  # raises before any tensor takes an out-of-range result
    note_realized(becomes, fresh_from)  # autograd: realized values that required grad keep their forward graph
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
        cls = t._tensor_class()
        t = cls(t.uop.copy_to_device(t.uop.device[0]))
    elif buffer_of(t.uop) is None and t.device.startswith("DISK"):
        # DISK runs no kernels: a view of a file (e.g. a contiguous slice) is read through a copy to the host
        cls = t._tensor_class()
        t = cls(t.uop.copy_to_device("CPU"))
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


def from_bytes(raw: bytes, shape: tuple[int, ...], dt: DType, device: str) -> UOp:
    """A realized BUFFER holding `raw` (the row-major bytes of a `dt` array), reshaped to `shape`."""
    buf = UOp.new_buffer(device, math.prod(shape), dt)
    upload(raw, buf)
    return buf.reshape(shape)
