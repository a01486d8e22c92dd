"""Autograd: requires_grad semantics, backward/.grad, Tensor.gradient, detach/no_grad, training mode, and gradient
rules checked against float64 central differences (numpy)."""

import math
import zlib
from collections.abc import Callable

import numpy as np
import pytest

from tg.tensor import Context, Tensor, enable_grad, is_grad_enabled, no_grad, set_grad_enabled


def numeric_grad(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        hi = f(x)
        x[i] = old - eps
        lo = f(x)
        x[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g


# (name, tg function, input generator): inputs are float64, the function returns a tensor; the test differentiates
# sum(f(x) * r) for a random r
UNARY_CASES: list[tuple[str, Callable[[Tensor], Tensor], Callable[[np.random.Generator], np.ndarray]]] = [
    ("exp", lambda x: x.exp(), lambda r: r.standard_normal((3, 4))),
    ("log", lambda x: x.log(), lambda r: r.uniform(0.5, 3, (3, 4))),
    ("sqrt", lambda x: x.sqrt(), lambda r: r.uniform(0.5, 3, (3, 4))),
    ("sin", lambda x: x.sin(), lambda r: r.standard_normal((3, 4))),
    ("cos", lambda x: x.cos(), lambda r: r.standard_normal((3, 4))),
    ("reciprocal", lambda x: x.reciprocal(), lambda r: r.uniform(0.5, 3, (3, 4))),
    ("sigmoid", lambda x: x.sigmoid(), lambda r: r.standard_normal((3, 4))),
    ("tanh", lambda x: x.tanh(), lambda r: r.standard_normal((3, 4))),
    ("relu", lambda x: x.relu(), lambda r: r.standard_normal((3, 4)) + 0.05),
    ("abs", lambda x: x.abs(), lambda r: r.standard_normal((3, 4)) + 0.05),
    ("square", lambda x: x.square(), lambda r: r.standard_normal((3, 4))),
    ("pow3", lambda x: x**3, lambda r: r.standard_normal((3, 4))),
    ("pow_float", lambda x: x**1.7, lambda r: r.uniform(0.5, 3, (3, 4))),
    ("rpow", lambda x: 2.0**x, lambda r: r.standard_normal((3, 4))),
    ("sum_axis", lambda x: x.sum(1), lambda r: r.standard_normal((3, 4))),
    ("sum_all", lambda x: x.sum(), lambda r: r.standard_normal((3, 4))),
    ("mean", lambda x: x.mean(0, keepdim=True), lambda r: r.standard_normal((3, 4))),
    ("max", lambda x: x.max(1), lambda r: r.standard_normal((3, 4))),
    ("min", lambda x: x.min(0), lambda r: r.standard_normal((3, 4))),
    ("prod", lambda x: x.prod(1), lambda r: r.uniform(0.5, 2, (3, 4))),
    ("softmax", lambda x: x.softmax(1), lambda r: r.standard_normal((3, 4))),
    ("log_softmax", lambda x: x.log_softmax(0), lambda r: r.standard_normal((3, 4))),
    ("reshape_permute", lambda x: x.reshape(2, 6).permute(1, 0), lambda r: r.standard_normal((3, 4))),
    ("expand", lambda x: x.reshape(3, 1, 4).expand(3, 5, 4), lambda r: r.standard_normal((3, 4))),
    ("pad", lambda x: x.pad(((1, 2), (0, 1))), lambda r: r.standard_normal((3, 4))),
    ("shrink", lambda x: x.shrink(((1, 3), (0, 2))), lambda r: r.standard_normal((3, 4))),
    ("flip", lambda x: x.flip(1), lambda r: r.standard_normal((3, 4))),
    ("slice_step", lambda x: x[::-2, 1::2], lambda r: r.standard_normal((3, 4))),
    ("cat", lambda x: x.cat(x * 2, dim=1), lambda r: r.standard_normal((3, 4))),
    ("where", lambda x: (x > 0).where(x * 3, x * x), lambda r: r.standard_normal((3, 4)) + 0.05),
    ("maximum", lambda x: x.maximum(x.flip(0)), lambda r: r.standard_normal((3, 4))),
    ("matmul", lambda x: x @ x.transpose(), lambda r: r.standard_normal((3, 4))),
    ("div", lambda x: x / (x * x + 1), lambda r: r.standard_normal((3, 4))),
    ("floor_is_flat", lambda x: x.floor() * x, lambda r: r.uniform(0.1, 0.9, (3, 4)) + np.arange(4)),
]


@pytest.mark.parametrize("name,fn,gen", UNARY_CASES, ids=[c[0] for c in UNARY_CASES])
def test_gradient_matches_central_differences(name, fn, gen, device):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = gen(rng).astype(np.float64)
    out_shape = fn(Tensor(x, device=device)).shape
    r = rng.standard_normal(out_shape)

    def f(v: np.ndarray) -> float:
        return float((fn(Tensor(v, device=device)).numpy() * r).sum())

    xt = Tensor(x, device=device, requires_grad=True)
    (fn(xt) * Tensor(r, device=device)).sum().backward()
    assert xt.grad is not None and xt.grad.dtype == xt.dtype and xt.grad.shape == xt.shape
    np.testing.assert_allclose(xt.grad.numpy(), numeric_grad(f, x.copy()), rtol=1e-5, atol=1e-6)


def test_max_splits_gradient_among_ties(device):
    x = Tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], device=device, requires_grad=True)
    x.max(1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-6)


