"""Realize touches only what it realizes: the tensor index finds affected tensors without scanning live ones."""

import numpy as np

from tg.tensor import Tensor
from tg.tensor.realize import buffer_of, index


def test_realize_work_does_not_depend_on_unrelated_live_tensors():
    a = Tensor.ones(16, device="CPU").contiguous().realize()

    def work() -> int:
        before = index.visits
        (a + 1).realize()
        return index.visits - before

    work()
    alone = work()
    realized = [Tensor.ones(4, device="CPU").contiguous().realize() for _ in range(300)]
    lazy = [r * 2 + 1 for r in realized[:100]]
    crowded = work()
    assert crowded == alone
    assert all(buffer_of(t.uop) is None for t in lazy)  # untouched, still lazy


def test_lazy_tensors_reading_an_output_get_its_buffer():
    a = Tensor([1.0, 2.0, 3.0], device="CPU")
    s = (a * 2).sum()
    later = s + 1
    also = later * 3
    unrelated = Tensor([5.0], device="CPU") + 1
    unrelated_uop = unrelated.uop
    s.realize()
    assert buffer_of(s.uop) is not None
    # the lazy graphs above read the new buffer instead of recomputing the sum
    assert any(u is s.uop.src[0] or u is s.uop for u in later.uop.toposort())
    assert any(u is s.uop.src[0] or u is s.uop for u in also.uop.toposort())
    assert unrelated.uop is unrelated_uop
    assert later.item() == 13.0 and also.item() == 39.0


def test_affected_finds_tensors_sharing_an_interior_node():
    a = Tensor([1.0, 2.0], device="CPU")
    shared = (a + 1).exp()  # interior of both graphs below, never realized on its own
    t1, t2 = shared * 2, shared + 3
    roots = index.affected([t1.uop])
    assert t1.uop in roots
    buf = buffer_of(a.uop)
    assert buf is not None
    found = index.affected([buf])
    assert t1.uop in found and t2.uop in found


def test_pending_readers_of_an_assigned_buffer_keep_the_old_value():
    t = Tensor([1.0, 2.0, 3.0], device="CPU").contiguous().realize()
    old_double = t * 2  # lazy: reads t's current value
    chained = old_double + 1
    t.assign(Tensor([10.0, 20.0, 30.0], device="CPU")).realize()
    np.testing.assert_array_equal(old_double.numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(chained.numpy(), [3.0, 5.0, 7.0])
    np.testing.assert_array_equal(t.numpy(), [10.0, 20.0, 30.0])


def test_a_realized_tensor_leaves_its_old_graph_entry():
    base = Tensor([1.0, 2.0, 3.0, 4.0], device="CPU").realize()
    ts = [base + 1 for _ in range(50)]
    root = ts[0].uop  # hash-consed: the same ADD node for all 50 (contiguous() would make 50 storages)
    assert all(t.uop is root for t in ts) and len(index.tensors(root)) == 50
    Tensor.realize(*ts)
    assert index.tensors(root) == [] and len(index.by_uop.get(root, {})) == 0
    assert all(buffer_of(t.uop) is not None for t in ts)
