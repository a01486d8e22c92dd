"""Phase (a): decide which nodes are stored (`plan_stores`) by the rule tables of `policy.py`, in five linear passes.

Each pass is one walk over the graph in a fixed order that applies one table of `policy.py` to each node; the walks
only carry what the rules need (the index a node is read at, the region it would recompute) and decide nothing
themselves:

1. `pm_structural_stores` (S1-S5, sources first): outputs, CONTIGUOUS, ASSIGN, COPY.
2. The range walk (`CANDIDATE_RULES`, R2-R5, consumers before producers): every node gets the index its consumers
   read it at, in terms of fresh RANGEs of the kernel that reads it (movement ops map indices with
   `movement_index`, reductions add REDUCE ranges), and whether a broadcast, a reduction's loop or a PAD is above it.
3. The cost rule (`KEEP_RULES`, C1-C4, sources first): the region each candidate would recompute decides it.
4. The buffer limit (L1, sources first) and 5. the constant axes (D1, sources first).
Then every kept store gets its buffer (an assign writes its target's buffer).
"""

from __future__ import annotations

from typing import Any

from tg.codegen.schedule import policy, stats
from tg.codegen.schedule.indexing import Index, and_gates, as_index, is_one, movement_index, total_size
from tg.ir import AxisType, GroupOp, Ops, UOp
from tg.ir.uop import sint

Ask = tuple[Index, "UOp | None", UOp]  # an index into a node, its gate, and the stored node whose kernel reads it


def numel_matches(buf: UOp, shape: tuple[sint, ...]) -> bool:
    """Whether BUFFER `buf` holds exactly as many elements as `shape` (never for symbolic shapes)."""
    n = total_size(shape)
    return isinstance(n, int) and isinstance(buf.arg, int) and buf.arg == n


def buffer_size(shape: tuple[sint, ...]) -> int:
    """Elements of a buffer that can hold a value of `shape` (the maximum over the variables' ranges)."""
    n = total_size(shape)
    return n if isinstance(n, int) else int(n.vmax)


class Plan:
    """The stores of one schedule: node -> Store, aliases (values already in a buffer), and final buffers."""

    def __init__(self, sink: UOp) -> None:
        self.sink = sink
        self.order = list(sink.toposort())  # iterative: deep graphs need no recursion
        self.position = {n: i for i, n in enumerate(self.order)}
        self.stores: dict[UOp, policy.Store] = {}
        self.aliases: dict[UOp, UOp] = {}  # node -> a node that already holds its value (a buffer or a store)
        self.buffers: dict[UOp, UOp] = {}  # kept stored node -> the BUFFER its kernel writes
        self.index_memo: dict[Any, tuple[Index, UOp | None]] = {}  # movement_index memo, shared with kernels.py
        self.dead: dict[UOp, frozenset[int]] = {}  # D1: stored node -> axes its value is constant along (not stored)
        self._next_axis = 0
        self._assign_targets: dict[UOp, UOp] = {}  # ASSIGN -> the BUFFER it writes (assign_target's memo)

    # ---- where values live ----------------------------------------------------------------------------------

    @staticmethod
    def peel(node: UOp) -> UOp:
        """`node` under its reshapes and pass-through markers."""
        while node.op in policy.PASSTHROUGH:
            node = node.src[0]
        return node

    def storage_node(self, node: UOp) -> UOp | None:
        """The node that holds `node`'s value contiguously (a full BUFFER, or a stored/aliased node), if any."""
        base = self.peel(node)
        while base.op is not Ops.BUFFER and base in self.aliases:  # a loop: alias chains can be long
            node = self.aliases[base]
            base = self.peel(node)
        if base.op is Ops.BUFFER:
            return base if numel_matches(base, node.shape) else None
        if base in self.stores and not self.stores[base].removable:
            return base
        return None

    def disk_view(self, node: UOp) -> UOp | None:
        """A BUFFER_VIEW for copying `node` off a DISK buffer without a kernel, when it is one contiguous run."""
        if (rng := contiguous_range(node)) is None:
            return None
        buf, offset, size = rng
        if not str(buf.device).startswith("DISK"):
            return None
        return UOp(Ops.BUFFER_VIEW, buf.dtype, (buf,), (size, offset))

    def store(self, node: UOp, reason: str, removable: bool = False) -> None:
        """Record that `node` is stored for `reason` (a non-removable reason wins over candidates)."""
        st = self.stores.setdefault(node, policy.Store(removable=removable))
        st.reasons.add(reason)
        st.removable = st.removable and removable

    def fresh(self, shape: tuple[sint, ...], kind: AxisType = AxisType.LOOP) -> Index:
        """New ranges over `shape` (constant 0 for size-1 axes); ids are unique within this plan."""
        out = []
        for s in shape:
            if is_one(s):
                out.append(as_index(0))
            else:
                out.append(UOp(Ops.RANGE, as_index(0).dtype, (as_index(s),), (self._next_axis, kind)))
                self._next_axis += 1
        return tuple(out)

    def stored_shape(self, node: UOp) -> tuple[sint, ...]:
        """The shape `node` is stored in: its own, with 1 at the axes D1 dropped."""
        dead = self.dead.get(node)
        return node.shape if not dead else tuple(1 if a in dead else s for a, s in enumerate(node.shape))

    def stored_index(self, node: UOp, idx: Index) -> Index:
        """An index into `node` as an index into its buffer (0 at the axes D1 dropped: the value is the same)."""
        dead = self.dead.get(node)
        return idx if not dead else tuple(as_index(0) if a in dead else i for a, i in enumerate(idx))

    def assign_target(self, node: UOp) -> UOp:
        """The BUFFER an ASSIGN node writes (down a chain of assigns to assigns: a loop, memoised per assign, so
        3,000 chained assigns cost linear time and no recursion)."""
        chain: list[UOp] = []
        target = node
        while target.op is Ops.ASSIGN and target not in self._assign_targets:
            chain.append(target)
            target = self.peel(target.src[0])
        if target.op is Ops.ASSIGN:
            target = self._assign_targets[target]
        if target.op is not Ops.BUFFER:
            raise ValueError(f"assign target must be a realized buffer (possibly reshaped), got a {target.op} node")
        for a in chain:
            self._assign_targets[a] = target
        return target


