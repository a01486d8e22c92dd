"""qr and newton_schulz against numpy (and torch's gradients where installed)."""

import numpy as np
import pytest

from tg.tensor import Tensor
from tg.tensor.nn import optim

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 5), (1, 1), (2, 5, 4)])
def test_qr_complete_matches_numpy(shape):
    a = RNG.standard_normal(shape).astype(np.float32)
    q, r = Tensor(a).qr()
    assert q.shape == (*shape[:-1], shape[-2]) and r.shape == shape
    nq, nr = np.linalg.qr(a.astype(np.float64), mode="complete")
    np.testing.assert_allclose(r.numpy(), nr, atol=2e-5)
    np.testing.assert_allclose(q.numpy(), nq, atol=2e-5)
    np.testing.assert_allclose(q.numpy() @ r.numpy(), a, atol=2e-5)


def test_qr_reduced_r_mode_and_degenerate_columns():
    a = np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [2.0, 4.0, 0.0]], np.float32)  # rank 1
    q, r = Tensor(a).qr(mode="reduced")
    assert q.shape == (4, 3) and r.shape == (3, 3)
    np.testing.assert_allclose(q.numpy() @ r.numpy(), a, atol=1e-5)
    np.testing.assert_allclose(q.numpy().T @ q.numpy(), np.eye(3), atol=1e-5)
    assert np.isfinite(q.numpy()).all() and np.isfinite(r.numpy()).all()
    np.testing.assert_allclose(np.abs(np.diag(r.numpy())), np.abs(np.diag(np.linalg.qr(a)[1])), atol=1e-5)
    _, r_only = Tensor(a).qr(mode="r")
    np.testing.assert_allclose(r_only.numpy(), r.numpy())
    with pytest.raises(ValueError, match="mode must be"):
        Tensor(a).qr(mode="full")
    with pytest.raises(ValueError, match=r"needs a matrix .* got shape \(3,\)"):
        Tensor([1.0, 2.0, 3.0]).qr()


def newton_schulz_ref(g: np.ndarray, steps: int, params: tuple[float, ...], eps: float = 1e-7) -> np.ndarray:
    x = g.astype(np.float64)
    tall = x.shape[-2] > x.shape[-1]
    x = np.swapaxes(x, -1, -2) if tall else x
    x = x / (np.sqrt((x * x).sum((-2, -1), keepdims=True)) + eps)
    for _ in range(steps):
        a = x @ np.swapaxes(x, -1, -2)
        new, term = params[0] * x, x
        for p in params[1:]:
            term = a @ term
            new = new + p * term
        x = new
    return np.swapaxes(x, -1, -2) if tall else x


@pytest.mark.parametrize("params", [(3.4445, -4.775, 2.0315), (1.5, -0.5), (2.0, -1.5, 0.5)])
@pytest.mark.parametrize("shape", [(4, 6), (7, 3), (2, 3, 5)])
def test_newton_schulz_method_matches_numpy(params, shape):
    g = RNG.standard_normal(shape).astype(np.float32)
    out = Tensor(g).newton_schulz(5, params).numpy()
    np.testing.assert_allclose(out, newton_schulz_ref(g, 5, params), rtol=1e-4, atol=1e-4)
    assert optim.newton_schulz is Tensor.newton_schulz  # Muon's iteration is the Tensor method


def test_newton_schulz_orthogonalises():
    g = RNG.standard_normal((5, 8)).astype(np.float32)
    x = Tensor(g).newton_schulz(30, (1.5, -0.5)).numpy()  # the classic cubic iteration converges
    np.testing.assert_allclose(x @ x.T, np.eye(5), atol=1e-3)


@pytest.mark.torch
def test_qr_gradient_matches_torch():
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal((5, 3)).astype(np.float32)
    rq, rr = RNG.standard_normal((5, 3)).astype(np.float32), RNG.standard_normal((3, 3)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    q, r = x.qr(mode="reduced")
    ((q * Tensor(rq)).sum() + (r * Tensor(rr)).sum()).backward()
    tx = torch.tensor(a, requires_grad=True)
    tq, tr = torch.linalg.qr(tx, mode="reduced")
    ((tq * torch.tensor(rq)).sum() + (tr * torch.tensor(rr)).sum()).backward()
    np.testing.assert_allclose(q.numpy(), tq.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-4)
