"""All fusion policy in one place: which tensor-graph nodes are *stored* (end a kernel and get a buffer).

Everything not stored is computed inline by the kernel that reads it. The rules are the tables below, each row
commented with what it matches and why (ids as in the package README's "## Scheduling" and
`shared/specs/scheduler.md`). `rangeify.plan_stores` applies them in this order, each table in one pass:

| ids | rules here | applied by (order of the walk) |
| --- | ---------- | ------------------------------ |
| P1, P1a | `pm_split_reduce` | `create_schedule`'s graph rewrite before the others (long reductions with few outputs) |
| S1-S5 | `pm_structural_stores` | `rangeify._structural_stores` (sources first): outputs, CONTIGUOUS, ASSIGN, COPY |
| R2-R5 | `CANDIDATE_RULES` (R1: none holds, fuse) | `rangeify._range_walk` (consumers first: the index each reads) |
| C1-C4 | `KEEP_RULES` (C1: none holds, recompute), `op_cost` | `rangeify._unstore_cheap` (sources first: regions) |
| L1 | `over_buffer_limit` | `rangeify._limit_buffers` (sources first: the buffers each region reads) |
| D1 | `constant_axes`, `SHRINKABLE` | `rangeify._drop_dead_axes` (sources first: the axes values are constant along) |
| H1 | (kernels.py `_hazard`) | an assign that reads its target at another index computes into a temporary first |

C3 is the fusion cost model: an elementwise producer is fused into its consumer only where each of its elements is
evaluated once there, or where one evaluation costs at most `RECOMPUTE_MAX_COST` cheap ALU ops (`OP_COST`: a
transcendental is 16, a division or square root 4, a PAD (bounds check, select, gated load) 1, the rest 1). A producer
under a broadcast is evaluated once per broadcast element: GELU fused into the matmul that reads it would run once per
output column, softmax's `exp` once per column of the product it feeds, a `cat` of three gradients (three PADs, two
adds) three gated loads per output column. Those are stored (computed once) instead; a scale, a shift or a cast is still
recomputed. The threshold is low because the consumers that broadcast are mostly matmuls: an operand recomputed per
register tile costs about as much as the tile's FMAs per op (measured: a ReLU fused into a 512x64x256 matmul's operand
made it 40x slower than ReLU stored first), while storing costs one elementwise kernel the size of the operand.
Values read at several indices by one kernel (R2) are not counted as repeated: shifted sums like
`x[1:] + x[:-1]` reuse each other's terms. C4: a reduction nested in another reduction's loop
(`(a @ b).sum()`) runs as a kernel of its own, where the optimiser sees a plain matmul or reduction; fused, the
outer reduction's loops wrap it and no heuristic can vectorise it (a 1024x1024 matmul into a sum took 39 s). A
reduction read through a PAD would run its whole loop at every padded position too, the result thrown away by a
select: the three matmuls of an attention's q/k/v gradient `cat`ed into one tensor ran 3x the work, unvectorised.
P1 rewrites the graph before the other rules (`pm_split_reduce`): it gives long reductions with few outputs a
parallel axis (THREAD on the CPU, work-items on GPUs) and keeps the final reduction small. Accuracy does not come
from here: the lowering accumulates every long float sum in nested blocks (`lower/blocked.py`).
The buffer limit is the renderer's `max_buffers` for the kernel's device family (`Renderer.buffer_limits`), or
`MAX_KERNEL_BUFFERS` when set (tests, or to force smaller kernels); it is part of the schedule cache key
(`policy_key`). To add a rule (e.g. a split-reduce), add a row to its table here (and to the README's); nothing else
in the scheduler decides what is stored.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tg.codegen.render.renderer import Renderer
from tg.ir import GroupOp, Ops, PatternMatcher, UOp, UPat, dtypes
from tg.ir.helpers import MAX_KERNEL_BUFFERS

if TYPE_CHECKING:
    from tg.codegen.schedule.rangeify import Plan

# store reasons (rule ids of the table above)
OUTPUT, CONTIGUOUS, ASSIGN, HAZARD, COPY, COPY_SOURCE, MULTI_INDEX, BROADCAST, NESTED_REDUCE, PADDED_REDUCE = (
    "S1", "S2", "S3", "H1", "S5", "S5-source", "R2", "R3", "R4", "R5")  # fmt: skip
BUFFER_LIMIT = "L1"
# reasons whose store may drop the axes its value does not depend on (D1): no tensor observes these buffers
SHRINKABLE = frozenset({MULTI_INDEX, BROADCAST, NESTED_REDUCE, PADDED_REDUCE, BUFFER_LIMIT})

# L1: a kernel's buffer limit (output included) for every device; 0 uses the renderer's `max_buffers`
MIN_KERNEL_BUFFERS = 4  # a WHERE of three buffers and its output: no split can go below this

# ops whose value is free or already storage: never stored (S7)
NEVER_STORED = frozenset({Ops.BUFFER, Ops.BUFFER_VIEW, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.DEVICE, Ops.UNIQUE})
# ops that only rename a value (looked through when asking "is this already a buffer?")
PASSTHROUGH = frozenset({Ops.RESHAPE, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD})
# the most distinct buffers a recomputed region may read (C1)
MAX_RECOMPUTE_BUFFERS = 3


# R4: a reduction nested in another one's loop is stored from this many input elements (small ones stay fused)
NESTED_REDUCE_MIN = 2**15

# C3: what one evaluation of an op costs, in cheap ALU ops (add, multiply, compare, select, cast: 1; ops not listed
# cost 1, movement ops and loads 0). Transcendentals are polynomials of 10-20 ops; the divider is slow and unpipelined.
OP_COST: dict[Ops, int] = {
    Ops.EXP2: 16, Ops.LOG2: 16, Ops.SIN: 16, Ops.POW: 40, Ops.THREEFRY: 40,
    Ops.SQRT: 4, Ops.RECIPROCAL: 4, Ops.FDIV: 4, Ops.IDIV: 4, Ops.MOD: 4,
}  # fmt: skip
FREE_OPS = GroupOp.Movement | {Ops.BITCAST, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH}
# a PAD is a bounds check and a select, and its load is gated (never a vector load): one op. A `cat` of n parts is n
# PADs and n - 1 adds, so one of 2+ parts under a broadcast is stored (an attention's q/k/v gradient `cat` read by
# the qkv weight gradient and the input gradient: each element gathered from three gated loads per output column)
PAD_COST = 1
# C3: the most a region evaluated more than once per element may cost and still be recomputed (two adds, multiplies
# or casts: a scale and shift)
RECOMPUTE_MAX_COST = 2
COST_CAP = 1 << 20  # region costs add up over shared sources (an upper bound); capped so they stay small ints


def op_cost(x: UOp) -> int:
    """C3: the cost of evaluating tensor node `x` once, its sources excluded."""
    if x.op is Ops.PAD:
        return PAD_COST
    if x.op in FREE_OPS or x.op not in GroupOp.Elementwise:
        return 0
    return OP_COST.get(x.op, 1)


@dataclass
class Store:
    """Why a node is stored; `removable` stores are candidates the cost rule (C1) may undo. `repeated`: inlined, the
    node would be evaluated more than once per element by one kernel (C3)."""

    reasons: set[str] = field(default_factory=set)
    removable: bool = True
    repeated: bool = False


# ---- A1: structural stores (a rewrite that only fills the plan; sources before users) ----------------------------


def _store_output(ctx: Plan, x: UOp) -> None:
    for out in x.src:  # S1: requested outputs
        if ctx.storage_node(out) is None:
            ctx.store(ctx.peel(out), OUTPUT)


def _store_contiguous(ctx: Plan, x: UOp) -> None:
    if ctx.storage_node(x.src[0]) is not None:  # S2: already a contiguous buffer: an alias, no kernel
        ctx.aliases[x] = x.src[0]
    else:
        ctx.store(x, CONTIGUOUS)


def _store_copy(ctx: Plan, x: UOp) -> None:
    if ctx.storage_node(x.src[0]) is None and ctx.disk_view(x.src[0]) is None:  # S5: copies move whole buffers
        ctx.store(ctx.peel(x.src[0]), COPY_SOURCE)
    ctx.store(x, COPY)


pm_structural_stores = PatternMatcher([
    # S2: CONTIGUOUS is a user-requested kernel boundary
    (UPat(Ops.CONTIGUOUS, name="x"), _store_contiguous),
    # S3: an ASSIGN writes its value into the target's buffer
    (UPat(Ops.ASSIGN, name="x"), lambda ctx, x: ctx.store(x, ASSIGN)),
    # S5: a COPY is its own schedule step reading a stored source
    (UPat(Ops.COPY, name="x"), _store_copy),
    # S1: the SINK's sources are the outputs (visited last: the stores above are known)
    (UPat(Ops.SINK, name="x"), _store_output),
])  # fmt: skip


# ---- A2: candidates found in the range walk (consumers first) ------------------------------------------------------


@dataclass(frozen=True)
class Reads:
    """How a node's consumers read it, as the range walk found it (no store between them and the node)."""

    node: UOp
    consumers_agree: bool  # every consumer reads it at one index, in one kernel
    under_broadcast: bool  # an EXPAND is above it
    in_reduce: bool  # a consumer in the same kernel reduces over its value
    under_pad: bool  # a PAD is above it


