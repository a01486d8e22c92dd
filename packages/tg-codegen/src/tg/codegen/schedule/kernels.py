"""Phase (b): each stored node becomes one kernel AST; movement ops become index arithmetic over RANGEs.

A kernel is built by walking the tensor graph from the stored node down to stored nodes and buffers, carrying
the index (one int UOp per dimension, in terms of the kernel's RANGEs) and the gate at which a value is wanted.
What each op becomes is the table `LOWER_TENSOR_OP`: movement ops only change the index (`MOVEMENT_INDEX` in
indexing.py; PAD also gates the value with a WHERE), a REDUCE_AXIS opens REDUCE ranges, elementwise ops rebuild
on their sources' values, stored nodes and buffers are loaded through `INDEX(PARAM, flat index, gate)`.
The walk is memoised per (node, index, gate), so a value used twice at one index is computed once, and a
recomputed value (policy C1) is computed once per distinct index; it never raises for control flow.

Kernel AST (the contract with tg.codegen.opt/lower): `SINK[KernelInfo](END(STORE(INDEX(PARAM0, idx), v),
*loop ranges))`, `RANGE(end, (axis_id, AxisType.LOOP|REDUCE))` numbered from 0 in first-use order, PARAM slots
in first-use order with the output in slot 0, `LOAD(INDEX(PARAM, idx[, gate]))`, `REDUCE(v, *ranges, arg=op)`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from tg.codegen.schedule import stats
from tg.codegen.schedule.indexing import (
    INDEX_DTYPE,
    MAX_INDEX,
    Index,
    and_gates,
    as_index,
    flat_index,
    fold_constant,
    is_one,
    movement_index,
    simplify_index,
)
from tg.codegen.schedule.rangeify import Plan
from tg.ir import AxisType, GroupOp, KernelInfo, Ops, UOp, dtypes, to_function_name
from tg.ir.uop import sint

Request = tuple[UOp, Index, UOp | None]  # the value of (node, index, gate)


def _sint_name(s: sint) -> str:
    return str(s) if isinstance(s, int) else s.render()


class KernelBuilder:
    """Builds the AST of the kernel that stores the value of `root` into `out_buf`."""

    def __init__(self, plan: Plan, root: UOp, out_buf: UOp, extra: dict[UOp, UOp] | None = None) -> None:
        self.plan, self.root, self.out_buf, self.extra = plan, root, out_buf, extra or {}
        self.bufs: list[UOp] = []
        self.params: dict[UOp, UOp] = {}
        self.next_axis = 0
        self.reduce_sizes: list[sint] = []
        self.loaded_nodes: set[UOp] = set()  # stored nodes this kernel reads (read-after-write edges)
        self.raw_reads: set[UOp] = set()  # BUFFERs read in their state before this schedule (write-after-read)
        self.loads: dict[UOp, list[tuple[UOp, UOp | None]]] = {}  # BUFFER -> (flat index, gate) it is loaded at
        self._cache: dict[Request, UOp] = {}

    # ---- parameters, ranges, loads ------------------------------------------------------------------------

    def param(self, buf: UOp) -> UOp:
        """The PARAM of `buf` in this kernel (slots in first-use order)."""
        if (p := self.params.get(buf)) is None:
            size = buf.arg if buf.op is Ops.BUFFER else buf.arg[0]
            if size > MAX_INDEX:
                raise NotImplementedError(f"a buffer of {size} elements needs 64-bit indexing (not supported yet)")
            p = self.params[buf] = UOp(Ops.PARAM, buf.dtype.ptr(size), (), len(self.bufs))
            self.bufs.append(buf)
        return p

    def new_range(self, size: sint, kind: AxisType) -> UOp:
        """A fresh RANGE over `size` with the next axis id of this kernel."""
        r = UOp(Ops.RANGE, INDEX_DTYPE, (as_index(size),), (self.next_axis, kind))
        self.next_axis += 1
        return r

    def load(self, buf: UOp, shape: tuple[sint, ...], idx: Index, valid: UOp | None) -> UOp:
        """Element `idx` of `buf` viewed as a row-major array of `shape` (0 where `valid` is false)."""
        flat = simplify_index(flat_index(idx, shape))
        self.loads.setdefault(buf, []).append((flat, valid))
        return self.param(buf).index(flat, valid=valid).load()

    def storage(self, node: UOp) -> UOp | None:
        """The BUFFER holding `node`'s value when this kernel must load it instead of computing it."""
        if node is self.root:
            return None
        if (buf := self.extra.get(node)) is not None:
            return buf
        if (buf := self.plan.buffers.get(node)) is not None:
            self.loaded_nodes.add(node)
        return buf

    # ---- the walk -----------------------------------------------------------------------------------------

    def value(self, node: UOp, idx: Index, valid: UOp | None) -> UOp:
        """The kernel-level value of tensor node `node` at `idx` (gated by `valid`); iterative (deep graphs)."""
        root: Request = (node, idx, valid)
        if (ret := self._cache.get(root)) is not None:
            return ret
        stack: list[tuple[Request, Generator[Request, UOp, UOp]]] = [(root, self._value(*root))]
        sent: UOp | None = None
        while stack:
            key, gen = stack[-1]
            try:
                need = gen.send(sent)  # type: ignore[arg-type]  # None primes a fresh generator
            except StopIteration as done:
                self._cache[key] = sent = done.value
                stack.pop()
                continue
            if (sent := self._cache.get(need)) is None:
                stats.steps += 1
                stack.append((need, self._value(*need)))
        return self._cache[root]

    def _value(self, node: UOp, idx: Index, valid: UOp | None) -> Generator[Request, UOp, UOp]:
        if (buf := self.storage(node)) is not None:
            return self.load(buf, self.plan.stored_shape(node), self.plan.stored_index(node, idx), valid)
        if (rule := LOWER_TENSOR_OP.get(node.op)) is None:
            raise NotImplementedError(f"the scheduler cannot build a kernel from a {node.op} node: {node!r}")
        return (yield from rule(self, node, idx, valid))

    # ---- the whole kernel ---------------------------------------------------------------------------------

    def build(self, value_node: UOp) -> UOp:
        """The kernel AST storing `value_node` (shaped like the root) into the output buffer."""
        self.param(self.out_buf)
        shape = self.plan.stored_shape(self.root)  # D1: the axes its value is constant along are not stored
        idx = tuple(as_index(0) if is_one(s) else self.new_range(s, AxisType.LOOP) for s in shape)
        loops = tuple(i for i in idx if i.op is Ops.RANGE)
        val = self.value(value_node, idx, None)
        self.out_index = simplify_index(flat_index(idx, shape))
        store = self.param(self.out_buf).index(self.out_index).store(val)
        body = UOp(Ops.END, dtypes.void, (store, *loops)) if loops else store
        dims = [_sint_name(s) for s in shape if not is_one(s)] + [_sint_name(s) for s in self.reduce_sizes]
        name = to_function_name(("r_" if self.reduce_sizes else "E_") + ("_".join(dims) or "1"))
        return UOp(Ops.SINK, dtypes.void, (body,), KernelInfo(name=name))


