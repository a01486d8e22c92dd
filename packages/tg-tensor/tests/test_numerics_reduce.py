"""Reduction accuracy at large sizes: the lowering accumulates every long float sum in nested blocks (tg.codegen's
`lower/blocked.py`: no serial rounding chain longer than 4 for plain sums) and the scheduler splits long reductions
with few outputs into partials (P1), so sums, means, variances, scans and long-K matmuls are as accurate as numpy's
pairwise summation. Bounds are stated against numpy's own float32 error: tg's may exceed it by at most 2 float32
ulps of the result on random data (both are within about 1.5 ulps of the exact sum; which one rounds luckier varies
with the data; one serial chain is 5-75 ulps off at 10**3-10**5 elements), and not at all on the 0.1 array.

The 2**24 / 2**25 element cases run on compiled devices; the PYTHON interpreter checks the same rules at smaller
sizes (just above the split threshold, 2**14 per output)."""

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes


def _big(device: str, n: int) -> int:
    return n if device != "PYTHON" else 2**15 + 77


def _rel(got: float, want: float) -> float:
    return abs(got - want) / abs(want)


def _ulp(x: float) -> float:
    return float(np.spacing(np.float32(abs(x))))


def _assert_within_numpy(got: float, numpy_got: float, exact: float, ulps: float = 2) -> None:
    """tg's error is at most numpy's float32 error plus `ulps` float32 ulps of the exact result."""
    err, numpy_err = abs(got - exact), abs(float(numpy_got) - exact)
    assert err <= numpy_err + ulps * _ulp(exact), f"error {err:.3g} vs numpy {numpy_err:.3g} (ulp {_ulp(exact):.3g})"


@pytest.mark.parametrize("n", [2**24, 2**25, 20_000_000])
def test_sum_of_ones_is_exact(device: str, n: int) -> None:
    n = _big(device, n)
    assert Tensor.ones(n, device=device).sum().item() == n  # folded: n copies of a constant (P1a)
    assert Tensor.ones(n, device=device).contiguous().sum().item() == n  # stored: the split partial sums (P1)


# 2**25 runs the same split partial-sum kernels as 2**24 over twice the data: in the slow run
@pytest.mark.parametrize("n", [2**24, pytest.param(2**25, marks=pytest.mark.slow)])
def test_sum_and_mean_of_uniform(device: str, n: int, rng: np.random.Generator) -> None:
    a = rng.random(_big(device, n), dtype=np.float32)
    t = Tensor(a, device=device)
    want_sum = np.sum(a, dtype=np.float64)
    _assert_within_numpy(t.sum().item(), a.sum(), want_sum)
    _assert_within_numpy(t.mean().item(), a.mean(), want_sum / a.size, ulps=3)  # sum * (1/n): one more rounding
    Tensor.manual_seed(3)
    assert abs(Tensor.rand(_big(device, 2**22), device=device).mean().item() - 0.5) < 0.01  # was 0.25 at 64M


@pytest.mark.parametrize("n", [2**24, pytest.param(2**25, marks=pytest.mark.slow)])  # 2**25: as above
def test_sum_is_as_accurate_as_numpy(device: str, n: int, rng: np.random.Generator) -> None:
    a = rng.standard_normal(_big(device, n), dtype=np.float32) + np.float32(0.3)
    exact = np.sum(a, dtype=np.float64)
    ulp = float(np.spacing(np.float32(abs(exact))))
    got = Tensor(a, device=device).sum().item()
    assert abs(got - exact) <= abs(float(a.sum()) - exact) + ulp  # one serial chain is ~5 ulps off at 2**24
    _assert_within_numpy(Tensor(a, device=device).mean().item(), a.mean(), exact / a.size, ulps=3)


