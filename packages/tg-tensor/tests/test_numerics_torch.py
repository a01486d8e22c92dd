"""Edge-case numerics against PyTorch (skipped where torch is absent): NaN/inf through max/min/arg-reductions/clip,
integer floor division and modulo, and the float32 math functions at their extremes."""

import math

import numpy as np
import pytest

from tg.tensor import Tensor

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

nan, inf = math.nan, math.inf
ROWS = np.array([[1.0, nan, 3.0, 0.5], [nan, 1.0, nan, 2.0], [3.0, 2.0, 1.0, 0.0], [-inf, inf, 0.0, 1.0],
                 [nan, nan, nan, nan], [inf, nan, -inf, 0.0]], np.float32)  # fmt: skip


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("dim", [0, 1])
def test_nan_reductions_match_torch(device: str, op: str, dim: int) -> None:
    got = getattr(Tensor(ROWS, device=device), op)(dim).numpy()
    want = getattr(torch.from_numpy(ROWS), op)(dim)
    want = want.values if op in ("max", "min") else want
    np.testing.assert_array_equal(got, want.numpy())


def test_nan_elementwise_match_torch(device: str) -> None:
    a, b = ROWS[:, :2].ravel(), ROWS[:, 2:].ravel()
    ta, tb, pa, pb = Tensor(a, device=device), Tensor(b, device=device), torch.from_numpy(a), torch.from_numpy(b)
    np.testing.assert_array_equal(ta.maximum(tb).numpy(), torch.maximum(pa, pb).numpy())
    np.testing.assert_array_equal(ta.minimum(tb).numpy(), torch.minimum(pa, pb).numpy())
    np.testing.assert_array_equal(ta.clip(0.0, 1.0).numpy(), torch.clamp(pa, 0.0, 1.0).numpy())


def test_int_floor_division_matches_torch(device: str) -> None:
    a = np.array([7, -7, 7, -7, 0, 13, -13, 2**31 - 1, -(2**31)], np.int32)
    b = np.array([2, 2, -2, -2, 5, -4, 4, -3, 7], np.int32)
    ta, tb, pa, pb = Tensor(a, device=device), Tensor(b, device=device), torch.from_numpy(a), torch.from_numpy(b)
    np.testing.assert_array_equal((ta // tb).numpy(), torch.floor_divide(pa, pb).numpy())
    np.testing.assert_array_equal((ta % tb).numpy(), torch.remainder(pa, pb).numpy())


@pytest.mark.parametrize("fn", ["exp", "log", "sin", "cos", "tan", "tanh", "sigmoid", "erf", "expm1", "log1p", "sqrt"])
def test_math_extremes_close_to_torch(device: str, fn: str) -> None:
    x = np.array([0.0, -0.0, 1e-30, -1e-8, 1e-8, 0.5, -3.0, 20.0, -100.0, 88.7, 1e4, 3e38, -3e38, inf, -inf, nan],
                 np.float32)  # fmt: skip
    with np.errstate(all="ignore"):
        got = getattr(Tensor(x, device=device), fn)().numpy()
    want = getattr(torch, fn)(torch.from_numpy(x)).numpy()
    # atol: torch flushes some subnormal results (sigmoid(-100)) to 0; tg returns the subnormal
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=1e-37, equal_nan=True)
