"""Index arithmetic over symbolic ints: how a movement op maps an index of its result to an index of its source.

An index is a tuple of int32 UOps, one per dimension, plus an optional bool *gate* (the element exists; PAD
makes gates). Shapes and movement arguments are `sint`s (int or symbolic UOp): nothing here calls `int()` on a
shape, so a tensor shaped by a Variable indexes with DEFINE_VAR expressions. Results are simplified and
hash-consed, so the same view of the same index is the same UOp (inlined recompute deduplicates).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tg.ir import DType, Ops, UOp, dtypes, exec_alu, prod
from tg.ir.uop import sint

# dtype of all index arithmetic in kernel ASTs, and the largest buffer it can index
INDEX_DTYPE: DType = dtypes.int32
MAX_INDEX = 2**31 - 1

Index = tuple[UOp, ...]


def as_index(x: sint) -> UOp:
    """An index-dtype UOp for an int or a symbolic int."""
    if isinstance(x, UOp):
        return x if x.dtype is INDEX_DTYPE else x.cast(INDEX_DTYPE)
    return UOp.const(INDEX_DTYPE, x)


def is_one(s: sint) -> bool:
    """Whether a dimension is exactly 1 (a symbolic dimension never is)."""
    return isinstance(s, int) and s == 1


def total_size(shape: Sequence[sint]) -> sint:
    """Number of elements of a shape (symbolic when the shape is)."""
    return prod(shape) if shape else 1


def simplify_index(u: UOp) -> UOp:
    """`u` simplified (constants and ranges are already canonical)."""
    return u if u.op is Ops.CONST or u.op is Ops.RANGE or u.op is Ops.DEFINE_VAR else u.simplify()


def strides_of(shape: Sequence[sint]) -> tuple[sint, ...]:
    """Row-major (C order) strides of a contiguous buffer of `shape`, in elements (symbolic when shape is)."""
    out: list[sint] = []
    acc: sint = 1
    for s in reversed(shape):
        out.append(acc)
        acc = acc * s
    return tuple(reversed(out))


def flat_index(idx: Sequence[UOp], shape: Sequence[sint]) -> UOp:
    """The linear offset of `idx` in a contiguous row-major buffer of `shape`."""
    terms = [i if is_one(st) else i * as_index(st)
             for i, st, s in zip(idx, strides_of(shape), shape, strict=True) if not is_one(s)]  # fmt: skip
    if not terms:
        return as_index(0)
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


def _split_flat(flat: UOp, shape: Sequence[sint], total: sint) -> list[UOp]:
    """Split a flat offset into a row-major index of `shape` (whose product is `total`)."""
    out: list[UOp] = []
    for st, s in zip(strides_of(shape), shape, strict=True):
        if is_one(s):
            out.append(as_index(0))
            continue
        e = flat if is_one(st) else flat // as_index(st)
        if not (isinstance(st, int) and isinstance(total, int) and st * s == total) and not (
            isinstance(st, UOp) and st * s is total
        ):
            e = e % as_index(s)
        out.append(simplify_index(e))
    return out


def reshape_index(idx: Sequence[UOp], out_shape: Sequence[sint], in_shape: Sequence[sint]) -> Index:
    """Map an index into `out_shape` (the reshape's result) to an index into `in_shape` (its source).

    Dimensions are matched in groups with equal products so that splitting or merging a few axes only produces
    divisions and modulos inside those groups; symbolic shapes fall back to flatten + re-split.
    """
    if [s for s in out_shape if not is_one(s)] == [s for s in in_shape if not is_one(s)]:
        it = iter(i for i, s in zip(idx, out_shape, strict=True) if not is_one(s))
        return tuple(as_index(0) if is_one(s) else next(it) for s in in_shape)
    if not all(isinstance(s, int) for s in (*out_shape, *in_shape)):
        return tuple(_split_flat(simplify_index(flat_index(idx, out_shape)), in_shape, total_size(in_shape)))
    outs, ins = [int(s) for s in out_shape], [int(s) for s in in_shape]
    result: list[UOp] = [as_index(0)] * len(ins)
    if 0 in outs:  # no elements: no index is ever used (and equal-product groups do not exist)
        return tuple(result)
    i = j = 0
    while i < len(outs) or j < len(ins):
        group_out, group_in, p_out, p_in = [], [], 1, 1
        while True:
            if (p_out <= p_in and i < len(outs)) or j >= len(ins):
                group_out.append(i)
                p_out *= outs[i]
                i += 1
            else:
                group_in.append(j)
                p_in *= ins[j]
                j += 1
            if p_out == p_in and (i >= len(outs) or outs[i] != 1 or j >= len(ins)):
                break
        flat = flat_index([idx[k] for k in group_out], [outs[k] for k in group_out])
        for k, e in zip(group_in, _split_flat(flat, [ins[k] for k in group_in], p_in), strict=True):
            result[k] = e
    return tuple(result)


def and_gates(a: UOp | None, b: UOp | None) -> UOp | None:
    """The AND of two optional gates."""
    if a is None:
        return b
    if b is None:
        return a
    return a & b


# ---- the movement table: op -> (arg, source shape, result shape, index) -> (source index, gate) ----------------


def _reshape(arg: Any, src: Sequence[sint], out: Sequence[sint], idx: Index) -> tuple[Index, UOp | None]:
    return reshape_index(idx, out, src), None


def _permute(arg: Any, src: Sequence[sint], out: Sequence[sint], idx: Index) -> tuple[Index, UOp | None]:
    new_idx: list[UOp] = [as_index(0)] * len(src)
    for i, axis in enumerate(arg):
        new_idx[axis] = idx[i]
    return tuple(new_idx), None


def _expand(arg: Any, src: Sequence[sint], out: Sequence[sint], idx: Index) -> tuple[Index, UOp | None]:
    return tuple(as_index(0) if is_one(s) and not is_one(o) else i for i, s, o in zip(idx, src, out, strict=True)), None


def _shrink(arg: Any, src: Sequence[sint], out: Sequence[sint], idx: Index) -> tuple[Index, UOp | None]:
    return tuple(i if isinstance(b, int) and b == 0 else simplify_index(i + as_index(b))
                 for i, (b, _) in zip(idx, arg, strict=True)), None  # fmt: skip


def _flip(arg: Any, src: Sequence[sint], out: Sequence[sint], idx: Index) -> tuple[Index, UOp | None]:
    return tuple(simplify_index(as_index(s) - 1 - i) if f else i for i, s, f in zip(idx, src, arg, strict=True)), None


def _pad(arg: Any, src: Sequence[sint], out: Sequence[sint], idx: Index) -> tuple[Index, UOp | None]:
    gate: UOp | None = None
    new_idx: list[UOp] = []
    for ix, (before, after), s in zip(idx, arg, src, strict=True):
        no_before, no_after = isinstance(before, int) and before == 0, isinstance(after, int) and after == 0
        new_idx.append(ix if no_before else simplify_index(ix - as_index(before)))
        if not no_before:
            gate = and_gates(gate, as_index(before - 1) < ix)
        if not no_after:
            gate = and_gates(gate, ix < simplify_index(as_index(before) + as_index(s)))
    return tuple(new_idx), gate


MOVEMENT_INDEX: dict[Ops, Callable[[Any, Sequence[sint], Sequence[sint], Index], tuple[Index, UOp | None]]] = {
    Ops.RESHAPE: _reshape,  # flatten the result index and re-split it over the source shape (grouped by products)
    Ops.PERMUTE: _permute,  # reorder the index
    Ops.EXPAND: _expand,  # broadcast axes read element 0 of the source
    Ops.SHRINK: _shrink,  # add the start offset
    Ops.FLIP: _flip,  # mirror: size - 1 - i
    Ops.PAD: _pad,  # shift by the padding before, gate the padded area off
}


def movement_index(node: UOp, idx: Index, memo: dict[Any, tuple[Index, UOp | None]]) -> tuple[Index, UOp | None]:
    """The source index (and new gate, or None) of movement op `node` read at `idx`, memoised in `memo` (one per
    schedule, so no graph outlives it)."""
    key = (node.op, node.arg, node.src[0].shape, node.shape, idx)
    if (ret := memo.get(key)) is None:
        ret = memo[key] = MOVEMENT_INDEX[node.op](node.arg, node.src[0].shape, node.shape, idx)
    return ret


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
