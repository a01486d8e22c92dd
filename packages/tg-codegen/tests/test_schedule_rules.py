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
    small = b.alu(Ops.MUL, b).alu(Ops.ADD, full((4, 1), 1.0))  # cost 2: a scale and shift is recomputed
    out = a.alu(Ops.ADD, small.expand((4, 8)))
    assert stores(out) == {out: {policy.OUTPUT}}


def test_c3_expensive_elementwise_under_a_broadcast_is_stored():
    a, b = buf(4, 8), buf(4, 1)
    costly = b.alu(Ops.MUL, b).alu(Ops.EXP2)  # evaluated 8 times per element if fused
    got = stores(a.alu(Ops.ADD, costly.expand((4, 8))))
    assert got[costly] == {policy.BROADCAST}


def test_c3_expensive_value_read_once_per_element_by_each_kernel_is_recomputed():
    a = buf(4, 8)
    e = a.alu(Ops.EXP2)
    total = e.r(Ops.ADD, (1,))  # stored (R3): its kernel evaluates e once per element, and so does the output's
    out = e.alu(Ops.MUL, total.expand((4, 8)))
    got = stores(out)
    assert e not in got and got[total] == {policy.BROADCAST}


def test_c3_value_read_at_two_indices_by_one_kernel_is_not_repeated():
    a = buf(8)
    e = a.alu(Ops.EXP2)  # shifted and flipped reads share the kernel's loop: recomputed (C1), as before
    assert stores(e.alu(Ops.ADD, e.flip((True,)))) == {e.alu(Ops.ADD, e.flip((True,))): {policy.OUTPUT}}


def test_c3_cost_model_counts_op_weights():
    a = buf(4)
    assert policy.op_cost(a.alu(Ops.ADD, a)) == 1 and policy.op_cost(a.alu(Ops.EXP2)) == policy.OP_COST[Ops.EXP2]
    assert policy.op_cost(a.reshape((2, 2))) == 0
    region = policy.Region(frozenset(), cost=policy.RECOMPUTE_MAX_COST + 1)
    assert policy.keep_candidate(region, policy.Store({policy.BROADCAST}, repeated=True))
    assert not policy.keep_candidate(region, policy.Store({policy.MULTI_INDEX}, repeated=False))
    cheap = policy.Region(frozenset(), cost=policy.RECOMPUTE_MAX_COST)
    assert not policy.keep_candidate(cheap, policy.Store({policy.BROADCAST}, repeated=True))


def test_r4_long_reduction_nested_in_another_is_stored():
    a, b = buf(64, 32), buf(32, 64)
    mm = a.reshape((64, 32, 1)).expand((64, 32, 64)).alu(Ops.MUL, b.reshape((1, 32, 64)).expand((64, 32, 64)))
    inner = mm.r(Ops.ADD, (1,))  # 64*32*64 = 2**17 products: a matmul
    got = stores(inner.r(Ops.ADD, (0, 1, 2)))
    assert got[inner] == {policy.NESTED_REDUCE}


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


def _sum_of_buffers(n: int, device: str = "CPU") -> tuple[list[UOp], UOp]:
    bufs = [buf(4, 4, device=device) for _ in range(n)]
    out = bufs[0]
    for b in bufs[1:]:
        out = out.alu(Ops.ADD, b)
    return bufs, out


def _kernel_args(outs: UOp) -> list[int]:
    from tg.codegen.schedule import create_schedule

    return [len(c.src) - 1 for c in create_schedule(UOp(Ops.SINK, src=(outs,))).linear.src]


@pytest.mark.parametrize("limit", [4, 5, 8])
def test_l1_kernels_over_the_buffer_limit_store_intermediates(limit: int):
    from tg.ir import Context

    _, out = _sum_of_buffers(8)  # one kernel of 8 inputs + the output without a limit
    assert _kernel_args(out) == [9]
    with Context(MAX_KERNEL_BUFFERS=limit):
        args = _kernel_args(out)
        plan = plan_stores(UOp(Ops.SINK, src=(out,)))
    assert len(args) > 1 and max(args) <= limit
    assert sum(1 for st in plan.stores.values() if policy.BUFFER_LIMIT in st.reasons) == len(args) - 1


def test_l1_limit_comes_from_the_renderer_of_the_device():
    from tg.codegen.render.renderer import Renderer

    class _FewArgs(Renderer):  # a target whose kernels take at most 4 buffers
        device = "TESTFEWARGS"
        max_buffers = 4

    try:
        assert Renderer.buffer_limits["TESTFEWARGS"] == 4
        _, out = _sum_of_buffers(6, device="TESTFEWARGS")
        assert max(_kernel_args(out)) <= 4
        _, other = _sum_of_buffers(6)  # another device: no limit
        assert _kernel_args(other) == [7]
    finally:
        del Renderer.buffer_limits["TESTFEWARGS"]


def test_l1_rejects_a_limit_too_small_to_split_to():
    from tg.ir import Context

    _, out = _sum_of_buffers(4)
    with Context(MAX_KERNEL_BUFFERS=3), pytest.raises(ValueError, match="too small"):
        plan_stores(UOp(Ops.SINK, src=(out,)))


def test_d1_a_kept_value_constant_along_an_axis_is_stored_without_it():
    cols = [buf(4, 1) for _ in range(4)]
    wide = [c.expand((4, 8)) for c in cols]
    y = wide[0].alu(Ops.MUL, wide[1]).alu(Ops.ADD, wide[2].alu(Ops.MUL, wide[3]))  # reads 4 buffers: C2 keeps it
    out = y.alu(Ops.ADD, y.flip((False, True)))  # read at two indices: R2
    plan = plan_stores(UOp(Ops.SINK, src=(out,)))
    assert plan.stores[y].reasons == {policy.MULTI_INDEX}
    assert plan.dead[y] == frozenset({1}) and plan.stored_shape(y) == (4, 1)
    assert plan.buffers[y].arg == 4  # 4 elements stored, not 32
    assert out not in plan.dead  # an output is stored whole


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        (lambda b: b.reshape((4, 1)).expand((4, 8)), {1}),
        (lambda b: b.reshape((4, 1)).expand((4, 8)).permute((1, 0)), {0}),
        (lambda b: b.reshape((4, 1)).expand((4, 8)).pad(((0, 0), (1, 0))), set()),  # zeros along the padded axis
        (lambda b: b.reshape((4, 1)).expand((4, 8)).pad(((1, 0), (0, 0))), {1}),
        (lambda b: b.reshape((4, 1)).expand((4, 8)).reshape((2, 2, 8)), set()),  # splits a non-1 axis: unknown
        (lambda b: b.reshape((4, 1)).expand((4, 8)).reshape((4, 1, 8)), {2}),
        (lambda b: b.reshape((4, 1)).expand((4, 8)).alu(Ops.ADD, buf(4, 8)), set()),
        (lambda b: b.reshape((4, 1, 1)).expand((4, 8, 2)).r(Ops.ADD, (2,)), {1}),
    ],
)
def test_d1_constant_axes_through_each_op(make, expect):
    x = make(UOp.new_buffer("CPU", 4, dtypes.float32))
    dead: dict[UOp, int] = {}
    for n in x.toposort():
        if n._shape is not None:
            dead[n] = policy.constant_axes(n, [dead.get(s, 0) for s in n.src])
    assert dead[x] == sum(1 << a for a in expect)
