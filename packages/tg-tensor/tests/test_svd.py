"""Tensor.svd against numpy.linalg.svd: singular values, reconstruction, orthogonality, shapes of both
full_matrices modes, batches, rank-deficient inputs, dtypes, errors; gradients against torch where installed."""

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes

RNG = np.random.default_rng(12)


def check_svd(a: np.ndarray, full_matrices: bool = True, atol: float = 2e-5) -> tuple[Tensor, Tensor, Tensor]:
    """Checks Tensor(a).svd() against numpy (values, reconstruction, orthogonality, shapes); returns (u, s, vh)."""
    result = Tensor(a).svd(full_matrices=full_matrices)
    u, s, vh = (t.numpy().astype(np.float64) for t in result)
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    rows_u, rows_vh = (m, n) if full_matrices else (k, k)
    assert u.shape == (*batch, m, rows_u) and s.shape == (*batch, k) and vh.shape == (*batch, rows_vh, n)
    scale = max(1.0, float(np.abs(a).max()))
    np.testing.assert_allclose(s, np.linalg.svd(a.astype(np.float64), compute_uv=False), atol=atol * scale)
    assert (np.diff(s, axis=-1) <= 0).all() and (s >= 0).all()
    rebuilt = (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :]
    np.testing.assert_allclose(rebuilt, a, atol=atol * scale)
    np.testing.assert_allclose(
        np.swapaxes(u, -1, -2) @ u, np.broadcast_to(np.eye(rows_u), (*batch, rows_u, rows_u)), atol=atol
    )
    np.testing.assert_allclose(
        vh @ np.swapaxes(vh, -1, -2), np.broadcast_to(np.eye(rows_vh), (*batch, rows_vh, rows_vh)), atol=atol
    )
    return result


# 17x17: more Jacobi sweeps of the same kernels as 4x4 (~10 CPU-s), in the slow run; a wide matrix (3x6, transposed
# to a tall one) with --slow too: test_svd_batched_and_reduced's (3, 4, 6) takes that path by default
SLOW = pytest.mark.slow
SHAPES = [(4, 4), (6, 3), pytest.param((3, 6), marks=SLOW), (1, 1), (7, 1), (1, 5), pytest.param((17, 17), marks=SLOW)]


@pytest.mark.parametrize("shape", SHAPES)
def test_svd_matches_numpy(shape):
    check_svd(RNG.standard_normal(shape).astype(np.float32))


# (3, 4, 6): a batch of wide matrices by default; (2, 3, 5, 4), two batch axes of tall ones, with --slow
@pytest.mark.parametrize("shape", [pytest.param((2, 3, 5, 4), marks=pytest.mark.slow), (3, 4, 6)])
def test_svd_batched_and_reduced(shape):
    a = RNG.standard_normal(shape).astype(np.float32)
    check_svd(a, full_matrices=True)
    check_svd(a, full_matrices=False)


# the shapes of test_svd_matches_numpy (6x3, 4x4): the same ~30 kernels a shape, compiled once for both tests
def test_svd_rank_deficient_matrices_keep_orthonormal_vectors():
    low_rank = (RNG.standard_normal((6, 2)) @ RNG.standard_normal((2, 3))).astype(np.float32)  # rank 2 of 3
    check_svd(low_rank)
    zero_col = RNG.standard_normal((4, 4)).astype(np.float32)
    zero_col[:, 2] = 0
    check_svd(zero_col)
    check_svd(np.zeros((6, 3), np.float32))  # every singular value 0: U and V still orthogonal
    check_svd(np.ones((4, 4), np.float32))  # rank 1


