"""`create_schedule`: a SINK of tensor-level UOps -> an ordered list of kernels and copies.

Fusion rules (also in the package README, "## Scheduling"):

- A kernel is made for each node that must be *stored*: every SINK source that is not already a buffer,
  every CONTIGUOUS (unless its source is already a contiguous buffer), every ASSIGN (stored into the
  assign target's buffer), and the source of every COPY. Everything else is computed inline in the
  kernel that consumes it: elementwise chains, movement ops (as index arithmetic) and reductions.
- A reduction is stored in its own kernel when recomputing it inline would repeat work: when it is
  broadcast (reached through an EXPAND, e.g. `x - x.max(1, keepdim=True)`), when it is used at two
  different indices or by two kernels, or when it sits inside another reduction.
- Realized buffers are loaded, constants become kernel constants.
- Kernels run in dependency order; a kernel that reads a buffer's old value runs before an ASSIGN that
  overwrites that buffer. An ASSIGN whose value reads its own target at other positions (e.g.
  `t.assign(t.flip(0))`) first stores the value in a temporary buffer.
"""

from __future__ import annotations

from tg.codegen.schedule import stats
from tg.codegen.schedule.indexing import KernelBuilder, MustRealize, total_size
from tg.codegen.schedule.item import ScheduleItem
from tg.ir import Ops, UOp, tensor_spec, verify
from tg.ir.helpers import SPEC

_PASSTHROUGH = {Ops.DETACH, Ops.CONTIGUOUS_BACKWARD}


def contiguous_range(node: UOp) -> tuple[UOp, int, int] | None:
    """(BUFFER, offset, size) in elements when `node` is one contiguous run of a BUFFER (reshapes and shrinks
    that keep the elements in order and adjacent), else None."""
    if node.op is Ops.BUFFER:
        return node, 0, int(node.arg)
    if node.op is Ops.RESHAPE or node.op in _PASSTHROUGH:
        return contiguous_range(node.src[0])
    if node.op is not Ops.SHRINK or (inner := contiguous_range(node.src[0])) is None:
        return None
    buf, offset, _ = inner
    shape = [int(s) for s in node.src[0].shape]
    bounds = [(int(b), int(e)) for b, e in node.arg]
    partial = [i for i, ((b, e), s) in enumerate(zip(bounds, shape, strict=True)) if (b, e) != (0, s)]
    # whole dims after the last cut one and single indices before it: the run has no gaps
    if partial and any(e - b != 1 for b, e in bounds[: partial[-1]]):
        return None
    start, stride = 0, 1
    for (b, _), s in zip(reversed(bounds), reversed(shape), strict=True):
        start += b * stride
        stride *= s
    return buf, offset + start, total_size(node.shape)


