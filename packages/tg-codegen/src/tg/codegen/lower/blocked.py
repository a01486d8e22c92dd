"""Blocked accumulation: a long float sum becomes nested sums of short blocks (shared/specs/optimizer.md §5.4).

One accumulator per output lane that adds n values in a row has a rounding error that grows with n (a float32 sum of
10**6 copies of 0.1 that way is off by 1%). Before expansion, every float `REDUCE(ADD)` whose innermost loop (a
REDUCE-type range, i.e. not unrolled into lanes) runs longer than a block is rewritten into nested REDUCEs: the
loop `r` of n iterations becomes `ro * b + ri`, the inner REDUCE sums a block of `b` iterations, the outer one adds
the block sums (recursively, so every level is at most `b` long); `n % b` leftover iterations form a short tail
loop added at the end. Lanes and accumulators split off by opts stay on the outermost REDUCE (one horizontal
reduce at the very end), unrolled values on the innermost. The loops over blocks carry `BLOCK_LOOP` in their arg:
the C renderer keeps them rolled (unrolling them lets the compiler interleave loads of different blocks, which
cost a third of the bandwidth of a 64 MB sum, measured), while a block itself may unroll.

Block sizes: plain sums longer than 16 iterations use b = 4 (chains of 4 at every level: about as accurate as
numpy's pairwise sum, and free for a memory-bound loop); fused multiply-add chains (a matmul tile holds many
accumulators, and every level costs one more register per accumulator) stay one chain up to 4096 multiply-adds
(BLAS kernels chain a similar length) and use blocks of 1024 beyond (a long-K matmul).
"""

from __future__ import annotations

import math

from tg.codegen.render.renderer import BLOCK_LOOP, Renderer
from tg.ir.dtype import dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.pattern import PatternMatcher, UPat, graph_rewrite
from tg.ir.uop import UOp

BLOCK_ADD = 4  # loop iterations per level of a plain float sum
BLOCK_FMA = 1024  # multiply-adds per level of a fused chain
SHORT_LOOP = 16  # a plain sum loop of at most this many iterations stays one chain
SHORT_FMA_CHAIN = 4096  # a fused chain of at most this many multiply-adds stays one chain (as long as BLAS's)


def _const_size(r: UOp) -> int | None:
    return s if isinstance(s := r.range_size, int) else None


class _Blocker:
    def __init__(self, ast: UOp, renderer: Renderer) -> None:
        self.ren = renderer
        self.next_id = 1 + max((u.axis_id for u in ast.toposort() if u.op is Ops.RANGE), default=-1)
        self.done: set[UOp] = set()  # REDUCEs made by a rewrite

    def new_range(self, size: int, over_blocks: bool) -> UOp:
        self.next_id += 1
        arg = (self.next_id - 1, AxisType.REDUCE, *((BLOCK_LOOP,) if over_blocks else ()))
        return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, size),), arg)

    def block_sizes(self, red: UOp) -> tuple[int, int]:
        """(iterations per block, longest loop that stays one chain) for REDUCE `red`."""
        value = red.src[0]
        wide = red.dtype.scalar() in (dtypes.float32, dtypes.float64)
        fma = getattr(self.ren, "has_fma", False) and value.op is Ops.MUL and wide
        if not fma:
            return BLOCK_ADD, SHORT_LOOP
        per_iter = math.prod(_const_size(r) or 1 for r in red.src[1:] if r.axis_type is AxisType.UNROLL)
        return max(2, BLOCK_FMA // per_iter), max(2, SHORT_FMA_CHAIN // per_iter)

    def rewrite(self, red: UOp) -> UOp | None:
        if red in self.done or red.arg is not Ops.ADD or not dtypes.is_float(red.dtype.scalar()):
            return None
        loops = [r for r in red.src[1:] if r.axis_type is AxisType.REDUCE and _const_size(r) is not None]
        if not loops:
            return None
        r = max(loops, key=lambda r: r.axis_id)
        n, (b, short) = _const_size(r), self.block_sizes(red)
        assert n is not None
        if n <= max(b, short):
            return None
        inner_extra = [x for x in red.src[1:] if x.axis_type is AxisType.UNROLL]
        outer = [x for x in red.src[1:] if x is not r and x not in inner_extra]
        ret = self.split(red.src[0], r, n, b, inner_extra, outer, over_blocks=False)
        # one rewrite per REDUCE: the REDUCEs of the result (new ones, and copies of nested ones already rewritten)
        # are not rewritten again (its outer REDUCE may still hold other long REDUCE loops: they stay as they are)
        self.done.update(u for u in ret.toposort() if u.op is Ops.REDUCE)
        return ret

    def split(self, value: UOp, r: UOp, n: int, b: int, inner_extra: list[UOp], outer: list[UOp],
              over_blocks: bool) -> UOp:  # fmt: skip
        """REDUCE(ADD, value, r, *inner_extra, *outer) with r (n iterations) cut into blocks of b, recursively."""
        q, m = divmod(n, b)
        ri = self.new_range(b, over_blocks)
        ro = self.new_range(q, True) if q > 1 else UOp.const(r.dtype, 0)
        inner = _reduce(value.substitute({r: ro * b + ri}), [ri, *inner_extra])
        if q > b:
            main = self.split(inner, ro, q, b, [], outer, over_blocks=True)
        else:
            main = _reduce(inner, [*([ro] if q > 1 else []), *outer])
        if m:
            rt = self.new_range(m, over_blocks) if m > 1 else UOp.const(r.dtype, 0)
            tail = _reduce(value.substitute({r: rt + q * b}), [*([rt] if m > 1 else []), *inner_extra, *outer])
            main = main + tail
        return main


def _reduce(value: UOp, ranges: list[UOp]) -> UOp:
    return value.reduce(*sorted(ranges, key=lambda r: r.axis_id), arg=Ops.ADD) if ranges else value


# one rule: a long float REDUCE(ADD) becomes nested block sums (afterwards every float sum's innermost REDUCE loop is
# at most a block long; the REDUCEs of a result are not rewritten again). The context is the kernel's _Blocker (its
# renderer, the next free axis id and the REDUCEs it made).
pm_block_reduces = PatternMatcher([(UPat(Ops.REDUCE, name="red"), lambda ctx, red: ctx.rewrite(red))])


def block_reduces(ast: UOp, renderer: Renderer) -> UOp:
    """Rewrite every long float sum of kernel `ast` into nested block sums (see the module docstring)."""
    if not any(u.op is Ops.REDUCE for u in ast.toposort()):
        return ast
    return graph_rewrite(ast, pm_block_reduces, ctx=_Blocker(ast, renderer), name="block reduces")
