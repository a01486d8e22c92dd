"""Realize plans: a cache from the *structure* of a realize's graph straight to the kernels that compute it.

An eager loop (`x = (x + 1).realize()`) builds a new graph of one structure each time. The schedule cache
(tg.codegen.schedule.cache) skips the scheduling phases for it, but every realize still normalises the graph,
instantiates the template, plans memory and lowers each CALL to a runner. A :class:`RealizePlan` records the outcome
of one full realize with the buffers as *slots*: the graph's input BUFFERs (numbered by first appearance in toposort
order) and the buffers the scheduler made (fresh for every realize, as an instantiated template's are; views of
either, memory-planner arenas, stay views of their slot). Its schedule is a `tg.runtime.replay.Replay` with every
buffer given per run (the runtime's one captured-program object, also behind the JIT): a later realize of the same
structure makes new buffers and runs the replay (the runners of `method_cache`, or the HCQ launcher), then builds the
same storage expressions, with no scheduler, normaliser or memory planner.

The structure key lists the graph in toposort order, each node as (op, dtype, arg, tag, positions of its
sources); a UNIQUE node is just `UNIQUE` (its position identifies it, so distinct buffers stay distinct and a
buffer read twice is one source). A bound Variable is keyed by its variable, not its value, wherever callify.py
unbinds it (a BIND node is a leaf; a movement argument is keyed unbound): a loop over the values of one Variable
(symbolic shapes) runs one plan, taking this realize's values as kernel arguments and binding them again in the
storage expressions it returns. Two graphs with equal keys are the same graph up to which buffers they read and the
values their Variables are bound to, so they normalise to one schedule-cache key (callify.py) and schedule the
same way. The key also holds the
switches that change scheduling (`tg.codegen.schedule.switches()`, `NO_MEMORY_PLANNER`).
`clear_schedule_cache()` empties this cache too and `SCACHE=0` turns it off with the schedule cache. Graphs the
plan format does not cover (sharded tensors, call bodies other than kernels and copies) always take the full path.
`stats` counts hits and misses (tests).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from tg.ir import Ops, UOp
from tg.ir.dtype import DType
from tg.ir.helpers import DEV

# hits: realizes that ran a stored plan; misses: realizes that scheduled (and stored a plan when they could)
stats = {"hits": 0, "misses": 0}


class Structure:
    """One walk over a realize's SINK: its structure key, its nodes in toposort order and what the realize
    needs to know about them (input buffers, assigns, sharding, bound Variables). A BIND reached before its variable
    is a leaf keyed by the variable: its value (a CONST) is not walked, not in the key and not in `order`."""

    __slots__ = ("_binds_conflict", "_key", "_pos", "_sink", "assigns", "binds", "inputs", "key", "order", "sharded",
                 "var_vals")  # fmt: skip
    _pos: dict[UOp, int]
    _key: list[Any]
    _binds_conflict: bool
    _sink: UOp
    inputs: list[UOp]
    assigns: list[UOp]
    binds: dict[UOp, UOp]
    sharded: bool

    def __init__(self, sink: UOp, extends: Structure | None = None) -> None:
        """`extends`: the Structure of a SINK whose sources begin `sink`'s (the same roots with more after them, e.g.
        deferred index checks): its walk is continued instead of repeated (the same result as a fresh walk, as a
        post-order walk visits the roots in order and the old SINK is its last node). `extends` is used up."""
        # a post-order walk (sources in order, then the node: `UOp.toposort`'s order) that numbers the nodes and
        # writes each node's key entry as it goes (the hot loop of a cached realize: kept lean)
        if extends is not None and _begins_with(sink.src, extends._sink.src):
            pos, key, inputs, assigns = extends._pos, extends._key, extends.inputs, extends.assigns
            binds, binds_conflict, sharded = extends.binds, extends._binds_conflict, extends.sharded
            del pos[extends._sink]  # the old SINK: the walk's last node and key entry
            key.pop()
        else:
            pos, key, inputs, assigns = {}, [], [], []
            binds = {}  # DEFINE_VAR -> the BIND of it in this graph
            binds_conflict = sharded = False
        stack = [sink]
        while stack:
            u = stack[-1]
            for s in u.src:
                if s not in pos:
                    stack.append(s)
                    break
            else:
                stack.pop()
                if u in pos:
                    continue
                pos[u] = len(pos)
                op = u.op
                if (kind := _NOTED.get(op)) is not None:
                    if kind is _MOVEMENT:  # a symbolic shape is keyed with its Variables unbound
                        if (unbound := _unbound_args.get(u.arg, _UNSEEN)) is _UNSEEN:
                            unbound = _unbind_arg(u.arg)
                        if unbound is not None:
                            free_arg, arg_binds = unbound
                            for b in arg_binds:
                                binds_conflict |= binds.setdefault(b.src[0], b) is not b
                            key.append((op, u.dtype, free_arg, u.tag, tuple(map(pos.__getitem__, u.src))))
                            continue
                    elif kind is _UNIQUE:
                        key.append(op)
                        continue
                    elif kind is _VARIABLE:
                        # a variable first reached from its BIND (on the stack below it): the BIND is a leaf keyed
                        # by the variable, its value (the CONST) is never walked but is a kernel argument
                        if stack and (b := stack[-1]).op is _BIND and b.src[0] is u:
                            key.append(u._ukey)
                            stack.pop()
                            pos[b] = len(pos)
                            key.append((_BIND, b.dtype, None, None, (pos[u],)))
                            binds_conflict |= binds.setdefault(u, b) is not b
                            continue
                    elif kind is _BOUND:  # a BIND walked in full (its variable was reached before): keyed by value
                        binds_conflict |= binds.setdefault(u.src[0], u) is not u
                    elif kind is _BUFFER:
                        inputs.append(u)
                    elif kind is _ASSIGN:
                        assigns.append(u)
                    elif op is not _DEVICE or u.arg.__class__ is tuple:  # MULTI, or a DEVICE of several devices
                        sharded = True
                k = u._ukey  # (op, dtype, src, arg as hash-consing compares it (-0.0 apart from 0.0), tag)
                key.append((op, k[1], k[3], k[4], tuple(map(pos.__getitem__, u.src))) if u.src else k)
        self.order, self.inputs, self.assigns, self.sharded = list(pos), inputs, assigns, sharded
        self.key = tuple(key)
        self.binds = binds
        self._pos, self._key, self._binds_conflict, self._sink = pos, key, binds_conflict, sink
        # the Variables' values by name (as create_schedule's var_vals); None when one is bound to two values
        self.var_vals: dict[str, int] | None = {}
        if binds:
            self.var_vals = None if binds_conflict else {str(v.arg[0]): b.src[1].arg for v, b in binds.items()}

    @property
    def positions(self) -> dict[UOp, int]:
        """Each walked node's position in `order` (read only)."""
        return self._pos


