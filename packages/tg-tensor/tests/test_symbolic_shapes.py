"""Tensor-level symbolic shapes: a tensor shaped by a bound Variable runs kernels that take the variable as an
argument, so one compiled kernel (and one cached schedule) serves every value. Results are compared with numpy."""

from collections.abc import Callable

import numpy as np
import pytest

from tg.codegen.schedule import cache_stats
from tg.ir import Ops, UOp
from tg.runtime.engine import method_cache
from tg.tensor import GlobalCounters, Tensor, Variable, plans

DEVICES = ["CPU", "PYTHON"]
RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 10)).astype(np.float32)
B = RNG.standard_normal((3, 10)).astype(np.float32)
W = RNG.standard_normal((10, 5)).astype(np.float32)


def _compiled(device: str) -> set:
    return {k for k in method_cache if k[0] == device}


def _run_for_values(device: str, fn: Callable[[UOp], Tensor], expect: Callable[[int], np.ndarray]) -> int:
    """Run `fn(v)` for v bound to 3, 5, 7; compare with numpy; return how many kernels the last two values added."""
    var = Variable("i", 1, 10)
    before_last: set = set()
    for k, val in enumerate((3, 5, 7)):
        if k == 1:
            before_last = _compiled(device)
        out = fn(var.bind(val))
        np.testing.assert_allclose(out.numpy(), expect(val), rtol=1e-5, atol=1e-5)
    return len(_compiled(device) - before_last)


CASES: dict[str, tuple[Callable[[Tensor, Tensor, Tensor, UOp], Tensor], Callable[[int], np.ndarray]]] = {
    "slice": (lambda a, b, w, v: a[:, :v] * 2, lambda n: A[:, :n] * 2),
    "shrink": (lambda a, b, w, v: a.shrink(((0, 3), (0, v))) + 1, lambda n: A[:, :n] + 1),
    "add two symbolic": (lambda a, b, w, v: a[:, :v] + b[:, :v], lambda n: A[:, :n] + B[:, :n]),
    "offset slice": (lambda a, b, w, v: a[:, v:] - 1, lambda n: A[:, n:] - 1),
    "sum": (lambda a, b, w, v: a[:, :v].sum(1), lambda n: A[:, :n].sum(1)),
    "sum all": (lambda a, b, w, v: a[:, :v].sum(), lambda n: np.float32(A[:, :n].sum())),
    "max": (lambda a, b, w, v: a[:, :v].max(1), lambda n: A[:, :n].max(1)),
    "mean": (lambda a, b, w, v: a[:, :v].mean(1), lambda n: A[:, :n].mean(1)),
    "mean all": (lambda a, b, w, v: a[:, :v].mean(), lambda n: np.float32(A[:, :n].mean())),
    "matmul": (lambda a, b, w, v: a[:, :v] @ w[:v], lambda n: A[:, :n] @ W[:n]),
    "softmax": (
        lambda a, b, w, v: a[:, :v].softmax(1),
        lambda n: (
            np.exp(A[:, :n] - A[:, :n].max(1, keepdims=True))
            / np.exp(A[:, :n] - A[:, :n].max(1, keepdims=True)).sum(1, keepdims=True)
        ),
    ),
    "times variable": (lambda a, b, w, v: a[:, :v] * v, lambda n: A[:, :n] * n),
    "transpose sum": (lambda a, b, w, v: a[:, :v].T.sum(1), lambda n: A[:, :n].T.sum(1)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CASES))
def test_symbolic_ops_compile_once_and_match_numpy(device: str, case: str) -> None:
    fn, expect = CASES[case]
    a, b, w = (Tensor(x, device=device).realize() for x in (A, B, W))
    added = _run_for_values(device, lambda v: fn(a, b, w, v), expect)
    assert added == 0  # the kernels compiled for i=3 serve i=5 and i=7


