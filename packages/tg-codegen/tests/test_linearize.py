"""The linearizer: loops nest correctly, every node sits inside the loops it depends on and no others."""

from __future__ import annotations

import pytest

from tg.codegen.linearize import LinearizeError, linearize
from tg.codegen.lower import lower_kernel
from tg.codegen.lower.structure import open_ranges
from tg.codegen.render.cstyle import ClangRenderer
from tg.ir.dtype import dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.spec import program_spec, verify
from tg.ir.uop import UOp

f32, i32 = dtypes.float32, dtypes.int32


def check_linear(uops: list[UOp]) -> None:
    """Sources come first; RANGE/END are balanced; each node is exactly inside the loops it depends on."""
    seen: set[UOp] = set()
    stack: list[UOp] = []
    live = open_ranges(uops[-1])
    for u in uops:
        assert all(s in seen for s in u.src), f"{u.op} before its sources"
        seen.add(u)
        if u.op is Ops.RANGE:
            assert live[u] - {u} <= set(stack)
            stack.append(u)
        elif u.op is Ops.END:
            assert stack and stack.pop() is u.src[1], "END does not close the innermost loop"
        else:
            assert live[u] <= set(stack), f"{u.op} outside a loop it depends on"
            innermost = stack[-1] if stack else None
            assert innermost is None or innermost in live[u] or u.op in (Ops.GROUP,), f"{u.op} not hoisted"
    assert not stack and uops[-1].op is Ops.SINK


def lin(ast: UOp) -> list[UOp]:
    uops = linearize(lower_kernel(ast, ClangRenderer()))
    check_linear(uops)
    assert verify(uops, program_spec)
    return uops


def test_elementwise_2d() -> None:
    r0, r1 = UOp.range(3, 0), UOp.range(4, 1)
    idx = r0 * 4 + r1
    uops = lin(UOp.sink(UOp.param(0, f32, 12).index(idx).store(UOp.param(1, f32, 12).index(idx).load()).end(r0, r1)))
    loops = [u.arg[0] for u in uops if u.op is Ops.RANGE]
    assert loops == [0, 1]  # lower axis ids outside


def test_loop_invariant_load_is_hoisted() -> None:
    # b[r0] does not depend on r1: it is loaded once per r0, outside the r1 loop
    r0, r1 = UOp.range(3, 0), UOp.range(4, 1)
    val = UOp.param(1, f32, 12).index(r0 * 4 + r1).load() * UOp.param(2, f32, 3).index(r0).load()
    uops = lin(UOp.sink(UOp.param(0, f32, 12).index(r0 * 4 + r1).store(val).end(r0, r1)))
    pos = {u: i for i, u in enumerate(uops)}
    inner = next(u for u in uops if u.op is Ops.RANGE and u.arg[0] == 1)
    b_load = next(u for u in uops if u.op is Ops.LOAD and u.src[0].src[0].arg == 2)
    assert pos[b_load] < pos[inner]


def test_reduce_nesting_and_order() -> None:
    ro, rr = UOp.range(4, 0), UOp.range(8, 1, AxisType.REDUCE)
    red = UOp.param(1, f32, 32).index(ro * 8 + rr).load().reduce(rr, arg=Ops.MAX)
    uops = lin(UOp.sink(UOp.param(0, f32, 4).index(ro).store(red + UOp.const(f32, 1.0)).end(ro)))
    kinds = [u.op for u in uops if u.op in (Ops.RANGE, Ops.END, Ops.STORE)]
    # init store, reduce loop with its update store, output store, closing the output loop
    assert kinds == [Ops.RANGE, Ops.STORE, Ops.RANGE, Ops.STORE, Ops.END, Ops.STORE, Ops.END]


def test_two_sequential_reductions() -> None:
    ro, r1, r2 = UOp.range(2, 0), UOp.range(6, 1, AxisType.REDUCE), UOp.range(6, 2, AxisType.REDUCE)
    a = UOp.param(1, f32, 12)
    mx = a.index(ro * 6 + r1).load().reduce(r1, arg=Ops.MAX)
    s = (a.index(ro * 6 + r2).load() - mx).reduce(r2)
    uops = lin(UOp.sink(UOp.param(0, f32, 2).index(ro).store(s).end(ro)))
    ranges = [u.arg[0] for u in uops if u.op is Ops.RANGE]
    assert ranges == [0, 1, 2]


def test_params_first_in_slot_order() -> None:
    r = UOp.range(4, 0)
    val = UOp.param(2, f32, 4).index(r).load() + UOp.param(1, f32, 4).index(r).load()
    uops = lin(UOp.sink(UOp.param(0, f32, 4).index(r).store(val).end(r)))
    assert [u.arg for u in uops[:3]] == [0, 1, 2] and all(u.op is Ops.PARAM for u in uops[:3])


def test_unclosed_range_is_an_error() -> None:
    r = UOp.range(4, 0)
    sink = UOp.sink(UOp.param(0, f32, 4).index(r).store(UOp.const(f32, 0.0)))
    with pytest.raises(LinearizeError, match="never closed"):
        linearize(sink)


def test_needs_a_sink() -> None:
    with pytest.raises(LinearizeError, match="needs a SINK"):
        linearize(UOp.const(f32, 0.0))


def test_multi_range_end_must_be_split_first() -> None:
    r0, r1 = UOp.range(2, 0), UOp.range(2, 1)
    sink = UOp.sink(UOp.param(0, f32, 4).index(r0 * 2 + r1).store(UOp.const(f32, 0.0)).end(r0, r1))
    with pytest.raises(LinearizeError, match="exactly one range"):
        linearize(sink)
