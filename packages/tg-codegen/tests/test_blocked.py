"""Blocked accumulation (tg.codegen.lower.blocked): long float sums become nested sums of short blocks.

The rewritten kernels are checked by a small float64 interpreter of kernel ASTs (every element summed exactly
once, whatever the nesting and tails) and by the shape of the nesting and of the generated C."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from tg.codegen.lower.blocked import BLOCK_ADD, BLOCK_FMA, SHORT_FMA_CHAIN, SHORT_LOOP, block_reduces
from tg.codegen.program import get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.codegen.render.python import PythonRenderer
from tg.ir.dtype import dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp

f32 = dtypes.float32


def row_sums(rows: int, n: int, product: bool = False, unroll: int = 1) -> UOp:
    """out[i] = sum_j a[i, j] (or a[i, j] * b[j]); the reduce axis optionally split into an UNROLL of `unroll`."""
    i = UOp.range(rows, 0)
    r = UOp.range(n // unroll, 1, AxisType.REDUCE)
    ranges = [r]
    j: UOp = r
    if unroll > 1:
        u = UOp.range(unroll, 2, AxisType.UNROLL)
        ranges.append(u)
        j = r * unroll + u
    v = UOp.param(1, f32, rows * n).index(i * n + j).load()
    if product:
        v = v * UOp.param(2, f32, n).index(j).load()
    return UOp.sink(UOp.param(0, f32, rows).index(i).store(v.reduce(*ranges, arg=Ops.ADD)).end(i))


def evaluate(ast: UOp, bufs: dict[int, list[float]]) -> list[float]:
    """Run kernel `ast` in float64 (exact for these tests: order does not matter), returning buffer 0."""
    out = bufs[0]

    def ev(u: UOp, env: dict[UOp, int]) -> float:
        if u.op is Ops.CONST:
            return u.arg
        if u.op is Ops.RANGE:
            return env[u]
        if u.op is Ops.LOAD:
            idx = u.src[0]
            return float(bufs[idx.src[0].arg][int(ev(idx.src[1], env))])
        if u.op is Ops.REDUCE:
            rngs = u.src[1:]
            return sum(ev(u.src[0], {**env, **dict(zip(rngs, vals, strict=True))})
                       for vals in itertools.product(*(range(int(r.src[0].arg)) for r in rngs)))  # fmt: skip
        a = [ev(s, env) for s in u.src]
        return {Ops.ADD: lambda: a[0] + a[1], Ops.MUL: lambda: a[0] * a[1]}[u.op]()

    for end in ast.src:
        store, rngs = end.src[0], end.src[1:]
        for vals in itertools.product(*(range(int(r.src[0].arg)) for r in rngs)):
            env = dict(zip(rngs, vals, strict=True))
            out[int(ev(store.src[0].src[1], env))] = ev(store.src[1], env)
    return out


def reduces(ast: UOp) -> list[UOp]:
    return [u for u in ast.toposort() if u.op is Ops.REDUCE]


# 64 = 4**3 nests exact blocks, 1001 and 4099 leave tails at several levels; 4096 = 4**6 (64 three levels deeper, its
# 12,288 elements summed by the Python interpreter above) with --slow
@pytest.mark.parametrize("n", [17, 64, 1001, pytest.param(4096, marks=pytest.mark.slow), 4099])
def test_every_element_is_summed_once(n: int) -> None:
    ast = row_sums(3, n)
    blocked = block_reduces(ast, ClangRenderer())
    assert len(reduces(blocked)) > 1  # nested
    a = [random.Random(n).random() for _ in range(3 * n)]
    got = evaluate(blocked, {0: [0.0] * 3, 1: a})
    assert got == pytest.approx([math.fsum(a[i * n : (i + 1) * n]) for i in range(3)], rel=1e-12)


@pytest.mark.parametrize("n", [64, 4096, 1001])
def test_no_level_is_longer_than_a_block(n: int) -> None:
    blocked = block_reduces(row_sums(2, n), ClangRenderer())
    for red in reduces(blocked):
        loops = [r for r in red.src[1:] if r.op is Ops.RANGE and r.arg[1] is AxisType.REDUCE]
        assert all(int(r.src[0].arg) <= BLOCK_ADD for r in loops), [int(r.src[0].arg) for r in loops]


def test_short_sums_and_other_reductions_stay_one_loop() -> None:
    ast = row_sums(2, SHORT_LOOP)
    assert block_reduces(ast, ClangRenderer()) is ast
    i, r = UOp.range(2, 0), UOp.range(4096, 1, AxisType.REDUCE)
    mx = UOp.param(1, f32, 2 * 4096).index(i * 4096 + r).load().reduce(r, arg=Ops.MAX)  # max is exact
    ast = UOp.sink(UOp.param(0, f32, 2).index(i).store(mx).end(i))
    assert block_reduces(ast, ClangRenderer()) is ast
    ints = UOp.param(1, dtypes.int32, 4096).index(r).load().reduce(r, arg=Ops.ADD)  # int sums are exact
    ast = UOp.sink(UOp.param(0, dtypes.int32, 1).index(UOp.const(dtypes.int32, 0)).store(ints))
    assert block_reduces(ast, ClangRenderer()) is ast


def test_unrolled_values_stay_in_the_innermost_block() -> None:
    blocked = block_reduces(row_sums(2, 4096, unroll=4), ClangRenderer())
    inner = [red for red in reduces(blocked) if not any(s.op is Ops.REDUCE for s in red.src[0].toposort())]
    assert inner and all(any(r.arg[1] is AxisType.UNROLL for r in red.src[1:]) for red in inner)
    got = evaluate(blocked, {0: [0.0] * 2, 1: [float(i) for i in range(2 * 4096)]})
    assert got == [sum(range(4096)), sum(range(4096, 2 * 4096))]  # exact in float64


def test_fused_multiply_add_chains_block_only_when_long() -> None:
    fma = ClangRenderer(fma=True)
    short = row_sums(2, SHORT_FMA_CHAIN, product=True)
    assert block_reduces(short, fma) is short  # a matmul's K loop of <= 4096 stays one chain (registers)
    long = block_reduces(row_sums(2, 4 * SHORT_FMA_CHAIN, product=True, unroll=4), fma)
    inner = [red for red in reduces(long) if not any(s.op is Ops.REDUCE for s in red.src[0].toposort())]
    assert [int(r.src[0].arg) for r in inner[0].src[1:] if r.arg[1] is AxisType.REDUCE] == [BLOCK_FMA // 4]
    n = 4 * SHORT_FMA_CHAIN
    rng = random.Random(0)
    a, b = [rng.random() for _ in range(2 * n)], [rng.random() for _ in range(n)]
    got = evaluate(long, {0: [0.0] * 2, 1: a, 2: b})
    want = [math.fsum(a[i * n + j] * b[j] for j in range(n)) for i in range(2)]
    assert got == pytest.approx(want, rel=1e-12)
    plain = row_sums(2, 4 * SHORT_FMA_CHAIN, product=True)
    assert len(reduces(block_reduces(plain, ClangRenderer(fma=False)))) > 1  # no fma: a plain sum of products


def test_loops_over_blocks_render_rolled() -> None:
    src = get_program(row_sums(2, 4096), ClangRenderer(), []).src
    assert "#pragma GCC unroll 1" in src
    assert "#pragma" not in get_program(row_sums(2, SHORT_LOOP), ClangRenderer(), []).src.replace(
        "#pragma STDC FP_CONTRACT", "")  # fmt: skip
    assert "#pragma GCC unroll" not in get_program(row_sums(2, 4096), PythonRenderer(), []).src


def test_only_the_innermost_loop_of_a_sum_is_blocked() -> None:
    """A sum over two long REDUCE loops (a convolution's weight gradient over 26x26 positions) splits its innermost
    loop into blocks once; the outer loop stays one loop of 26 (the REDUCEs a rewrite makes are not rewritten again:
    the rule table once re-blocked them, changing the generated code)."""
    i, ro, ri = UOp.range(2, 0), UOp.range(26, 1, AxisType.REDUCE), UOp.range(26, 2, AxisType.REDUCE)
    v = UOp.param(1, f32, 2 * 26 * 26).index(i * 676 + ro * 26 + ri).load().reduce(ro, ri, arg=Ops.ADD)
    ast = UOp.sink(UOp.param(0, f32, 2).index(i).store(v).end(i))
    blocked = block_reduces(ast, ClangRenderer())
    loops = sorted(int(u.src[0].arg) for u in blocked.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE)
    assert loops == [2, 2, 4, 4, 26], loops  # the inner 26: blocks of 4 over blocks of 4, tails of 2; the outer: one
    a = [random.Random(5).random() for _ in range(2 * 676)]
    got = evaluate(blocked, {0: [0.0] * 2, 1: a})
    assert got == pytest.approx([math.fsum(a[:676]), math.fsum(a[676:])], rel=1e-12)