def contiguous_range(node: UOp) -> tuple[UOp, int, int] | None:
    """(BUFFER, offset, size) in elements when `node` is one contiguous run of a BUFFER (reshapes and shrinks that
    keep the elements in order and adjacent), else None. Symbolic views are never a known run."""
    shrinks: list[UOp] = []
    while node.op is not Ops.BUFFER:  # down to the buffer (a loop: view chains can be long)
        if node.op is Ops.SHRINK:
            shrinks.append(node)
        elif node.op not in policy.PASSTHROUGH:
            return None
        node = node.src[0]
    run: tuple[UOp, int, int] | None = (node, 0, node.arg) if isinstance(node.arg, int) else None
    for shrink in reversed(shrinks):  # innermost first
        if run is None:
            return None
        run = _shrunk_run(shrink, run)
    return run


def _shrunk_run(node: UOp, inner: tuple[UOp, int, int]) -> tuple[UOp, int, int] | None:
    """The run a SHRINK of the contiguous run `inner` covers, if it is one."""
    shape, bounds = node.src[0].shape, node.arg
    if not all(isinstance(s, int) for s in shape) or not all(isinstance(b, int) for bd in bounds for b in bd):
        return None
    buf, offset, _ = inner
    partial = [i for i, ((b, e), s) in enumerate(zip(bounds, shape, strict=True)) if (b, e) != (0, s)]
    # whole dims after the last cut one and single indices before it: the run has no gaps
    if partial and any(e - b != 1 for b, e in bounds[: partial[-1]]):
        return None
    start, stride = 0, 1
    b: Any
    s: Any
    for (b, _), s in zip(reversed(bounds), reversed(shape), strict=True):
        start += b * stride
        stride *= s
    size = total_size(node.shape)
    assert isinstance(size, int)
    return buf, offset + start, size


# ---- the range walk --------------------------------------------------------------------------------------------

_NOT_WALKED = policy.NEVER_STORED | {Ops.SINK, Ops.COPY}