def test_prod_gradient_with_zeros(device):
    x = Tensor([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0], [1.0, 2.0, 4.0]], device=device, requires_grad=True)
    x.prod(1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 6, 0], [0, 0, 0], [8, 4, 2]])


def test_requires_grad_propagates_like_torch(device):
    w = Tensor([1.0, 2.0], device=device, requires_grad=True)
    c = Tensor([3.0, 4.0], device=device)
    assert w.requires_grad and w.is_leaf
    assert c.requires_grad is None and c.is_leaf
    y = w * c
    assert y.requires_grad and not y.is_leaf
    assert not (c * 2).requires_grad
    d = y.detach()
    assert not d.requires_grad and d.is_leaf
    with pytest.raises(RuntimeError, match="does not require grad"):
        (d * 2).sum().backward()  # detached: nothing in its graph can take a gradient
    (c * 2).sum().backward()  # nothing marked, c never set: it gets a gradient (tinygrad's habit; torch raises)
    assert c.grad is not None and c.grad.tolist() == [2.0, 2.0]


def test_backward_accumulates_and_after_item(device):
    w = Tensor([1.0, -2.0, 3.0], device=device, requires_grad=True)
    loss = (w * w).sum()
    assert loss.item() == 14.0  # realizing the loss first must not cut the graph
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), [2, -4, 6])
    (w * 3).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [5, -1, 9])
    assert not w.grad.requires_grad


def test_gradient_through_realized_intermediate(device):
    w = Tensor([[1.0, 2.0], [3.0, 4.0]], device=device, requires_grad=True)
    h = (w * 2).relu()
    h.realize()
    assert h.requires_grad
    (h * h).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 8 * w.numpy())


def test_gradient_after_realizing_a_sibling_that_shares_intermediates(device):
    """Realizing `key` first rewrites `value`'s graph around the shared stored intermediates; realizing `value`
    next must still keep the graph its gradient flows through (it once gave all-zero gradients)."""
    x = Tensor(np.arange(8, dtype=np.float32), device=device, requires_grad=True)
    key, value = (Tensor(np.arange(8, dtype=np.int32), device=device) * 1).contiguous(), x
    for _ in range(2):
        take = key.flip(0) < key
        key, value = take.where(key.flip(0), key).contiguous(), take.where(value.flip(0), value).contiguous()
    key.numpy()
    value.numpy()
    (g,) = value.sum().gradient(x)
    np.testing.assert_array_equal(g.numpy(), [2, 2, 2, 2, 0, 0, 0, 0])


def test_gradient_through_clone_realized_inside_a_larger_graph(device):
    """`out = x.clone() * 2; out.float().numpy()` stores the clone's copy as an intermediate: the gradient must
    still reach x (it once stopped at the stored copy)."""
    x = Tensor([1.0, 2.0, 3.0], device=device, dtype="float16", requires_grad=True)
    out = x.clone() * 2
    out.float().numpy()
    out.sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_equal_constant_leaves_get_separate_grads(device):
    a = Tensor.zeros(3, device=device, requires_grad=True)
    b = Tensor.zeros(3, device=device, requires_grad=True)
    (a * 2 + b * 5).sum().backward()
    assert a.grad.tolist() == [2.0, 2.0, 2.0]
    assert b.grad.tolist() == [5.0, 5.0, 5.0]


