"""The scheduler's fusion cost model (tg.codegen.schedule.policy C3-C4, R4-R5) seen from tensors: an expensive
producer fused into a reduction that reads it is evaluated once per element it produces, counted by the PYTHON
device's op counter, and the results stay equal to numpy's."""

import numpy as np
import pytest

from tg.codegen.schedule import create_schedule
from tg.ir import Ops, UOp, dtypes
from tg.runtime.backends.python import count_ops
from tg.tensor import Tensor

P = "PYTHON"


def kernels(*ts: Tensor) -> int:
    linear = create_schedule(UOp(Ops.SINK, src=tuple(t.uop for t in ts))).linear
    return sum(c.src[0].op is Ops.SINK for c in linear.src)


def _t(rng: np.random.Generator, *shape: int, device: str = P) -> Tensor:
    return Tensor(rng.standard_normal(shape).astype(np.float32), device=device).realize()


def test_op_counter_counts_each_lane(rng: np.random.Generator) -> None:
    x = _t(rng, 6, 5)
    with count_ops() as n:
        x.exp2().realize()
    assert n[Ops.EXP2] == 30
    with count_ops() as outer, count_ops() as inner:
        (x * 2).realize()
    assert outer[Ops.MUL] == inner[Ops.MUL] == 30  # index arithmetic (ints) is not counted
    (x + 1).realize()  # no block open: nothing is counted anywhere
    assert outer[Ops.ADD] == 0


