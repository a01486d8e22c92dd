"""Movement ops and basic indexing against numpy (they become index arithmetic, never copies)."""

import numpy as np
import pytest

from tg.tensor import GlobalCounters, Tensor


@pytest.fixture
def arr(size, rng):
    return rng.standard_normal((size(4), 5, 6)).astype(np.float32)


def test_reshape_permute_expand(arr, device):
    t = Tensor(arr, device=device)
    np.testing.assert_array_equal(t.reshape(-1, 6).numpy(), arr.reshape(-1, 6))
    np.testing.assert_array_equal(t.reshape((arr.shape[0] * 5, 6)).numpy(), arr.reshape(-1, 6))
    np.testing.assert_array_equal(t.permute(2, 0, 1).numpy(), arr.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.permute(2, 0, 1).reshape(6, -1).numpy(), arr.transpose(2, 0, 1).reshape(6, -1))
    col = Tensor(arr[:, :1, :], device=device)
    np.testing.assert_array_equal(col.expand(-1, 5, -1).numpy(), np.broadcast_to(arr[:, :1, :], arr.shape))
    np.testing.assert_array_equal(col.expand(2, *col.shape).numpy(), np.broadcast_to(arr[:, :1, :], (2, *col.shape)))


def test_pad_shrink_flip(arr, device):
    t = Tensor(arr, device=device)
    np.testing.assert_array_equal(t.pad(((1, 2), None, (0, 3))).numpy(), np.pad(arr, ((1, 2), (0, 0), (0, 3))))
    np.testing.assert_array_equal(
        t.pad(((1, 1), None, None), value=7).numpy(), np.pad(arr, ((1, 1), (0, 0), (0, 0)), constant_values=7)
    )
    np.testing.assert_array_equal(t.shrink(((1, 2), None, (2, 5))).numpy(), arr[1:2, :, 2:5])
    np.testing.assert_array_equal(t.flip(0).numpy(), arr[::-1])
    np.testing.assert_array_equal(t.flip((1, 2)).numpy(), arr[:, ::-1, ::-1])
    np.testing.assert_array_equal(t.pad(((0, 0), (-1, 1), None)).numpy(), np.pad(arr[:, 1:], ((0, 0), (0, 1), (0, 0))))
    # pad of a function that is not zero at zero: the padding must stay zero
    np.testing.assert_allclose(
        t.exp().pad((None, None, (2, 0))).numpy(), np.pad(np.exp(arr), ((0, 0), (0, 0), (2, 0))), rtol=1e-6
    )


def test_transpose_flatten_squeeze(arr, device):
    t = Tensor(arr, device=device)
    np.testing.assert_array_equal(t.transpose(0, 2).numpy(), arr.swapaxes(0, 2))
    np.testing.assert_array_equal(t[0].T.numpy(), arr[0].T)
    np.testing.assert_array_equal(t.flatten().numpy(), arr.flatten())
    np.testing.assert_array_equal(t.flatten(1).numpy(), arr.reshape(arr.shape[0], -1))
    assert t.unsqueeze(1).shape == (arr.shape[0], 1, 5, 6)
    assert t.unsqueeze(-1).shape == (*arr.shape, 1)
    assert t.reshape(arr.shape[0], 1, 5, 6, 1).squeeze().shape == tuple(s for s in (arr.shape[0], 5, 6) if s != 1)
    assert t.unsqueeze(0).squeeze(0).shape == arr.shape


@pytest.mark.parametrize(
    "index",
    [1, -1, (1, 2), (slice(1, 3), slice(None, None, 2)), (slice(None), None, Ellipsis), (Ellipsis, -1),
     (slice(None, None, -1),), (slice(3, 0, -2), slice(None), slice(-1, None, -3)), (None, 0, None, slice(1, 4)),
     (slice(10, 20),), (slice(None), slice(2, 2))],
)  # fmt: skip
def test_getitem(index, device, rng):
    a = rng.standard_normal((5, 5, 6)).astype(np.float32)
    np.testing.assert_array_equal(Tensor(a, device=device)[index].numpy(), a[index])


def test_getitem_errors(device):
    t = Tensor.zeros(3, 4, device=device)
    with pytest.raises(IndexError, match="out of bounds"):
        t[3]
    with pytest.raises(IndexError, match="out of bounds"):
        t[0, -5]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(TypeError, match="unsupported index"):
        t["a"]


def test_cat_stack(device, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal(ta.cat(tb).numpy(), np.concatenate([a, b]))
    np.testing.assert_array_equal(ta.cat(ta, dim=1).numpy(), np.concatenate([a, a], 1))
    np.testing.assert_array_equal(Tensor.stack(ta, ta, dim=1).numpy(), np.stack([a, a], 1))
    np.testing.assert_array_equal(
        Tensor([True], device=device).cat(Tensor([False, True], device=device)).numpy(), [True, False, True]
    )
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 4\)"):
        ta.cat(Tensor.zeros(4, 4, device=device))


def test_movement_errors(device):
    t = Tensor.zeros(2, 3, device=device)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 2\)"):
        t.reshape(4, 2)
    with pytest.raises(ValueError, match="permutation"):
        t.permute(0, 0)
    with pytest.raises(ValueError, match=r"expand"):
        t.expand(4, 3)
    with pytest.raises(ValueError, match="broadcast"):
        t + Tensor.zeros(4, device=device)
    with pytest.raises(IndexError):
        t.sum(2)


def test_movement_chain_is_one_kernel(device, rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    t = Tensor(a, device=device).realize()
    out = t.T.reshape(2, 12).flip(1)[:, ::3].pad((None, (1, 1))) + 1
    before = GlobalCounters.kernel_count
    got = out.numpy()
    assert GlobalCounters.kernel_count - before == 1
    want = np.pad(a.T.reshape(2, 12)[:, ::-1][:, ::3], ((0, 0), (1, 1))) + 1
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize(
    "build",
    [
        lambda t: (t.reshape(0, 25, 8) + 1).sum(1),
        lambda t: t.reshape(0, 25, 8).permute(0, 2, 1).contiguous() + 1,
        lambda t: t.reshape(0, 200, 1).expand(0, 200, 3).max(2),
    ],
    ids=["sum", "permute", "expand_max"],
)
def test_reshapes_of_zero_size_tensors_compute(build):
    # a zero-size dim makes the reshape's equal-product dimension groups meaningless; nothing is indexed
    x = np.zeros((0, 200), np.float32)
    got = build(Tensor(x)).numpy()
    want = build(Tensor(x, device="PYTHON")).numpy()
    assert got.shape == want.shape and got.size == 0 and 0 in got.shape