def test_leaf_used_twice_and_retain_grad(device):
    x = Tensor([2.0, 3.0], device=device, requires_grad=True)
    y = (x * x).retain_grad()
    (y + x).sum().backward()
    assert x.grad.tolist() == [5.0, 7.0]
    assert y.grad.tolist() == [1.0, 1.0]


def test_no_grad_and_detach_cut_paths(device):
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    with no_grad():
        assert not is_grad_enabled()
        frozen = x * 10
        with enable_grad():
            assert is_grad_enabled()
    assert is_grad_enabled()
    assert not frozen.requires_grad
    loss = (x * frozen).sum() + (x.detach() * 100).sum()
    loss.backward()
    assert x.grad.tolist() == [10.0, 20.0]  # neither the no_grad product nor the detached term gives gradient
    with set_grad_enabled(False):
        assert not (x * 2).requires_grad


def test_broadcast_binary_ops_in_and_out_of_grad_mode(device):
    """Same-dtype operands of different shapes (broadcast on the operands' nodes in grad mode, through operand tensors
    under no_grad with tracked inputs): values and gradients as numpy's."""
    a_np = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    b_np = np.array([0.5, 2.0, -1.0], dtype=np.float32)
    a = Tensor(a_np, device=device, requires_grad=True)
    b = Tensor(b_np, device=device, requires_grad=True)
    out = a * b - b + b.reshape(1, 3) * a
    with no_grad():
        frozen = a * b - b
    assert not frozen.requires_grad
    np.testing.assert_allclose(frozen.numpy(), a_np * b_np - b_np, rtol=1e-6)
    (out.sum() + (a * frozen).sum()).backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * b_np + (a_np * b_np - b_np), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), (2 * a_np - 1).sum(0), rtol=1e-6)


@no_grad()
def _decorated(x: Tensor) -> Tensor:
    return x * 2


def test_no_grad_decorator_and_optimizer_style_update(device):
    w = Tensor([1.0, 2.0], device=device, requires_grad=True)
    assert not _decorated(w).requires_grad
    (w * w).sum().backward()
    with Tensor.no_grad():
        w.assign(w - 0.25 * w.grad)
    w.realize()
    assert w.tolist() == [0.5, 1.0]
    assert w.requires_grad and w.is_leaf
    w.grad = None
    (w * w).sum().backward()
    assert w.grad.tolist() == [1.0, 2.0]


def test_gradient_functional(device):
    x = Tensor([1.0, 2.0, 3.0], device=device)
    y = Tensor([4.0, 5.0, 6.0], device=device)
    unused = Tensor([1.0], device=device)
    gx, gy, gu = (x * y).sum().gradient(x, y, unused)
    assert gx.tolist() == [4.0, 5.0, 6.0] and gy.tolist() == [1.0, 2.0, 3.0] and gu.tolist() == [0.0]
    (gx2,) = (x * 2).gradient(x, gradient=Tensor([1.0, 10.0, 100.0], device=device))
    assert gx2.tolist() == [2.0, 20.0, 200.0]


def test_second_derivative(device):
    x = Tensor([0.5, -1.0], device=device, dtype="float64")
    (g,) = (x * x * x).sum().gradient(x)
    (gg,) = g.sum().gradient(x)
    np.testing.assert_allclose(gg.numpy(), 6 * x.numpy())


def test_autograd_errors(device):
    with pytest.raises(RuntimeError, match="floating point"):
        Tensor([1, 2], device=device, requires_grad=True)
    w = Tensor([1.0, 2.0], device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="one-element"):
        (w * 2).backward()
    with pytest.raises(RuntimeError, match="shape"):
        (w * 2).backward(Tensor([1.0], device=device))
    with pytest.raises(RuntimeError, match="leaf"):
        (w * 2).requires_grad_(False)


def test_training_flag():
    assert Tensor.training is False
    with Tensor.train():
        assert Tensor.training is True
        with Tensor.train(False):
            assert Tensor.training is False
    with Context(TRAINING=1):
        assert Tensor.training is True
    assert Tensor.training is False


