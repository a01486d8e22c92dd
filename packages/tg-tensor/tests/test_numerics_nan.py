"""NaN and inf through max/min/maximum/minimum/argmax/argmin/clip: PyTorch's semantics (NaN propagates, the
arg-reductions point at the first NaN), compared with numpy's NaN-propagating functions."""

import numpy as np
import pytest

from tg.tensor import Tensor

nan, inf = float("nan"), float("inf")

ROWS = [
    [1.0, nan, 3.0],
    [nan, 1.0, nan],
    [3.0, 2.0, 1.0],
    [-inf, inf, 0.0],
    [nan, nan, nan],
    [inf, nan, -inf],
    [0.0, -2.0, -1.0],
    [1.0, 3.0, 3.0],
]


@pytest.mark.parametrize("row", ROWS, ids=[str(r) for r in ROWS])
def test_reductions_nan_inf_table(device: str, row: list[float]) -> None:
    x = np.array(row, np.float32)
    t = Tensor(x, device=device)
    np.testing.assert_equal(t.max().item(), np.max(x))
    np.testing.assert_equal(t.min().item(), np.min(x))
    # numpy's argmax/argmin also return the first NaN
    assert t.argmax().item() == int(np.argmax(x))
    assert t.argmin().item() == int(np.argmin(x))


def test_arg_reductions_along_axis_stay_in_range(device: str) -> None:
    x = np.array(ROWS, np.float32)
    t = Tensor(x, device=device)
    for axis in (0, 1):
        for fn in ("argmax", "argmin"):
            got = getattr(t, fn)(axis).numpy()
            np.testing.assert_array_equal(got, getattr(np, fn)(x, axis=axis))
            assert got.min() >= 0 and got.max() < x.shape[axis]
    np.testing.assert_equal(t.max(1).numpy(), x.max(1))
    np.testing.assert_equal(t.min(0).numpy(), x.min(0))


def test_maximum_minimum_propagate_nan(device: str) -> None:
    a = np.array([nan, 1.0, nan, -inf, 2.0, inf], np.float32)
    b = np.array([1.0, nan, nan, 0.0, -inf, nan], np.float32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_equal(ta.maximum(tb).numpy(), np.maximum(a, b))
    np.testing.assert_equal(ta.minimum(tb).numpy(), np.minimum(a, b))
    np.testing.assert_equal(ta.maximum(0.0).numpy(), np.maximum(a, 0.0))
    np.testing.assert_equal(ta.minimum(0.0).numpy(), np.minimum(a, np.float32(0.0)))


def test_clip_propagates_nan_and_clamps_inf(device: str) -> None:
    x = np.array([nan, -inf, inf, -2.0, 0.5, 2.0], np.float32)
    t = Tensor(x, device=device)
    np.testing.assert_equal(t.clip(0, 1).numpy(), np.clip(x, 0, 1))
    np.testing.assert_equal(t.clip(None, 1).numpy(), np.minimum(x, np.float32(1)))
    np.testing.assert_equal(t.clip(0, None).numpy(), np.maximum(x, np.float32(0)))
    np.testing.assert_equal(t.relu().numpy(), np.maximum(x, np.float32(0)))


def test_int_arg_reductions(device: str) -> None:
    x = np.array([3, -(2**31), 2**31 - 1, 3, -(2**31)], np.int32)
    t = Tensor(x, device=device)
    assert t.argmax().item() == int(np.argmax(x))
    assert t.argmin().item() == int(np.argmin(x))
    assert t.min().item() == x.min() and t.max().item() == x.max()