# R2-R5: the first rule that holds makes the node a store candidate, for its reason (none holds: R1, it is fused)
CANDIDATE_RULES: tuple[tuple[str, Callable[[Reads], bool]], ...] = (
    # R2: read at different indices by its consumers (or by two kernels): inlined, it is computed once per index
    (MULTI_INDEX, lambda r: not r.consumers_agree),
    # R3: a reduction or elementwise node under a broadcast: inlined, it is computed once per broadcast element
    (BROADCAST, lambda r: r.under_broadcast and (r.node.op is Ops.REDUCE_AXIS or r.node.op in GroupOp.Elementwise)),
    # R4: a long reduction another reduction of its kernel reads in its loop: the optimiser sees only the outer one
    (NESTED_REDUCE, lambda r: r.node.op is Ops.REDUCE_AXIS and r.in_reduce
     and _input_elements(r.node) >= NESTED_REDUCE_MIN),
    # R5: a reduction read through a PAD: its whole loop would also run at every padded position
    (PADDED_REDUCE, lambda r: r.node.op is Ops.REDUCE_AXIS and r.under_pad),
)  # fmt: skip


def candidate_reason(reads: Reads) -> str | None:
    """R2-R5: the reason to make `reads.node` a store candidate (the first of `CANDIDATE_RULES` that holds)."""
    return next((reason for reason, holds in CANDIDATE_RULES if holds(reads)), None)