# ---- the lowering table: tensor op -> kernel-level value --------------------------------------------------------

Rule = Callable[[KernelBuilder, UOp, Index, "UOp | None"], Generator[Request, UOp, UOp]]


def _buffer(kb: KernelBuilder, node: UOp, idx: Index, valid: UOp | None) -> Generator[Request, UOp, UOp]:
    kb.raw_reads.add(node if node.op is Ops.BUFFER else node.src[0])
    return kb.load(node, node.shape, idx, valid)
    yield  # a generator like every rule


def _const(kb: KernelBuilder, node: UOp, idx: Index, valid: UOp | None) -> Generator[Request, UOp, UOp]:
    return UOp.const(node.dtype, node.arg)
    yield


def _variable(kb: KernelBuilder, node: UOp, idx: Index, valid: UOp | None) -> Generator[Request, UOp, UOp]:
    return node.src[0] if node.op is Ops.BIND else node
    yield


def _movement(kb: KernelBuilder, node: UOp, idx: Index, valid: UOp | None) -> Generator[Request, UOp, UOp]:
    src_idx, gate = movement_index(node, idx, kb.plan.index_memo)
    inner = yield (node.src[0], src_idx, and_gates(valid, gate))
    return inner if gate is None else gate.where(inner, UOp.const(node.dtype, 0))


def _reduce(kb: KernelBuilder, node: UOp, idx: Index, valid: UOp | None) -> Generator[Request, UOp, UOp]:
    op, axes = node.arg
    src_shape = node.src[0].shape
    ranges, src_idx = [], list(idx)
    for a in axes:
        if is_one(src_shape[a]):
            src_idx[a] = as_index(0)
        else:
            ranges.append(r := kb.new_range(src_shape[a], AxisType.REDUCE))
            kb.reduce_sizes.append(src_shape[a])
            src_idx[a] = r
    inner = yield (node.src[0], tuple(src_idx), valid)
    return UOp(Ops.REDUCE, node.dtype, (inner, *ranges), op) if ranges else inner


def _passthrough(kb: KernelBuilder, node: UOp, idx: Index, valid: UOp | None) -> Generator[Request, UOp, UOp]:
    return (yield (node.src[0], idx, valid))


