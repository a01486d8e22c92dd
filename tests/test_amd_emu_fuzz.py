"""Hypothesis-generated elementwise and reduce graphs: their kernels on the RDNA3 emulator match the PYTHON device.

Each example builds a random expression over one to three input tensors (float32, float16 or int32; arithmetic,
comparisons and selects, transcendentals, casts), optionally reduced (sum or max over an axis or everything), realizes
it on PYTHON while `record_calls` records every kernel call, and replays the calls on the emulator with
tg.runtime.amd.sim.differential's rules (bit for bit unless approximate instructions or reordered float reductions
are involved). The default run takes a few derandomized examples; 200 more run in CI's emulator stage under --full.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("llvmlite")
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tg.runtime.amd.sim.differential import record_calls, replay
from tg.tensor import Tensor, dtypes

Expr = Any  # nested tuples: ("in", k) | ("const", v) | (op, *args)

FLOAT_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "neg": lambda x: -x, "abs": lambda x: x.abs(), "relu": lambda x: x.relu(), "exp2": lambda x: x.exp2(),
    "log2": lambda x: x.log2(), "sqrt": lambda x: x.sqrt(), "recip": lambda x: x.reciprocal(),
    "sin": lambda x: x.sin(), "floor": lambda x: x.floor(), "trunc": lambda x: x.trunc(),
    "square": lambda x: x.square(), "to_int": lambda x: x.cast(dtypes.int32).cast(x.dtype),
}  # fmt: skip
INT_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "neg": lambda x: -x, "abs": lambda x: x.abs(), "to_float": lambda x: x.cast(dtypes.float32).cast(x.dtype),
}  # fmt: skip
BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "max": lambda a, b: a.maximum(b), "min": lambda a, b: a.minimum(b),
    "select": lambda a, b: (a < b).where(a, b), "eq": lambda a, b: (a == b).where(b, a * 2),
}  # fmt: skip
FLOAT_BINARY = {**BINARY, "div": lambda a, b: a / b}
INT_BINARY = {**BINARY, "idiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "and": lambda a, b: a & b,
              "xor": lambda a, b: a ^ b}  # fmt: skip
DTYPES = {"float32": (dtypes.float32, np.float32), "float16": (dtypes.float16, np.float16),
          "int32": (dtypes.int32, np.int32)}  # fmt: skip


def expressions(kind: str, n_inputs: int) -> st.SearchStrategy[Expr]:
    unary, binary = (INT_UNARY, INT_BINARY) if kind == "int32" else (FLOAT_UNARY, FLOAT_BINARY)
    consts = st.integers(-5, 5) if kind == "int32" else st.sampled_from([0.0, -0.0, 0.5, 1.0, -3.0, 1e-3, 100.0])
    leaves = st.one_of(st.tuples(st.just("in"), st.integers(0, n_inputs - 1)), st.tuples(st.just("const"), consts))

    def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        return st.one_of(st.tuples(st.sampled_from(sorted(unary)), children),
                         st.tuples(st.sampled_from(sorted(binary)), children, children))  # fmt: skip

    return extend(st.recursive(leaves, extend, max_leaves=5))  # an op at the root: the graph always has a kernel


def build(expr: Expr, inputs: list[Tensor], kind: str) -> Tensor:
    op = expr[0]
    if op == "in":
        return inputs[expr[1]]
    if op == "const":
        return inputs[0] * 0 + expr[1]  # a constant of the inputs' shape and dtype
    if len(expr) == 2:
        return (INT_UNARY if kind == "int32" else FLOAT_UNARY)[op](build(expr[1], inputs, kind))
    fn = (INT_BINARY if kind == "int32" else FLOAT_BINARY)[op]
    return fn(build(expr[1], inputs, kind), build(expr[2], inputs, kind))


@st.composite
def graphs(draw: st.DrawFn) -> tuple[str, tuple[int, int], int, Expr, str, int]:
    kind = draw(st.sampled_from(sorted(DTYPES)))
    shape = (draw(st.integers(1, 9)), draw(st.integers(1, 40)))
    n_inputs = draw(st.integers(1, 3))
    return kind, shape, n_inputs, draw(expressions(kind, n_inputs)), draw(st.sampled_from(["none", "sum", "max"])), \
        draw(st.sampled_from([0, 1, -1])), draw(st.integers(0, 2**31))  # type: ignore[return-value]  # fmt: skip


def check(case: tuple[Any, ...]) -> None:
    kind, shape, n_inputs, expr, reduce, axis, seed = case
    npdt = DTYPES[kind][1]
    rng = np.random.default_rng(seed)
    if kind == "int32":
        arrays = [rng.integers(-100, 100, shape).astype(npdt) for _ in range(n_inputs)]
    else:
        arrays = [(rng.standard_normal(shape) * 4).astype(npdt) for _ in range(n_inputs)]
        arrays[0].flat[0] = np.nan if rng.random() < 0.3 else arrays[0].flat[0]  # sometimes a NaN
    with record_calls() as rec:
        out = build(expr, [Tensor(a, device="PYTHON") for a in arrays], kind)
        if reduce != "none":
            out = out.sum(axis=None if axis == -1 else axis) if reduce == "sum" else \
                out.max(axis=None if axis == -1 else axis)  # fmt: skip
        out.realize()
    failures, counts = replay(rec.calls)
    assume(counts["calls"] >= 1)  # a graph that folded away to an input runs no kernel: nothing to compare
    assert not failures, f"{expr} {reduce} {kind}{shape}:\n" + "\n".join(failures)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(graphs())
def test_random_graphs_on_the_emulator_match_python(case: tuple[Any, ...]) -> None:
    check(case)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TG_EMU_DIFF") != "full", reason="runs in CI's emulator stage under --full "
                    "(TG_EMU_DIFF=full)")  # fmt: skip
@settings(max_examples=200, deadline=None)
@given(graphs())
def test_many_random_graphs_on_the_emulator_match_python(case: tuple[Any, ...]) -> None:
    check(case)
