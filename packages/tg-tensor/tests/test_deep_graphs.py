"""Graphs thousands of nodes deep: every pass (building, autograd, @function, scheduling, the expander and the rest of
codegen, pickling, printing) walks them iteratively, so no depth hits Python's recursion limit, and their cost grows
linearly. These hold at every vector width (the CI's `DEV=CPU:CLANG:x86-64-v2`/`-v3` passes run them again); the
longest versions are marked slow (`bash .ci/run --full`)."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest

from tg.ir import Context, GlobalCounters, Ops
from tg.tensor import Tensor, TinyJit, function


def _kernels_of(*tensors: Tensor) -> int:
    before = GlobalCounters.kernel_count
    Tensor.realize(*tensors)
    return GlobalCounters.kernel_count - before


def _mul_add_chain(x: Tensor, n: int) -> Tensor:
    for i in range(n):
        x = x * 1.0001 + 0.0001 if i % 2 else x - 0.0003
    return x


def _mul_add_chain_numpy(x: np.ndarray, n: int) -> np.ndarray:
    for i in range(n):
        x = x * np.float32(1.0001) + np.float32(0.0001) if i % 2 else x - np.float32(0.0003)
    return x


def test_the_recursion_limit_is_the_default() -> None:
    assert sys.getrecursionlimit() <= 1000  # Python's default: nothing raised it to make the tests below pass


def test_200_mul_adds_on_a_realized_input_are_one_kernel(device: str, rng: np.random.Generator) -> None:
    # raised RecursionError in the expander (three frames per node) once 8-wide vectors applied
    a = rng.standard_normal(64).astype(np.float32)
    x = Tensor(a, device=device).realize()
    for _ in range(200):
        x = x * 1.0001 + 0.0001
    assert _kernels_of(x) == 1
    ref = a
    for _ in range(200):
        ref = ref * np.float32(1.0001) + np.float32(0.0001)
    np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [3000, pytest.param(10_000, marks=pytest.mark.slow)])
def test_a_long_elementwise_chain_fuses_into_one_kernel(n: int, device: str, rng: np.random.Generator) -> None:
    if device == "PYTHON" and n > 3000:
        pytest.skip("the interpreter runs the 3000-op version")
    a = rng.standard_normal(64).astype(np.float32)
    y = _mul_add_chain(Tensor(a, device=device).realize(), n)
    assert _kernels_of(y) == 1
    np.testing.assert_allclose(y.numpy(), _mul_add_chain_numpy(a, n), rtol=1e-4, atol=1e-4)


def _tanh_chain_gradients(x0: np.ndarray, ws: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """d sum(x_n) / d x0 and / d w_i for x_i = tanh(x_{i-1} * w_i), in float64."""
    xs = [x0.astype(np.float64)]
    for w in ws:
        xs.append(np.tanh(xs[-1] * w))
    g = np.ones_like(xs[0])
    grads_w: list[np.ndarray] = [np.zeros(0)] * len(ws)
    for i in reversed(range(len(ws))):
        local = g * (1 - xs[i + 1] ** 2)
        grads_w[i] = local * xs[i]
        g = local * ws[i]
    return g, grads_w


@pytest.mark.parametrize("layers", [100, pytest.param(2000, marks=pytest.mark.slow)])
def test_backward_through_a_deep_tanh_chain(layers: int, device: str, rng: np.random.Generator) -> None:
    if device == "PYTHON" and layers > 200:
        pytest.skip("the interpreter runs the 100-layer version")
    a = rng.standard_normal(16).astype(np.float32)
    w_np = [rng.uniform(0.9, 1.3, 16).astype(np.float32) for _ in range(layers)]
    x0 = Tensor(a, device=device, requires_grad=True)
    ws = [Tensor(w, device=device, requires_grad=True) for w in w_np]
    x = x0
    for w in ws:
        x = (x * w).tanh()
    x.sum().backward()
    assert x0.grad is not None and all(w.grad is not None for w in ws)
    Tensor.realize(x0.grad, *[w.grad for w in ws])  # type: ignore[misc]
    ref_x0, ref_ws = _tanh_chain_gradients(a, w_np)
    np.testing.assert_allclose(x0.grad.numpy(), ref_x0, rtol=2e-3, atol=1e-6)
    for i in (0, layers // 2, layers - 1):
        np.testing.assert_allclose(ws[i].grad.numpy(), ref_ws[i], rtol=2e-3, atol=1e-6)  # type: ignore[union-attr]


def test_a_function_called_1000_times_in_sequence(device: str) -> None:
    @function
    def step(x: Tensor, w: Tensor) -> Tensor:
        return x * w + 1.0

    x = Tensor(np.linspace(-1, 1, 8, dtype=np.float32), device=device)
    w = Tensor(np.full(8, 0.999, np.float32), device=device)
    for _ in range(1000):
        x = step(x, w)
    assert step.trace_count == 1
    assert x.uop.op is Ops.GETTUPLE  # a call over the previous call's result, 1000 deep
    ref = np.linspace(-1, 1, 8, dtype=np.float32)
    for _ in range(1000):
        ref = ref * np.float32(0.999) + np.float32(1.0)
    np.testing.assert_allclose(x.numpy(), ref, rtol=1e-4)


def test_tinyjit_captures_and_replays_a_1000_op_function(device: str) -> None:
    @TinyJit
    def step(x: Tensor) -> Tensor:
        return _mul_add_chain(x, 1000).realize()

    for k in range(3):  # trace, capture, replay
        a = np.linspace(-1, 1, 16, dtype=np.float32) + k
        out = step(Tensor(a, device=device).realize())
        np.testing.assert_allclose(out.numpy(), _mul_add_chain_numpy(a, 1000), rtol=1e-4, atol=1e-4)


def test_a_10000_deep_graph_pickles_and_prints(device: str) -> None:
    x = Tensor(np.arange(8, dtype=np.float32), device=device).realize()
    y = _mul_add_chain(x, 10_000)
    loaded = pickle.loads(pickle.dumps(y.uop))
    assert loaded.op is y.uop.op and len(loaded.toposort()) == len(y.uop.toposort())
    assert loaded.buf_uop is not x.uop.buf_uop  # a load never aliases the original's buffers
    assert repr(y.uop).count("\n") > 10_000 and len(y.uop.key) == 32


@pytest.mark.parametrize("n", [3000, pytest.param(10_000, marks=pytest.mark.slow)])
def test_pickling_a_deep_lazy_tensor_realizes_it(n: int, device: str) -> None:
    if device == "PYTHON" and n > 3000:
        pytest.skip("the interpreter runs the 3000-op version")
    a = np.linspace(-2, 2, 8, dtype=np.float32)
    y = pickle.loads(pickle.dumps(_mul_add_chain(Tensor(a, device=device).realize(), n)))
    np.testing.assert_allclose(y.numpy(), _mul_add_chain_numpy(a, n), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("noopt", [0, 1])
def test_3000_pending_assigns(noopt: int, device: str) -> None:
    # failed in the scheduler's assign_target (recursive) even with NOOPT=1
    t = Tensor.zeros(16, device=device).contiguous().realize()
    with Context(NOOPT=noopt):
        for _ in range(3000):
            t.assign(t + 1)
        np.testing.assert_array_equal(t.numpy(), np.full(16, 3000, np.float32))