def _elementwise(kb: KernelBuilder, node: UOp, idx: Index, valid: UOp | None) -> Generator[Request, UOp, UOp]:
    srcs = []
    for src in node.src:
        srcs.append((yield (src, idx, valid)))
    if all(s.op is Ops.CONST for s in srcs) and (folded := fold_constant(node.op, node.dtype, srcs)) is not None:
        return folded
    return UOp(node.op, node.dtype, tuple(srcs), node.arg)


LOWER_TENSOR_OP: dict[Ops, Rule] = {
    # storage read directly (a reshape of it is looked through by the movement rules)
    Ops.BUFFER: _buffer, Ops.BUFFER_VIEW: _buffer,
    # constants and variables are kernel constants and kernel arguments
    Ops.CONST: _const, Ops.DEFINE_VAR: _variable, Ops.BIND: _variable,
    # movement ops: index arithmetic only (PAD also gates the value)
    **{op: _movement for op in GroupOp.Movement},
    # a tensor-level reduction opens REDUCE ranges over its reduced axes
    Ops.REDUCE_AXIS: _reduce,
    # markers that do not change the value (a stored CONTIGUOUS is loaded before reaching here)
    Ops.CONTIGUOUS: _passthrough, Ops.CONTIGUOUS_BACKWARD: _passthrough, Ops.DETACH: _passthrough,
    # math rebuilds itself on its sources' values (constant sources fold)
    **{op: _elementwise for op in GroupOp.Elementwise},
}  # fmt: skip


# ---- kernels of a plan ------------------------------------------------------------------------------------------


class Kernel:
    """One CALL of the schedule with what ordering needs: the node it stores, what it reads and writes."""

    def __init__(self, node: UOp, call: UOp, reads: set[UOp], raw_reads: set[UOp], deps: tuple[Kernel, ...] = ()):
        self.node, self.call, self.reads, self.raw_reads, self.deps = node, call, reads, raw_reads, deps


def _call(ast: UOp, bufs: list[UOp] | tuple[UOp, ...]) -> UOp:
    return UOp(Ops.CALL, dtypes.void, (ast, *bufs))


def _hazard(kb: KernelBuilder, target: UOp) -> bool:
    """H1: the assign kernel reads its own target somewhere other than where it writes."""
    return any(i is not kb.out_index for i, _ in kb.loads.get(target, []))


def build_kernels(plan: Plan) -> list[Kernel]:
    """The kernels and copies of every kept store, in graph order (size-0 values need none)."""
    out: list[Kernel] = []
    for node in plan.order:
        if (buf := plan.buffers.get(node)) is None:
            continue
        size = buf.arg
        if node.op is not Ops.ASSIGN and isinstance(size, int) and size == 0:
            continue
        if node.op is Ops.COPY:
            out.append(_copy_kernel(plan, node, buf))
            continue
        value = node.src[1] if node.op is Ops.ASSIGN else node.src[0] if node.op is Ops.CONTIGUOUS else node
        kb = KernelBuilder(plan, node, buf)
        ast = kb.build(value)
        if node.op is Ops.ASSIGN and _hazard(kb, buf):
            # H1: compute the value into a temporary first, then copy it into the target
            tmp = UOp.new_buffer(buf.src[1].arg, buf.arg, buf.dtype)
            first = KernelBuilder(plan, node, tmp)
            first_k = Kernel(node, _call(first.build(value), first.bufs), first.loaded_nodes, first.raw_reads)
            out.append(first_k)
            kb = KernelBuilder(plan, node, buf, extra={value: tmp})
            ast = kb.build(value)
            out.append(Kernel(node, _call(ast, kb.bufs), kb.loaded_nodes, kb.raw_reads, (first_k,)))
            continue
        out.append(Kernel(node, _call(ast, kb.bufs), kb.loaded_nodes, kb.raw_reads))
    return out


def copy_body(dtype: Any, device: Any) -> UOp:
    """The body of a copy CALL: `COPY(DEVICE)` with the destination device (args are (destination, source))."""
    return UOp(Ops.COPY, dtype, (UOp(Ops.DEVICE, arg=device),))


def _copy_kernel(plan: Plan, node: UOp, out_buf: UOp) -> Kernel:
    src_node = plan.storage_node(node.src[0])
    reads: set[UOp] = set()
    raw: set[UOp] = set()
    if src_node is None:
        view = plan.disk_view(node.src[0])
        assert view is not None, "COPY source was not stored"
        src_buf = view
        raw.add(view.src[0])
    elif (b := plan.buffers.get(src_node)) is not None:
        src_buf = b
        reads.add(src_node)
    else:
        src_buf = src_node
        raw.add(src_node)
    return Kernel(node, _call(copy_body(node.dtype, node.src[1].arg), (out_buf, src_buf)), reads, raw)
