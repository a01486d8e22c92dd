"""Advanced indexing (int tensors/lists, bool masks), setitem with them, gather/scatter/masked ops, against numpy."""

import numpy as np
import pytest

from tg.tensor import Tensor

A = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6) / 7 - 8
MASK2 = (np.arange(20).reshape(4, 5) % 3) == 0

INDICES = [
    ([0, 2, -1],),
    (np.array([[0, 1], [3, 2]]),),
    (slice(None), [1, 3]),
    ([0, 1], slice(None), [2, 5]),  # separated: broadcast dims go first
    ([1, 2], [0, 4]),  # adjacent: they stay in place
    (Ellipsis, [0, -1]),
    (1, [0, 2], slice(1, 4)),
    ([[0], [1]], [1, 2, 3]),
    (None, [0, 1], 2),
    (np.array([True, False, True, False]),),
    (MASK2,),
    (slice(1, 3), np.array([True, False, True, True, False])),
]


def _ours(ix: tuple) -> tuple:
    return tuple(Tensor(i) if isinstance(i, np.ndarray) else i for i in ix)


@pytest.mark.parametrize("ix", INDICES, ids=[str(i) for i in range(len(INDICES))])
def test_advanced_getitem_matches_numpy(ix, device):
    np.testing.assert_array_equal(Tensor(A, device=device)[_ours(ix)].numpy(), A[ix])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint32])
def test_index_tensor_of_any_int_dtype(dtype, device):
    idx = np.array([3, 0, 1], dtype=dtype)
    np.testing.assert_array_equal(Tensor(A, device=device)[Tensor(idx, device=device)].numpy(), A[idx.astype(np.int64)])


def test_advanced_index_gradient_accumulates_duplicates(device):
    x = Tensor(A, device=device, requires_grad=True)
    (x[[0, 0, 2], 1:3] * 2).sum().backward()
    expected = np.zeros_like(A)
    np.add.at(expected, ([0, 0, 2], slice(1, 3)), 2)
    np.testing.assert_array_equal(x.grad.numpy(), expected)


@pytest.mark.parametrize(
    "ix,value",
    [(([0, 2],), 7.0), (([1, 3], slice(None), [0, 5]), np.arange(5, dtype=np.float32)), (([0, 0, 1],), 3.0)],
)
def test_advanced_setitem(ix, value, device):
    t, ref = Tensor(A.copy(), device=device), A.copy()
    t[ix] = Tensor(value, device=device) if isinstance(value, np.ndarray) else value
    ref[ix] = value
    np.testing.assert_array_equal(t.numpy(), ref)


def test_setitem_repeated_index_last_write_wins(device):
    t = Tensor.zeros(4, device=device).contiguous().realize()
    t[[1, 1, 2]] = Tensor([5.0, 6.0, 7.0], device=device)
    assert t.tolist() == [0.0, 6.0, 7.0, 0.0]


def test_bool_mask_setitem(device):
    m = A > 0
    t, ref = Tensor(A.copy(), device=device), A.copy()
    t[Tensor(m, device=device)] = 0.0
    ref[m] = 0
    np.testing.assert_array_equal(t.numpy(), ref)
    t2, ref2 = Tensor(A.copy(), device=device), A.copy()
    t2[Tensor(m, device=device)] = Tensor(np.arange(m.sum(), dtype=np.float32), device=device)
    ref2[m] = np.arange(m.sum())
    np.testing.assert_array_equal(t2.numpy(), ref2)


def test_gather_scatter_masked(device, rng):
    t = Tensor(A, device=device)
    ind = rng.integers(0, 5, (3, 4, 6))
    np.testing.assert_array_equal(
        t.gather(1, Tensor(ind, device=device)).numpy(), np.take_along_axis(A[:3, :, :], ind, 1)
    )
    src = rng.standard_normal((3, 4, 6)).astype(np.float32)
    ref = A.copy()
    for i, j, k in np.ndindex(ind.shape):
        ref[i, ind[i, j, k], k] += src[i, j, k]
    out = t.scatter(1, Tensor(ind, device=device), Tensor(src, device=device), reduce="add")
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-6)
    amax = A.copy()
    for i, j, k in np.ndindex(ind.shape):
        amax[i, ind[i, j, k], k] = max(amax[i, ind[i, j, k], k], src[i, j, k])
    out = t.scatter_reduce(1, Tensor(ind, device=device), Tensor(src, device=device), "amax")
    np.testing.assert_array_equal(out.numpy(), amax)
    m = A > 0
    np.testing.assert_array_equal(t.masked_fill(Tensor(m, device=device), -1.0).numpy(), np.where(m, -1, A))
    np.testing.assert_array_equal(t.masked_select(Tensor(m, device=device)).numpy(), A[m])
    np.testing.assert_array_equal(Tensor(m, device=device).nonzero().numpy(), np.argwhere(m))


def test_indexing_errors(device):
    t = Tensor(A, device=device)
    with pytest.raises(IndexError, match="integer or bool"):
        t[Tensor([0.5], device=device)]
    with pytest.raises(ValueError, match="cannot be broadcast"):
        t[[0, 1], [0, 1, 2]]
    with pytest.raises(ValueError, match="gather: index"):
        t.gather(1, Tensor([[1]], device=device))