def _same(a: Ask, b: Ask) -> bool:
    return a[2] is b[2] and a[1] is b[1] and all(i is j for i, j in zip(a[0], b[0], strict=True))


def _range_walk(plan: Plan) -> None:
    consumers: dict[UOp, list[UOp]] = {}
    for n in plan.order:
        for s in n.src:
            if (cs := consumers.get(s)) is None:
                consumers[s] = [n]
            else:
                cs.append(n)
    inp: dict[UOp, Ask] = {}  # node -> the index its sources are read at
    # node -> (a broadcast is above it, its sources are read inside a reduction's loop of the same kernel, a PAD is
    # above it), each with no store in between
    flags: dict[UOp, tuple[bool, bool, bool]] = {}
    stores, movement = plan.stores, GroupOp.Movement
    for x in reversed(plan.order):
        if x.op in _NOT_WALKED:
            continue
        asks: list[Ask] = []
        ub = in_reduce = under_pad = False
        for c in consumers.get(x, ()):  # one pass over the consumers that read x's value (not an assign's target)
            if (ask := inp.get(c)) is None or (c.op is Ops.ASSIGN and c.src[0] is x and c.src[1] is not x):
                continue
            asks.append(ask)
            cu, cr, cp = flags[c]
            ub, in_reduce, under_pad = ub or cu, in_reduce or cr, under_pad or cp
        out: Ask
        if x in stores:
            out = (plan.fresh(x.shape), None, x)
        elif not asks:
            continue
        elif (reason := policy.candidate_reason(policy.Reads(x, all(_same(a, asks[0]) for a in asks[1:]), ub,
                                                             in_reduce, under_pad))) is not None:  # fmt: skip
            out = (plan.fresh(x.shape), None, x)
            plan.store(x, reason, removable=True)
            stores[x].repeated = ub
        else:
            out = asks[0]  # R1: one index in one kernel for every consumer: fuse
        if x in stores:
            ub = in_reduce = under_pad = False  # the buffer ends the broadcast, the reduction and the padding
        if x.op is Ops.EXPAND:
            ub = True
        elif x.op is Ops.PAD:
            under_pad = True
        if x.op in movement:
            idx, gate = movement_index(x, out[0], plan.index_memo)
            inp[x] = (idx, and_gates(out[1], gate), out[2])
        elif x.op is Ops.REDUCE_AXIS:
            red = plan.fresh(x.src[0].shape, AxisType.REDUCE)
            inp[x] = (tuple(red[a] if a in x.arg[1] else i for a, i in enumerate(out[0])), out[1], out[2])
            in_reduce = True
        else:
            inp[x] = out
        flags[x] = (ub, in_reduce, under_pad)


# ---- the cost rule -----------------------------------------------------------------------------------------------


def _cap(bufs: frozenset[UOp]) -> frozenset[UOp]:
    limit = policy.MAX_RECOMPUTE_BUFFERS + 1
    return bufs if len(bufs) <= limit else frozenset(list(bufs)[:limit])


def _unstore_cheap(plan: Plan) -> None:
    seen: dict[UOp, policy.Region] = {}  # node -> its region as its consumers see it
    empty = policy.Region()
    stores, cap, op_cost = plan.stores, policy.COST_CAP, policy.op_cost
    for x in plan.order:
        if x.op in (Ops.BUFFER, Ops.BUFFER_VIEW):
            seen[x] = policy.Region(frozenset({x}))
            continue
        cost = op_cost(x)
        if len(x.src) == 1 and not cost and x.op is not Ops.REDUCE_AXIS:
            region = seen.get(x.src[0], empty)  # a view or free op: its source's region as it is (no new object)
        else:
            bufs: frozenset[UOp] = frozenset()
            reduces = False
            for s in x.src:
                r = seen.get(s, empty)
                if (b := r.buffers) and b is not bufs:  # sources often share one set: no new set then
                    bufs = b if not bufs else bufs | b
                reduces = reduces or r.reduces_buffer
                cost += r.cost
            bufs = _cap(bufs)
            reduces = reduces or (x.op is Ops.REDUCE_AXIS and bool(bufs))
            region = policy.Region(bufs, reduces, min(cap, cost))
        if (st := stores.get(x)) is not None and st.removable and not policy.keep_candidate(region, st):
            del stores[x]  # C1: recompute at each consumer
        seen[x] = policy.Region(frozenset({x})) if x in stores else region


