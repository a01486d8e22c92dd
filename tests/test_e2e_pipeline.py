"""Tensor -> schedule -> kernels -> results, end to end, on CPU and on the PYTHON reference device."""

import numpy as np
import pytest

from tg.tensor import Context, Device, GlobalCounters, Tensor, dtypes


def run_counted(t: Tensor) -> tuple[np.ndarray, int]:
    before = GlobalCounters.kernel_count
    out = t.numpy()
    return out, GlobalCounters.kernel_count - before


def test_mlp_forward(device, rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w1, b1 = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    w2, b2 = rng.standard_normal((16, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    tx, tw1, tb1, tw2, tb2 = (Tensor(a, device=device) for a in (x, w1, b1, w2, b2))
    out, n = run_counted(((tx @ tw1 + tb1).relu() @ tw2 + tb2).softmax(-1))
    h = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    e = np.exp(h - h.max(-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
    assert n <= 5


def test_fused_elementwise_and_reduce_counts(device, rng):
    a, b, c = (Tensor(rng.standard_normal((6, 5)).astype(np.float32), device=device).realize() for _ in range(3))
    out, n = run_counted((a + b) * c)
    assert n == 1
    out, n = run_counted((a * b).sum())
    assert n == 1
    np.testing.assert_allclose(out, (a.numpy() * b.numpy()).sum(), rtol=1e-5)
    out, n = run_counted((a * b).sum(1) + 1)
    assert n == 1


def test_same_results_on_both_devices(device, rng):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    graph = lambda t: ((t.permute(2, 0, 1)[1:, ::-1] * 2).exp().sum(2) / 3).max(0)
    want = graph(Tensor(a, device="CPU")).numpy()
    np.testing.assert_allclose(graph(Tensor(a, device=device)).numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("dt", ["float32", "float16", "int32", "int64", "bool"])
def test_dtypes_roundtrip_through_kernels(dt, device, rng):
    a = (rng.standard_normal((3, 7)) * 5).astype(dt)
    t = Tensor(a, device=device)
    np.testing.assert_array_equal(t.flip(1).numpy(), a[:, ::-1])
    if dt != "bool":
        np.testing.assert_allclose(
            (t * 2).numpy().astype(np.float64), (a * np.asarray(2, dt)).astype(np.float64), rtol=1e-3
        )


def test_cross_device_copy(device, rng):
    a = rng.standard_normal(10).astype(np.float32)
    other = "PYTHON" if device == "CPU" else "CPU"
    moved = (Tensor(a, device=device) + 1).to(other) * 2
    assert moved.device == other
    np.testing.assert_allclose(moved.numpy(), (a + 1) * 2, rtol=1e-6)


def test_default_device_follows_dev(device):
    with Context(DEV=device):
        assert Device.DEFAULT == device
        t = Tensor([1, 2, 3])
        assert t.device == device
        assert (t * 2).tolist() == [2, 4, 6]


def test_assign_loop(device):
    acc = Tensor.zeros(4, device=device).contiguous().realize()
    for i in range(3):
        acc.assign(acc + i).realize()
    np.testing.assert_array_equal(acc.numpy(), [3, 3, 3, 3])
    assert acc.dtype is dtypes.float32


def test_unknown_device_lists_available():
    with pytest.raises(ValueError, match=r"available devices:.*CPU"):
        Tensor([1.0], device="NOPE")


@pytest.mark.parametrize(
    "name,kernels",
    [("sum_then_max", 1), ("mean_of_mean", 1), ("matmul_sum", 1), ("log_softmax", 3), ("argmax", 2), ("variance", 2)],
)
def test_reduction_patterns(name, kernels, device, rng):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    cases = {
        "sum_then_max": (lambda t: t.sum(2).max(1), lambda x: x.sum(2).max(1)),
        "mean_of_mean": (lambda t: t.mean(2).mean(0), lambda x: x.mean(2).mean(0)),
        "matmul_sum": (lambda t: (t[0] @ t[1].T).sum(), lambda x: (x[0] @ x[1].T).sum()),
        "log_softmax": (
            lambda t: t.log_softmax(2),
            lambda x: x - x.max(2, keepdims=True) - np.log(np.exp(x - x.max(2, keepdims=True)).sum(2, keepdims=True)),
        ),
        "argmax": (lambda t: t.argmax(1), lambda x: x.argmax(1)),
        "variance": (lambda t: ((t - t.mean(1, keepdim=True)) ** 2).mean(1), lambda x: x.var(1)),
    }
    ours, ref = cases[name]
    t = Tensor(a, device=device).realize()
    out, n = run_counted(ours(t))
    np.testing.assert_allclose(out, ref(a), rtol=1e-4, atol=1e-5)
    assert n == kernels


def test_long_elementwise_chain_is_one_kernel(device):
    # 600 fused adds once nested deeper than the C compiler's bracket limit; the renderer names deep values.
    x = Tensor(np.arange(8, dtype=np.float32), device=device).realize()
    y = x
    for i in range(600):
        y = y + 1 if i % 2 else y * 1.0
    out, n = run_counted(y)
    assert n == 1
    np.testing.assert_array_equal(out, np.arange(8, dtype=np.float32) + 300)