def _input_elements(x: UOp) -> int:
    n = 1
    for s in x.src[0].shape:
        n *= s if isinstance(s, int) else int(s.vmax)
    return n


# ---- L1: the buffer limit of a kernel (sources first, after the cost rule) -----------------------------------------


def kernel_buffer_limit(device: object) -> int | None:
    """The most buffers (output included) one kernel on `device` may take, None for no limit."""
    limit = MAX_KERNEL_BUFFERS.value or (Renderer.buffer_limits.get(device.split(":")[0])
                                         if isinstance(device, str) else None)  # fmt: skip
    if limit is not None and limit < MIN_KERNEL_BUFFERS:
        raise ValueError(f"a kernel buffer limit of {limit} is too small: at least {MIN_KERNEL_BUFFERS} are needed "
                         "(a WHERE of three buffers and its output)")  # fmt: skip
    return limit


def smallest_buffer_limit() -> int | None:
    """The smallest buffer limit any kernel may have (None: no limit anywhere): a graph that holds fewer buffers
    than this cannot put too many into one kernel."""
    return MAX_KERNEL_BUFFERS.value or min(Renderer.buffer_limits.values(), default=None)


def over_buffer_limit(x: UOp, inputs: int) -> bool:
    """L1: an ALU op whose inline region reads `inputs` distinct buffers makes its kernel take too many."""
    return x.op in GroupOp.ALU and (limit := kernel_buffer_limit(x.device)) is not None and inputs > limit - 1