class _Scheduler:
    """Holds the decisions for one `create_schedule` call."""

    def __init__(self, sink: UOp) -> None:
        self.sink = sink
        self.order = list(sink.toposort())  # iterative: deep graphs need no recursion
        self.position = {n: i for i, n in enumerate(self.order)}
        self.stored: dict[UOp, UOp] = {}  # node -> BUFFER its value is written to by a schedule item
        self.aliases: dict[UOp, UOp] = {}  # node -> BUFFER that already holds its value (no work)

    # ---- where values live ------------------------------------------------------------------------------

    def storage(self, node: UOp) -> UOp | None:
        """The BUFFER that holds `node`'s value contiguously (through reshapes), if there is one."""
        base = node
        while base.op is Ops.RESHAPE or base.op in _PASSTHROUGH:
            base = base.src[0]
        if base.op is Ops.BUFFER:
            buf = base
        elif base in self.stored:
            buf = self.stored[base]
        elif base in self.aliases:
            buf = self.aliases[base]
        else:
            return None
        return buf if total_size(node.shape) == int(buf.arg) else None

    def source_view(self, node: UOp) -> UOp | None:
        """A BUFFER_VIEW for copying `node` off a DISK buffer without a kernel (DISK runs none), if it is one
        contiguous run of that buffer."""
        if (rng := contiguous_range(node)) is None:
            return None
        buf, offset, size = rng
        if not str(buf.device).startswith("DISK"):
            return None
        return UOp(Ops.BUFFER_VIEW, buf.dtype, (buf,), (size, offset))

    def assign_target(self, node: UOp) -> UOp:
        """The BUFFER an ASSIGN node writes."""
        target = node.src[0]
        while target.op is Ops.RESHAPE or target.op in _PASSTHROUGH:
            target = target.src[0]
        if target.op is Ops.ASSIGN:
            return self.assign_target(target)
        if target.op is Ops.BUFFER:
            return target
        if target in self.stored:
            return self.stored[target]
        raise ValueError(f"assign target must be a realized buffer (possibly reshaped), got a {target.op} node")

    def store(self, node: UOp) -> None:
        """Decide that `node` gets its own buffer (a new one, or the assign target)."""
        if node in self.stored:
            return
        if node.op is Ops.ASSIGN:
            self.stored[node] = self.assign_target(node)
        else:
            if (device := node.device) is None:
                raise ValueError(f"cannot store a {node.op} node without a device")
            self.stored[node] = UOp.new_buffer(device, total_size(node.shape), node.dtype)

    # ---- decisions --------------------------------------------------------------------------------------

    def mark_required(self) -> None:
        """Store what the graph itself asks for: outputs, CONTIGUOUS, ASSIGN, and the sources of COPY."""
        for node in self.order:
            if node.op is Ops.CONTIGUOUS:
                if (buf := self.storage(node.src[0])) is not None:
                    self.aliases[node] = buf
                else:
                    self.store(node)
            elif node.op is Ops.ASSIGN:
                self.store(node)
            elif node.op is Ops.COPY:
                if self.storage(node.src[0]) is None and self.source_view(node.src[0]) is None:
                    src = node.src[0]
                    while src.op is Ops.RESHAPE or src.op in _PASSTHROUGH:  # storage() looks under reshapes
                        src = src.src[0]
                    self.store(src)
                self.store(node)
        for out in self.sink.src:
            if self.storage(out) is None:
                self.store(out)

    def build_kernels(self) -> dict[UOp, tuple[ScheduleItem, KernelBuilder | None]]:
        """Build every item; grows `self.stored` and starts over whenever a builder asks for a store."""
        while True:
            try:
                return self._build_all()
            except MustRealize as e:
                if e.node in self.stored:
                    raise RuntimeError(f"scheduler loop: {e}") from e
                self.store(e.node)

    def _build_all(self) -> dict[UOp, tuple[ScheduleItem, KernelBuilder | None]]:
        items: dict[UOp, tuple[ScheduleItem, KernelBuilder | None]] = {}
        reduce_owner: dict[UOp, UOp] = {}
        # iterate in graph order so the set of stored nodes only grows while we walk
        for node in [n for n in self.order if n in self.stored]:
            out_buf = self.stored[node]
            if total_size(node.shape) == 0:
                continue
            if node.op is Ops.COPY:
                src_buf = self.storage(node.src[0])
                if src_buf is None:
                    src_buf = self.source_view(node.src[0])
                assert src_buf is not None, "COPY source was not stored"
                items[node] = (
                    ScheduleItem(UOp(Ops.COPY, node.dtype, (src_buf, *node.src[1:]), node.arg), (out_buf, src_buf)),
                    None,
                )
                continue
            realized = {n: b for n, b in self.stored.items() if n is not node}
            builder = KernelBuilder(realized)
            value = node.src[1] if node.op is Ops.ASSIGN else node
            if node.op is Ops.CONTIGUOUS:
                value = node.src[0]
            ast = builder.build(out_buf, node, value)
            if node.op is Ops.ASSIGN:
                self._check_assign_hazard(node, out_buf, builder)
            for r in builder.reduce_sites:
                if (owner := reduce_owner.setdefault(r, node)) is not node:
                    raise MustRealize(r, f"the reduction is used by two kernels ({owner.op} and {node.op})")
            items[node] = (ScheduleItem(ast, tuple(builder.bufs)), builder)
        return items

    def _check_assign_hazard(self, node: UOp, out_buf: UOp, builder: KernelBuilder) -> None:
        store_idx = builder.out_index
        if any(i is not store_idx for i in builder.loads.get(out_buf, [])):
            value = node.src[1]
            if value in self.stored or value.op is Ops.BUFFER:
                raise RuntimeError("assign value aliases its own target buffer at other positions")
            raise MustRealize(value, "the assign value reads its own target at other positions")

    # ---- ordering ---------------------------------------------------------------------------------------

    def ordered(self, items: dict[UOp, tuple[ScheduleItem, KernelBuilder | None]]) -> list[ScheduleItem]:
        """Items in an order that respects data dependencies and write-after-read on assign targets."""
        deps: dict[UOp, set[UOp]] = {n: set() for n in items}
        writers: dict[UOp, list[UOp]] = {}
        for n in items:
            if n.op is Ops.ASSIGN:
                writers.setdefault(self.stored[n], []).append(n)
        for n, (_, builder) in items.items():
            if builder is None:  # a COPY depends on whatever produced its source
                src = n.src[0]
                while src.op is Ops.RESHAPE or src.op in _PASSTHROUGH:
                    src = src.src[0]
                if src in items:
                    deps[n].add(src)
                continue
            deps[n].update(d for d in builder.loaded_nodes if d in items)
        # an assign overwrites a buffer: every other item reading that buffer's old contents goes first
        for n, (item, _) in items.items():
            for buf in item.bufs[1:]:
                for w in writers.get(buf, []):
                    if w is not n and w not in deps[n] and not self._reads_through(n, w, items):
                        deps[w].add(n)
        return self._kahn(items, deps)

    def _reads_through(
        self, node: UOp, writer: UOp, items: dict[UOp, tuple[ScheduleItem, KernelBuilder | None]]
    ) -> bool:
        """True if `node` (transitively) depends on `writer`, i.e. it reads the new value."""
        stack, seen = [node], set()
        while stack:
            n = stack.pop()
            if n is writer:
                return True
            if n in seen:
                continue
            seen.add(n)
            _, builder = items[n]
            if builder is not None:
                stack.extend(d for d in builder.loaded_nodes if d in items)
        return False

    def _kahn(
        self, items: dict[UOp, tuple[ScheduleItem, KernelBuilder | None]], deps: dict[UOp, set[UOp]]
    ) -> list[ScheduleItem]:
        remaining = dict(deps)
        out: list[ScheduleItem] = []
        while remaining:
            ready = sorted(
                (n for n, d in remaining.items() if not (d & remaining.keys())), key=self.position.__getitem__
            )
            if not ready:
                raise RuntimeError(
                    "the schedule has a cycle (a kernel reads both the old and the new value of an assigned buffer)"
                )
            for n in ready:
                out.append(items[n][0])
                del remaining[n]
        return out


def create_schedule(sink: UOp) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
    """Schedule a SINK of tensor-level UOps into kernels and copies.

    Returns the items in execution order and a map from every tensor-level UOp that got a buffer to that
    BUFFER reshaped to the node's shape (tensors swap their graphs for it).
    """
    if sink.op is not Ops.SINK:
        raise TypeError(f"create_schedule expects a SINK, got {sink.op}")
    stats.calls += 1
    if SPEC:  # SPEC=1 (on in the test suites): the tensor graph must satisfy tg.ir's tensor spec
        verify(sink, tensor_spec)
    sched = _Scheduler(sink)
    sched.mark_required()
    items = sched.build_kernels()
    schedule = sched.ordered(items)
    becomes: dict[UOp, UOp] = {}
    for node, buf in [*sched.stored.items(), *sched.aliases.items()]:
        becomes[node] = buf.reshape(tuple(node.shape))
    # outputs that are reshapes of stored values need no kernel, but still get their buffer
    for out in sink.src:
        if out not in becomes and (out_buf := sched.storage(out)) is not None:
            becomes[out] = out_buf.reshape(tuple(out.shape))
    return schedule, becomes