# ops whose argument may hold bound Variables: the same set callify.py unbinds (a test checks)
_SYMBOLIC_ARGS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK})
# the ops the walk looks at more closely, by kind (module constants: in the walk's hot loop an enum attribute
# lookup costs more than a global)
_MOVEMENT, _UNIQUE, _BUFFER, _ASSIGN, _SHARDING, _VARIABLE, _BOUND = range(7)
_NOTED = {
    **dict.fromkeys(_SYMBOLIC_ARGS, _MOVEMENT),
    Ops.DEFINE_VAR: _VARIABLE,
    Ops.BIND: _BOUND,
    Ops.UNIQUE: _UNIQUE,
    Ops.BUFFER: _BUFFER,
    Ops.ASSIGN: _ASSIGN,
    Ops.MULTI: _SHARDING,
    Ops.DEVICE: _SHARDING,
}
_BIND, _DEVICE = Ops.BIND, Ops.DEVICE


def _begins_with(src: tuple[UOp, ...], prefix: tuple[UOp, ...]) -> bool:
    return len(src) >= len(prefix) and all(a is b for a, b in zip(src, prefix, strict=False))


def _holds_uop(arg: Any) -> bool:
    """Whether a movement argument (ints and nested tuples of them) holds a UOp (a symbolic size)."""
    for x in arg:
        c = x.__class__
        if c is UOp or (c is tuple and _holds_uop(x)):
            return True
    return False


# movement argument -> None when it holds no UOp, else (the argument unbound, the BINDs it held); bounded
_unbound_args: dict[Any, tuple[Any, tuple[UOp, ...]] | None] = {}
_UNSEEN: Any = object()


def _unbind_arg(arg: Any) -> tuple[Any, tuple[UOp, ...]] | None:
    """None for a movement argument of plain ints, else the argument with every BIND in it replaced by its
    variable (as callify.py does) and those BINDs; remembered in `_unbound_args` (eager loops repeat arguments)."""
    ret: tuple[Any, tuple[UOp, ...]] | None = None
    if arg.__class__ is tuple and _holds_uop(arg):
        found: dict[UOp, None] = {}

        def unbind(x: UOp) -> UOp:
            binds = {b: b.src[0] for b in x.toposort() if b.op is Ops.BIND}
            found.update(dict.fromkeys(binds))
            return x.substitute(binds) if binds else x

        ret = _rt().callify.map_uops(arg, unbind), tuple(found)
    if len(_unbound_args) >= 4096:
        _unbound_args.clear()
    _unbound_args[arg] = ret
    return ret


