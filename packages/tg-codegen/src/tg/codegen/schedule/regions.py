"""Kernels with the same inline region are built once: the structural key of a kernel and the memo over it.

A kernel's AST is a function of its *region* (the nodes it computes inline: everything under its value down to the
stored nodes and buffers it loads, its *loads*), of how each load is laid out (a stored node's shape and stored
layout, a buffer's size and dtype), of which loads are one buffer, and of the shape its root is stored in. Deep
networks repeat the same layer hundreds of times, so most kernels of a schedule are the same AST over other buffers:
`RegionKeys` gives each kernel a key, and `KernelMemo` maps a key to the AST built the first time plus which PARAM
slot reads which numbered buffer, so later kernels only rename buffers.

Keys are built once per node, not once per kernel (regions overlap where kernels recompute cheap values): every node
gets a *signature*, an int interned from its op, dtype, arg, its sources' signatures and how each source's loads map
into its own (the loads of a node: the distinct loads under it in depth-first order, sources in order). Equal
signatures mean the same DAG up to renaming the loads, sharing included (hash-consing makes equal subgraphs over
the same loads one node, and the maps say which loads are the same); a load's signature describes its layout. A
kernel's key adds which of its loads share a buffer. The lowering (kernels.py) is a deterministic function of these.
A region with more than `MAX_LOADS` loads gets no key (its kernel is built as usual): the maps stay small.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from tg.codegen.schedule import stats
from tg.ir import Ops, UOp

if TYPE_CHECKING:
    from tg.codegen.schedule.rangeify import Plan

MAX_LOADS = 64  # loads of one region beyond which it is not keyed (keeps the per-node load maps bounded)


class Region(NamedTuple):
    """A kernel's region: its key, its loads by local number, its buffers by local number (0: the output)."""

    key: tuple[Any, ...]
    nodes: list[UOp]
    buffers: list[UOp]


