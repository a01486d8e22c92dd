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
    a += 1  # in place, as torch
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


# ---- equal computed values (one hash-consed graph) are copied on write ------------------------------------------


def test_assign_into_one_of_two_equal_computed_values() -> None:
    x = Tensor([1.0, 2.0]).realize()
    c, d = x + 1, x + 1
    c.realize()
    d.realize()
    c.assign(Tensor([9.0, 9.0])).realize()
    assert c.tolist() == [9.0, 9.0] and d.tolist() == [2.0, 3.0] and x.tolist() == [1.0, 2.0]


def test_setitem_into_one_of_two_equal_lazy_values() -> None:
    x = Tensor([1.0, 2.0]).realize()
    e, f = x * 2, x * 2
    e[0] = 5
    assert e.tolist() == [5.0, 4.0] and f.tolist() == [2.0, 4.0]


def test_inplace_ops_on_equal_values_realized_together() -> None:
    x = Tensor([[1, 2], [3, 4]]).realize()
    a, b, c = x.sum(0), x.sum(0), x.sum(0)
    Tensor.realize(a, b, c)
    b.mul_(10)
    assert a.tolist() == [4, 6] and b.tolist() == [40, 60] and c.tolist() == [4, 6]
    c.add_(1)  # the remaining twins were split too
    assert a.tolist() == [4, 6] and c.tolist() == [5, 7]


def test_views_of_a_written_twin_see_the_write() -> None:
    x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    c, d = x + 1, x + 1
    Tensor.realize(c, d)
    row, col, det = c.reshape(2, 2)[0], c.reshape(2, 2)[:, 1], c.detach()
    same = c.contiguous().realize()  # contiguous of a contiguous buffer: the same storage (PyTorch)
    c[0] = 10.0
    assert row.tolist() == [10.0, 3.0] and col.tolist() == [3.0, 5.0] and det.tolist()[0] == 10.0
    assert same.tolist()[0] == 10.0 and d.tolist() == [2.0, 3.0, 4.0, 5.0]
    d.assign(d * 0).realize()  # and the twin's own writes leave c alone
    assert d.tolist() == [0.0] * 4 and c.tolist() == [10.0, 3.0, 4.0, 5.0]


def test_write_through_a_view_of_a_tensor_aliases_it_not_its_equal() -> None:
    x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    c = (x + 1).realize()
    v = c[1:3]
    v.assign(Tensor([0.0, 0.0]))
    assert c.tolist() == [2.0, 0.0, 0.0, 5.0] and x.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_gradient_flows_through_the_copied_twin() -> None:
    w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    c, d = w * 2, w * 2
    Tensor.realize(c, d)
    c.assign(Tensor([0.0, 0.0, 0.0])).realize()
    assert d.tolist() == [2.0, 4.0, 6.0]
    (d * d).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [8.0, 16.0, 24.0])
