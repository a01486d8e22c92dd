"""sort/argsort/topk against numpy's stable sort with torch's NaN placement: short rows (all-pairs ranking) and
long rows (bitonic network), every dtype, descending, ties, -0, +-inf, NaN, gradients of the values."""

import numpy as np
import pytest

from tg.tensor import Tensor

RNG = np.random.default_rng(0)


def _reference_order(a: np.ndarray, descending: bool) -> np.ndarray:
    """torch.sort(stable=True) order along the last dim: NaN above +inf, -0 == 0, ties by position."""
    out = []
    for row in a.reshape(-1, a.shape[-1]):
        r = row.astype(np.float64) if row.dtype.kind in "fb" else row
        nan = np.isnan(r) if r.dtype.kind == "f" else np.zeros(r.shape, bool)
        pos = np.arange(len(r))
        if r.dtype.kind == "f":
            val = np.where(nan, 0, r) + 0.0  # -0 -> 0
            primary = -val if descending else val
            nan_rank = ~nan if descending else nan  # NaN last ascending, first descending
            out.append(np.lexsort((pos, primary, nan_rank)))
        else:
            primary = r.astype(np.int64)
            out.append(np.lexsort((pos, ~primary if descending else primary)))  # ~ reverses without overflow
    return np.stack(out).reshape(a.shape)


def _floats(shape, dtype=np.float32):
    a = RNG.integers(-4, 4, size=shape).astype(dtype)  # many ties
    flat = a.reshape(-1)
    flat[::7] = np.nan
    flat[1::11] = -0.0
    flat[2::13] = np.inf
    flat[3::17] = -np.inf
    flat[4::19] = RNG.standard_normal(len(flat[4::19])) * 1e4
    return a


# 257 (two network stages past 64) runs with --slow: 65 and 100 take the padded, non-power-of-two path by default
@pytest.mark.parametrize("n", [1, 2, 7, 64, 65, 100, pytest.param(257, marks=pytest.mark.slow)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_floats_with_edges_matches_torch_order(n, descending):
    a = _floats((3, n))
    values, indices = Tensor(a).sort(descending=descending)
    order = _reference_order(a, descending)
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(a, order, -1))


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int8, np.uint8, np.int32, np.uint32, np.int64, np.bool_])
@pytest.mark.parametrize("n", [9, pytest.param(130, marks=pytest.mark.slow)])  # 130: two network stages more
def test_sort_every_dtype(dtype, n):
    if dtype == np.bool_:
        a = RNG.integers(0, 2, size=(2, n)).astype(bool)
    elif np.dtype(dtype).kind == "f":
        a = _floats((2, n), dtype)
    else:
        info = np.iinfo(dtype)
        a = RNG.integers(info.min, info.max, size=(2, n), dtype=dtype, endpoint=True)
        a[:, ::5] = info.max
        a[:, 1::7] = info.min
    for descending in (False, True):
        values, indices = Tensor(a).sort(descending=descending)
        order = _reference_order(a, descending)
        np.testing.assert_array_equal(indices.numpy(), order)
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(a, order, -1))


def test_sort_along_dim_0_and_argsort():
    a = RNG.standard_normal((200, 3)).astype(np.float32)
    values, indices = Tensor(a).sort(dim=0)
    np.testing.assert_array_equal(values.numpy(), np.sort(a, axis=0))
    np.testing.assert_array_equal(indices.numpy(), np.argsort(a, axis=0, kind="stable"))
    descending = Tensor(a).argsort(dim=0, descending=True).numpy()
    np.testing.assert_array_equal(descending, np.argsort(-a, axis=0, kind="stable"))


@pytest.mark.slow  # the same bitonic network as n=257 above (padded to 512), 6 stages more
def test_sort_large_row():
    """2^14 + 3 elements (padded to 2^15): the bitonic network, not an n^2 comparison."""
    a = RNG.standard_normal(2**14 + 3).astype(np.float32)
    values, indices = Tensor(a).sort()
    np.testing.assert_array_equal(indices.numpy(), np.argsort(a, kind="stable"))
    np.testing.assert_array_equal(values.numpy(), np.sort(a))


@pytest.mark.parametrize("n", [10, pytest.param(300, marks=pytest.mark.slow)])
def test_topk_values_indices_and_gradient(n):
    a = RNG.standard_normal((2, n)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    values, indices = x.topk(5)
    order = np.argsort(-a, axis=-1, kind="stable")[:, :5]
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(a, order, -1))
    r = RNG.standard_normal((2, 5)).astype(np.float32)
    (grad,) = (values * Tensor(r)).sum().gradient(x)
    expected = np.zeros_like(a)
    np.put_along_axis(expected, order, r, -1)
    np.testing.assert_array_equal(grad.numpy(), expected)


@pytest.mark.parametrize("n", [20, 200])
def test_sort_gradient_goes_to_source_positions(n):
    a = RNG.standard_normal((3, n)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    values, _ = x.sort(descending=True)
    r = RNG.standard_normal((3, n)).astype(np.float32)
    (grad,) = (values * Tensor(r)).sum().gradient(x)
    expected = np.zeros_like(a)
    np.put_along_axis(expected, np.argsort(-a, axis=-1, kind="stable"), r, -1)
    np.testing.assert_array_equal(grad.numpy(), expected)


@pytest.mark.torch
@pytest.mark.parametrize("n", [50, 200])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_torch_stable(n, descending):
    torch = pytest.importorskip("torch")
    a = _floats((4, n))
    values, indices = Tensor(a).sort(descending=descending)
    tv, ti = torch.tensor(a).sort(descending=descending, stable=True)
    np.testing.assert_array_equal(indices.numpy(), ti.numpy())
    np.testing.assert_array_equal(values.numpy(), tv.numpy())