class RegionKeys:
    """Signatures of the nodes of one plan (see the module docstring), computed once per node, sources first."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.signature: dict[UOp, int | None] = {}  # node as its consumers see it (a load if stored) -> signature
        self.loads: dict[UOp, tuple[UOp, ...]] = {}  # node -> its distinct loads, depth first
        self._interned: dict[tuple[Any, ...], int] = {}

    def _intern(self, entry: tuple[Any, ...]) -> int:
        if (i := self._interned.get(entry)) is None:
            i = self._interned[entry] = len(self._interned)
        return i

    def _load_entry(self, node: UOp) -> tuple[Any, ...] | None:
        """The layout of a load (None if `node` is computed inline)."""
        if (stored := self.plan.buffers.get(node)) is not None:  # loaded from a store's buffer
            dead = self.plan.dead.get(node)
            return ("stored", stored.arg, stored.dtype, node.shape, node.dtype, tuple(sorted(dead)) if dead else ())
        if node.op is Ops.BUFFER or node.op is Ops.BUFFER_VIEW:
            return (node.op, node.arg, node.dtype)
        return None

    def _inline(self, node: UOp) -> tuple[int | None, tuple[UOp, ...]]:
        """(signature, loads) of `node` computed inline, its sources' signatures known."""
        sigs, loads = self.signature, self.loads
        src_sigs = []
        mine: tuple[UOp, ...] = ()
        merge = False
        for s in node.src:
            if (sig := sigs[s]) is None:
                return None, ()
            src_sigs.append(sig)
            if (x := loads[s]) and x != mine:
                if mine:
                    merge = True
                else:
                    mine = x
        if merge:  # sources with other loads: the union, depth first (most nodes have one source with loads)
            mine = tuple(dict.fromkeys(n for s in node.src for n in loads[s]))
            if len(mine) > MAX_LOADS:
                return None, ()
            position = {n: i for i, n in enumerate(mine)}
            maps: tuple[Any, ...] = tuple(() if not (x := loads[s]) else -1 if x == mine else
                                          tuple([position[n] for n in x]) for s in node.src)  # fmt: skip
        else:  # each source reads all of `mine` in its order, or nothing
            maps = tuple(-1 if loads[s] else () for s in node.src) if mine else ()
        return self._intern((node.op, node.dtype, node.arg, tuple(src_sigs), maps)), mine

    def _fill(self, nodes: tuple[UOp, ...]) -> None:
        """Signatures of `nodes` and everything under them that has none yet: iterative, sources first."""
        sigs, loads, stored = self.signature, self.loads, self.plan.buffers
        stack: list[tuple[UOp, bool]] = [(s, False) for s in reversed(nodes) if s not in sigs]
        while stack:
            node, expanded = stack.pop()
            if node in sigs:
                continue
            if not expanded:
                if node in stored or node.op is Ops.BUFFER or node.op is Ops.BUFFER_VIEW:
                    entry = self._load_entry(node)
                    assert entry is not None
                    sigs[node], loads[node] = self._intern(entry), (node,)
                    continue
                if missing := [s for s in node.src if s not in sigs]:
                    stack.append((node, True))
                    stack.extend([(s, False) for s in reversed(missing)])
                    continue
            sigs[node], loads[node] = self._inline(node)
            stats.steps += 1

    def key(self, root: UOp, value: UOp, out_buf: UOp) -> Region | None:
        """The key of the kernel storing `value` (the value of stored node `root`) into `out_buf`; None when its
        region has too many loads to be keyed."""
        if value is root:  # the root is computed here, not loaded
            self._fill(root.src)
            sig, loads = self._inline(root)
        else:
            self._fill((value,))
            sig, loads = self.signature[value], self.loads[value]
        if sig is None:
            return None
        buffers, number = [out_buf], {out_buf: 0}
        pattern = []
        for n in loads:
            for b in (self.plan.buffers.get(n, n), *(n.src[:1] if n.op is Ops.BUFFER_VIEW else ())):
                if (i := number.get(b)) is None:
                    i = number[b] = len(buffers)
                    buffers.append(b)
                pattern.append(i)
        return Region((sig, tuple(pattern), self.plan.stored_shape(root), out_buf.arg, out_buf.dtype), list(loads),
                      buffers)  # fmt: skip


class Built(NamedTuple):
    """A kernel built once: its AST and, by local number, the buffers of its PARAM slots, the stored nodes it loads
    and the buffers it reads in their state before the schedule."""

    ast: UOp
    slots: tuple[int, ...]
    loaded: tuple[int, ...]
    raw: tuple[int, ...]


class KernelMemo:
    """Region key -> the kernel built for it (one schedule's kernels; see the module docstring)."""

    def __init__(self) -> None:
        self.built: dict[tuple[Any, ...], Built] = {}
        self.hits = 0

    def get(self, region: Region) -> tuple[UOp, list[UOp], set[UOp], set[UOp]] | None:
        """(ast, buffers in PARAM slot order, stored nodes loaded, buffers read raw) for a region built before."""
        if (b := self.built.get(region.key)) is None:
            return None
        self.hits += 1
        bufs, nodes = region.buffers, region.nodes
        return b.ast, [bufs[i] for i in b.slots], {nodes[i] for i in b.loaded}, {bufs[i] for i in b.raw}

    def put(self, region: Region, ast: UOp, bufs: list[UOp], loaded: set[UOp], raw: set[UOp]) -> None:
        """Remember a kernel built for `region` (skipped if it touches a buffer or node the key does not number)."""
        buffer_number = {b: i for i, b in enumerate(region.buffers)}
        node_number = {n: i for i, n in enumerate(region.nodes)}
        if not all(b in buffer_number for b in (*bufs, *raw)) or not all(n in node_number for n in loaded):
            return
        self.built[region.key] = Built(ast, tuple(buffer_number[b] for b in bufs),
                                       tuple(sorted(node_number[n] for n in loaded)),
                                       tuple(sorted(buffer_number[b] for b in raw)))  # fmt: skip