@pytest.mark.parametrize("device", DEVICES)
def test_same_schedule_and_one_kernel_per_ast_for_every_value(device: str) -> None:
    a = Tensor(A, device=device).realize()
    var = Variable("i", 1, 10)
    keys, hits = [], []
    for val in (3, 5, 7):
        before = set(method_cache)
        hits_before = cache_stats["hits"] + plans.stats["hits"]
        GlobalCounters.reset()
        out = (a[:, : var.bind(val)] * 3).sum(1)
        np.testing.assert_allclose(out.numpy(), (A[:, :val] * 3).sum(1), rtol=1e-5, atol=1e-5)
        assert GlobalCounters.kernel_count == 1
        keys.append(set(method_cache) - before)
        hits.append(cache_stats["hits"] + plans.stats["hits"] - hits_before)
    assert len(keys[0] | set()) <= 1 and keys[1] == set() and keys[2] == set()
    # the schedule of i=3 was reused (its realize plan, or the schedule cache): the value is an argument
    assert hits[1] >= 1 and hits[2] >= 1


def test_reshape_with_matching_symbolic_size() -> None:
    v = Variable("i", 1, 10).bind(3)
    x = Tensor.arange(40, dtype="float32")[: v * 4]
    assert x.shape[0].render() == "i*4"
    y = x.reshape(v, 4)
    assert y.shape[0] is v and y.shape[1] == 4
    np.testing.assert_array_equal(y.sum(0).numpy(), np.arange(12, dtype=np.float32).reshape(3, 4).sum(0))
    np.testing.assert_array_equal(y.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(ValueError, match="cannot reshape"):
        x.reshape(v, 5)


def test_ones_reshape_slice_and_creation_with_a_symbolic_shape() -> None:
    v = Variable("i", 1, 10).bind(4)
    assert Tensor.ones(3, 10).reshape(3, 10)[:, :v].sum().item() == 12.0
    z = Tensor.zeros(v, 4)
    assert z.shape == (v, 4)
    np.testing.assert_array_equal(z.numpy(), np.zeros((4, 4), np.float32))
    np.testing.assert_array_equal(Tensor.ones(v, 4).sum(0).numpy(), np.full(4, 4.0, np.float32))
    np.testing.assert_array_equal(Tensor.full((2, v), 7).numpy(), np.full((2, 4), 7))
    e = Tensor.empty(v, 4)
    assert e.shape == (v, 4)
    assert e.assign(Tensor.ones(v, 4) * 2).realize().tolist() == [[2.0] * 4] * 4
    np.testing.assert_array_equal(Tensor.arange(v).numpy(), np.arange(4))


def test_shape_is_the_bound_variable_and_realized_results_read_at_its_value() -> None:
    v = Variable("i", 1, 10).bind(3)
    a = Tensor(A)
    b = a[:, :v]
    assert b.shape[0] == 3 and b.shape[1] is v
    assert isinstance(b.numel(), UOp)
    assert b.max_shape == (3, 10) and b.max_numel() == 30 and Tensor(A).max_shape == (3, 10)
    c = (b + 1).contiguous().realize()
    assert c.shape[1] is v  # realized: still the bound variable, not its unbound DEFINE_VAR
    assert c.uop.op is Ops.RESHAPE  # the leading part of a buffer of the maximum size
    np.testing.assert_allclose(c.numpy(), A[:, :3] + 1, rtol=1e-6)
    assert np.asarray(c.tolist(), np.float32).shape == (3, 3)
    np.testing.assert_allclose((c * 2).numpy(), (A[:, :3] + 1) * 2, rtol=1e-6)  # a realized value as an input


def test_symbolic_pad_and_cat() -> None:
    v = Variable("i", 1, 10).bind(3)
    a = Tensor(A)
    np.testing.assert_allclose(a[:, :v].pad(((0, 0), (1, 2))).numpy(), np.pad(A[:, :3], ((0, 0), (1, 2))))
    np.testing.assert_allclose(a[:, :v].cat(a[:, :v], dim=1).numpy(), np.concatenate([A[:, :3]] * 2, 1))
    np.testing.assert_allclose(a[:, :2].pad(((0, 0), (0, v))).numpy(), np.pad(A[:, :2], ((0, 0), (0, 3))))


def test_clear_errors_for_what_a_symbolic_dim_cannot_do() -> None:
    var = Variable("i", 1, 10)
    v = var.bind(3)
    b = Tensor(A)[:, :v]
    with pytest.raises(TypeError, match=r"not a concrete int: i \(it depends on the Variable i in \[1, 10\]"):
        int(b.shape[1])
    with pytest.raises(TypeError, match="needs a concrete size"):  # an op that decides on sizes while building
        b.reshape(1, 1, 3, v).conv2d(Tensor.ones(1, 1, 2, 2))
    with pytest.raises(TypeError, match=r"len.*symbolic"):
        len(b.T)
    with pytest.raises(TypeError, match="symbolic shape"):
        Tensor.rand(v, 4)
    with pytest.raises(NotImplementedError, match="symbolic amount"):
        b.pad(((0, 0), (0, v)), mode="reflect")
    with pytest.raises(IndexError, match="step 1"):
        Tensor(A)[:, :v:2]
    with pytest.raises(ValueError, match="out of range"):
        Tensor(A)[:, : Variable("j", 1, 20).bind(15)]  # 15 > 10 at the bound value
    with pytest.raises(ValueError, match="broadcast"):
        Tensor(A)[:, :v] + Tensor(A)[:, : Variable("k", 1, 10).bind(3)]  # different variables: different dims


def test_argmax_pickle_copy_and_gradient_of_symbolic_tensors() -> None:
    import pickle

    v = Variable("i", 1, 10).bind(3)
    b = Tensor(A)[:, :v]
    np.testing.assert_array_equal(b.argmax(1).numpy(), A[:, :3].argmax(1))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(b)).numpy(), A[:, :3])  # a concrete copy
    np.testing.assert_array_equal(b.to("PYTHON").numpy(), A[:, :3])
    np.testing.assert_array_equal(Tensor.arange(v, 0, -1).numpy(), np.arange(3, 0, -1))
    x = Tensor.ones(3, 10, requires_grad=True)
    (x[:, :v] * 2).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), np.pad(np.full((3, 3), 2.0, np.float32), ((0, 0), (0, 7))))