def policy_key() -> tuple:
    """Every switch that changes store decisions, for the schedule cache key."""
    return (MAX_KERNEL_BUFFERS.value, tuple(sorted(Renderer.buffer_limits.items())))


# ---- D1: axes a value is constant along (sources first) ---------------------------------------------------------


def _is_one(s: object) -> bool:
    return isinstance(s, int) and s == 1


def _bits(axes: object) -> int:
    return sum(1 << a for a in axes)  # type: ignore[attr-defined]


def _reshape_axes(x: UOp, dead: int) -> int:
    """Constant axes through a RESHAPE that only adds or removes size-1 axes (else none are known)."""
    src_axes = [a for a, s in enumerate(x.src[0].shape) if not _is_one(s)]
    out_axes = [a for a, s in enumerate(x.shape) if not _is_one(s)]
    if len(src_axes) != len(out_axes):
        return 0
    ret = 0
    for a, o in zip(src_axes, out_axes, strict=True):
        sa, so = x.src[0].shape[a], x.shape[o]
        if sa is not so and sa != so:
            return 0
        if dead >> a & 1:
            ret |= 1 << o
    return ret


# D1: how a single-source op passes on the axes its source's value is constant along (bit masks over axes)
CONSTANT_AXES_RULES: dict[Ops, Callable[[UOp, int], int]] = {
    # a RESHAPE that only adds or removes size-1 axes keeps them (renumbered); any other loses them
    Ops.RESHAPE: lambda x, dead: _reshape_axes(x, dead),
    # a PERMUTE moves them with its axes
    Ops.PERMUTE: lambda x, dead: _bits(i for i, p in enumerate(x.arg) if dead >> p & 1),
    # shrinks, flips and markers keep every value where it was along the axis
    **dict.fromkeys((Ops.SHRINK, Ops.FLIP, Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), lambda x, dead: dead),
    # zeros come in along the padded axes
    Ops.PAD: lambda x, dead: dead & ~_bits(a for a, p in enumerate(x.arg) if p != (0, 0)),
    # a reduction is constant along no reduced axis (it has size 1 there)
    Ops.REDUCE_AXIS: lambda x, dead: dead & ~_bits(x.arg[1]),
}  # fmt: skip


def constant_axes(x: UOp, src_dead: list[int]) -> int:
    """The axes (of size > 1, as a bit mask) along which tensor node `x`'s value does not vary, given its
    sources' masks (D1): an EXPAND adds the axes it broadcasts, an elementwise op keeps those all its shaped
    sources share, the ops of `CONSTANT_AXES_RULES` map their source's, any other op (buffers, copies, assigns,
    constants) has none."""
    op = x.op
    if op is Ops.EXPAND:
        ret = src_dead[0] | _bits(a for a, (s, n) in enumerate(zip(x.src[0].shape, x.shape, strict=True))
                                  if _is_one(s) and not _is_one(n))  # fmt: skip
    elif op in GroupOp.Elementwise:
        ret = -1
        for s, d in zip(x.src, src_dead, strict=True):
            if s._shape is not None:
                ret &= d
                if not ret:
                    return 0
        ret = 0 if ret == -1 else ret
    elif not src_dead or not src_dead[0] or (rule := CONSTANT_AXES_RULES.get(op)) is None:
        return 0
    else:
        ret = rule(x, src_dead[0])
    return ret & ~_bits(a for a, s in enumerate(x.shape) if _is_one(s)) if ret else 0


# ---- A3: the cost rule (sources first, once everything below is decided) ----------------------------------------


@dataclass(frozen=True)
class Region:
    """What computing a node inline costs: the distinct buffers it reads (capped), whether it reduces one, and the
    cost of one evaluation (`op_cost` summed down to stores and buffers)."""

    buffers: frozenset[UOp] = frozenset()
    reduces_buffer: bool = False
    cost: int = 0


