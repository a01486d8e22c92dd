"""The assign scenarios of specs/jit-multi.md 7.4 (S1-S25): values read before/after assigns, views, bitcasts."""

from __future__ import annotations

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes


def r(values: list, dtype: object = None, device: str | None = None) -> Tensor:
    return Tensor(values, dtype=dtype, device=device).realize()


def test_s1_value_read_before_assign_keeps_old_value() -> None:
    a = r([1, 2, 3])
    b = a + 1
    a.assign(a * 10).realize()
    assert b.tolist() == [2, 3, 4] and a.tolist() == [10, 20, 30]


@pytest.mark.parametrize("order", ["ab", "ba"])
def test_s2_realized_together(order: str) -> None:
    a = r([1, 2, 3])
    b = a + 1
    a.assign(a * 10)
    Tensor.realize(*((a, b) if order == "ab" else (b, a)))
    assert b.tolist() == [2, 3, 4] and a.tolist() == [10, 20, 30]


def test_s3_two_assigns_after_a_read() -> None:
    a = r([1, 2])
    b = a + 0
    a.assign(r([5, 5])).realize()
    a.assign(r([7, 7])).realize()
    assert b.tolist() == [1, 2] and a.tolist() == [7, 7]


def test_s4_reduction_read_before_slice_assign() -> None:
    a = r([1, 2, 3, 4])
    s = a.sum()
    a[0:2].assign(r([0, 0]))
    a.realize()
    assert s.item() == 10 and a.tolist() == [0, 0, 3, 4]


def test_s5_copy_read_before_slice_assign() -> None:
    a = r([1, 2, 3, 4])
    old = a * 1
    a[1:3].assign(r([7, 8])).realize()
    assert old.tolist() == [1, 2, 3, 4] and a.tolist() == [1, 7, 8, 4]


def test_s6_chained_assigns() -> None:
    a = r([1])
    a.assign(a + 1)
    a.assign(a + 1)
    a.assign(a * 3)
    assert a.tolist() == [9]


def test_s7_reads_between_assigns() -> None:
    a = r([1])
    reads = []
    for _ in range(3):
        reads.append(a * 1)
        a.assign(a + 1)
    assert [x.item() for x in reads] == [1, 2, 3] and a.item() == 4


def _sgd_step(w: Tensor, x: Tensor) -> Tensor:
    loss = (w * x).sum()
    (g,) = loss.gradient(w)
    w.assign(w.detach() - 0.1 * g)
    return loss


def test_s8_loss_read_after_step_is_the_pre_step_loss() -> None:
    w, x = Tensor([2.0], requires_grad=True).realize(), r([3.0])
    loss = _sgd_step(w, x)
    w.realize()
    assert loss.item() == pytest.approx(6.0) and w.item() == pytest.approx(1.7)


def test_s9_losses_read_after_the_loop() -> None:
    w, x = Tensor([2.0], requires_grad=True).realize(), r([3.0])
    losses = []
    for _ in range(3):
        losses.append(_sgd_step(w, x))
        w.realize()
    np.testing.assert_allclose([loss.item() for loss in losses], [6.0, 5.1, 4.2], rtol=1e-6)


def test_s10_pending_assign_reading_a_buffer_that_is_overwritten() -> None:
    a, c = r([1, 2]), r([0, 0])
    c.assign(a * 2)
    a.assign(r([5, 5])).realize()
    assert c.tolist() == [2, 4] and a.tolist() == [5, 5]


def test_s11_swap_through_copies() -> None:
    a, b = r([1, 2]), r([3, 4])
    ao, bo = a * 1, b * 1
    a.assign(bo)
    b.assign(ao)
    Tensor.realize(a, b)
    assert a.tolist() == [3, 4] and b.tolist() == [1, 2]


def test_s12_assigns_apply_in_call_order() -> None:
    a, b = r([1, 2]), r([3, 4])
    a.assign(b)
    b.assign(a)
    Tensor.realize(a, b)
    assert a.tolist() == [3, 4] and b.tolist() == [3, 4]


def test_s13_old_and_new_value_in_one_expression() -> None:
    a = r([1, 2])
    b = a * 1
    a.assign(a + 1)
    c = b + a
    assert c.tolist() == [3, 5]


def test_s14_assign_of_a_value_computed_before_an_earlier_assign() -> None:
    a = r([1, 2])
    g = a * 2
    a.assign(a + 1)
    a.assign(g + 0)
    assert a.tolist() == [2, 4]


def test_s15_one_kernel_needing_old_and_new_value_raises() -> None:
    a = r([1, 2])
    y = (a * 1) + a.assign(a + 1)
    from tg.codegen.schedule import AssignOrderError

    with pytest.raises(AssignOrderError, match="reads both the old and the new value of an assigned buffer"):
        y.realize()


