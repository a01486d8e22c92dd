"""Phase (b): each stored node becomes one kernel AST; movement ops become index arithmetic over RANGEs.

A kernel's value is one top-first `graph_rewrite` (`pm_lower_tensor`) of a *request* `NOOP(node[, buffer],
arg=(index, gate))`: the value of tensor node `node` at an index (one int UOp per dimension, in terms of the
kernel's RANGEs) under a gate. The index and gate live in the arg, so the rewrite never walks them, and kernel
values that are final (`FINAL`: loads, ranges, constants) are not walked either. The rules: math is rebuilt on
requests for its sources, a REDUCE_AXIS opens REDUCE ranges, stored nodes and buffers are loaded through
`INDEX(PARAM, flat index, gate)`, movement ops only map the index (`MOVEMENT_INDEX` in indexing.py; PAD also
gates the value with a WHERE). `request` answers at once what needs no rule: a constant, a chain of views (one
request for the node under it), and loads while the PARAM slot order allows. The rewrite memoises per request,
so a value used twice at one index is computed once, and a recomputed value (policy C1) once per distinct index.

Kernel AST (the contract with tg.codegen.opt/lower): `SINK[KernelInfo](END(STORE(INDEX(PARAM0, idx), v),
*loop ranges))`, `RANGE(end, (axis_id, AxisType.LOOP|REDUCE))` numbered from 0 in first-use order, PARAM slots
in first-use order with the output in slot 0, `LOAD(INDEX(PARAM, idx[, gate]))`, `REDUCE(v, *ranges, arg=op)`.
"""

from __future__ import annotations

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
from tg.codegen.schedule.regions import KernelMemo, RegionKeys
from tg.ir import AxisType, GroupOp, KernelInfo, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite, to_function_name
from tg.ir.uop import sint


def _sint_name(s: sint) -> str:
    return str(s) if isinstance(s, int) else s.render()


class KernelBuilder:
    """Builds the AST of the kernel that stores the value of `root` into `out_buf`."""

    def __init__(
        self, plan: Plan, root: UOp, out_buf: UOp, extra: dict[UOp, UOp] | None = None, slice_only: bool = True
    ) -> None:
        self.plan, self.root, self.out_buf, self.extra = plan, root, out_buf, extra or {}
        self.slice_only = slice_only  # W1: an assign into a box of its buffer stores only that box
        self.bufs: list[UOp] = []
        self.params: dict[UOp, UOp] = {}
        self.next_axis = 0
        self.reduce_sizes: list[sint] = []
        self.loaded_nodes: set[UOp] = set()  # stored nodes this kernel reads (read-after-write edges)
        self.raw_reads: set[UOp] = set()  # BUFFERs read in their state before this schedule (write-after-read)
        self.loads: dict[UOp, list[tuple[UOp, UOp | None]]] = {}  # BUFFER -> (flat index, gate) it is loaded at
        self.gates: set[UOp] = set()  # the index arithmetic of PAD's gates (the lowering leaves it as built)

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

    # ---- the lowering -------------------------------------------------------------------------------------

    def value(self, node: UOp, idx: Index, valid: UOp | None) -> UOp:
        """The kernel-level value of tensor node `node` at `idx` (gated by `valid`): one top-first rewrite of the
        request for it (`pm_lower_tensor`); each distinct request is lowered once."""
        start = request(self, node, idx, valid)
        return graph_rewrite(start, pm_lower_tensor, ctx=self, bottom_up=True, name="lower tensor", skip=FINAL)

    # ---- the whole kernel ---------------------------------------------------------------------------------

    def build(self, value_node: UOp) -> UOp:
        """The kernel AST storing `value_node` (shaped like the root) into the output buffer."""
        self.param(self.out_buf)
        shape = self.plan.stored_shape(self.root)  # D1: the axes its value is constant along are not stored
        if self.slice_only and (box := written_box(self.plan, self.root, value_node, self.out_buf)) is not None:
            # W1: only the written box is stored (its value's shape), at its offsets in the buffer's view shape
            inner, view_shape, offsets, old = box
            (self.loaded_nodes if old.op is Ops.ASSIGN else self.raw_reads).add(old)  # the same order edges
            shape = inner.shape
            idx = tuple(as_index(0) if is_one(s) else self.new_range(s, AxisType.LOOP) for s in shape)
            val = self.value(inner, idx, None)
            at = tuple(i if isinstance(o, int) and o == 0 else simplify_index(i + as_index(o))
                       for i, o in zip(idx, offsets, strict=True))  # fmt: skip
            self.out_index = simplify_index(flat_index(at, view_shape))
        else:
            idx = tuple(as_index(0) if is_one(s) else self.new_range(s, AxisType.LOOP) for s in shape)
            val = self.value(value_node, idx, None)
            self.out_index = simplify_index(flat_index(idx, shape))
        loops = tuple(i for i in idx if i.op is Ops.RANGE)
        store = self.param(self.out_buf).index(self.out_index).store(val)
        body = UOp(Ops.END, dtypes.void, (store, *loops)) if loops else store
        dims = [_sint_name(s) for s in shape if not is_one(s)] + [_sint_name(s) for s in self.reduce_sizes]
        name = to_function_name(("r_" if self.reduce_sizes else "E_") + ("_".join(dims) or "1"))
        return UOp(Ops.SINK, dtypes.void, (body,), KernelInfo(name=name))