def _rebind_arg(arg: tuple[Any, ...], binds: dict[UOp, UOp]) -> tuple[Any, ...]:
    """An unbound movement argument with its variables bound again to this realize's BINDs."""

    def rebind(x: UOp) -> UOp:
        found = {v: binds[v] for v in x.toposort() if v.op is Ops.DEFINE_VAR and v in binds}
        return x.substitute(found) if found else x

    return _rt().callify.map_uops(arg, rebind)


@dataclass
class _Fresh:
    """A buffer every run makes (`named`: it also needs a BUFFER uop, because a tensor will hold it)."""

    device: str
    size: int
    dtype: DType
    named: bool = False
    device_uop: UOp | None = None  # the DEVICE node of the buffer's BUFFER uop


@dataclass
class RealizePlan:
    """What a realize of one structure does, buffers given as slots: inputs first, then `fresh` in order."""

    n_inputs: int
    fresh: list[_Fresh] = field(default_factory=list)
    replay: Any = None  # the tg.runtime.replay.Replay of the schedule, every buffer a given slot
    # (node position, chain, slot): the storage expression of a node is its slot's BUFFER under the chain's
    # single-source movement ops, kept as (op, dtype, arg, tag) so that a plan never pins the buffers of the
    # realize it was made from
    becomes: list[tuple[int, tuple[tuple[Any, ...], ...], int]] = field(default_factory=list)
    symbolic: bool = False  # a storage expression has a symbolic shape (bound again at every run)
    used_inputs: tuple[int, ...] = ()  # input slots the schedule reads or writes (they need a device Buffer)


@functools.cache
def _rt() -> SimpleNamespace:
    """The scheduler and runtime, imported on the first realize (so that `import tg.tensor` stays free of work)."""
    from tg.codegen import schedule
    from tg.codegen.schedule import cache, callify, memory
    from tg.runtime import device, engine, replay
    from tg.runtime.hcq.ir import slot_param

    return SimpleNamespace(schedule=schedule, cache=cache, callify=callify, memory=memory, engine=engine, device=device,
                           replay=replay, slot_param=slot_param)  # fmt: skip


class _NoPlan(Exception):
    """The schedule has something a plan cannot express."""


_plans: OrderedDict[tuple[Any, ...], RealizePlan | None] = OrderedDict()
_generation = -1  # the schedule cache's generation these plans were made in


def clear_plans() -> None:
    """Forget every plan."""
    _plans.clear()
    stats.update(hits=0, misses=0)


def _lookup_key(st: Structure) -> tuple[Any, ...] | None:
    """The cache key of a walked graph, or None when caching is off."""
    global _generation
    rt = _rt()
    if not rt.cache.SCACHE.value or st.var_vals is None:  # a Variable bound to two values: the full path raises
        return None
    if rt.cache.generation != _generation:  # clear_schedule_cache() was called: plans go with the templates
        _plans.clear()
        _generation = rt.cache.generation
    # DEV picks which device a name opens (`CPU` is plain CPU or HCQ+CPU, `AMD` a mock over KFD, PCI or USB): a plan
    # holds launchers bound to those devices, so it is kept apart per DEV
    return (rt.schedule.switches(), rt.memory.NO_MEMORY_PLANNER.value, DEV.value, st.key)


def realize(sink: UOp, st: Structure) -> dict[UOp, UOp]:
    """Compute `sink` (its walk is `st`; no sharded nodes) and return the storage of each observable node, as
    `create_schedule`'s `becomes`: from a stored plan when one matches, else by scheduling (storing a plan)."""
    rt = _rt()
    key = None if rt.engine.capturing else _lookup_key(st)
    if key is not None and (plan := _plans.get(key)) is not None:
        _plans.move_to_end(key)
        stats["hits"] += 1
        return _run(plan, st)
    stats["misses"] += 1
    linear, var_vals, becomes = rt.schedule.create_schedule(sink)
    rt.engine.run_linear(linear, var_vals)
    if key is not None and key not in _plans:
        try:
            _plans[key] = _make_plan(st, linear, var_vals, becomes)
        except _NoPlan:
            _plans[key] = None
        while len(_plans) > rt.cache.SCACHE_SIZE.value:
            _plans.popitem(last=False)
    return becomes