# C2-C4: a candidate is kept stored when one of these holds (the cost rule, sources first, with `region` the node's
# inline region and `store` its Store); C1: a candidate none holds for is un-stored and recomputed by each reader
KEEP_RULES: tuple[tuple[str, Callable[[Region, Store | None], bool]], ...] = (
    # C2: recomputing would read more than MAX_RECOMPUTE_BUFFERS buffers, or reduce over memory, at every reader
    ("C2", lambda region, store: len(region.buffers) > MAX_RECOMPUTE_BUFFERS or region.reduces_buffer),
    # C4: a nested reduction (R4) or one read through a PAD (R5) runs as a kernel of its own
    ("C4", lambda region, store: store is not None and bool(store.reasons & {NESTED_REDUCE, PADDED_REDUCE})),
    # C3: the fusion cost model: evaluated more than once per element and more than a scale and shift per evaluation
    ("C3", lambda region, store: store is not None and store.repeated and region.cost > RECOMPUTE_MAX_COST),
)  # fmt: skip


def keep_candidate(region: Region, store: Store | None = None) -> bool:
    """C1-C4: whether a candidate stays stored (one of `KEEP_RULES` holds) or is recomputed (C1)."""
    return any(holds(region, store) for _, holds in KEEP_RULES)


# ---- P1: split long reductions with few outputs (a graph rewrite before the store rules) ------------------------

SPLIT_MIN = 2**14  # elements reduced per output from which a reduction is split
SPLIT_MAX_OUTPUTS = 255  # outputs above which a reduction has parallel work already and stays one kernel
SPLIT_CHUNK = 4096  # the least elements per partial (the partial kernel's loop stays long enough to stream)
SPLIT_PARTIALS = 4096  # the most partials of all outputs together (the final reduce stays small)


def _broadcast_const(src: UOp) -> UOp | None:
    """The float CONST that src only reshapes/expands/permutes (no pad or shrink: every element is it), else None."""
    while src.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE):
        src = src.src[0]
    return src if src.op is Ops.CONST and isinstance(src.arg, float) else None


def _split_reduce(x: UOp) -> UOp | None:
    """REDUCE_AXIS(op, src, axes) -> partial reductions of P contiguous chunks per output (stored, a new axis that
    THREAD and GPU work-items split), then one short reduction of the partials: two kernels."""
    op, axes = x.arg
    src = x.src[0]
    if not (op is Ops.MAX or (op is Ops.ADD and dtypes.is_float(x.dtype))) or \
            not all(isinstance(s, int) for s in src.shape):  # fmt: skip
        return None
    shape: tuple[int, ...] = src.shape  # type: ignore[assignment]
    n = math.prod(shape[a] for a in axes)
    keep = [i for i in range(len(shape)) if i not in axes]
    outs = [shape[i] for i in keep]
    if n < SPLIT_MIN:
        return None
    if op is Ops.ADD and (c := _broadcast_const(src)) is not None:  # P1a: a sum of n copies of c is c*n, rounded once
        return x.const_like(c.arg * n)
    if math.prod(outs) > SPLIT_MAX_OUTPUTS:
        return None
    parts = max(2, min(-(-n // SPLIT_CHUNK), SPLIT_PARTIALS // math.prod(outs)))
    chunk = -(-n // parts // 256) * 256  # a multiple of 256: whole vectors of lanes and accumulators in each chunk
    parts = -(-n // chunk)
    order = (*keep, *axes)
    level = (src.permute(order) if order != tuple(range(len(shape))) else src).reshape((*outs, n))
    if parts * chunk != n:  # the identity pads the last chunk: zeros add nothing, the dtype's minimum changes no max
        pads = ((0, 0),) * len(outs) + ((0, parts * chunk - n),)
        padded = level.pad(pads)
        if op is Ops.MAX:
            valid = UOp.const(dtypes.bool, True, level.device, level.shape).pad(pads)
            padded = valid.where(padded, padded.const_like(x.dtype.min))
        level = padded
    level = level.reshape((*outs, parts, chunk)).r(op, (len(outs) + 1,)).reshape((*outs, parts)).contiguous()
    return level.r(op, (len(outs),)).reshape(x.shape)


pm_split_reduce = PatternMatcher([
    # P1: a long reduction with few outputs becomes stored partials and a short reduction of them
    (UPat(Ops.REDUCE_AXIS, name="x"), _split_reduce),
])  # fmt: skip