# ---- W1: an assign into a box of its buffer ------------------------------------------------------------------
# A write into a slice of a stored tensor (`t[:, p:p+T].assign(v)`) reaches the scheduler as the whole buffer
# assigned `mask.where(v', old)`: `v'` and `mask` (a constant True) padded to the buffer's view shape by the same
# PADs (then reshaped to the buffer), `old` the buffer's current state. Outside the mask the kernel would store
# what the buffer already holds, so it stores only the box: ranges over `v`'s shape, shifted by the pads' offsets.


def _whole_true(n: UOp) -> bool:
    while n.op in (Ops.RESHAPE, Ops.EXPAND):
        n = n.src[0]
    return n.op is Ops.CONST and n.arg is True


def _same_arg(a: Any, b: Any) -> bool:
    """Movement arguments equal element by element (symbolic ints are hash-consed UOps: compared by identity)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_arg(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, UOp) or isinstance(b, UOp):
        return a is b
    return bool(a == b)


def written_box(
    plan: Plan, root: UOp, value: UOp, out_buf: UOp
) -> tuple[UOp, tuple[sint, ...], tuple[sint, ...], UOp] | None:
    """For an ASSIGN `root` of `value = mask.where(v', old)` as above: (v, the view shape, v's offsets in it, old's
    node); None when the value has another form (then the whole buffer is stored)."""
    if root.op is not Ops.ASSIGN or value.op is not Ops.WHERE or plan.stored_shape(root) != root.shape:
        return None
    mask, val, old = value.src
    old = plan.peel(old)
    if old is not plan.peel(root.src[0]):
        return None
    if not (old is out_buf or (old.op is Ops.ASSIGN and plan.buffers.get(old) is out_buf)):
        return None
    if mask.op is Ops.RESHAPE:  # the buffer viewed in the shape the slice was taken from
        if val.op is not Ops.RESHAPE or mask.src[0].shape != val.src[0].shape:
            return None
        mask, val = mask.src[0], val.src[0]
    view_shape = mask.shape
    if mask.op is not Ops.PAD:
        return None
    offsets: list[sint] = [0] * len(view_shape)
    while mask.op is Ops.PAD:  # nested slices: their offsets add
        if val.op is not Ops.PAD or not _same_arg(mask.arg, val.arg):
            return None
        offsets = [o + before for o, (before, _) in zip(offsets, mask.arg, strict=True)]
        mask, val = mask.src[0], val.src[0]
    return (val, view_shape, tuple(offsets), old) if _whole_true(mask) else None


# ---- the lowering rules: a request for a tensor node's value at an index -> kernel-level value ---------------
# Rules fire top-first (consumers before producers, sources in order: RANGE ids and PARAM slots come in first-use
# order); a rule's result is rewritten until no request is left in it.

# kernel-level values the rewrite leaves alone (a load's index, a range's end are final)
FINAL = frozenset({Ops.LOAD, Ops.RANGE, Ops.CONST, Ops.DEFINE_VAR, Ops.PARAM})


def request(ctx: KernelBuilder, node: UOp, idx: Index, valid: UOp | None, now: bool = True) -> UOp:
    """`node`'s value at `idx` (gated by `valid`) as far as it is known at once: a constant's value, with `now` a
    load (a stored node or a buffer), and the index a chain of views maps to (down to a gate, a non-view or a stored
    node); anything else is a request `NOOP(node[, its buffer], arg=(idx, gate))` that the rules lower. `now=False`
    keeps loads as requests, so that PARAM slots stay in first-use order."""
    if node.op is Ops.CONST:
        return UOp.const(node.dtype, node.arg)
    stats.steps += 1
    if (buf := ctx.storage(node)) is not None:
        return _load_stored(ctx, node, buf, idx, valid) if now else UOp(Ops.NOOP, node.dtype, (node, buf), (idx, valid))
    if node.op in GroupOp.Movement:
        return _view(ctx, node, idx, valid, now)
    if now and (node.op is Ops.BUFFER or node.op is Ops.BUFFER_VIEW):
        return _load_buffer(ctx, node, idx, valid)
    return UOp(Ops.NOOP, node.dtype, (node,), (idx, valid))


def _pending(v: UOp) -> bool:
    """Whether `request`'s answer `v` is (a gated) request, not a value yet."""
    while v.op is Ops.WHERE:
        v = v.src[1]
    return v.op is Ops.NOOP