def test_sum_of_a_constant_that_is_not_exact(device: str) -> None:
    n = _big(device, 10**6)
    exact = n * float(np.float32(0.1))
    got = Tensor.full((n,), 0.1, device=device).sum().item()
    assert got == np.float32(exact)  # c*n rounded once (P1a); 256-chunk partials gave 2.6e-6, one chain 1e-2
    stored_data = np.full(n, 0.1, np.float32)
    stored = Tensor(stored_data, device=device).sum().item()
    # blocked accumulation: 1.5e-8 at 10**6 on CPU, numpy 6.3e-8 (256-element partials gave 1.4e-7, one chain 1e-2).
    # CL (PoCL) is 1.4e-7: its work-items add 16 elements in a row before the local-memory tree (GPU heuristics).
    if device in ("CPU", "PYTHON"):
        _assert_within_numpy(stored, stored_data.sum(), exact, ulps=0)
        assert abs(stored - exact) <= abs(float(np.float32(exact)) - exact) + _ulp(exact)  # <= 1 ulp off the best
    else:
        _assert_within_numpy(stored, stored_data.sum(), exact)
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
    _assert_within_numpy(t.var().item(), a.var(ddof=1), ref.var(ddof=1), ulps=3)
    _assert_within_numpy(t.std().item(), a.std(ddof=1), ref.std(ddof=1), ulps=3)


@pytest.mark.parametrize("axis", [1, 0])
def test_many_outputs_as_accurate_as_pairwise(device: str, axis: int, rng: np.random.Generator) -> None:
    # 4096 outputs: no split (enough parallel work); rows reduce over a contiguous axis in vector lanes, columns
    # over a strided one (output lanes, unrolled reduce): both accumulate in blocks. numpy's own axis-0 sum adds
    # row after row (about 34 ulps off here), so the reference is numpy's pairwise sum of the contiguous copy.
    shape = (4096, 4096) if device != "PYTHON" else (40, 3000)
    a = rng.standard_normal(shape, dtype=np.float32) + np.float32(0.3)
    exact = a.astype(np.float64).sum(axis)
    pairwise = np.ascontiguousarray(a if axis == 1 else a.T).sum(1).astype(np.float64)
    got = Tensor(a, device=device).sum(axis).numpy().astype(np.float64)
    assert got.shape == exact.shape
    bound = np.max(np.abs(pairwise - exact)) + 2 * _ulp(np.max(np.abs(exact)))
    assert np.max(np.abs(got - exact)) <= bound


@pytest.mark.parametrize("n", [1001, 4099, 65537])
def test_odd_lengths_that_leave_a_tail(device: str, n: int, rng: np.random.Generator) -> None:
    # lengths that neither the blocks (4) nor the lanes divide: the blocked sum ends with a short tail loop
    a = rng.random((3, n), dtype=np.float32)
    t = Tensor(a, device=device)
    for got, want, np_got in ((t.sum(1).numpy(), a.astype(np.float64).sum(1), a.sum(1)),
                              (t.T.sum(0).numpy(), a.astype(np.float64).sum(1), a.sum(1))):  # fmt: skip
        for g, w, ng in zip(got, want, np_got, strict=True):
            _assert_within_numpy(float(g), ng, float(w))


def test_long_k_matmul(device: str, rng: np.random.Generator) -> None:
    k = _big(device, 2**22)
    a = rng.standard_normal((2, k)).astype(np.float32)
    b = rng.standard_normal((k, 2)).astype(np.float32)
    got = (Tensor(a, device=device) @ Tensor(b, device=device)).numpy()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)  # error bound is relative to sum |a*b|
    numpy_err = np.max(np.abs(a @ b - ref) / scale)  # numpy: BLAS (2.5e-9 tg vs 5e-9 numpy on CPU, measured)
    assert np.max(np.abs(got - ref) / scale) <= max(numpy_err, 2**-24)


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
    # a serial float32 scan (numpy's cumsum) drifts to 1e-2 at 2**20; blocked accumulation keeps tg's near 1e-7
    # (measured: CPU 1.3e-7, CL 7.4e-8 where one accumulator per work-item gave 2.4e-6, PYTHON 1.6e-7 at 3000)
    assert np.max(np.abs(got - want) / want) < 3e-7
    assert Tensor.ones(n, device=device).cumsum(0).numpy()[-1] == n
