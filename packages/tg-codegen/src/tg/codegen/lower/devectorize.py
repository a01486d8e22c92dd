"""The devectorizer: every vector op the renderer cannot do in vector form is done lane by lane.

After the expander, values may be vectors (`dtype.count > 1`). A renderer lists the ops it computes on vectors in
`vector_ops` (for C with vector extensions: arithmetic, bitwise ops, comparisons into lane masks, WHERE, trunc, and
the numeric conversions in `vector_conversions`); every other vector op (transcendental functions, integer division,
...) becomes one scalar op per lane, reading lanes with GEP and rebuilding the vector with VECTORIZE. GEP folding
rules then remove the glue (a lane of a VECTORIZE is its source, a lane of a constant is a constant).
"""

from __future__ import annotations

import functools

from tg.ir.dtype import DType, dtypes
from tg.ir.ops import GroupOp, Ops
from tg.ir.pattern import PatternMatcher, UPat
from tg.ir.uop import UOp


def _lane(x: UOp, i: int) -> UOp:
    return x.gep(i) if x.dtype.count > 1 else x


def _scalarize(x: UOp) -> UOp:
    n = x.dtype.count
    return UOp(Ops.VECTORIZE, x.dtype, tuple(UOp(x.op, x.dtype.scalar(), tuple(_lane(s, i) for s in x.src), x.arg)
                                             for i in range(n)))  # fmt: skip


def _gep_fold(g: UOp) -> UOp | None:
    x, lanes = g.src[0], g.arg
    if x.op is Ops.VECTORIZE:
        parts = [x.src[i] for i in lanes]
        return parts[0] if len(parts) == 1 else UOp(Ops.VECTORIZE, g.dtype, tuple(parts))
    if x.op is Ops.CONST:
        return UOp.const(g.dtype, x.arg)
    if x.op is Ops.VCONST:
        return UOp.const(g.dtype, tuple(x.arg[i] for i in lanes) if len(lanes) > 1 else x.arg[lanes[0]])
    if x.op is Ops.GEP:
        return x.src[0].gep(tuple(x.arg[i] for i in lanes))
    if lanes == tuple(range(x.dtype.count)):
        return x
    return None


pm_gep_fold = PatternMatcher([
    # lanes of vectors built from scalars, of constants, of lanes: the scalar itself
    (UPat(Ops.GEP, name="g"), _gep_fold),
])  # fmt: skip


@functools.lru_cache(maxsize=16)
def devectorize_rules(
    vector_ops: frozenset[Ops],
    bool_ops: frozenset[Ops] = frozenset(),
    conversions: frozenset[tuple[Ops, DType, DType]] = frozenset(),
) -> PatternMatcher:
    """Rules that scalarise every vector ALU/CAST/BITCAST op the target cannot do on vectors (a renderer's
    `vector_ops`; with a bool source or result, its `vector_bool_ops`; conversions: its `vector_conversions`),
    plus GEP folding."""

    def supported(x: UOp) -> bool:
        if x.op in (Ops.CAST, Ops.BITCAST):
            return (x.op, x.src[0].dtype.scalar(), x.dtype.scalar()) in conversions
        if x.dtype.scalar() is dtypes.bool or any(s.dtype.scalar() is dtypes.bool for s in x.src):
            # bool vectors are lane masks (true = all bits set): ordering them is not ordering bools
            return x.op in bool_ops and not (x.op is Ops.CMPLT and x.src[0].dtype.scalar() is dtypes.bool)
        return x.op in vector_ops

    def unsupported(x: UOp) -> UOp | None:
        vec = x.dtype.count > 1 or any(s.dtype.count > 1 for s in x.src)
        return _scalarize(x) if vec and not supported(x) else None

    return PatternMatcher([(UPat(GroupOp.ALU | {Ops.CAST, Ops.BITCAST}, name="x"), unsupported)]) + pm_gep_fold