def _view(ctx: KernelBuilder, x: UOp, idx: Index, valid: UOp | None, now: bool = True) -> UOp:
    """View `x` at `idx`: its source down the chain of views at the mapped index (stops under a gate)."""
    dtype, memo, movement = x.dtype, ctx.plan.index_memo, GroupOp.Movement
    while True:
        idx, gate = movement_index(x, idx, memo)
        valid, x = and_gates(valid, gate), x.src[0]
        if gate is not None or x.op not in movement or ctx.storage(x) is not None:
            break
    if gate is None:
        return request(ctx, x, idx, valid, now)
    ctx.gates.update(gate.toposort())  # index arithmetic: never folded (as it was built)
    # under a gate, a further view is left to the rule (a rewrite step, not a recursion: pads can nest deeply)
    if x.op in movement and ctx.storage(x) is None:
        inner = UOp(Ops.NOOP, x.dtype, (x,), (idx, valid))
    else:
        inner = request(ctx, x, idx, valid, now)
    return gate.where(inner, UOp.const(dtype, 0))


def _load_stored(ctx: KernelBuilder, x: UOp, buf: UOp, idx: Index, valid: UOp | None) -> UOp:
    return ctx.load(buf, ctx.plan.stored_shape(x), ctx.plan.stored_index(x, idx), valid)


def _load_buffer(ctx: KernelBuilder, x: UOp, idx: Index, valid: UOp | None) -> UOp:
    ctx.raw_reads.add(x if x.op is Ops.BUFFER else x.src[0])
    return ctx.load(x, x.shape, idx, valid)


def _math(ctx: KernelBuilder, r: UOp, x: UOp) -> UOp:
    # the sources before the first pending one are values at once; later loads wait their turn (PARAM slot order)
    (idx, valid), srcs, now = r.arg, [], True
    for s in x.src:
        srcs.append(v := request(ctx, s, idx, valid, now))
        now = now and not _pending(v)
    return UOp(x.op, x.dtype, tuple(srcs), x.arg)