def _make_plan(st: Structure, linear: UOp, var_vals: dict[str, int], becomes: dict[UOp, UOp]) -> RealizePlan:
    """The plan of a realize that just ran `linear` (its buffers are still alive)."""
    rt = _rt()
    Device = rt.device.Device
    if var_vals != st.var_vals:  # the walk must see exactly the Variables the schedule takes
        raise _NoPlan(Ops.BIND)
    plan = RealizePlan(len(st.inputs))
    used: set[int] = set()  # input slots that need their device Buffer
    slot: dict[UOp, int] = {b: i for i, b in enumerate(st.inputs)}
    params: dict[UOp, UOp] = {}  # BUFFER -> the PARAM of its slot

    def slot_of(b: UOp) -> int:
        if (s := slot.get(b)) is not None:
            return s
        if b.op is not Ops.BUFFER or not isinstance(dev := b.src[1].arg, str):
            raise _NoPlan(b.op)
        plan.fresh.append(_Fresh(Device.canonicalize(dev), int(b.arg), b.dtype, device_uop=b.src[1]))
        s = slot[b] = plan.n_inputs + len(plan.fresh) - 1
        return s

    def given(a: UOp) -> UOp:
        """The CALL argument `a` with its buffer the PARAM of its slot (a view of a BUFFER stays that view)."""
        if a.op is Ops.BUFFER_VIEW and a.src[0].op is Ops.BUFFER:
            return a.replace(src=(given(a.src[0]),))
        if a.op is not Ops.BUFFER:
            raise _NoPlan(a.op)
        if (p := params.get(a)) is None:
            if (s := slot_of(a)) < plan.n_inputs:
                used.add(s)
            p = params[a] = rt.slot_param(s, Device.canonicalize(str(a.src[1].arg)), a.dtype, int(a.arg))
        return p

    calls = []
    for call in linear.src:
        body, args = call.src[0], call.src[1:]
        if not (body.op is Ops.SINK or (body.op is Ops.COPY and len(args) == 2)):
            raise _NoPlan(body.op)
        calls.append(call.replace(src=(body, *(given(a) for a in args))))
    plan.replay = rt.replay.Replay(linear.replace(src=tuple(calls)))
    pos = {u: i for i, u in enumerate(st.order)}
    for node, expr in becomes.items():
        if (p := pos.get(node)) is None:
            raise _NoPlan(node.op)
        chain: list[tuple[Any, ...]] = []
        while expr.op is not Ops.BUFFER:
            if len(expr.src) != 1:
                raise _NoPlan(expr.op)
            arg = expr.arg
            if expr.op in _SYMBOLIC_ARGS and (unbound := _unbind_arg(arg)) is not None:
                arg, plan.symbolic = unbound[0], True  # kept unbound, bound again at every run
            chain.append((expr.op, expr.dtype, arg, expr.tag))
            expr = expr.src[0]
        s = slot_of(expr)
        if s >= plan.n_inputs:
            plan.fresh[s - plan.n_inputs].named = True
        plan.becomes.append((p, tuple(reversed(chain)), s))
    plan.used_inputs = tuple(sorted(used))
    return plan


def _run(plan: RealizePlan, st: Structure) -> dict[UOp, UOp]:
    """Run a plan for the walked graph `st`; returns the storage of each observable node."""
    rt = _rt()
    buffer_for = rt.engine.buffer_for
    inputs = st.inputs
    bufs: list[Any] = [None] * plan.n_inputs
    uops: list[UOp | None] = list(inputs)
    for i in plan.used_inputs:
        bufs[i] = buffer_for(inputs[i])
    for f in plan.fresh:
        u = None
        if f.named:
            assert f.device_uop is not None
            u = UOp(Ops.BUFFER, f.dtype, (UOp.unique(), f.device_uop), f.size)
            b = buffer_for(u)
        else:
            b = rt.device.Buffer(f.device, f.size, f.dtype)
        bufs.append(b)
        uops.append(u)
    assert st.var_vals is not None  # a walk with conflicting binds has no plan
    plan.replay(bufs, st.var_vals)
    becomes: dict[UOp, UOp] = {}
    order, binds = st.order, st.binds
    for p, chain, s in plan.becomes:
        e = uops[s]
        assert e is not None  # a named slot
        for op, dtype, arg, tag in chain:
            if plan.symbolic and op in _SYMBOLIC_ARGS and _holds_uop(arg):
                arg = _rebind_arg(arg, binds)
            e = UOp(op, dtype, (e,), arg, tag)
        becomes[order[p]] = e
    return becomes
