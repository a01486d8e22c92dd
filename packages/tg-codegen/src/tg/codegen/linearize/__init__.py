"""Linearize a lowered kernel graph into a list of UOps with correct loop nesting (the linear program).

Each node is placed in the innermost loop among the ranges it depends on (so loop-invariant work is hoisted out of
loops for free), each loop is emitted as RANGE, its body, END, and inside one loop body nodes follow their
dependencies (ties broken by a fixed priority: buffers and variables first, then the graph's toposort order).
"""

from __future__ import annotations

import heapq

from tg.codegen.lower.structure import open_ranges
from tg.ir.dtype import dtypes
from tg.ir.ops import Ops
from tg.ir.uop import UOp

# The ordering rules, in the order they decide (`linearize` is one walk that applies them):
# 1. a node goes into the innermost loop among the ranges it depends on (loop-invariant work is hoisted for free)
# 2. a loop is its RANGE, its body, its END, placed in its parent loop's body as one item
# 3. inside one loop body, a node comes after the items it depends on
# 4. among the items whose dependencies are placed, by `_order_key`: the definitions the body's code refers to first
#    (kernel parameters, then variables, then register and local buffers, then constants; every other op after
#    them), kernel parameters by slot (the argument order)
# 5. then the graph's toposort order (stable: the same graph always gives the same program)
_PRIORITY = {Ops.PARAM: 0, Ops.DEFINE_VAR: 1, Ops.DEFINE_REG: 2, Ops.DEFINE_LOCAL: 2, Ops.CONST: 3}


class LinearizeError(RuntimeError):
    """The kernel graph has no valid loop nesting (e.g. a value used outside the loop that computes it)."""


def linearize(sink: UOp) -> list[UOp]:
    """Order the lowered kernel `sink` into the linear program: every RANGE is followed by its body and its END."""
    if sink.op is not Ops.SINK:
        raise LinearizeError(f"linearize needs a SINK, got {sink.op}")
    topo = list(sink.toposort())
    order = {u: i for i, u in enumerate(topo)}
    live = open_ranges(sink)
    ends: dict[UOp, UOp] = {}
    for u in topo:
        if u.op is Ops.END:
            for r in u.src[1:]:
                if r in ends:
                    raise LinearizeError(f"range {r.arg} is closed by two ENDs; run unify_ends first")
                ends[r] = u
            if len(u.src) != 2:
                raise LinearizeError(f"END must close exactly one range, got {len(u.src) - 1}; run pm_split_ends first")

    # loop tree: a loop's parent is the innermost range still open where it ends (or that its bound needs). A loop is
    # placed once every loop around it is: one depth-first walk with a stack (the toposort may list inner loops first)
    depth: dict[UOp, int] = {}
    parent: dict[UOp, UOp | None] = {}
    ranges = [u for u in topo if u.op is Ops.RANGE]
    for r in ranges:
        if r not in ends:
            raise LinearizeError(f"range {r.arg} is never closed by an END")
    around = {r: live[ends[r]] | (live[r] - {r}) for r in ranges}
    on_path: set[UOp] = set()
    for r in ranges:
        stack = [(r, False)]
        while stack:
            x, loops_placed = stack.pop()
            if loops_placed:
                parent[x] = p = _innermost(around[x], depth, parent, f"range {x.arg}")
                depth[x] = 0 if p is None else depth[p] + 1
                on_path.discard(x)
            elif x not in depth:
                if x in on_path:  # reached again from a loop it must enclose
                    raise LinearizeError(f"ranges {sorted(str(o.arg) for o in on_path)} are nested in each other")
                on_path.add(x)
                stack.append((x, True))
                stack.extend((o, False) for o in around[x] if o not in depth)

    def chain(scope: UOp | None) -> list[UOp]:
        ret: list[UOp] = []
        while scope is not None:
            ret.append(scope)
            scope = parent[scope]
        return ret[::-1]

    # full position of a node: the loops around it, then the node (a RANGE stands for its whole loop)
    position: dict[UOp, list[UOp]] = {}
    scope_of: dict[UOp, UOp | None] = {}
    for u in topo:
        if u.op is Ops.RANGE:
            position[u] = [*chain(parent[u]), u]
        elif u.op is Ops.END:
            position[u] = [*chain(u.src[1]), u]
        else:
            scope_of[u] = _innermost(live[u], depth, parent, f"{u.op}")
            position[u] = [*chain(scope_of[u]), u]

    # dependency edges between the items of one loop body
    items: dict[UOp | None, list[UOp]] = {}
    preds: dict[UOp, set[UOp]] = {}
    for u in topo:
        if u.op is Ops.END:
            continue
        scope = parent[u] if u.op is Ops.RANGE else scope_of[u]
        items.setdefault(scope, []).append(u)
        preds.setdefault(u, set())
    for u in topo:
        for s in u.src:
            pu, ps = position[u], position[s]
            k = 0
            while k < len(pu) and k < len(ps) and pu[k] is ps[k]:
                k += 1
            if k == len(ps) or k == len(pu):
                continue  # s encloses u (its loop) or u is an END of a loop containing s
            if s.dtype != dtypes.void and s.op is not Ops.RANGE and ps[:-1] != pu[: len(ps) - 1]:
                raise LinearizeError(f"{s.op} computed inside a loop is used outside it by {u.op}")
            if pu[k].op is not Ops.END:  # an END always comes last in its loop anyway
                preds[pu[k]].add(ps[k])

    out: list[UOp] = []

    def emit(scope: UOp | None) -> None:
        body = items.get(scope, [])
        remaining = {u: len(preds[u]) for u in body}
        succs: dict[UOp, list[UOp]] = {}
        for u in body:
            for p in preds[u]:
                succs.setdefault(p, []).append(u)
        heap = [(*_order_key(u), order[u], u) for u, n in remaining.items() if n == 0]
        heapq.heapify(heap)
        done = 0
        while heap:
            *_, u = heapq.heappop(heap)
            done += 1
            if u.op is Ops.RANGE:
                out.append(u)
                emit(u)
                out.append(ends[u])
            else:
                out.append(u)
            for v in succs.get(u, []):
                remaining[v] -= 1
                if remaining[v] == 0:
                    heapq.heappush(heap, (*_order_key(v), order[v], v))
        if done != len(body):
            raise LinearizeError("cycle between loop bodies while linearizing")

    emit(None)
    if out[-1] is not sink:
        raise LinearizeError("SINK was not the last node of the linear program")
    return out


def _order_key(u: UOp) -> tuple[int, int]:
    """Rule 4 for `u`: smaller goes first among the nodes of one loop body whose dependencies are placed."""
    return _PRIORITY.get(u.op, 9), u.arg if u.op is Ops.PARAM and isinstance(u.arg, int) else 0


def _innermost(ranges: frozenset[UOp], depth: dict[UOp, int], parent: dict[UOp, UOp | None], what: str) -> UOp | None:
    if not ranges:
        return None
    inner = max(ranges, key=lambda r: depth[r])
    enclosing = set()
    cur: UOp | None = inner
    while cur is not None:
        enclosing.add(cur)
        cur = parent[cur]
    if not ranges <= enclosing:
        names = sorted(str(r.arg) for r in ranges)
        raise LinearizeError(f"{what} depends on ranges {names} that are not nested in one another")
    return inner