# one decomposition per case (~30 kernels in float64); full_matrices=True (U completed to 12x12, the path the float32
# shapes above take by default) with --slow
@pytest.mark.parametrize("full_matrices", [False, pytest.param(True, marks=SLOW)])
def test_svd_ill_conditioned_float64(full_matrices):
    q1, _ = np.linalg.qr(RNG.standard_normal((12, 12)))
    q2, _ = np.linalg.qr(RNG.standard_normal((9, 9)))
    a = q1[:, :9] @ np.diag(np.logspace(0, -10, 9)) @ q2
    s = check_svd(a, full_matrices=full_matrices, atol=1e-12)[1]
    assert s.dtype == dtypes.float64
    np.testing.assert_allclose(s.numpy(), np.logspace(0, -10, 9), rtol=1e-6, atol=1e-14)


def test_svd_dtypes_and_errors():
    u, s, vh = Tensor([[1, 2], [3, 4]]).svd()  # integers: the default float
    assert s.dtype == dtypes.default_float
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(np.array([[1.0, 2], [3, 4]]), compute_uv=False), rtol=1e-6)
    h = RNG.standard_normal((3, 5)).astype(np.float16)
    u, s, vh = Tensor(h).svd(full_matrices=False)  # float16 computes in float32 and returns float16
    assert (u.dtype, s.dtype, vh.dtype) == (dtypes.float16,) * 3
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(h.astype(np.float64), compute_uv=False), rtol=2e-3)
    nan = np.eye(4, dtype=np.float32)  # 4x4: test_svd_matches_numpy's kernels
    nan[1, 1] = np.nan
    assert np.isnan(Tensor(nan).svd()[1].numpy()).any()  # NaN in, NaN out (a fixed number of sweeps: no hang)
    with pytest.raises(ValueError, match=r"svd: needs a matrix .* got shape \(3,\)"):
        Tensor([1.0, 2.0, 3.0]).svd()
    with pytest.raises(ValueError, match=r"svd: needs a non-empty matrix, got shape \(0, 3\)"):
        Tensor.zeros(0, 3).svd()


@pytest.mark.slow  # backward through every Jacobi sweep
def test_svd_gradient_of_singular_values_is_u_vt():
    a = RNG.standard_normal((5, 3)).astype(np.float32)
    t = Tensor(a, requires_grad=True)
    t.svd()[1].sum().backward()
    nu, _, nvh = np.linalg.svd(a.astype(np.float64), full_matrices=False)
    np.testing.assert_allclose(t.grad.numpy(), nu @ nvh, atol=2e-5)  # d(sum S)/dA = U Vᵀ


@pytest.mark.torch
def test_svd_gradient_matches_torch():
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    w = RNG.standard_normal((4, 6)).astype(np.float32)
    t = Tensor(a, requires_grad=True)
    u, s, vh = t.svd(full_matrices=False)
    ((u[:, :2] * s[:2]) @ vh[:2] * Tensor(w)).sum().backward()  # a sign-invariant function of the vectors
    ta = torch.tensor(a, requires_grad=True)
    tu, ts, tvh = torch.linalg.svd(ta, full_matrices=False)
    ((tu[:, :2] * ts[:2]) @ tvh[:2] * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), ta.grad.numpy(), atol=5e-5)


def test_svd_inside_a_function_body_stays_lazy():
    from tg.tensor import function

    a = RNG.standard_normal((5, 4)).astype(np.float32)
    s = function(lambda t: t.svd()[1])(Tensor(a)).numpy()
    np.testing.assert_allclose(s, np.linalg.svd(a.astype(np.float64), compute_uv=False), atol=2e-5)


def test_svd_under_tinyjit_replays_with_new_data():
    from tg.tensor import TinyJit

    jitted = TinyJit(lambda t: t.svd()[1].realize())
    for _ in range(3):  # capture, then replays
        a = RNG.standard_normal((5, 4)).astype(np.float32)
        np.testing.assert_allclose(jitted(Tensor(a)).numpy(), np.linalg.svd(a, compute_uv=False), atol=2e-5)


def test_svd_of_an_empty_batch():
    u, s, vh = Tensor(np.zeros((0, 3, 2), np.float32)).svd()
    assert u.numpy().shape == (0, 3, 3) and s.numpy().shape == (0, 2) and vh.numpy().shape == (0, 2, 2)