@pytest.mark.parametrize("device", DEVICES)
def test_kv_cache_with_a_variable_position_compiles_once(device: str) -> None:
    """A KV-cache step: write at `start_pos`, attend over `[:start_pos+1]`; lazy readers of the previous step are
    computed in their own schedule before the write (they bind the variable to another value)."""
    rng = np.random.default_rng(5)
    cache_np = np.zeros((2, 8, 4), np.float32)
    cache = Tensor(cache_np, device=device).realize()
    pos_var = Variable("start_pos", 0, 7)
    q = Tensor(np.ones((2, 1, 4), np.float32), device=device).realize()
    compiled_after: list[int] = []
    for pos in range(4):
        v = pos_var.bind(pos)
        new = rng.standard_normal((2, 1, 4)).astype(np.float32)
        cache[:, v : v + 1].assign(Tensor(new, device=device)).realize()
        cache_np[:, pos : pos + 1] = new
        keys = cache[:, : v + 1]
        out = (q @ keys.transpose(1, 2)).softmax(-1) @ keys
        k = cache_np[:, : pos + 1]
        att = np.exp(np.ones((2, 1, 4), np.float32) @ k.transpose(0, 2, 1))
        np.testing.assert_allclose(out.numpy(), (att / att.sum(-1, keepdims=True)) @ k, rtol=1e-5, atol=1e-6)
        compiled_after.append(len(_compiled(device)))
    assert compiled_after[2] == compiled_after[3]  # positions 2 and 3 reuse the kernels of the earlier steps
