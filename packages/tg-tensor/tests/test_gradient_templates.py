"""Gradient templates (tg.tensor.gradcache): a backward pass over a structure differentiated before reuses its
gradient graph with this pass's nodes, and gives exactly the gradients of the full path (GRAD_CACHE=0)."""

import gc
import weakref

import numpy as np
import pytest

from tg.ir import Context
from tg.tensor import Tensor, dtypes, gradcache


@pytest.fixture(autouse=True)
def fresh_templates():
    gradcache.clear_gradient_templates()
    yield
    gradcache.clear_gradient_templates()


def _mlp_grads(x: np.ndarray, w: Tensor, b: Tensor, scale: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    w.grad = b.grad = None
    loss = ((Tensor(x) @ w + b).relu() * scale).sum()
    loss.backward()
    assert w.grad is not None and b.grad is not None
    return w.grad.numpy(), b.grad.numpy()


def _numpy_mlp_grads(x: np.ndarray, w: np.ndarray, b: np.ndarray, scale: float = 2.0) -> tuple[np.ndarray, ...]:
    active = ((x @ w + b) > 0).astype(np.float32) * scale
    return x.T @ active, active.sum(0)


def _params(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, Tensor, Tensor]:
    wn = rng.standard_normal((5, 3)).astype(np.float32)
    bn = rng.standard_normal(3).astype(np.float32)
    return wn, bn, Tensor(wn, requires_grad=True), Tensor(bn, requires_grad=True)


def test_a_repeated_structure_hits_and_gives_each_batch_its_gradients(rng):
    wn, bn, w, b = _params(rng)
    batches = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(4)]
    for i, x in enumerate(batches):
        got = _mlp_grads(x, w, b)
        for g, want in zip(got, _numpy_mlp_grads(x, wn, bn), strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)
        # the first backward from such a root is not walked, the second makes the template, later ones use it
        assert gradcache.stats == {"hits": max(i - 1, 0), "misses": min(i + 1, 2)}


@pytest.mark.parametrize(
    "change",
    ["shape", "dtype", "constant", "targets"],
)
def test_a_different_structure_misses(rng, change):
    wn, bn, w, b = _params(rng)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    _mlp_grads(x, w, b)
    _mlp_grads(x, w, b)  # the second backward of the structure makes its template
    if change == "shape":
        x2 = rng.standard_normal((6, 5)).astype(np.float32)
        got, want = _mlp_grads(x2, w, b), _numpy_mlp_grads(x2, wn, bn)
    elif change == "constant":  # a constant the gradient is made of
        got, want = _mlp_grads(x, w, b, scale=3.0), _numpy_mlp_grads(x, wn, bn, scale=3.0)
    elif change == "targets":  # the same graph, one more target: the input's gradient too
        xt = Tensor(x, requires_grad=True)
        w.grad = b.grad = None
        ((xt @ w + b).relu() * 2.0).sum().backward()
        assert xt.grad is not None and w.grad is not None and b.grad is not None
        active = ((x @ wn + bn) > 0).astype(np.float32) * 2.0
        np.testing.assert_allclose(xt.grad.numpy(), active @ wn.T, rtol=1e-5, atol=1e-5)
        got, want = (w.grad.numpy(), b.grad.numpy()), _numpy_mlp_grads(x, wn, bn)
    else:
        w16 = Tensor(wn, dtype=dtypes.float16, requires_grad=True)
        b16 = Tensor(bn, dtype=dtypes.float16, requires_grad=True)
        got = tuple(g.astype(np.float32) for g in _mlp_grads(x.astype(np.float16), w16, b16))
        want = _numpy_mlp_grads(x.astype(np.float16).astype(np.float32), wn.astype(np.float16).astype(np.float32),
                                bn.astype(np.float16).astype(np.float32))  # fmt: skip
        for g, v in zip(got, want, strict=True):
            np.testing.assert_allclose(g, v, rtol=2e-2, atol=2e-2)
        assert gradcache.stats == {"hits": 0, "misses": 3}
        return
    for g, v in zip(got, want, strict=True):
        np.testing.assert_allclose(g, v, rtol=1e-5, atol=1e-5)
    assert gradcache.stats == {"hits": 0, "misses": 3}


def test_templates_pin_no_buffer_and_see_assigned_weights(rng):
    _, bn, w, b = _params(rng)
    for _ in range(2):  # the second backward makes the template
        x = Tensor(rng.standard_normal((4, 5)).astype(np.float32))
        ((x @ w + b).relu() * 2.0).sum().backward()
        w.grad = b.grad = None
    first_input = weakref.ref(x.uop)
    del x
    gc.collect()
    assert first_input() is None, "the template must not keep the first backward's graph alive"
    wn2 = rng.standard_normal((5, 3)).astype(np.float32)
    w.assign(Tensor(wn2)).realize()  # the weight's buffer now holds other values
    x2 = rng.standard_normal((4, 5)).astype(np.float32)
    got = _mlp_grads(x2, w, b)
    assert gradcache.stats["hits"] == 1
    for g, want in zip(got, _numpy_mlp_grads(x2, wn2, bn), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_convolution_templates_equal_the_full_path(rng):
    """The convolution's custom gradient rule makes storage of its own (a stored padded gradient): every
    instantiation gets new storage, and the gradients equal those of GRAD_CACHE=0 bit for bit."""
    wn = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    xs = [rng.standard_normal((2, 2, 6, 6)).astype(np.float32) for _ in range(3)]

    def grads(x: np.ndarray) -> list[np.ndarray]:
        w = Tensor(wn, requires_grad=True)
        h = Tensor(x).conv2d(w, padding=1).relu().conv2d(Tensor(wn.transpose(1, 0, 2, 3).copy()), padding=1)
        h.square().mean().backward()
        assert w.grad is not None
        return [w.grad.numpy()]

    with Context(GRAD_CACHE=0):
        want = [grads(x) for x in xs]
    got = [grads(x) for x in xs]
    assert gradcache.stats == {"hits": 1, "misses": 2}
    for g, v in zip(got, want, strict=True):
        np.testing.assert_array_equal(g[0], v[0])


def test_grad_cache_off_runs_the_rules_every_time(rng):
    _, _, w, b = _params(rng)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    with Context(GRAD_CACHE=0):
        for _ in range(2):
            _mlp_grads(x, w, b)
    assert gradcache.stats == {"hits": 0, "misses": 0}
