"""Multi-device tensors over CPU:0..3: sharding, per-op rules, resharding, allreduce (naive and ring), training."""

from __future__ import annotations

import numpy as np
import pytest

from tg.ir import Ops
from tg.ir.helpers import Context
from tg.runtime import engine
from tg.runtime.engine import BufferCopy
from tg.tensor import Device, Tensor
from tg.tensor.multi import shard_axis


def devices(n: int) -> tuple[str, ...]:
    return ("CPU", *[f"CPU:{i}" for i in range(1, n)])


class _Recorder:
    def __init__(self) -> None:
        self.items: list = []

    def add(self, ei: object) -> None:
        self.items.append(ei)


def copies_while(fn) -> tuple[int, object]:  # type: ignore[no-untyped-def]
    """(number of buffer copies run, result) while `fn()` realizes."""
    rec = _Recorder()
    engine.capturing.append(rec)
    try:
        out = fn()
    finally:
        engine.capturing.remove(rec)
    return sum(isinstance(ei.runner, BufferCopy) for ei in rec.items), out


def arr(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 5


SLOW = pytest.mark.slow
# device counts: 2 and 3 (an even and an odd ring) by default; 4, a bigger variant of 2, with --slow
N = [2, 3, pytest.param(4, marks=SLOW)]


@pytest.mark.parametrize("n", N)
def test_shard_round_trip_and_layout(n: int) -> None:
    a = arr(n * 2, 3)
    t = Tensor(a).shard(devices(n), axis=0)
    assert t.shape == (n * 2, 3) and t.device == devices(n) and t.devices == devices(n)
    t.realize()
    assert t.uop.op is Ops.MULTI and t.uop.arg == 0
    for i, shard in enumerate(t.uop.src):  # each device holds its own rows only
        assert shard.device == devices(n)[i]
        np.testing.assert_array_equal(Tensor(shard).numpy(), a[2 * i : 2 * i + 2])
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(t.to("CPU:1").numpy(), a)
    rep = Tensor(a).shard(devices(n))
    np.testing.assert_array_equal(rep.numpy(), a)
    np.testing.assert_array_equal(t.to(devices(n)).numpy(), a)


def test_shard_errors() -> None:
    with pytest.raises(ValueError, match="devices must be distinct"):
        Tensor(arr(2)).shard(("CPU", "CPU"), axis=0)
    with pytest.raises(
        RuntimeError, match=rf"tensors are on different devices: \('CPU', 'CPU:1'\) and {Device.DEFAULT}"
    ):
        Tensor(arr(2)).shard(devices(2), axis=0) + Tensor(arr(2))


@pytest.mark.parametrize("n", N)
@pytest.mark.parametrize("axis", [0, 1])
def test_elementwise_with_sharded_replicated_and_scalar(n: int, axis: int) -> None:
    a, b = arr(2 * n, 2 * n), arr(2 * n, 2 * n) * 0.5
    ta, tb = Tensor(a).shard(devices(n), axis=axis), Tensor(b).shard(devices(n), axis=axis)
    rb = Tensor(b).shard(devices(n))
    np.testing.assert_allclose((ta * tb + 1).numpy(), a * b + 1)
    np.testing.assert_allclose((ta - rb).numpy(), a - b)
    np.testing.assert_allclose((rb - ta).relu().numpy(), np.maximum(b - a, 0))
    np.testing.assert_allclose(ta.cast("int32").numpy(), a.astype(np.int32))
    other = Tensor(b).shard(devices(n), axis=1 - axis)  # different axes: resharded
    np.testing.assert_allclose((ta + other).numpy(), a + b)


@pytest.mark.parametrize("n", N)
def test_reductions(n: int) -> None:
    a = arr(2 * n, 3, 2)
    t = Tensor(a).shard(devices(n), axis=0)
    np.testing.assert_allclose(t.sum().numpy(), a.sum())
    np.testing.assert_allclose(t.sum(0).numpy(), a.sum(0))
    np.testing.assert_allclose(t.sum(1).numpy(), a.sum(1))
    np.testing.assert_allclose(t.max(0).numpy(), a.max(0))
    np.testing.assert_allclose(t.mean(2).numpy(), a.mean(2))
    np.testing.assert_allclose(t.softmax(0).numpy(), np.exp(a) / np.exp(a).sum(0), rtol=1e-5)


@pytest.mark.parametrize("n", N)
def test_movement_ops(n: int) -> None:
    a = arr(2 * n, 4)
    t = Tensor(a).shard(devices(n), axis=0)
    np.testing.assert_array_equal(t.reshape(n, 8).numpy(), a.reshape(n, 8))  # axis stays whole
    np.testing.assert_array_equal(t.reshape(8 * n).numpy(), a.reshape(-1))
    np.testing.assert_array_equal(t.reshape(4, 2 * n).numpy(), a.reshape(4, 2 * n))  # resharded
    np.testing.assert_array_equal(t.T.numpy(), a.T)
    np.testing.assert_array_equal(
        t.reshape(2 * n, 1, 4).expand(2 * n, 3, 4).numpy(), np.broadcast_to(a[:, None], (2 * n, 3, 4))
    )
    np.testing.assert_array_equal(t[:, 1:3].numpy(), a[:, 1:3])  # shrink off the axis: per shard
    np.testing.assert_array_equal(t[1:3].numpy(), a[1:3])  # shrink on the axis: gathered
    np.testing.assert_array_equal(t.pad(((0, 0), (1, 1))).numpy(), np.pad(a, ((0, 0), (1, 1))))
    np.testing.assert_array_equal(t.pad(((1, 0), (0, 0))).numpy(), np.pad(a, ((1, 0), (0, 0))))
    np.testing.assert_array_equal(t.flip(1).numpy(), a[:, ::-1])
    np.testing.assert_array_equal(t.flip(0).numpy(), a[::-1])


@pytest.mark.parametrize("n", N)
def test_cat_stack_matmul(n: int) -> None:
    a, b = arr(2 * n, 3), arr(2 * n, 3) + 100
    ta, tb = Tensor(a).shard(devices(n), axis=0), Tensor(b).shard(devices(n), axis=0)
    np.testing.assert_array_equal(ta.cat(tb, dim=1).numpy(), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(ta.cat(tb, dim=0).numpy(), np.concatenate([a, b], 0))
    np.testing.assert_array_equal(Tensor.stack(ta, tb).numpy(), np.stack([a, b]))
    w = arr(3, 5) / 10
    np.testing.assert_allclose((ta @ Tensor(w).shard(devices(n))).numpy(), a @ w, rtol=1e-5)  # rows sharded
    # K-sharded @ K-sharded: partial products, then an allreduce
    x, y = arr(3, 2 * n) / 7, arr(2 * n, 4) / 9
    tx, ty = Tensor(x).shard(devices(n), axis=1), Tensor(y).shard(devices(n), axis=0)
    np.testing.assert_allclose((tx @ ty).numpy(), x @ y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", N)
def test_assign_into_sharded_and_replicated(n: int) -> None:
    a = arr(2 * n, n)
    t = Tensor(a).shard(devices(n), axis=0).realize()
    t.assign(t * 2 + 1).realize()
    np.testing.assert_array_equal(t.numpy(), a * 2 + 1)
    t.assign(Tensor(a).shard(devices(n), axis=1)).realize()  # value on another axis: resharded
    np.testing.assert_array_equal(t.numpy(), a)
    assert t.uop.op is Ops.MULTI and t.uop.arg == 0
    r = Tensor(a).shard(devices(n)).realize()
    r.assign(r + t).realize()
    np.testing.assert_array_equal(r.numpy(), 2 * a)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_allreduce_naive_equals_ring_with_copy_counts(n: int) -> None:
    # integer-valued floats: both orders of summation are exact
    rows = 5 * n
    a = (np.arange(rows * 101) % 7).astype(np.float32).reshape(rows, 101)  # 101 columns: not divisible by n x factor
    results = {}
    for mode in ("naive", "ring"):
        with Context(ALLREDUCE=mode):
            t = Tensor(a).shard(devices(n), axis=0).realize()
            count, out = copies_while(lambda t=t: t.sum(0).realize())
            results[mode] = out.numpy()
            expected = n * (n - 1) if mode == "naive" else 2 * n * (n - 1)
            assert count == expected, (mode, count)
    np.testing.assert_array_equal(results["naive"], a.sum(0, keepdims=False))
    np.testing.assert_array_equal(results["ring"], results["naive"])


def test_allreduce_setting_is_checked() -> None:
    t = Tensor(arr(4, 2)).shard(devices(2), axis=0)
    with Context(ALLREDUCE="sometimes"), pytest.raises(ValueError, match="ALLREDUCE must be auto, naive or ring"):
        t.sum(0).realize()


def _train(devs: tuple[str, ...] | None, steps: int = 3) -> tuple[list[float], np.ndarray, np.ndarray, list]:
    rng = np.random.default_rng(0)
    x_np, y_np = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    w1_np, w2_np = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    w1, w2, x, y = Tensor(w1_np), Tensor(w2_np), Tensor(x_np), Tensor(y_np)
    if devs:
        w1, w2, x, y = w1.shard(devs), w2.shard(devs), x.shard(devs, axis=0), y.shard(devs, axis=0)
    w1.requires_grad = w2.requires_grad = True
    Tensor.realize(w1, w2)
    losses, grads = [], []
    for _ in range(steps):
        loss = ((x @ w1).relu() @ w2 - y).square().mean()
        g1, g2 = loss.gradient(w1, w2)
        Tensor.realize(g1, g2, loss)
        grads.append(g1)
        w1.assign(w1.detach() - 0.1 * g1)
        w2.assign(w2.detach() - 0.1 * g2)
        Tensor.realize(w1, w2)
        losses.append(loss.item())
    return losses, w1.numpy(), w2.numpy(), grads


def test_data_parallel_sgd_matches_single_device() -> None:
    single = _train(None)
    for devs in (devices(2), devices(4)):
        multi = _train(devs)
        np.testing.assert_allclose(multi[0], single[0], atol=1e-6)
        assert np.abs(multi[1] - single[1]).max() <= 1e-6 and np.abs(multi[2] - single[2]).max() <= 1e-6
        g = multi[3][-1]  # the weight gradient is replicated: equal on every device
        assert g.uop.op is Ops.MULTI and g.uop.arg is None
        per_device = [Tensor(s).numpy() for s in g.uop.src]
        for other in per_device[1:]:
            np.testing.assert_array_equal(other, per_device[0])


@pytest.mark.parametrize("axis", [0, 1, None])
def test_gradients_flow_through_shard_to_the_original(axis: int | None) -> None:
    a = arr(4, 2) / 3
    x = Tensor(a, requires_grad=True)
    ((x.shard(devices(2), axis=axis) ** 2).sum(0) * Tensor([1.0, 2.0]).shard(devices(2))).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 2 * a * np.array([1.0, 2.0]), rtol=1e-6)


@pytest.mark.parametrize("mode", ["naive", "ring"])
def test_python_devices_are_the_oracle(mode: str) -> None:
    devs = ("PYTHON", "PYTHON:1", "PYTHON:2")
    a, w = arr(6, 4), arr(4, 2) / 5
    with Context(ALLREDUCE=mode):
        t = Tensor(a, device="PYTHON").shard(devs, axis=0)
        np.testing.assert_allclose(t.sum(0).numpy(), a.sum(0))
        np.testing.assert_allclose((t @ Tensor(w, device="PYTHON").shard(devs)).numpy(), a @ w, rtol=1e-6)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_data_parallel_with_nn_optim_and_losses_read_after_step(optimizer: str) -> None:
    from tg.tensor.nn import optim

    rng = np.random.default_rng(0)
    x_np, y_np = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    w_np = rng.standard_normal((4, 2)).astype(np.float32)

    def run(devs: tuple[str, ...] | None) -> tuple[list[float], np.ndarray]:
        w, x, y = Tensor(w_np), Tensor(x_np), Tensor(y_np)
        if devs:
            w, x, y = w.shard(devs), x.shard(devs, axis=0), y.shard(devs, axis=0)
        w.requires_grad = True
        opt = getattr(optim, optimizer)([w], lr=0.1)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = ((x @ w - y) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss)  # read after the step: the pre-step loss (pending reads of sharded weights)
        return [loss.item() for loss in losses], w.numpy()

    single, multi = run(None), run(devices(2))
    np.testing.assert_allclose(multi[0], single[0], atol=1e-6)
    np.testing.assert_allclose(multi[1], single[1], atol=1e-6)


# ---- uneven shards: ceil-size chunks, the last ones shorter or empty -------------------------------------------

# (axis length, devices): 3+2, 3+3+1, 2+2+0, 3+3+3+0, 1+0; the default run takes a short last shard (5, 2), empty ones
# (4, 3) and a single element (1, 2); the bigger variants of the first two (7, 3) and (9, 4) run with --slow
UNEVEN = [(5, 2), pytest.param(7, 3, marks=SLOW), (4, 3), pytest.param(9, 4, marks=SLOW), (1, 2)]


@pytest.mark.parametrize(("size", "n"), UNEVEN)
def test_uneven_shard_layout_and_round_trip(size: int, n: int) -> None:
    a = arr(size, 3)
    t = Tensor(a).shard(devices(n), axis=0).realize()
    assert t.shape == (size, 3) and t.devices == devices(n)
    chunk = -(-size // n)
    multi = t.uop.src[0]
    assert multi.op is Ops.MULTI and multi.arg == 0
    for i, shard in enumerate(multi.src):  # device i holds rows [i*chunk, (i+1)*chunk) (padded past the end)
        real = a[i * chunk : (i + 1) * chunk]
        np.testing.assert_array_equal(Tensor(shard).numpy()[: len(real)], real)
        assert shard.shape == (chunk, 3) and shard.device == devices(n)[i]
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(t.to("CPU:1").numpy(), a)
    np.testing.assert_array_equal(t.to(devices(n)).numpy(), a)
    np.testing.assert_array_equal(Tensor(a).shard(devices(n), axis=1).numpy(), a)  # 3 columns over n devices


@pytest.mark.parametrize(("size", "n"), UNEVEN)
def test_uneven_elementwise_and_reductions(size: int, n: int) -> None:
    a, b = arr(size, 4), arr(size, 4) * -0.5
    ta, tb = Tensor(a).shard(devices(n), axis=0), Tensor(b).shard(devices(n), axis=0)
    rb = Tensor(b).shard(devices(n))
    np.testing.assert_allclose((ta * tb + 1).numpy(), a * b + 1)
    np.testing.assert_allclose((ta - rb).exp().numpy(), np.exp(a - b), rtol=1e-6)  # replicated source sliced
    # reductions over the sharded axis skip the padding (exp(0) = 1 there would change a sum, 0 a max)
    np.testing.assert_allclose(ta.exp().sum(0).numpy(), np.exp(a).sum(0), rtol=1e-5)
    np.testing.assert_allclose(ta.sum().numpy(), a.sum())
    np.testing.assert_allclose((-ta.abs() - 1).max(0).numpy(), (-np.abs(a) - 1).max(0))
    np.testing.assert_allclose((ta * 0 + 2).prod(0).numpy(), np.full(4, 2.0**size), rtol=1e-6)
    np.testing.assert_allclose(ta.sum(1).numpy(), a.sum(1))  # not over the sharded axis: stays sharded
    np.testing.assert_allclose(ta.mean(0).numpy(), a.mean(0), rtol=1e-6)
    np.testing.assert_allclose(ta.softmax(1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize(("size", "n"), UNEVEN)
def test_uneven_matmul_movement_and_cat(size: int, n: int) -> None:
    a, w = arr(size, 3), arr(3, 5) / 10
    ta = Tensor(a).shard(devices(n), axis=0)
    np.testing.assert_allclose((ta @ Tensor(w).shard(devices(n))).numpy(), a @ w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((ta.T @ ta).numpy(), a.T @ a, rtol=1e-5)  # the uneven axis is K: an allreduce
    x, y = arr(2, size) / 7, arr(size, 4) / 9  # K uneven on both sides: partial products, then an allreduce
    tx, ty = Tensor(x).shard(devices(n), axis=1), Tensor(y).shard(devices(n), axis=0)
    np.testing.assert_allclose((tx @ ty).numpy(), x @ y, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ta.T.numpy(), a.T)
    np.testing.assert_array_equal(ta[:, 1:].numpy(), a[:, 1:])
    np.testing.assert_array_equal(ta.reshape(size, 3, 1).numpy(), a.reshape(size, 3, 1))
    np.testing.assert_array_equal(ta.reshape(3 * size).numpy(), a.reshape(-1))
    np.testing.assert_array_equal(ta.flip(0).numpy(), a[::-1])
    b = arr(size, 3) + 100
    tb = Tensor(b).shard(devices(n), axis=0)
    np.testing.assert_array_equal(ta.cat(tb, dim=1).numpy(), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(ta.cat(tb, dim=0).numpy(), np.concatenate([a, b], 0))
    even = Tensor(arr(2 * n, 3)).shard(devices(n), axis=0)
    np.testing.assert_array_equal(ta.cat(even, dim=0).numpy(), np.concatenate([a, arr(2 * n, 3)], 0))
    np.testing.assert_array_equal(Tensor.stack(ta, tb).numpy(), np.stack([a, b]))


def test_uneven_shards_stay_sharded_without_copies() -> None:
    a, w = arr(7, 3), arr(3, 5) / 10
    ta = Tensor(a).shard(devices(3), axis=0).realize()
    tw = Tensor(w).shard(devices(3)).realize()
    for make, expected in ((lambda: ta * 2 + 1, a * 2 + 1), (lambda: ta.sum(1), a.sum(1)), (lambda: ta @ tw, a @ w)):
        out = make()
        copies, _ = copies_while(out.realize)
        assert copies == 0 and shard_axis(out) == 0
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    copies, _ = copies_while(ta.sum(0).realize)  # over the uneven axis: one naive allreduce, n(n-1) copies
    assert copies == 6


def test_assign_into_uneven_shards_writes_them_in_place() -> None:
    a = arr(7, 3)
    t = Tensor(a).shard(devices(3), axis=0).realize()
    shards = [engine.buffer_for(s) for s in t.uop.src[0].src]
    t.assign(t * 2)
    t.assign(t + Tensor(a).shard(devices(3)))  # a replicated value is cut into the same uneven slices
    np.testing.assert_array_equal(t.numpy(), a * 3)
    assert [engine.buffer_for(s) for s in t.uop.src[0].src] == shards


@pytest.mark.parametrize("rows", [8, 7])
def test_function_with_sharded_arguments_values_and_gradients(rows: int) -> None:
    from tg.tensor import function

    def loss_fn(x: Tensor, y: Tensor, w: Tensor) -> Tensor:
        return ((x @ w).relu() - y).square().mean()

    traced = function(loss_fn)
    rng = np.random.default_rng(5)
    for f in (loss_fn, traced, traced):
        x_np, y_np = (
            rng.standard_normal((rows, 4)).astype(np.float32),
            rng.standard_normal((rows, 3)).astype(np.float32),
        )
        w_np = rng.standard_normal((4, 3)).astype(np.float32)
        x, y = Tensor(x_np).shard(devices(2), axis=0), Tensor(y_np).shard(devices(2), axis=0)
        w = Tensor(w_np).shard(devices(2)).realize()
        w.requires_grad = True
        loss = f(x, y, w)
        np.testing.assert_allclose(loss.numpy(), ((np.maximum(x_np @ w_np, 0) - y_np) ** 2).mean(), rtol=1e-5)
        (g,) = loss.gradient(w)
        assert g.device == devices(2)
        h = np.maximum(x_np @ w_np, 0)
        expected = x_np.T @ ((2 * (h - y_np) / (rows * 3)) * (x_np @ w_np > 0))
        np.testing.assert_allclose(g.numpy(), expected, rtol=1e-4, atol=1e-6)
    assert traced.trace_count == 1  # one trace served both sharded calls
