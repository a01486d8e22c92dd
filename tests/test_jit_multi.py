"""A jitted data-parallel training step on CPU:0/CPU:1 equals the eager one (sharded inputs and outputs)."""

from __future__ import annotations

import pickle

import numpy as np

from tg.codegen.schedule import stats
from tg.ir import Ops
from tg.tensor import Tensor, TinyJit

DEVS = ("CPU", "CPU:1")


def _setup() -> tuple[Tensor, Tensor, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w1 = Tensor(rng.standard_normal((4, 3)).astype(np.float32)).shard(DEVS)
    w2 = Tensor(rng.standard_normal((3, 2)).astype(np.float32)).shard(DEVS)
    w1.requires_grad = w2.requires_grad = True
    Tensor.realize(w1, w2)
    xs = rng.standard_normal((5, 8, 4)).astype(np.float32)
    ys = rng.standard_normal((5, 8, 2)).astype(np.float32)
    return w1, w2, xs, ys


def _step(w1: Tensor, w2: Tensor, x: Tensor, y: Tensor) -> Tensor:
    loss = ((x @ w1).relu() @ w2 - y).square().mean()
    g1, g2 = loss.gradient(w1, w2)
    w1.assign(w1.detach() - 0.1 * g1)
    w2.assign(w2.detach() - 0.1 * g2)
    Tensor.realize(loss, w1, w2)
    return loss


def test_jitted_data_parallel_step_equals_eager() -> None:
    e1, e2, xs, ys = _setup()
    eager = [
        _step(e1, e2, Tensor(x).shard(DEVS, axis=0), Tensor(y).shard(DEVS, axis=0)).item()
        for x, y in zip(xs, ys, strict=True)
    ]
    j1, j2, _, _ = _setup()
    runs = 0

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        nonlocal runs
        runs += 1
        return _step(j1, j2, x, y)

    jitted = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        xt, yt = Tensor(x).shard(DEVS, axis=0).realize(), Tensor(y).shard(DEVS, axis=0).realize()
        calls = stats.calls
        loss = step(xt, yt)
        if i >= 2:
            assert stats.calls == calls, "a replay must not schedule"
        jitted.append(loss.item())
    assert runs == 2
    np.testing.assert_allclose(jitted, eager, rtol=1e-6)
    np.testing.assert_allclose(j1.numpy(), e1.numpy(), atol=1e-6)
    np.testing.assert_allclose(j2.numpy(), e2.numpy(), atol=1e-6)


def test_sharded_outputs_and_pickled_jit() -> None:
    f = TinyJit(lambda x: (x * 2 + 1).realize())
    for i in range(3):
        out = f(Tensor(np.full((4, 2), i, np.float32)).shard(DEVS, axis=0))
        assert out.uop.op is Ops.MULTI and out.uop.arg == 0 and out.devices == DEVS
        np.testing.assert_array_equal(out.numpy(), np.full((4, 2), 2 * i + 1))
    loaded = pickle.loads(pickle.dumps(f))
    out = loaded(Tensor(np.full((4, 2), 5, np.float32)).shard(DEVS, axis=0))
    np.testing.assert_array_equal(out.numpy(), np.full((4, 2), 11))


def test_jit_with_uneven_sharded_inputs_and_outputs() -> None:
    # 7 rows over 3 devices (3 + 3 + 1): inputs and outputs are uneven sharded tensors, replays take new ones
    devs = ("CPU", "CPU:1", "CPU:2")
    rng = np.random.default_rng(4)
    w_np = rng.standard_normal((3, 5)).astype(np.float32)
    w = Tensor(w_np).shard(devs).realize()
    runs = 0

    @TinyJit
    def f(x: Tensor) -> tuple[Tensor, Tensor]:
        nonlocal runs
        runs += 1
        return (x @ w).relu().realize(), x.sum(0).realize()

    for i in range(5):
        x_np = rng.standard_normal((7, 3)).astype(np.float32)
        x = Tensor(x_np).shard(devs, axis=0).realize()
        calls = stats.calls
        rows, total = f(x)
        if i >= 2:
            assert stats.calls == calls, "a replay must not schedule"
        assert rows.shape == (7, 5) and rows.device == devs
        np.testing.assert_allclose(rows.numpy(), np.maximum(x_np @ w_np, 0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(total.numpy(), x_np.sum(0), rtol=1e-5, atol=1e-6)
    assert runs == 2