def test_gelu_feeding_a_matmul_is_evaluated_once_per_element(rng: np.random.Generator) -> None:
    x, w = _t(rng, 8, 16), _t(rng, 16, 12)
    out = x.gelu() @ w
    assert kernels(out) == 2  # gelu stored, then the matmul
    with count_ops() as n:
        got = out.numpy()
    with count_ops() as alone:
        g = x.gelu().realize()
    with count_ops() as product:
        (g @ w).realize()
    # GELU's ops once per element (as when computed alone), plus the matmul's: not GELU once per output column
    assert sum(n.values()) == sum(alone.values()) + sum(product.values())
    xs = x.numpy().astype(np.float64)
    erf = np.vectorize(__import__("math").erf)
    np.testing.assert_allclose(got, (0.5 * xs * (1 + erf(xs / np.sqrt(2)))) @ w.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_softmax_feeding_a_matmul_computes_exp_once_per_kernel(rng: np.random.Generator, dtype) -> None:
    x, w = _t(rng, 6, 10).cast(dtype).realize(), _t(rng, 10, 7).cast(dtype).realize()
    out = x.softmax(1) @ w
    assert kernels(out) == 4  # max, sum of exp, the stored softmax, the matmul
    with count_ops() as n:
        got = out.numpy()
    if dtype is dtypes.float64:  # float32's exp is a polynomial without EXP2 (its kernel count above says the same)
        assert n[Ops.EXP2] == 2 * 6 * 10  # once in the sum's kernel, once where the softmax is stored
    z = np.exp(x.numpy() - x.numpy().max(1, keepdims=True))
    np.testing.assert_allclose(got, (z / z.sum(1, keepdims=True)) @ w.numpy(), rtol=1e-5, atol=1e-6)


def test_cat_feeding_a_matmul_is_stored_once(rng: np.random.Generator) -> None:
    # a cat of three parts (three PADs, two adds) read by a matmul's operand would be gathered from three gated loads
    # per output column (an attention's q/k/v gradients read by the qkv weight and input gradients): stored first
    a, b, c = _t(rng, 32, 8), _t(rng, 32, 8), _t(rng, 32, 8)
    w, x = _t(rng, 24, 16), _t(rng, 32, 16)
    cat = a.cat(b, c, dim=1)
    assert kernels(cat @ w) == kernels(cat.T @ x) == 2
    with count_ops() as n:
        got = (cat @ w).numpy()
    with count_ops() as alone:
        stored = cat.realize()
    with count_ops() as product:
        (stored @ w).realize()
    assert sum(n.values()) == sum(alone.values()) + sum(product.values())
    want = np.concatenate([a.numpy(), b.numpy(), c.numpy()], 1)
    np.testing.assert_allclose(got, want @ w.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((cat.T @ x).numpy(), want.T @ x.numpy(), rtol=1e-5, atol=1e-5)
    assert kernels(a.pad(((0, 0), (4, 4))) @ w[:16]) == 1  # one PAD (one gated load) is still recomputed


def test_cheap_producer_is_still_fused_into_the_matmul(rng: np.random.Generator) -> None:
    x, w = _t(rng, 8, 16), _t(rng, 16, 12)
    out = (x * 2 + 1) @ w
    assert kernels(out) == 1
    np.testing.assert_allclose(out.numpy(), (x.numpy() * 2 + 1) @ w.numpy(), rtol=1e-5, atol=1e-5)
    relu = x.relu() @ w  # three ops (compare, not, select) per evaluation: stored
    assert kernels(relu) == 2
    np.testing.assert_allclose(relu.numpy(), np.maximum(x.numpy(), 0) @ w.numpy(), rtol=1e-5, atol=1e-5)


def test_matmul_into_a_sum_is_its_own_kernel(rng: np.random.Generator) -> None:
    a = Tensor.empty(256, 256, device="NULL")
    assert kernels((a @ a).sum()) == 3  # the matmul, then the sum (P1: partials, total): never nested loops
    x, y = _t(rng, 64, 64, device="CPU"), _t(rng, 64, 64, device="CPU")
    got = (x @ y).sum().item()
    want = float((x.numpy().astype(np.float64) @ y.numpy().astype(np.float64)).sum())
    assert got == pytest.approx(want, rel=1e-4, abs=1e-3)


def test_concatenated_matmuls_run_no_masked_products(rng: np.random.Generator) -> None:
    a, b, c = _t(rng, 4, 8), _t(rng, 8, 3), _t(rng, 8, 5)
    out = (a @ b).cat(a @ c, dim=1)
    assert kernels(out) == 3  # each matmul in its own kernel, then the cat
    with count_ops() as n:
        got = out.numpy()
    products = n[Ops.MULACC] + n[Ops.MUL]  # float ops only: index arithmetic is not counted
    assert products == 4 * 8 * (3 + 5)  # fused under the cat's padding, both loops ran at every output
    np.testing.assert_allclose(got, np.concatenate([a.numpy() @ b.numpy(), a.numpy() @ c.numpy()], 1), rtol=1e-5)


def test_reported_1024_matmul_sum_schedules_a_tiled_matmul_and_a_small_sum() -> None:
    """`(Tensor.rand(1024, 1024) @ same).sum()` once ran as one kernel of three nested loops (~39 s): its schedule
    is the matmul (which gets the CPU heuristic's register tile) and the sum's two small kernels."""
    from tg.codegen.program import get_program
    from tg.codegen.render.cstyle import ClangRenderer
    from tg.ir import AxisType

    a = Tensor.rand(1024, 1024, device="NULL").realize()
    linear = create_schedule((a @ a).sum().uop.sink()).linear
    asts = [c.src[0] for c in linear.src if c.src[0].op is Ops.SINK]
    assert len(asts) == 3
    reduce_loops = [sum(u.op is Ops.REDUCE for u in ast.toposort()) for ast in asts]
    assert reduce_loops == [1, 1, 1]  # no reduction nested in another one's loop
    ren = ClangRenderer(32, 4, True)  # AVX2-sized lanes; the tile is chosen the same way for any width
    matmul = get_program(asts[0], ren)
    kinds = {o.arg[1] for o in matmul.applied_opts if isinstance(o.arg, tuple)}
    assert {AxisType.UPCAST, AxisType.UNROLL, AxisType.THREAD} <= kinds, matmul.applied_opts


def test_non_overlapping_max_pool_backward_has_no_remainders(rng: np.random.Generator) -> None:
    """A 2x2 max pool of stride 2 cuts windows by reshapes: its gradient's kernels index without MOD (the repeat-based
    windows made the backward one scalar kernel of remainders, half of the digits CNN's step)."""
    xn = rng.permutation(2 * 3 * 6 * 8).reshape(2, 3, 6, 8).astype(np.float32)  # distinct values: one max a window
    x = Tensor(xn, device="CPU", requires_grad=True)
    out = x.max_pool2d(2)
    (out * Tensor(np.arange(out.numel(), dtype=np.float32).reshape(out.shape), device="CPU")).sum().backward()
    assert x.grad is not None
    linear = create_schedule(UOp(Ops.SINK, src=(x.grad.uop,))).linear
    assert not any(u.op is Ops.MOD for c in linear.src for u in c.src[0].toposort())
    win = xn.reshape(2, 3, 3, 2, 4, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 3, 4, 4)
    np.testing.assert_array_equal(out.numpy(), win.max(-1))
    want = (win == win.max(-1, keepdims=True)) * np.arange(out.numel(), dtype=np.float32).reshape(2, 3, 3, 4, 1)
    want = want.reshape(2, 3, 3, 4, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 6, 8)
    np.testing.assert_array_equal(x.grad.numpy(), want)


def _stored_dtypes(*ts: Tensor) -> set:
    linear = create_schedule(UOp(Ops.SINK, src=tuple(t.uop for t in ts))).linear
    return {u.src[1].dtype.scalar() for c in linear.src if c.src[0].op is Ops.SINK
            for u in c.src[0].toposort() if u.op is Ops.STORE}  # fmt: skip


@pytest.mark.parametrize("length", [32, 5])
def test_causal_attention_recomputes_its_mask(rng: np.random.Generator, length: int) -> None:
    # the causal mask is a comparison of two aranges (cheap: recomputed where read), not a stored bool buffer, whose
    # bool loads kept the scores and softmax-gradient kernels from vectorising
    q = Tensor(rng.standard_normal((2, 3, length, 8)).astype(np.float32), device=P, requires_grad=True).realize()
    k, v = _t(rng, 2, 3, 7 if length == 5 else length, 8), _t(rng, 2, 3, 7 if length == 5 else length, 8)
    out = q.scaled_dot_product_attention(k, v, is_causal=True)
    (g,) = out.sum().gradient(q)
    assert _stored_dtypes(out, g) == {dtypes.float32}
    s = q.numpy() @ k.numpy().transpose(0, 1, 3, 2) / np.sqrt(8)
    s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), (w / w.sum(-1, keepdims=True)) @ v.numpy(), rtol=1e-5, atol=1e-6)
