"""Issue 27, item 4: constant folding of floats computes exactly what the kernel would, operation by operation, in
the dtype: float constants hold values of their dtype, and float sums/products are never regrouped."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tg.ir import Ops, UOp, dtypes, graph_rewrite
from tg.ir.symbolic import symbolic, symbolic_simple


def _fold(u: UOp) -> UOp:
    return graph_rewrite(u, symbolic)


def test_float32_constant_holds_a_float32_value() -> None:
    c = UOp.const(dtypes.float32, 1.0001)
    assert c.arg == float(np.float32(1.0001)) and c.arg != 1.0001
    assert UOp.const(dtypes.float64, 1.0001).arg == 1.0001
    assert UOp.const(dtypes.float16, 0.1).arg == float(np.float16(0.1))
    assert UOp.const(dtypes.float32.vec(2), (0.1, 0.2)).arg == (float(np.float32(0.1)), float(np.float32(0.2)))
    assert UOp.const(dtypes.float32, 1e39).arg == float("inf")  # overflow rounds to inf, as a float32 store does


def test_step_by_step_chain_equals_numpy_float32() -> None:
    x = UOp.const(dtypes.float32, 1.0)
    ref = np.float32(1.0)
    for _ in range(3000):
        x = _fold(x * 1.0001 + 0.0001)
        ref = np.float32(ref * np.float32(1.0001)) + np.float32(0.0001)
    assert x.op is Ops.CONST and x.arg == float(ref)  # 1.6998134; the old folding gave 1.6997367


def test_float_sums_are_not_regrouped() -> None:
    x = UOp.variable("i", 0, 10).cast(dtypes.float32)
    e = (x + 1.0) + 1.0  # at x = 2**24 this is 2**24 in float32, x + 2.0 is 2**24 + 2
    assert _fold(e).src[0].op is Ops.ADD and _fold(e).src[1].arg == 1.0
    m = (x * 3.0) * 5.0
    assert _fold(m).src[0].op is Ops.MUL  # not x * 15.0
    i = UOp.variable("j", 0, 10)
    assert _fold((i + 1) + 1) is i + 2  # ints wrap: regrouping is exact
    assert _fold(x.maximum(1.0).maximum(2.0)) is x.maximum(2.0)  # max is exact in any dtype


@settings(max_examples=200, deadline=None)
@given(
    st.floats(-1e6, 1e6, width=32),
    st.floats(-1e6, 1e6, width=32),
    st.sampled_from(["add", "mul", "sub", "div"]),
    st.sampled_from(["float32", "float16"]),
)
def test_folding_one_op_rounds_like_numpy(a: float, b: float, op: str, dt: str) -> None:
    dtype, npt = getattr(dtypes, dt), getattr(np, dt)
    x, y = UOp.const(dtype, a), UOp.const(dtype, b)
    if op == "div" and y.arg == 0:
        return
    expr = {"add": x + y, "mul": x * y, "sub": x - y, "div": x / y}[op]
    folded = graph_rewrite(expr, symbolic_simple)
    with np.errstate(all="ignore"):
        na, nb = npt(x.arg), npt(y.arg)
        ref = {"add": na + nb, "mul": na * nb, "sub": na - nb, "div": na / nb}[op]
    assert folded.op is Ops.CONST
    assert folded.arg == float(ref) or (np.isnan(ref) and folded.arg != folded.arg)  # inf - inf in float16
