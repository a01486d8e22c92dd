"""Kernels with the same inline region are built once: the structural key of a kernel and the memo over it.

A kernel's AST is a function of its *region* (the nodes it computes inline: everything under its value down to the
stored nodes and buffers it loads), of what it loads (each stored node's shape and stored layout, each buffer's size
and dtype, which of them are one buffer) and of the shape its root is stored in. Deep networks repeat the same layer
hundreds of times, so most kernels of a schedule are the same AST over other buffers: `region_key` describes the region
with local numbers instead of nodes (one walk, no new UOps), and `KernelMemo` maps a key to the AST built the first
time plus which PARAM slot reads which numbered buffer, so later kernels only rename buffers.

The key numbers nodes in the order one fixed walk discovers them (sources in order) and describes each by its op,
dtype, arg and its sources' numbers, so two regions get equal keys exactly when they are the same DAG over equally
described loads; the lowering (kernels.py) is a deterministic function of those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from tg.codegen.schedule import stats
from tg.ir import Ops, UOp

if TYPE_CHECKING:
    from tg.codegen.schedule.rangeify import Plan


class Region(NamedTuple):
    """A kernel's region: its key, the nodes by local number, the buffers by local number (0: the output)."""

    key: tuple[Any, ...]
    nodes: list[UOp]
    buffers: list[UOp]


def region_key(plan: Plan, root: UOp, value: UOp, out_buf: UOp) -> Region:
    """The structural key of the kernel storing `value` (the value of stored node `root`) into `out_buf`."""
    number: dict[UOp, int] = {value: 0}  # region node -> local number, given when the walk first meets it
    nodes: list[UOp] = [value]
    entries: list[Any] = [None]
    buffer_number: dict[UOp, int] = {out_buf: 0}
    buffers: list[UOp] = [out_buf]

    def buffer(b: UOp) -> int:
        if (i := buffer_number.get(b)) is None:
            i = buffer_number[b] = len(buffers)
            buffers.append(b)
        return i

    get_buffer, dead_axes = plan.buffers.get, plan.dead
    stack = [value]
    while stack:  # each node is expanded once (iterative: any depth); the numbering is the order of discovery
        node = stack.pop()
        i = number[node]
        if node is not root and (stored := get_buffer(node)) is not None:  # loaded from a store's buffer
            dead = dead_axes.get(node)
            entries[i] = ("stored", buffer(stored), stored.arg, stored.dtype, node.shape, node.dtype,
                          tuple(sorted(dead)) if dead else ())  # fmt: skip
        elif node.op is Ops.BUFFER:
            entries[i] = ("buffer", buffer(node), node.arg, node.dtype)
        elif node.op is Ops.BUFFER_VIEW:
            entries[i] = ("view", buffer(node), node.arg, node.dtype, buffer(node.src[0]))
        else:
            src_numbers = []
            for s in node.src:
                if (j := number.get(s)) is None:
                    j = number[s] = len(nodes)
                    nodes.append(s)
                    entries.append(None)
                    stack.append(s)
                src_numbers.append(j)
            entries[i] = (node.op, node.dtype, node.arg, tuple(src_numbers))
    stats.steps += len(nodes)
    key = (tuple(entries), plan.stored_shape(root), out_buf.arg, out_buf.dtype)
    return Region(key, nodes, buffers)


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