def _reduce(ctx: KernelBuilder, r: UOp, x: UOp) -> UOp:
    (idx, valid), (op, axes), src_shape = r.arg, x.arg, x.src[0].shape
    ranges, src_idx = [], list(idx)
    for a in axes:
        if is_one(src_shape[a]):
            src_idx[a] = as_index(0)
        else:
            ranges.append(rng := ctx.new_range(src_shape[a], AxisType.REDUCE))
            ctx.reduce_sizes.append(src_shape[a])
            src_idx[a] = rng
    inner = request(ctx, x.src[0], tuple(src_idx), valid)
    return UOp(Ops.REDUCE, x.dtype, (inner, *ranges), op) if ranges else inner


def _fold(ctx: KernelBuilder, x: UOp) -> UOp | None:
    for s in x.src:
        if s.op is not Ops.CONST:
            return None
    return None if x in ctx.gates else fold_constant(x.op, x.dtype, x.src)


pm_lower_tensor = PatternMatcher([
    # math is rebuilt on requests for its sources; once they are values, math on constants folds (not a gate's)
    (UPat(Ops.NOOP, src=(UPat(GroupOp.Elementwise, name="x"),), name="r"), _math),
    (UPat(GroupOp.Elementwise, name="x"), _fold),
    # a stored node (not this kernel's own) or a buffer is loaded: INDEX(PARAM, flat index, gate)
    (UPat(Ops.NOOP, src=(UPat(name="x"), UPat(name="buf")), name="r"),
     lambda ctx, r, x, buf: _load_stored(ctx, x, buf, *r.arg)),
    (UPat(Ops.NOOP, src=(UPat((Ops.BUFFER, Ops.BUFFER_VIEW), name="x"),), name="r"),
     lambda ctx, r, x: _load_buffer(ctx, x, *r.arg)),
    # movement ops: index arithmetic only (PAD also gates the value); `request` follows chains of them at once
    (UPat(Ops.NOOP, src=(UPat(GroupOp.Movement, name="x"),), name="r"), lambda ctx, r, x: _view(ctx, x, *r.arg)),
    # a tensor-level reduction opens REDUCE ranges over its reduced axes
    (UPat(Ops.NOOP, src=(UPat(Ops.REDUCE_AXIS, name="x"),), name="r"), _reduce),
    # markers that do not change the value (a stored CONTIGUOUS is loaded by the rule above)
    (UPat(Ops.NOOP, src=(UPat((Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH), name="x"),), name="r"),
     lambda ctx, r, x: request(ctx, x.src[0], *r.arg)),
    # variables are kernel arguments (constants need no request: `request` gives their value)
    (UPat(Ops.NOOP, src=(UPat(Ops.DEFINE_VAR, name="x"),)), lambda x: x),
    (UPat(Ops.NOOP, src=(UPat(Ops.BIND, name="x"),)), lambda x: x.src[0]),
    # anything else has no kernel form
    (UPat(Ops.NOOP, src=(UPat(name="x"),)), lambda x: _unsupported(x)),
])  # fmt: skip


def _unsupported(x: UOp) -> UOp:
    raise NotImplementedError(f"the scheduler cannot build a kernel from a {x.op} node: {x!r}")


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
    memo, keys = KernelMemo(), RegionKeys(plan)
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
        region = keys.key(node, value, buf) if node.op is not Ops.ASSIGN else None
        if region is not None:  # a kernel like one built before (deep nets repeat layers): rename its buffers
            if (hit := memo.get(region)) is not None:
                ast, bufs, loaded, raw = hit
                out.append(Kernel(node, _call(ast, bufs), loaded, raw))
                continue
        kb = KernelBuilder(plan, node, buf)
        ast = kb.build(value)
        if region is not None:
            memo.put(region, ast, kb.bufs, kb.loaded_nodes, kb.raw_reads)
        if node.op is Ops.ASSIGN and _hazard(kb, buf):
            # H1: compute the value into a temporary first, then copy it into the target
            tmp = UOp.new_buffer(buf.src[1].arg, buf.arg, buf.dtype)
            first = KernelBuilder(plan, node, tmp, slice_only=False)
            first_k = Kernel(node, _call(first.build(value), first.bufs), first.loaded_nodes, first.raw_reads)
            out.append(first_k)
            kb = KernelBuilder(plan, node, buf, extra={value: tmp}, slice_only=False)
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
