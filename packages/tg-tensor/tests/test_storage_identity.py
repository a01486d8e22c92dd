"""Independently created tensors never share storage, although equal lazy graphs are one hash-consed UOp;
real views (slices, reshapes, detach, bitcasts) keep aliasing their base, as in PyTorch."""

from __future__ import annotations

import numpy as np

from tg.tensor import Tensor, dtypes


def test_two_contiguous_zeros_are_two_buffers() -> None:
    a = Tensor.zeros(4).contiguous()
    b = Tensor.zeros(4).contiguous()
    a.realize()
    b.realize()
    a.add_(1)  # in place (tg's `a += 1` rebinds `a`)
    np.testing.assert_array_equal(a.numpy(), np.ones(4, np.float32))
    np.testing.assert_array_equal(b.numpy(), np.zeros(4, np.float32))


def test_contiguous_realized_together_are_two_buffers() -> None:
    a = Tensor.full((2, 3), 7.0).contiguous()
    b = Tensor.full((2, 3), 7.0).contiguous()
    Tensor.realize(a, b)
    b.assign(Tensor.full((2, 3), 1.0)).realize()
    np.testing.assert_array_equal(a.numpy(), np.full((2, 3), 7.0, np.float32))
    np.testing.assert_array_equal(b.numpy(), np.ones((2, 3), np.float32))


def test_contiguous_of_one_computed_value_twice_is_two_buffers() -> None:
    x = Tensor([1.0, 2.0]).realize()
    c = (x + 1).contiguous()
    d = (x + 1).contiguous()
    Tensor.realize(c, d)
    c[0] = 9.0
    np.testing.assert_array_equal(c.numpy(), [9.0, 3.0])
    np.testing.assert_array_equal(d.numpy(), [2.0, 3.0])


def test_clone_is_its_own_buffer() -> None:
    x = Tensor([1.0, 2.0, 3.0]).realize()
    c1, c2 = x.clone().realize(), x.clone().realize()
    c1.add_(10)
    np.testing.assert_array_equal(c1.numpy(), [11.0, 12.0, 13.0])
    np.testing.assert_array_equal(c2.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])


def test_creation_functions_realized_are_separate() -> None:
    for make in (lambda: Tensor.zeros(3), lambda: Tensor.ones(3), lambda: Tensor.full((3,), 2.5)):
        a, b = make(), make()
        a.realize()
        b.realize()
        want = b.numpy().copy()
        a.add_(1)
        np.testing.assert_array_equal(a.numpy(), want + 1)
        np.testing.assert_array_equal(b.numpy(), want)


def test_requires_grad_leaves_from_equal_graphs_are_separate() -> None:
    w1 = Tensor.zeros(3).requires_grad_()
    w2 = Tensor.zeros(3).requires_grad_()
    w1.assign(Tensor.ones(3)).realize()
    np.testing.assert_array_equal(w2.numpy(), np.zeros(3, np.float32))


def test_views_of_contiguous_still_alias() -> None:
    a = Tensor.zeros(2, 3).contiguous().realize()
    row, flat, det = a[1], a.reshape(6), a.detach()
    same = a.contiguous()  # contiguous of a contiguous buffer is that buffer (PyTorch: the same storage)
    a.add_(1)
    np.testing.assert_array_equal(row.numpy(), np.ones(3, np.float32))
    np.testing.assert_array_equal(flat.numpy(), np.ones(6, np.float32))
    np.testing.assert_array_equal(det.numpy(), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(same.numpy(), np.ones((2, 3), np.float32))
    a[0, 0] = 5.0
    assert row.tolist() == [1.0, 1.0, 1.0] and flat.tolist()[0] == 5.0 and det.tolist()[0][0] == 5.0


def test_write_through_bitcast_view_reaches_its_base_only() -> None:
    a = Tensor.zeros(2, dtype=dtypes.float32).contiguous().realize()
    twin = Tensor.zeros(2, dtype=dtypes.float32).contiguous().realize()
    a.bitcast(dtypes.int32).assign(Tensor([0x40400000, 0x40800000], dtype=dtypes.int32))
    assert a.tolist() == [3.0, 4.0] and twin.tolist() == [0.0, 0.0]
