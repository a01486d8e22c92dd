"""Issue 27, item 2: reads between assigns capture the value at the time of the read (tinygrad's and torch's
semantics), through chains of assigns, partial assigns into buffers that are not stored yet, and read-after-write /
write-after-read orderings across kernels. Expected values are torch's (eager `copy_`), listed inline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tg.tensor import Tensor


def r(values: list) -> Tensor:
    return Tensor(values).realize()


def test_read_between_two_assigns_of_a_pending_value() -> None:
    a, b = Tensor.zeros(1).contiguous().realize(), Tensor([2.0])
    a.assign(b + 1)
    v1 = a * 3  # reads the first assigned value, 3
    a.assign(b + 100)
    assert (a + v1).tolist() == [111.0]  # tinygrad 0.14 gives 408 (v1 sees the second value)


CHAIN_RESULT = [11.0, 17.0, 1.0, 2.0, 4.0, 6.0, 7.0, 11.0]


def assign_chain(a: Any, assign: Callable[[Any, Any], Any]) -> list[Any]:
    """Three assigns to `a` with reads between them (`assign(a, v)`: Tensor.assign, torch's copy_): [a, r1, r2, r3]."""
    r1 = a * 1
    assign(a, a + 1)
    r2 = a * 2
    assign(a, a * 3)
    r3 = a + r1
    assign(a, r2 + r3)
    return [a, r1, r2, r3]


def test_chain_of_assigns_and_reads() -> None:
    assert Tensor.cat(*assign_chain(r([1.0, 2.0]), Tensor.assign)).tolist() == CHAIN_RESULT


def test_reductions_between_assigns() -> None:
    a = r([1.0, 2.0, 3.0])
    s1 = a.sum()
    a.assign(a * 2)
    s2 = a.sum()
    a.assign(a + s1)
    assert a.tolist() == [8.0, 10.0, 12.0] and s1.item() == 6.0 and s2.item() == 12.0


def test_many_pending_states_read_in_one_expression() -> None:
    a = r([1.0])
    reads = []
    for _ in range(5):
        reads.append(a * 1)
        a.assign(a + 1)
    assert Tensor.cat(*reads, a).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_three_states_summed() -> None:
    a = r([1.0])
    s0 = a * 1
    a.assign(a + 1)
    s1 = a * 1
    a.assign(a + 1)
    s2 = a * 1
    a.assign(a + 1)
    assert (a + s0 + s1 + s2).tolist() == [10.0]


def test_assign_of_another_buffer_from_a_pending_state() -> None:
    a, b = r([1.0, 2.0]), r([0.0, 0.0])
    a.assign(a + 1)
    b.assign(a * 2)  # reads a's first new value
    a.assign(a * 10)
    assert a.tolist() == [20.0, 30.0] and b.tolist() == [4.0, 6.0]


# ---- partial assigns into values that have no storage yet ---------------------------------------------------------


def test_partial_assign_into_a_lazy_contiguous() -> None:
    x = Tensor([1.0, 2.0])
    y = (x + 1).contiguous()
    y[:1].assign(9.0)  # a scalar broadcasts, as torch's copy_
    assert y.realize().tolist() == [9.0, 3.0]  # tinygrad 0.14 loses the write ([2, 3])


def test_partial_assign_into_a_lazy_expression() -> None:
    y = r([1.0, 2.0, 3.0, 4.0]) * 2
    y[1:3].assign(r([7.0, 8.0]))
    assert y.tolist() == [2.0, 7.0, 8.0, 8.0]


def test_partial_assign_keeps_earlier_reads() -> None:
    y = (r([1.0, 2.0, 3.0]) + 1).contiguous()
    z = y * 2
    y[0:1].assign(0.0)
    assert y.tolist() == [0.0, 3.0, 4.0] and z.tolist() == [4.0, 6.0, 8.0]


def test_two_partial_assigns_with_a_read_between() -> None:
    a = r([1.0, 2.0, 3.0, 4.0])
    a[0:2].assign(r([5.0, 6.0]))
    snapshot = a * 1
    a[1:3].assign(r([9.0, 9.0]))
    assert a.tolist() == [5.0, 9.0, 9.0, 4.0] and snapshot.tolist() == [5.0, 6.0, 3.0, 4.0]


def test_assign_into_lazy_value_with_live_views() -> None:
    y = r([1.0, 2.0, 3.0]) * 2
    v = y[0:2]
    y.assign(r([7.0, 8.0, 9.0]))
    assert v.tolist() == [7.0, 8.0] and y.tolist() == [7.0, 8.0, 9.0]  # views alias, as in torch


def test_assign_into_a_view_of_a_constant_raises() -> None:
    z = Tensor.zeros(4)
    with pytest.raises(ValueError, match="no storage"):
        z[0:2].assign(Tensor([1.0, 1.0]))
    z[0:2] = 5.0  # setitem gives z storage first
    assert z.tolist() == [5.0, 5.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("value", "expected"), [(7.0, [[7.0, 7.0], [7.0, 7.0]]), ([5.0, 6.0], [[5.0, 6.0], [5.0, 6.0]])]
)
def test_assign_broadcasts_the_value(value: object, expected: list) -> None:
    a = r([[1.0, 2.0], [3.0, 4.0]])
    a.assign(value if isinstance(value, float) else Tensor(value))
    assert a.tolist() == expected


def test_assign_of_a_non_broadcastable_shape_raises() -> None:
    with pytest.raises(ValueError, match=r"target \(2, 2\) vs value \(3,\)"):
        r([[1.0, 2.0], [3.0, 4.0]]).assign(Tensor([1.0, 2.0, 3.0]))


# ---- ordering across kernels: write-after-read and read-after-write ----------------------------------------------


def test_war_swap_through_reads() -> None:
    a, b = r([1.0, 2.0]), r([3.0, 4.0])
    ao = a * 1
    a.assign(b)
    b.assign(ao)
    assert a.tolist() == [3.0, 4.0] and b.tolist() == [1.0, 2.0]


def test_raw_chain_across_buffers() -> None:
    a, b = r([1.0, 2.0]), r([3.0, 4.0])
    a.assign(b + 1)
    b.assign(a * 2)  # reads a's new value
    assert a.tolist() == [4.0, 5.0] and b.tolist() == [8.0, 10.0]


def test_raw_and_war_mixed() -> None:
    a, c = r([1.0, 2.0]), r([0.0, 0.0])
    c.assign(a * 2)
    a.assign(r([5.0, 5.0]))
    out = c + a
    assert c.tolist() == [2.0, 4.0] and a.tolist() == [5.0, 5.0] and out.tolist() == [7.0, 9.0]


def test_matmul_read_before_weight_update() -> None:
    w, x = r([[1.0, 2.0], [3.0, 4.0]]), r([[1.0, 0.0], [0.0, 1.0]])
    y = x @ w
    w.assign(w * 2)
    z = x @ w
    assert (y + z).tolist() == [[3.0, 6.0], [9.0, 12.0]] and w.tolist() == [[2.0, 4.0], [6.0, 8.0]]


def test_old_and_new_value_in_one_expression() -> None:
    a = r([1.0, 2.0])
    old = a * 1
    a.assign(a + 1)
    assert (old + a).tolist() == [3.0, 5.0]


def test_old_read_inline_with_its_assign_is_refused_clearly() -> None:
    # the old value is read by a temporary that dies inside the expression: no live tensor keeps it, and one kernel
    # would need both values (specs/jit-multi.md S15); tg says so instead of computing a wrong value
    from tg.codegen.schedule import AssignOrderError

    a = r([1.0, 2.0])
    with pytest.raises(AssignOrderError, match="realize the read of the old value first"):
        ((a * 1) + a.assign(a + 1)).realize()


@pytest.mark.torch
def test_matches_torch_for_a_chain() -> None:
    torch = pytest.importorskip("torch")
    assert torch.cat(assign_chain(torch.tensor([1.0, 2.0]), torch.Tensor.copy_)).tolist() == CHAIN_RESULT
