"""The tiny suite (specs/amd.md section 8): a quick, device-independent check of a device end to end.

Everything runs on the default device (`DEV`: `DEV=CPU:LLVM pytest tests/test_tiny.py`, `DEV=CL`, `DEV=PYTHON`, the
AMD configurations later) and is compared with numpy: constants, copies both ways, elementwise ops on 2^20 elements,
cat, a sum, eye, matmuls (float32, float16, matrix-vector), seeded random numbers against the CPU device, a TinyJit
of four kernels replayed, BEAM=1 on one kernel, symbolic shapes (one compile for three values), and a two-layer MLP
forward and backward. On the PYTHON interpreter the 2^20-element cases shrink to 2^14.
"""

from __future__ import annotations

import numpy as np
import pytest

from tg.ir.helpers import Context
from tg.runtime.device import Device
from tg.runtime.engine import method_cache
from tg.tensor import Tensor, TinyJit, Variable, dtypes


@pytest.fixture(scope="module")
def dev() -> str:
    """The device under test: the default device (DEV)."""
    return Device.DEFAULT


def _big(dev: str) -> int:
    return 1 << 14 if dev.startswith("PYTHON") else 1 << 20


def test_const(dev: str) -> None:
    np.testing.assert_array_equal(Tensor.full((4, 5), 3.5, device=dev).numpy(), np.full((4, 5), 3.5, np.float32))
    np.testing.assert_array_equal(Tensor.full((3,), -7, dtype=dtypes.int32, device=dev).numpy(), [-7, -7, -7])


def test_copy_both_ways(dev: str) -> None:
    x = np.arange(1000, dtype=np.float32) * 0.5
    t = Tensor(x, device=dev).realize()
    assert t.device == dev
    np.testing.assert_array_equal(t.numpy(), x)
    back = t.to("CPU").to(dev).realize()
    np.testing.assert_array_equal(back.numpy(), x)


def test_elu(dev: str) -> None:
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    np.testing.assert_allclose(Tensor(x, device=dev).elu().numpy(), np.where(x > 0, x, np.expm1(x)), atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_plus_big(dev: str, dtype: type) -> None:
    n = _big(dev)
    a = (np.arange(n) % 1000).astype(dtype)
    b = (np.arange(n)[::-1] % 77).astype(dtype)
    np.testing.assert_array_equal((Tensor(a, device=dev) + Tensor(b, device=dev)).numpy(), a + b)


def test_cat(dev: str) -> None:
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(9, dtype=np.float32).reshape(3, 3)
    np.testing.assert_array_equal(Tensor(a, device=dev).cat(Tensor(b, device=dev)).numpy(), np.concatenate([a, b]))


def test_sum_of_256(dev: str) -> None:
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    np.testing.assert_allclose(Tensor(x, device=dev).sum().item(), x.astype(np.float64).sum(), rtol=1e-5)


def test_eye(dev: str) -> None:
    np.testing.assert_array_equal(Tensor.eye(7, device=dev).numpy(), np.eye(7, dtype=np.float32))


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-4), (np.float16, 2e-2)])
def test_gemm_64(dev: str, dtype: type, tol: float) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 64)).astype(dtype), rng.standard_normal((64, 64)).astype(dtype)
    got = (Tensor(a, device=dev) @ Tensor(b, device=dev)).numpy().astype(np.float32)
    np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=tol, atol=tol * 8)


def test_gemv_64(dev: str) -> None:
    rng = np.random.default_rng(2)
    a, v = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    np.testing.assert_allclose((Tensor(a, device=dev) @ Tensor(v, device=dev)).numpy(), a @ v, rtol=1e-4, atol=1e-4)


def test_seeded_random_matches_cpu(dev: str) -> None:
    Tensor.manual_seed(1234)
    here = Tensor.rand(300, device=dev).numpy()
    Tensor.manual_seed(1234)
    cpu = Tensor.rand(300, device="CPU").numpy()
    np.testing.assert_array_equal(here, cpu)
    assert 0 <= here.min() and here.max() < 1 and here.std() > 0.2


def test_jit_of_four_kernels_over_five_calls(dev: str) -> None:
    w = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4), device=dev).realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        a = (x * 2).contiguous()
        b = (a @ w).contiguous()
        c = (b + a).relu().contiguous()
        return c.sum(1).realize()

    wn = np.arange(16, dtype=np.float32).reshape(4, 4)
    for i in range(5):
        xn = np.full((4, 4), i - 2.0, np.float32) + np.eye(4, dtype=np.float32)
        a = xn * 2
        np.testing.assert_allclose(step(Tensor(xn, device=dev).realize()).numpy(), np.maximum(a @ wn + a, 0).sum(1))
    assert step.captured is not None and step.captured.kernel_count == 4


def test_beam_on_one_kernel(dev: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IGNORE_BEAM_CACHE", "1")  # search, even when an earlier run cached the answer
    monkeypatch.setenv("BEAM_TIME", "2")  # seconds: enough for a few rounds on this small kernel
    x = np.random.default_rng(3).standard_normal((16, 32)).astype(np.float32)
    with Context(BEAM=1):
        got = (Tensor(x, device=dev) * 3).sum(1).numpy()
    np.testing.assert_allclose(got, (x * 3).sum(1), rtol=1e-5, atol=1e-5)


def test_symbolic_slice_compiles_once(dev: str) -> None:
    x = np.arange(40, dtype=np.float32).reshape(4, 10)
    t, var = Tensor(x, device=dev).realize(), Variable("n", 1, 10)
    compiled = []
    for n in (3, 5, 7):
        np.testing.assert_array_equal((t[:, : var.bind(n)] + 1).numpy(), x[:, :n] + 1)
        compiled.append({k for k in method_cache if k[0] == str(Device.target(dev))})
    assert compiled[0] and compiled[0] == compiled[1] == compiled[2]


def test_symbolic_reduce(dev: str) -> None:
    x = np.arange(40, dtype=np.float32).reshape(4, 10)
    t, var = Tensor(x, device=dev).realize(), Variable("n", 1, 10)
    for n in (2, 9):
        np.testing.assert_allclose(t[:, : var.bind(n)].sum(1).numpy(), x[:, :n].sum(1))


def test_mlp_forward_and_backward(dev: str) -> None:
    rng = np.random.default_rng(4)
    xn, w1n, w2n = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((8, 16), (16, 32), (32, 4)))
    x = Tensor(xn, device=dev)
    w1, w2 = Tensor(w1n, device=dev, requires_grad=True), Tensor(w2n, device=dev, requires_grad=True)
    loss = ((x @ w1).relu() @ w2).square().mean()
    loss.backward()
    h = xn @ w1n
    r = np.maximum(h, 0)
    y = r @ w2n
    dy = 2 * y / y.size
    dw2 = r.T @ dy
    dw1 = xn.T @ ((dy @ w2n.T) * (h > 0))
    np.testing.assert_allclose(loss.item(), (y**2).mean(), rtol=1e-5)
    assert w1.grad is not None and w2.grad is not None
    np.testing.assert_allclose(w2.grad.numpy(), dw2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w1.grad.numpy(), dw1, rtol=1e-4, atol=1e-5)