def test_tiny_mlp_loss_falls(device):
    Tensor.manual_seed(0)
    rng = np.random.default_rng(0)
    xs = Tensor(rng.standard_normal((32, 4)).astype(np.float32), device=device)
    ys = Tensor((rng.standard_normal((32, 1)) > 0).astype(np.float32), device=device)
    w1 = Tensor.randn(4, 16, device=device, requires_grad=True)
    w2 = Tensor.randn(16, 1, device=device, requires_grad=True)
    losses = []
    for _ in range(8):
        pred = ((xs @ w1).relu() @ w2).sigmoid()
        loss = ((pred - ys) ** 2).mean()
        loss.backward()
        with no_grad():
            for p in (w1, w2):
                p.assign(p - 0.5 * p.grad)
                p.grad = None
        Tensor.realize(w1, w2)
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.9, losses


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tanh_gradient_from_its_result_at_the_edges(dtype: str, device: str) -> None:
    # tanh's gradient is built from its result (1 - y^2 below |x| 0.55, 4e / (1 + e)^2 with e = exp(-2|x|) above),
    # not node by node through its series and exp: values vs float64 numpy at 0, tiny, the series' edge, large |x|
    # (exactly 0 once e underflows), +-inf (0) and NaN (NaN)
    x = np.array([0, 1e-8, -0.3, 0.549, 0.551, 1.0, -2.5, 5.0, 9.0, -20.0, 1e30, np.inf, -np.inf, np.nan], dtype)
    xt = Tensor(x, device=device, requires_grad=True)
    r = np.linspace(-2, 2, x.size).astype(dtype)
    (xt.tanh() * Tensor(r, device=device)).sum().backward()
    assert xt.grad is not None and xt.grad.dtype == xt.dtype
    with np.errstate(over="ignore"):
        ref = r.astype(np.float64) / np.cosh(x.astype(np.float64)) ** 2
    rtol = 2e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(xt.grad.numpy(), ref, rtol=rtol, atol=0)


def _gelu_grad_ref(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    phi = 0.5 * np.vectorize(math.erfc)(-x / math.sqrt(2))
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.isinf(x), phi, phi + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_gradient_from_phi_and_the_density(dtype: str, device: str) -> None:
    # gelu's gradient is Phi(x) + x * pdf(x) (float64: the forward's Phi; float32: erfc from one exp, within 3e-7),
    # not node by node through the erf series: values vs float64 math.erfc at 0, tiny, both erf branches, its zero
    # near -0.75, large |x| (the pdf term 0 from 10 on), +-inf (1, 0) and NaN (NaN)
    x = np.array([0, 1e-8, -0.3, 0.5, -1.2, 1.5, -2.5, 3.0, 5.0, -5.0, 9.0, 20.0, 1e30, -1e30, np.inf, -np.inf,
                  np.nan], dtype)  # fmt: skip
    xt = Tensor(x, device=device, requires_grad=True)
    r = np.linspace(-2, 2, x.size).astype(dtype)
    (xt.gelu() * Tensor(r, device=device)).sum().backward()
    assert xt.grad is not None and xt.grad.dtype == xt.dtype
    got, ref = xt.grad.numpy(), r.astype(np.float64) * _gelu_grad_ref(x)
    tol = 1e-6 if dtype == "float32" else 1e-12  # absolute: the gradient is O(1) and crosses 0
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    dense = np.linspace(-5.5, 5.5, 1101).astype(dtype)  # float64 Phi is 0 below -4 sqrt(2) (about 1e-10)
    dt = Tensor(dense, device=device, requires_grad=True)
    dt.gelu().sum().backward()
    assert dt.grad is not None
    tol = 3e-7 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(dt.grad.numpy(), _gelu_grad_ref(dense), rtol=tol, atol=tol)


def test_gelu_second_derivative(device: str) -> None:
    x = np.array([-3.0, -0.7, -0.2, 0.0, 0.3, 0.6, 2.0])
    xt = Tensor(x, device=device, requires_grad=True)
    (g,) = xt.gelu().sum().gradient(xt)
    (gg,) = g.sum().gradient(xt)
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(g.numpy(), _gelu_grad_ref(x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gg.numpy(), pdf * (2 - x * x), rtol=1e-10, atol=1e-13)


def test_tanh_second_derivative(device: str) -> None:
    x = np.array([-3.0, -0.7, -0.2, 0.0, 0.3, 0.6, 2.0])
    xt = Tensor(x, device=device, requires_grad=True)
    (g,) = xt.tanh().sum().gradient(xt)
    (gg,) = g.sum().gradient(xt)
    y = np.tanh(x)
    np.testing.assert_allclose(g.numpy(), 1 - y * y, rtol=1e-13)
    np.testing.assert_allclose(gg.numpy(), -2 * y * (1 - y * y), rtol=1e-12, atol=1e-15)
