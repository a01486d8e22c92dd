"""Order the kernels of a plan into the schedule UOp: `LINEAR(CALL, ...)`.

Edges: read-after-write (a kernel reading a stored node runs after the kernel storing it) and write-after-read
(a kernel reading a buffer *state*, the buffer before this schedule or after an assign, runs before the assign
that writes the next state of that buffer). Kahn's algorithm with a priority on graph order makes the order
deterministic; a cycle means some kernel reads both the old and the new value of an assigned buffer.
"""

from __future__ import annotations

import heapq

from tg.codegen.schedule.kernels import Kernel
from tg.codegen.schedule.rangeify import Plan
from tg.ir import Ops, PatternMatcher, UOp, UPat, dtypes, kernel_spec, tensor_spec, verify


class AssignOrderError(RuntimeError):
    """Assigns that no kernel order can honour: one kernel needs both the old and the new value of a buffer."""


def _previous_state(plan: Plan, assign: UOp) -> UOp:
    """The buffer state an ASSIGN supersedes: the raw BUFFER or the previous ASSIGN of the same buffer."""
    return plan.peel(assign.src[0])


def order_kernels(plan: Plan, kernels: list[Kernel]) -> UOp:
    """The LINEAR of the kernels' CALLs in an order that respects every edge."""
    writer: dict[UOp, list[int]] = {}  # stored node -> kernels writing it (2 for an assign through a temporary)
    for i, k in enumerate(kernels):
        writer.setdefault(k.node, []).append(i)
    next_write: dict[UOp, list[int]] = {}  # buffer state -> kernels writing the next state
    for i, k in enumerate(kernels):
        if k.node.op is Ops.ASSIGN and (i == len(kernels) - 1 or kernels[i + 1].node is not k.node):
            next_write.setdefault(_previous_state(plan, k.node), []).append(i)
    index = {id(k): i for i, k in enumerate(kernels)}
    succ: list[list[int]] = [[] for _ in kernels]
    indeg = [0] * len(kernels)

    def edge(a: int, b: int) -> None:
        succ[a].append(b)
        indeg[b] += 1

    for i, k in enumerate(kernels):
        for d in k.deps:
            edge(index[id(d)], i)
        for n in k.reads:
            for w in writer.get(n, ()):
                if w != i and kernels[w].node is not k.node:
                    edge(w, i)
        for state in (*k.raw_reads, *(n for n in k.reads if n.op is Ops.ASSIGN)):
            for w in next_write.get(state, ()):
                if kernels[w].node is not k.node:
                    edge(i, w)
    ready = [(plan.position[k.node], i) for i, k in enumerate(kernels) if indeg[i] == 0]
    heapq.heapify(ready)
    out: list[UOp] = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(kernels[i].call)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, (plan.position[kernels[j].node], j))
    if len(out) != len(kernels):
        stuck = [kernels[i].node for i in range(len(kernels)) if indeg[i] > 0 and kernels[i].node.op is Ops.ASSIGN]
        bufs = sorted({str(plan.assign_target(n).arg) + " elements" for n in stuck})
        raise AssignOrderError(
            "the schedule has a cycle: a kernel reads both the old and the new value of an assigned buffer "
            f"({', '.join(bufs) or 'unknown'}); realize the read of the old value first"
        )
    return UOp(Ops.LINEAR, dtypes.void, tuple(out))


def _call_ok(x: UOp) -> bool:
    body, args = x.src[0], x.src[1:]
    if not args or not all(a.op in (Ops.BUFFER, Ops.BUFFER_VIEW) for a in args):
        return False
    if body.op is Ops.COPY:
        return len(args) == 2
    return body.op is Ops.SINK and len({str(a.device) for a in args}) == 1


# what a schedule may contain: a LINEAR of CALLs of kernel ASTs (kernel_spec) or copies over tensor-level buffers
schedule_spec = PatternMatcher([
    (UPat(Ops.LINEAR, dtypes.void, name="x"), lambda x: all(s.op is Ops.CALL for s in x.src)),
    (UPat(Ops.CALL, dtypes.void, name="x", src=(UPat(),), allow_any_len=True), _call_ok),
    (UPat(Ops.COPY, src=(UPat(Ops.DEVICE),)), lambda: True),
]) + kernel_spec + tensor_spec  # fmt: skip


def verify_schedule(linear: UOp) -> bool:
    """Check a schedule against `schedule_spec` (raises SpecError naming the bad node)."""
    return verify(linear, schedule_spec)


def replace_buffers(linear: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """`linear` with its buffer arguments replaced by `mapping` (BUFFER -> BUFFER; a BUFFER_VIEW follows its base),
    e.g. to run a captured schedule on new inputs. Kernel bodies are untouched (they only hold PARAM slots)."""

    def arg(a: UOp) -> UOp:
        if a.op is Ops.BUFFER_VIEW:
            return a if (b := arg(a.src[0])) is a.src[0] else a.replace(src=(b,))
        return mapping.get(a, a)

    calls = []
    for c in linear.src:
        args = tuple(arg(a) for a in c.src[1:])
        calls.append(
            c if all(x is y for x, y in zip(args, c.src[1:], strict=True)) else c.replace(src=(c.src[0], *args))
        )
    return linear.replace(src=tuple(calls))