def test_s16_views_alias_the_assigned_tensor() -> None:
    a = r([1, 2])
    v = a[0:1]
    a.assign(r([5, 6])).realize()
    assert v.tolist() == [5]


def test_views_taken_before_a_lazy_assign_see_it() -> None:
    a = r([1, 2, 3])
    v, whole, value = a[1:], a.reshape(3, 1), a * 1
    a.assign(a + 10)
    assert v.tolist() == [12, 13] and whole.tolist() == [[11], [12], [13]] and value.tolist() == [1, 2, 3]


def test_s17_assign_into_a_slice_of_an_unrealized_contiguous_tensor() -> None:
    a = r([1, 2, 3, 4])
    c = (a + 1).contiguous()
    c[0:2].assign(r([9, 9]))
    assert c.tolist() == [9, 9, 4, 5] and a.tolist() == [1, 2, 3, 4]


def test_s18_assign_to_an_unrealized_contiguous_tensor() -> None:
    a = r([1, 2])
    c = (a + 1).contiguous()
    c.assign(r([9, 9]))
    assert c.tolist() == [9, 9] and a.tolist() == [1, 2]


def test_s19_assign_through_a_same_size_bitcast() -> None:
    a = r([1.0, 2.0])
    a.bitcast(dtypes.int32).assign(r([0x40400000, 0x40800000], dtypes.int32))
    assert a.tolist() == [3.0, 4.0]


def test_s20_assign_through_a_shape_changing_bitcast() -> None:
    a = r([1.0, 2.0])
    v = a.bitcast(dtypes.uint16)
    assert v.shape == (4,)
    v.assign(r([0, 0x4040, 0, 0x4080], dtypes.uint16))
    assert a.tolist() == [3.0, 4.0] and v.tolist() == [0, 0x4040, 0, 0x4080]
    # to a wider dtype, and through a slice of the source: only the viewed elements change
    h = r([0, 0x3F80, 0, 0x4000, 7, 7], dtypes.uint16)
    wide = h[0:4].bitcast(dtypes.float32)
    np.testing.assert_array_equal(wide.numpy(), [1.0, 2.0])
    wide.assign(r([3.0, 4.0]))
    expected = [*np.array([3.0, 4.0], np.float32).view(np.uint16).tolist(), 7, 7]
    assert h.tolist() == expected and wide.tolist() == [3.0, 4.0]
    # bytes of a float64, little-endian as numpy's view
    d = r([1.5], dtypes.float64)
    d.bitcast(dtypes.uint8).assign(Tensor(np.array([2.5]).view(np.uint8).tolist(), dtype=dtypes.uint8))
    assert d.tolist() == [2.5]


def test_s21_assign_to_a_copy_on_another_device() -> None:
    a = r([1, 2])
    b = a.to("CPU:1")
    b.assign(r([5, 6], device="CPU:1"))
    assert b.tolist() == [5, 6] and a.tolist() == [1, 2]


def test_s22_to_the_same_device_is_the_tensor() -> None:
    a = r([1, 2])
    a.to(a.device).assign(r([5, 6]))
    assert a.tolist() == [5, 6]


def test_s23_random_tensors_realized_out_of_order() -> None:
    Tensor.manual_seed(3)
    r1, r2 = Tensor.rand(3), Tensor.rand(3)
    r2.realize()
    r1.realize()
    Tensor.manual_seed(3)
    e1, e2 = Tensor.rand(3).numpy(), Tensor.rand(3).numpy()
    np.testing.assert_array_equal(r1.numpy(), e1)
    np.testing.assert_array_equal(r2.numpy(), e2)


def test_s24_assign_of_a_shifted_self() -> None:
    n = 8
    t = r(list(range(n)))
    t.assign(t.pad(((1, 0),)).shrink(((0, n),)))
    assert t.tolist() == [0, 0, 1, 2, 3, 4, 5, 6]


def test_s25_assign_of_a_flipped_self() -> None:
    a = r([1, 2, 3])
    a.assign(a.flip(0))
    assert a.tolist() == [3, 2, 1]


def test_s8_s9_with_the_sgd_optimizer() -> None:
    from tg.tensor.nn.optim import SGD

    w, x = Tensor([2.0], requires_grad=True), r([3.0])
    opt = SGD([w], lr=0.1)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = (w * x).sum()
        loss.backward()
        opt.step()
        losses.append(loss)
        if len(losses) == 1:
            assert loss.item() == pytest.approx(6.0) and w.item() == pytest.approx(1.7)  # S8
    np.testing.assert_allclose([loss.item() for loss in losses], [6.0, 5.1, 4.2], rtol=1e-6)  # S9
