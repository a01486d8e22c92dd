"""tg.codegen.schedule: a SINK of tensor-level UOps -> the schedule, a `LINEAR` of `CALL`s (`create_schedule`).

Pipeline (one module per step): callify.py normalises the graph into the cache key; on a miss, rangeify.py
decides the stores (rules in policy.py), kernels.py builds one kernel AST per store (indexing.py does the
index arithmetic), linear.py orders the CALLs; cache.py instantiates the template with this realize's buffers
and memory.py lets intermediates share memory.
"""

from __future__ import annotations

import gc
from typing import NamedTuple

from tg.codegen.schedule import stats
from tg.codegen.schedule.cache import (
    Template,
    cache_lookup,
    cache_stats,
    cache_store,
    clear_schedule_cache,
    instantiate,
    made_buffers,
)
from tg.codegen.schedule.callify import Normalized
from tg.codegen.schedule.disk import pm_disk_strided_copy
from tg.codegen.schedule.kernels import build_kernels
from tg.codegen.schedule.linear import AssignOrderError, order_kernels, replace_buffers, schedule_spec, verify_schedule
from tg.codegen.schedule.memory import plan_memory
from tg.codegen.schedule.policy import pm_split_reduce, policy_key
from tg.codegen.schedule.rangeify import Plan, numel_matches, plan_stores
from tg.ir import Ops, UOp, graph_rewrite_map, tensor_spec, verify
from tg.ir.helpers import SPEC
from tg.ir.uop import sint

__all__ = [
    "AssignOrderError",
    "Schedule",
    "cache_stats",
    "clear_schedule_cache",
    "create_schedule",
    "replace_buffers",
    "schedule_spec",
    "verify_schedule",
]

# every switch that changes fusion decisions is part of the cache key
POLICY: tuple = ()


def switches() -> tuple:
    """The current values of every switch that changes scheduling decisions (part of each schedule-cache key, and of
    tg.tensor's realize-plan keys)."""
    return (*POLICY, *policy_key())


class Schedule(NamedTuple):
    """The result of scheduling: the LINEAR of CALLs in run order, variable values, and the storage of each node a
    tensor can observe (requested outputs, CONTIGUOUS, ASSIGN) as movement ops over a BUFFER."""

    linear: UOp
    var_vals: dict[str, int]
    becomes: dict[UOp, UOp]


def _storage_expr(plan: Plan, node: UOp) -> UOp | None:
    """`node`'s value as a view of the buffer holding it, if one does."""
    views: list[tuple[sint, ...]] = []  # the shapes of the aliases passed on the way down (a loop, not recursion)
    base = plan.peel(node)
    while base.op is not Ops.BUFFER and base in plan.aliases:
        views.append(node.shape)
        node = plan.aliases[base]
        base = plan.peel(node)
    buf = (base if numel_matches(base, node.shape) else None) if base.op is Ops.BUFFER else plan.buffers.get(base)
    if buf is None:
        return None
    if numel_matches(buf, node.shape):
        expr = buf.reshape(node.shape)
    else:
        n: sint = 1
        for s in node.shape:
            n = n * s
        expr = buf.shrink(((0, n),)).reshape(node.shape)
    for shape in reversed(views):
        expr = expr.reshape(shape)
    return expr


# rewrites before the store rules (one matcher object: its per-op compiled matchers are kept between schedules)
_pm_before_stores = pm_disk_strided_copy + pm_split_reduce


def _schedule_template(sink: UOp) -> Template:
    rewritten = graph_rewrite_map(sink, _pm_before_stores, name="disk copies, split sums")
    plan = plan_stores(rewritten[sink])
    linear = order_kernels(plan, build_kernels(plan))
    becomes: dict[UOp, UOp] = {}
    outputs = set(sink.src)  # a set: `in sink.src` scanned the tuple per node (nodes x outputs on deep backward graphs)
    for orig, new in rewritten.items():
        if orig in outputs or orig.op in (Ops.CONTIGUOUS, Ops.ASSIGN):
            if (expr := _storage_expr(plan, new)) is not None:
                becomes[orig] = expr
    return Template(linear, becomes, made_buffers(linear, becomes))


def create_schedule(sink: UOp) -> Schedule:
    """Schedule a SINK of tensor-level UOps: kernels and copies as a `LINEAR` of `CALL(body, *buffers)`.

    A call's body is a kernel AST (a SINK; buffer arguments in PARAM slot order, output first) or a COPY (arguments
    destination, source). Bound variables become `var_vals`. Same-structure graphs hit the schedule cache.
    """
    if not isinstance(sink, UOp) or sink.op is not Ops.SINK:
        raise TypeError(f"create_schedule expects a SINK, got {getattr(sink, 'op', type(sink).__name__)}")
    stats.calls += 1
    if SPEC:  # SPEC=1 (on in the test suites): the tensor graph must satisfy tg.ir's tensor spec
        verify(sink, tensor_spec)
    # scheduling allocates many small objects that all stay alive until it returns: the cyclic garbage collector
    # would rescan the whole heap over and over (superlinear on big graphs); it runs again afterwards
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _create_schedule(sink)
    finally:
        if gc_was_enabled:
            gc.enable()


def _create_schedule(sink: UOp) -> Schedule:
    norm = Normalized(sink)
    key = (norm.sink, switches())
    if (template := cache_lookup(key)) is None:
        template = _schedule_template(norm.sink)
        cache_store(key, template)
    linear, becomes_norm = instantiate(template, norm.inputs)
    becomes = {orig: norm.rebind(becomes_norm[n]) for orig, n in norm.nodes.items() if n in becomes_norm}
    held = {u for e in becomes.values() for u in e.toposort() if u.op is Ops.BUFFER} | set(norm.inputs)
    linear = plan_memory(linear, held)
    if SPEC:
        verify_schedule(linear)
    return Schedule(linear, norm.var_vals, becomes)
