"""The store rules of policy.py, one test per row: which nodes `plan_stores` stores and why."""

import pytest

from tg.codegen.schedule import policy
from tg.codegen.schedule.rangeify import plan_stores
from tg.ir import Ops, UOp, dtypes


def buf(*shape: int, device: str = "CPU") -> UOp:
    n = 1
    for s in shape:
        n *= s
    return UOp.new_buffer(device, n, dtypes.float32).reshape(shape)


def full(shape: tuple[int, ...], v: float) -> UOp:
    return UOp.full(shape, v, dtypes.float32, "CPU")


def stores(*outs: UOp) -> dict[UOp, set[str]]:
    plan = plan_stores(UOp(Ops.SINK, src=outs))
    return {n: st.reasons for n, st in plan.stores.items()}


def test_s1_outputs_are_stored_unless_already_a_buffer():
    a = buf(4, 8)
    out = a.alu(Ops.ADD, a)
    assert stores(out) == {out: {policy.OUTPUT}}
    assert stores(a) == {}


def test_s2_contiguous_is_stored_unless_its_source_is_a_buffer():
    a = buf(8)
    c = a.alu(Ops.ADD, a).contiguous()
    assert stores(c.alu(Ops.MUL, c))[c] == {policy.CONTIGUOUS}
    plan = plan_stores(UOp(Ops.SINK, src=(a.contiguous(),)))
    assert plan.stores == {} and a.contiguous() in plan.aliases


def test_s3_assign_is_stored_into_its_target():
    t = buf(8)
    a = t.assign(t.alu(Ops.ADD, full((8,), 1.0)))
    plan = plan_stores(UOp(Ops.SINK, src=(a,)))
    assert plan.stores[a].reasons == {policy.ASSIGN} and plan.buffers[a] is t  # buf(8) is the BUFFER itself


def test_s5_copy_source_is_stored_first():
    a = buf(8)
    v = a.alu(Ops.ADD, a)
    c = v.copy_to_device("PYTHON")
    assert stores(c) == {v: {policy.COPY_SOURCE}, c: {policy.COPY}}
    assert stores(a.copy_to_device("PYTHON")) == {a.copy_to_device("PYTHON"): {policy.COPY}}


def test_r2_read_at_two_indices_keeps_a_reduction():
    s = buf(4, 8).r(Ops.ADD, (1,)).reshape((4,))
    out = s.alu(Ops.ADD, s.flip((True,)))
    got = stores(out)
    assert got[s] == {policy.MULTI_INDEX} and got[out] == {policy.OUTPUT}


def test_r2_cheap_values_read_at_two_indices_are_recomputed_c1():
    a = buf(8)
    y = a.alu(Ops.MUL, a)
    out = y.alu(Ops.ADD, y.flip((True,)))
    assert stores(out) == {out: {policy.OUTPUT}}


def test_r3_broadcast_reduction_is_stored():
    a = buf(4, 8)
    m = a.r(Ops.MAX, (1,))
    out = a.alu(Ops.ADD, m.expand((4, 8)))
    assert stores(out)[m] == {policy.BROADCAST}


def test_r3_keeps_the_elementwise_work_between_reduction_and_broadcast():
    a = buf(4, 8)
    post = a.r(Ops.ADD, (1,)).alu(Ops.ADD, full((4, 1), 1.0)).alu(Ops.EXP2)
    got = stores(a.alu(Ops.MUL, post.expand((4, 8))))
    assert got[post] == {policy.BROADCAST} and len(got) == 2


def test_c1_broadcast_elementwise_of_few_buffers_is_recomputed():
    a, b = buf(4, 8), buf(4, 1)
    small = b.alu(Ops.MUL, b).alu(Ops.EXP2)
    out = a.alu(Ops.ADD, small.expand((4, 8)))
    assert stores(out) == {out: {policy.OUTPUT}}


def test_c2_broadcast_elementwise_reading_many_buffers_is_kept():
    a = buf(4, 8)
    bs = [buf(4, 1) for _ in range(4)]
    wide = bs[0].alu(Ops.ADD, bs[1]).alu(Ops.ADD, bs[2]).alu(Ops.ADD, bs[3])
    assert stores(a.alu(Ops.ADD, wide.expand((4, 8))))[wide] == {policy.BROADCAST}


def test_nested_reduction_depending_on_outer_ranges_is_not_stored():
    a = buf(4, 8, 2)
    out = a.r(Ops.ADD, (2,)).r(Ops.MAX, (1,))
    assert stores(out) == {out: {policy.OUTPUT}}


@pytest.mark.parametrize("keep", [True, False])
def test_keep_candidate_cost_rule(keep: bool):
    bufs = frozenset(buf(1).src[0] for _ in range(4 if keep else 3))
    assert policy.keep_candidate(policy.Region(bufs)) is keep
    assert policy.keep_candidate(policy.Region(frozenset(), reduces_buffer=True))