def _limit_buffers(plan: Plan) -> None:
    """L1: where an ALU op's inline region reads more buffers than its kernel may take, store its sources."""
    if (floor := policy.smallest_buffer_limit()) is None:
        return
    # every buffer a kernel can read is a BUFFER of the graph or a stored node: with fewer than the smallest limit in
    # all (the common case: the CPU allows 512) no kernel is over it, and the pass costs one count
    if sum(1 for x in plan.order if x.op in (Ops.BUFFER, Ops.BUFFER_VIEW)) + len(plan.stores) <= floor - 1:
        return
    stats.steps += len(plan.order)
    reads: dict[UOp, frozenset[UOp]] = {}  # node -> distinct buffers its inline region reads (stores count as one)
    empty: frozenset[UOp] = frozenset()
    for x in plan.order:
        if x.op in (Ops.BUFFER, Ops.BUFFER_VIEW):
            reads[x] = frozenset({x})
            continue
        bufs = empty.union(*(reads.get(s, empty) for s in x.src))
        if policy.over_buffer_limit(x, len(bufs)):
            for s in x.src:
                base = s
                while base.op in GroupOp.Movement:
                    base = base.src[0]
                if base.op in policy.NEVER_STORED or base in plan.stores or not reads.get(base):
                    continue
                plan.store(base, policy.BUFFER_LIMIT, removable=True)  # a candidate: not observable
                reads[base] = frozenset({base})
                for m in _movement_chain(s, base):  # the views of it now read that one buffer
                    reads[m] = reads[base]
            bufs = empty.union(*(reads.get(s, empty) for s in x.src))
        reads[x] = frozenset({x}) if x in plan.stores else bufs


def _movement_chain(top: UOp, base: UOp) -> list[UOp]:
    """The movement ops from `top` down to (not including) `base`."""
    chain = []
    while top is not base:
        chain.append(top)
        top = top.src[0]
    return chain


def _drop_dead_axes(plan: Plan) -> None:
    """D1: a kept candidate whose value is constant along some axes is stored without them (read back expanded).
    One pass, sources first; a stored value stays constant along those axes for its readers, so masks pass
    through stores."""
    memo: dict[UOp, int] = {}  # node -> bit mask of the axes (of size > 1) its value does not vary along (if any)
    shrinkable = policy.SHRINKABLE
    for x in plan.order:
        if not x.src or x._shape is None:
            continue
        if not (dead := policy.constant_axes(x, [memo.get(s, 0) for s in x.src])):
            continue
        memo[x] = dead
        if (st := plan.stores.get(x)) is not None and st.removable and st.reasons <= shrinkable:
            plan.dead[x] = frozenset(a for a in range(len(x.shape)) if dead >> a & 1)


def _structural_stores(plan: Plan) -> None:
    """A1: `pm_structural_stores` applied to every node, sources first. Its rules only record stores (they return
    None), so a visit in graph order is the rewrite without rebuilding anything."""
    rewrite = policy.pm_structural_stores.rewrite
    for node in plan.order:
        if rewrite(node, plan) is not None:
            raise RuntimeError(f"a structural store rule replaced a {node.op} node: its rules must only record stores")


def plan_stores(sink: UOp) -> Plan:
    """Decide every store of `sink` (rules in policy.py) and give each its buffer."""
    plan = Plan(sink)
    stats.steps += 2 * len(plan.order)  # the range walk and the cost rule visit every node once
    _structural_stores(plan)
    _range_walk(plan)
    _unstore_cheap(plan)
    _limit_buffers(plan)
    _drop_dead_axes(plan)
    for node in plan.order:
        if node not in plan.stores:
            continue
        if node.op is Ops.ASSIGN:
            plan.buffers[node] = plan.assign_target(node)
        else:
            if (device := node.device) is None:
                raise ValueError(f"cannot store a {node.op} node without a device")
            plan.buffers[node] = UOp.new_buffer(device, buffer_size(plan.stored_shape(node)), node.dtype)
    return plan
