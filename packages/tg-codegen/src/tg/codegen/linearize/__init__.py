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

# earlier in a loop body when otherwise unordered
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

    # loop tree: a loop's parent is the innermost range still open where it ends
    depth: dict[UOp, int] = {}
    parent: dict[UOp, UOp | None] = {}
    pending = [u for u in topo if u.op is Ops.RANGE]
    for r in pending:
        if r not in ends:
            raise LinearizeError(f"range {r.arg} is never closed by an END")
    while pending:  # a loop is placed once every loop around it is (the toposort may list inner loops first)
        later = []
        for r in pending:
            outer = live[ends[r]] | (live[r] - {r})  # open where it ends, or needed for its bound
            if not all(o in depth for o in outer):
                later.append(r)
                continue
            parent[r] = p = _innermost(outer, depth, parent, f"range {r.arg}")
            depth[r] = 0 if p is None else depth[p] + 1
        if len(later) == len(pending):
            raise LinearizeError(f"ranges {sorted(str(r.arg) for r in later)} are nested in each other")
        pending = later

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
        heap = [(_PRIORITY.get(u.op, 9), _tiebreak(u), order[u], u) for u, n in remaining.items() if n == 0]
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
                    heapq.heappush(heap, (_PRIORITY.get(v.op, 9), _tiebreak(v), order[v], v))
        if done != len(body):
            raise LinearizeError("cycle between loop bodies while linearizing")

    emit(None)
    if out[-1] is not sink:
        raise LinearizeError("SINK was not the last node of the linear program")
    return out


def _tiebreak(u: UOp) -> int:
    return u.arg if u.op is Ops.PARAM and isinstance(u.arg, int) else 0


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
