"""Build one kernel AST from a tensor-level graph: movement ops become index arithmetic, nothing is copied.

A value is produced by walking the tensor graph from the node being stored down to its leaves, carrying
the *index* at which the value is wanted (one integer UOp per dimension) and a *valid* gate (a bool UOp,
or None). Movement ops only rewrite the index (RESHAPE splits/merges it, PERMUTE reorders, EXPAND pins
broadcast dims to 0, SHRINK offsets, FLIP mirrors, PAD offsets and adds a gate), elementwise ops rebuild
themselves on the values of their sources, a REDUCE_AXIS opens new REDUCE ranges, and leaves become
loads from kernel parameters (realized buffers) or constants.

The builder also watches for work that would be repeated: a reduction reached at an index that does not
use every loop of the kernel (it sits behind an expand, so it would be recomputed per broadcast element),
reached twice at different indices, or nested inside another reduction. It then raises `MustRealize`
and the scheduler stores that reduction in its own kernel first.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any

from tg.ir import AxisType, DType, KernelInfo, Ops, UOp, dtypes, exec_alu, prod

# what a step of the walk asks for: the value of (node, index, valid gate)
Request = tuple[UOp, tuple[UOp, ...], UOp | None]

# dtype of all index arithmetic in kernel ASTs, and the largest buffer it can index
INDEX_DTYPE: DType = dtypes.int32
_MAX_INDEX = 2**31 - 1


class MustRealize(Exception):
    """Raised while building a kernel when `node` has to be stored in its own buffer first."""

    def __init__(self, node: UOp, why: str, broadcast: bool = False) -> None:
        super().__init__(f"{node.op} must be realized: {why}")
        self.node, self.why, self.broadcast = node, why, broadcast


def index_const(v: int) -> UOp:
    """An integer constant of the index dtype."""
    return UOp.const(INDEX_DTYPE, v)


def movement_arg(node: UOp) -> Any:
    """The argument of a movement op (new shape, order, padding, ...)."""
    return node.arg


def strides_of(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major (C order) strides of a contiguous buffer of `shape`, in elements."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= int(s)
    return tuple(reversed(out))


def flat_index(idx: Sequence[UOp], shape: Sequence[int]) -> UOp:
    """The linear offset of `idx` in a contiguous row-major buffer of `shape`."""
    terms = [
        i if st == 1 else i * index_const(st) for i, st, s in zip(idx, strides_of(shape), shape, strict=True) if s != 1
    ]
    if not terms:
        return index_const(0)
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


def fold_constant(op: Ops, dtype: DType, srcs: Sequence[UOp]) -> UOp | None:
    """The constant result of `op` on constant `srcs`, or None when it should be left to the device."""
    if op in {Ops.BITCAST, Ops.THREEFRY}:
        return None
    try:
        if op is Ops.CAST:
            return UOp.const(dtype, srcs[0].arg)
        return UOp.const(dtype, exec_alu(op, dtype, [s.arg for s in srcs]))
    except (ArithmeticError, ValueError, TypeError, KeyError):
        return None


def _simplify(u: UOp) -> UOp:
    return u.simplify() if u.op is not Ops.CONST and u.op is not Ops.RANGE else u


def reshape_index(idx: Sequence[UOp], out_shape: Sequence[int], in_shape: Sequence[int]) -> tuple[UOp, ...]:
    """Map an index into `out_shape` (the reshape's result) to an index into `in_shape` (its source).

    Dimensions are matched in groups with equal products so that splitting or merging a few axes only
    produces divisions and modulos inside those groups.
    """
    out_shape, in_shape = [int(s) for s in out_shape], [int(s) for s in in_shape]
    # only size-1 dims added or removed: the index passes through
    if [s for s in out_shape if s != 1] == [s for s in in_shape if s != 1]:
        it = iter(i for i, s in zip(idx, out_shape, strict=True) if s != 1)
        return tuple(index_const(0) if s == 1 else next(it) for s in in_shape)
    result: list[UOp] = [index_const(0)] * len(in_shape)
    i = j = 0
    while i < len(out_shape) or j < len(in_shape):
        group_out, group_in, p_out, p_in = [], [], 1, 1
        while True:
            if (p_out <= p_in and i < len(out_shape)) or j >= len(in_shape):
                group_out.append(i)
                p_out *= out_shape[i]
                i += 1
            else:
                group_in.append(j)
                p_in *= in_shape[j]
                j += 1
            if p_out == p_in and (i >= len(out_shape) or out_shape[i] != 1 or j >= len(in_shape)):
                break
        flat = flat_index([idx[k] for k in group_out], [out_shape[k] for k in group_out])
        sub_shape = [in_shape[k] for k in group_in]
        for k, st, s in zip(group_in, strides_of(sub_shape), sub_shape, strict=True):
            if s == 1:
                continue
            e = flat if st == 1 else flat // index_const(st)
            if st * s != p_in:
                e = e % index_const(s)
            result[k] = _simplify(e)
    return tuple(result)


def _and(a: UOp | None, b: UOp | None) -> UOp | None:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


class KernelBuilder:
    """Builds the AST of one kernel that stores the value of a tensor node into a buffer.

    `realized` maps tensor nodes whose values already live in (or will be written to, earlier in the
    schedule) a buffer to that BUFFER uop; those nodes are loaded, not recomputed.
    """

    def __init__(self, realized: Mapping[UOp, UOp]) -> None:
        self.realized = realized
        self.bufs: list[UOp] = []
        self.params: dict[UOp, UOp] = {}
        self.next_axis = 0
        self.loop_ranges: tuple[UOp, ...] = ()
        self.scope_ranges: list[UOp] = []  # REDUCE ranges of the reductions being built
        self.reduce_sites: dict[UOp, tuple[tuple[UOp, ...], UOp | None]] = {}
        self.has_reduce = False
        self.out_index: UOp = index_const(0)
        self.loaded_nodes: set[UOp] = set()  # realized tensor nodes this kernel reads
        self.loads: dict[UOp, list[UOp]] = {}  # BUFFER -> flat indices it is loaded at
        self._cache: dict[tuple[UOp, tuple[UOp, ...], UOp | None], UOp] = {}

    # ---- parameters, ranges, loads ----------------------------------------------------------------------

    def param(self, buf: UOp) -> UOp:
        """The PARAM uop of `buf` in this kernel (slots are handed out in first-use order)."""
        if (p := self.params.get(buf)) is None:
            if int(buf.arg) > _MAX_INDEX:
                raise NotImplementedError(f"a buffer of {buf.arg} elements needs 64-bit indexing (not supported yet)")
            p = self.params[buf] = UOp(Ops.PARAM, buf.dtype.ptr(int(buf.arg)), (), len(self.bufs))
            self.bufs.append(buf)
        return p

    def new_range(self, size: int, kind: AxisType) -> UOp:
        """A fresh RANGE over `size` with the next axis id of this kernel."""
        r = UOp(Ops.RANGE, INDEX_DTYPE, (index_const(size),), (self.next_axis, kind))
        self.next_axis += 1
        return r

    def load(self, buf: UOp, shape: Sequence[int], idx: Sequence[UOp], valid: UOp | None) -> UOp:
        """Load element `idx` of `buf` viewed as a contiguous array of `shape`; yields 0 where `valid` is false."""
        flat = _simplify(flat_index(idx, shape))
        self.loads.setdefault(buf, []).append(flat)
        return self.param(buf).index(flat, valid=valid).load()

    # ---- the walk ---------------------------------------------------------------------------------------

    def value(self, node: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
        """The kernel-level value of tensor node `node` at index `idx` (gated by `valid`).

        The walk is driven by an explicit stack of generators (each yields the (node, idx, valid) values it
        needs), so graphs thousands of ops deep do not hit Python's recursion limit.
        """
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
            except MustRealize as e:
                if e.broadcast:
                    raise MustRealize(self._broadcast_root([k for k, _ in stack]), e.why) from None
                raise
            if (sent := self._cache.get(need)) is None:
                stack.append((need, self._value(*need)))
        return self._cache[root]

    def _broadcast_root(self, path: list[Request]) -> UOp:
        """The node to store for a broadcast reduction at the end of `path` (root first).

        That is the top of the run of nodes, ending at the reduction, whose index misses some loop of the
        kernel: the value right under the EXPAND, so elementwise work after the reduction is stored once too.
        Movement ops are skipped (storing them would only copy).
        """
        best = path[-1][0]
        required = (*self.loop_ranges, *self.scope_ranges)
        for node, idx, _ in reversed(path[:-1]):
            used = {u for i in idx for u in i.toposort() if u.op is Ops.RANGE}
            if node.op is Ops.REDUCE_AXIS or all(r in used for r in required):
                break
            if node.op not in _MOVEMENT:
                best = node
        return best

    def _value(self, node: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> Generator[Request, UOp, UOp]:
        if (buf := self.realized.get(node)) is not None:
            self.loaded_nodes.add(node)
            return self.load(buf, [int(s) for s in node.shape], idx, valid)
        if node.op is Ops.BUFFER:
            return self.load(node, (int(node.arg),), idx, valid)
        if node.op is Ops.CONST:
            return UOp.const(node.dtype, node.arg)
        if node.op is Ops.BIND:
            return node.src[0]
        if node.op is Ops.DEFINE_VAR:
            return node
        if node.op in _MOVEMENT:
            return (yield from self._movement(node, idx, valid))
        if node.op is Ops.REDUCE_AXIS:
            return (yield from self._reduce(node, idx, valid))
        if node.op in {Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH}:
            return (yield (node.src[0], idx, valid))
        if node.op in {Ops.CAST, Ops.BITCAST} or node.op in _ELEMENTWISE:
            srcs = []
            for src in node.src:
                srcs.append((yield (src, idx, valid)))
            if all(s.op is Ops.CONST for s in srcs):
                if (folded := fold_constant(node.op, node.dtype, srcs)) is not None:
                    return folded
            return UOp(node.op, node.dtype, tuple(srcs), node.arg)
        if node.op in {Ops.COPY, Ops.ASSIGN}:
            raise MustRealize(node, "copies and assigns are separate schedule steps")
        raise NotImplementedError(f"the scheduler cannot build a kernel from a {node.op} node: {node!r}")

    def _movement(self, node: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> Generator[Request, UOp, UOp]:
        src, arg = node.src[0], movement_arg(node)
        in_shape = [int(s) for s in src.shape]
        if node.op is Ops.RESHAPE:
            return (yield (src, reshape_index(idx, [int(s) for s in node.shape], in_shape), valid))
        if node.op is Ops.PERMUTE:
            new_idx: list[UOp] = [index_const(0)] * len(in_shape)
            for i, axis in enumerate(arg):
                new_idx[axis] = idx[i]
            return (yield (src, tuple(new_idx), valid))
        if node.op is Ops.EXPAND:
            out_shape = [int(s) for s in node.shape]
            zipped = zip(idx, in_shape, out_shape, strict=True)
            return (yield (src, tuple(index_const(0) if s == 1 and o != 1 else i for i, s, o in zipped), valid))
        if node.op is Ops.SHRINK:
            offsets = [int(b) for b, _ in arg]
            shifted = tuple(i if b == 0 else _simplify(i + index_const(b)) for i, b in zip(idx, offsets, strict=True))
            return (yield (src, shifted, valid))
        if node.op is Ops.FLIP:
            zipped_flip = zip(idx, in_shape, arg, strict=True)
            mirrored = tuple(_simplify(index_const(s - 1) - i) if f else i for i, s, f in zipped_flip)
            return (yield (src, mirrored, valid))
        # PAD: shift the index and gate the padded area to zero
        gate: UOp | None = None
        pad_idx: list[UOp] = []
        for ix, (pad_before, pad_after), s in zip(idx, arg, in_shape, strict=True):
            before, after = int(pad_before), int(pad_after)
            if before == 0 and after == 0:
                pad_idx.append(ix)
                continue
            moved = ix if before == 0 else _simplify(ix - index_const(before))
            pad_idx.append(moved)
            if before > 0:
                gate = _and(gate, index_const(before - 1) < ix)
            if after > 0:
                gate = _and(gate, ix < index_const(before + s))
        if gate is None:
            return (yield (src, tuple(pad_idx), valid))
        inner = yield (src, tuple(pad_idx), _and(valid, gate))
        return gate.where(inner, UOp.const(node.dtype, 0))

    def _reduce(self, node: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> Generator[Request, UOp, UOp]:
        if (site := self.reduce_sites.get(node)) is not None and site != (idx, valid):
            raise MustRealize(node, "the reduction is used at two different indices")
        used = {u for i in idx for u in i.toposort() if u.op is Ops.RANGE}
        if any(r not in used for r in (*self.loop_ranges, *self.scope_ranges)):
            raise MustRealize(node, "the reduction is broadcast (expanded), it would be recomputed per element", True)
        self.reduce_sites[node] = (idx, valid)
        op, axes = node.arg
        src = node.src[0]
        in_shape = [int(s) for s in src.shape]
        ranges, src_idx = [], list(idx)
        for a in axes:
            if in_shape[a] == 1:
                src_idx[a] = index_const(0)
            else:
                r = self.new_range(in_shape[a], AxisType.REDUCE)
                ranges.append(r)
                src_idx[a] = r
        # a reduction nested in this one is fine if it depends on these ranges too (checked above)
        self.scope_ranges.extend(ranges)
        try:
            inner = yield (src, tuple(src_idx), valid)
        finally:
            del self.scope_ranges[len(self.scope_ranges) - len(ranges) :]
        if not ranges:
            return inner
        self.has_reduce = True
        return UOp(Ops.REDUCE, node.dtype, (inner, *ranges), op)

    # ---- the whole kernel -------------------------------------------------------------------------------

    def build(self, out_buf: UOp, node: UOp, value_node: UOp) -> UOp:
        """The kernel AST that stores `value_node` (shaped like `node`) into `out_buf`."""
        self.param(out_buf)
        shape = [int(s) for s in node.shape]
        idx = tuple(index_const(0) if s == 1 else self.new_range(s, AxisType.LOOP) for s in shape)
        self.loop_ranges = tuple(i for i in idx if i.op is Ops.RANGE)
        val = self.value(value_node, idx, None)
        self.out_index = _simplify(flat_index(idx, shape))
        store = self.param(out_buf).index(self.out_index).store(val)
        body = UOp(Ops.END, dtypes.void, (store, *self.loop_ranges)) if self.loop_ranges else store
        name = ("r_" if self.has_reduce else "E_") + "_".join(str(s) for s in shape if s != 1)
        return UOp(Ops.SINK, dtypes.void, (body,), KernelInfo(name=name.rstrip("_") or "E"))


_MOVEMENT = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.PAD})

_ELEMENTWISE = frozenset(
    {
        Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC, Ops.ADD, Ops.MUL, Ops.SHL,
        Ops.SHR, Ops.IDIV, Ops.MAX, Ops.MOD, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.OR, Ops.AND,
        Ops.THREEFRY, Ops.SUB, Ops.FDIV, Ops.POW, Ops.WHERE, Ops.MULACC,
    }
)  # fmt: skip


def total_size(shape: Sequence[Any]) -> int:
    """Number of elements of a concrete shape."""
    return int(prod(int(s) for s in shape))
