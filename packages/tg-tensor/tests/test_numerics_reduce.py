"""Reduction accuracy at large sizes: the scheduler's split-reduce rule (P1) keeps every serial float addition
chain short, so sums, means, variances and long-K matmuls stay close to numpy's pairwise summation.

The 2**24 / 2**25 element cases run on compiled devices; the PYTHON interpreter checks the same rule just above
the split threshold (2**14 per output)."""

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes


def _big(device: str, n: int) -> int:
    return n if device != "PYTHON" else 2**15 + 77


def _rel(got: float, want: float) -> float:
    return abs(got - want) / abs(want)


@pytest.mark.parametrize("n", [2**24, 2**25, 20_000_000])
def test_sum_of_ones_is_exact(device: str, n: int) -> None:
    n = _big(device, n)
    assert Tensor.ones(n, device=device).sum().item() == n  # folded: n copies of a constant (P1a)
    assert Tensor.ones(n, device=device).contiguous().sum().item() == n  # stored: the split partial sums (P1)


@pytest.mark.parametrize("n", [2**24, 2**25])
def test_sum_and_mean_of_uniform(device: str, n: int, rng: np.random.Generator) -> None:
    a = rng.random(_big(device, n), dtype=np.float32)
    t = Tensor(a, device=device)
    want_sum = np.sum(a, dtype=np.float64)
    assert _rel(t.sum().item(), want_sum) < 1e-6
    assert _rel(t.mean().item(), want_sum / a.size) < 1e-6
    Tensor.manual_seed(3)
    assert abs(Tensor.rand(_big(device, 2**22), device=device).mean().item() - 0.5) < 0.01  # was 0.25 at 64M


@pytest.mark.parametrize("n", [2**24, 2**25])
def test_sum_is_as_accurate_as_numpy(device: str, n: int, rng: np.random.Generator) -> None:
    a = rng.standard_normal(_big(device, n), dtype=np.float32) + np.float32(0.3)
    exact = np.sum(a, dtype=np.float64)
    ulp = float(np.spacing(np.float32(abs(exact))))
    got = Tensor(a, device=device).sum().item()
    assert abs(got - exact) <= abs(float(a.sum()) - exact) + ulp  # one serial chain is ~5 ulps off at 2**24


def test_sum_of_a_constant_that_is_not_exact(device: str) -> None:
    n = _big(device, 10**6)
    exact = n * float(np.float32(0.1))
    got = Tensor.full((n,), 0.1, device=device).sum().item()
    assert got == np.float32(exact)  # c*n rounded once (P1a); 256-chunk partials gave 2.6e-6, one chain 1e-2
    stored = Tensor.full((n,), 0.1, device=device).contiguous().sum().item()
    # measured 1.4e-7 at 10**6 on CPU (numpy 4.5e-8); PYTHON (no vector lanes: each 256-chunk is one serial
    # chain of equal addends) 9.5e-7, CL (PoCL) 3.3e-6
    assert _rel(stored, exact) < (2e-7 if device.startswith("CPU") else 1e-5)
    means = Tensor.full((3, n), 0.1, device=device).mean(1).numpy()
    np.testing.assert_allclose(means, np.full(3, 0.1, np.float32), rtol=1e-7, atol=0)


def test_sum_axes_rows_and_columns(device: str, rng: np.random.Generator) -> None:
    n = _big(device, 2**20)
    a = rng.standard_normal((3, n)).astype(np.float32) + 10
    t = Tensor(a, device=device)
    ref = a.astype(np.float64)
    np.testing.assert_allclose(t.sum(1).numpy(), ref.sum(1), rtol=1e-6)
    np.testing.assert_allclose(t.T.sum(0).numpy(), ref.sum(1), rtol=1e-6)  # reduced axis strided
    np.testing.assert_allclose(t.mean(1, keepdim=True).numpy(), ref.mean(1, keepdims=True), rtol=1e-6)


def test_var_std_with_large_offset(device: str, rng: np.random.Generator) -> None:
    n = _big(device, 2**22)
    a = (rng.standard_normal(n) * 2 + 1000).astype(np.float32)
    t = Tensor(a, device=device)
    ref = a.astype(np.float64)
    assert _rel(t.var().item(), ref.var(ddof=1)) < 1e-4
    assert _rel(t.std().item(), ref.std(ddof=1)) < 1e-4


def test_long_k_matmul(device: str, rng: np.random.Generator) -> None:
    k = _big(device, 2**22)
    a = rng.standard_normal((2, k)).astype(np.float32)
    b = rng.standard_normal((k, 2)).astype(np.float32)
    got = (Tensor(a, device=device) @ Tensor(b, device=device)).numpy()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)  # error bound is relative to sum |a*b|
    assert np.max(np.abs(got - ref) / scale) < 1e-7


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_half_inputs_accumulate_in_float32(device: str, dtype: dtypes) -> None:
    n = _big(device, 2**18)
    t = Tensor.full((n,), 0.25, dtype=dtype, device=device)
    assert t.mean().item() == 0.25
    assert t.sum(dtype=dtypes.float32).item() == n * 0.25
    small = Tensor.full((3000,), 0.1, dtype=dtype, device=device)
    want = np.float32(3000 * float(np.float32(small.cast(dtypes.float32).tolist()[0])))
    got = small.sum().cast(dtypes.float32).item()
    assert abs(got - want) <= abs(want) * 2**-7  # one rounding to the narrow dtype, not 3000


def test_cumsum_stays_accurate(device: str) -> None:
    n = 2**20 if device != "PYTHON" else 3000  # the scan costs n*sqrt(n): the interpreter gets a small one
    got = Tensor.full((n,), 0.1, device=device).cumsum(0).numpy()
    want = np.cumsum(np.full(n, np.float32(0.1), np.float64))
    # a serial float32 scan drifts to 1e-3 at 2**20. The CPU's vector accumulators keep it near 1e-7; GPU-style
    # kernels (CL) add each block's prefix in one accumulator per work-item and measure 2.4e-6 (a known gap, README).
    bound = 1e-6 if device in ("CPU", "PYTHON") else 5e-6
    assert np.max(np.abs(got - want) / want) < bound
    assert Tensor.ones(n, device=device).cumsum(0).numpy()[-1] == n
