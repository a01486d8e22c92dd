"""The schedule as IR: a LINEAR of CALLs that passes `schedule_spec`, its order (read-after-write,
write-after-read, cycles), the schedule cache, the memory planner."""

import gc
import itertools
import random
import weakref

import pytest

from tg.codegen.schedule import cache_stats, clear_schedule_cache, create_schedule, schedule_spec, verify_schedule
from tg.codegen.schedule.memory import ALIGN, plan_memory, plan_offsets
from tg.ir import Ops, SpecError, UOp, Variable, dtypes, verify


def buf(*shape: int, device: str = "CPU") -> UOp:
    n = 1
    for s in shape:
        n *= s
    return UOp.new_buffer(device, n, dtypes.float32).reshape(shape)


def full(shape: tuple[int, ...], v: float) -> UOp:
    return UOp.full(shape, v, dtypes.float32, "CPU")


def base(u: UOp) -> UOp:
    while u.op not in (Ops.BUFFER, Ops.BUFFER_VIEW):
        u = u.src[0]
    return u


# ---- the LINEAR and its spec ----------------------------------------------------------------------------------


def test_schedule_is_a_linear_of_calls_that_passes_the_spec():
    a = buf(4, 8)
    out = a.alu(Ops.ADD, a.r(Ops.MAX, (1,)).expand((4, 8))).copy_to_device("PYTHON")
    linear = create_schedule(UOp(Ops.SINK, src=(out,))).linear
    assert linear.op is Ops.LINEAR and [c.op for c in linear.src] == [Ops.CALL] * 3
    assert [c.src[0].op for c in linear.src] == [Ops.SINK, Ops.SINK, Ops.COPY]
    assert verify_schedule(linear)
    for call in linear.src:
        assert all(a.op in (Ops.BUFFER, Ops.BUFFER_VIEW) for a in call.src[1:])


def test_schedule_spec_rejects_malformed_schedules():
    a = UOp.new_buffer("CPU", 4, dtypes.float32)
    ok = create_schedule(UOp(Ops.SINK, src=(a.alu(Ops.ADD, a),))).linear
    ast = ok.src[0].src[0]
    bad_arg = UOp(Ops.LINEAR, dtypes.void, (UOp(Ops.CALL, dtypes.void, (ast, UOp.const(dtypes.float32, 1.0))),))
    with pytest.raises(SpecError):
        verify(bad_arg, schedule_spec)
    two_devices = UOp(Ops.CALL, dtypes.void, (ast, a, UOp.new_buffer("PYTHON", 4, dtypes.float32)))
    with pytest.raises(SpecError):
        verify_schedule(UOp(Ops.LINEAR, dtypes.void, (two_devices,)))
    with pytest.raises(SpecError):
        verify_schedule(UOp(Ops.LINEAR, dtypes.void, (ast,)))  # a bare kernel, not a CALL


# ---- order ----------------------------------------------------------------------------------------------------


def test_read_after_write_order():
    a = buf(4, 8)
    m = a.r(Ops.MAX, (1,))
    out = a.alu(Ops.ADD, m.expand((4, 8)))
    calls = create_schedule(UOp(Ops.SINK, src=(out,))).linear.src
    assert (len(calls) == 2 and calls[1].src[1 + 1] is calls[0].src[1]) or calls[0].src[1] in calls[1].src[1:]


def test_old_value_readers_run_before_the_assign():
    t = buf(8)
    reader = t.alu(Ops.MUL, full((8,), 2.0))
    assigned = t.assign(full((8,), 5.0))
    calls = create_schedule(UOp(Ops.SINK, src=(assigned, reader))).linear.src
    writer = next(i for i, c in enumerate(calls) if c.src[1] is base(t))
    reading = next(i for i, c in enumerate(calls) if base(t) in c.src[2:])
    assert reading < writer


def test_reading_old_and_new_value_in_one_kernel_is_a_cycle():
    t = buf(8)
    new = t.assign(full((8,), 5.0))
    both = t.alu(Ops.ADD, new)  # old t and the assigned t in one kernel
    with pytest.raises(RuntimeError, match="old and the new value"):
        create_schedule(UOp(Ops.SINK, src=(both, new)))


def test_two_assigns_of_one_buffer_run_in_graph_order():
    t = buf(8)
    first = t.assign(t.alu(Ops.ADD, full((8,), 1.0)))
    second = first.assign(first.alu(Ops.MUL, full((8,), 3.0)))
    calls = create_schedule(UOp(Ops.SINK, src=(second,))).linear.src
    assert len(calls) == 2 and all(c.src[1] is base(t) for c in calls)
    # the second reads the state the first wrote
    assert base(t) in calls[1].src[2:] or calls[1].src[1] is base(t)


# ---- schedule cache -----------------------------------------------------------------------------------------


def test_cache_hits_on_equal_structure_with_new_buffers():
    clear_schedule_cache()

    def graph():
        a, b = buf(4, 8), buf(4, 8)
        return a, b, a.alu(Ops.MUL, b).r(Ops.ADD, (1,))

    a1, b1, o1 = graph()
    s1 = create_schedule(UOp(Ops.SINK, src=(o1,)))
    a2, b2, o2 = graph()
    s2 = create_schedule(UOp(Ops.SINK, src=(o2,)))
    assert cache_stats == {"hits": 1, "misses": 1}
    (c1,), (c2,) = s1.linear.src, s2.linear.src
    assert c1.src[0] is c2.src[0]  # the same kernel AST: one compile
    assert c1.src[2:] == (base(a1), base(b1)) and c2.src[2:] == (base(a2), base(b2))
    assert c1.src[1] is not c2.src[1]  # fresh output buffers
    assert base(s1.becomes[o1]) is c1.src[1] and base(s2.becomes[o2]) is c2.src[1]
    # a different structure misses
    create_schedule(UOp(Ops.SINK, src=(a1.alu(Ops.ADD, b1),)))
    assert cache_stats["misses"] == 2


def test_cache_hits_across_storage_markers_and_keeps_them_apart():
    # CONTIGUOUS(x, UNIQUE) is storage of its own: markers are renumbered, so equal structures share a template
    clear_schedule_cache()

    def graph():
        x = full((4,), 0.0)
        return x.contiguous(UOp.unique()), x.contiguous(UOp.unique())

    a1, b1 = graph()
    assert a1 is not b1
    s1 = create_schedule(UOp(Ops.SINK, src=(a1, b1)))
    a2, b2 = graph()
    s2 = create_schedule(UOp(Ops.SINK, src=(a2, b2)))
    assert cache_stats == {"hits": 1, "misses": 1}
    # two markers in one graph stay two buffers (the normalised graph must not merge them)
    for s, a, b in ((s1, a1, b1), (s2, a2, b2)):
        assert base(s.becomes[a]) is not base(s.becomes[b])
    assert base(s1.becomes[a1]) is not base(s2.becomes[a2])


def test_cache_keeps_no_buffer_alive():
    clear_schedule_cache()
    a = UOp.new_buffer("CPU", 16, dtypes.float32)
    out = a.alu(Ops.ADD, a)
    s = create_schedule(UOp(Ops.SINK, src=(out,)))
    refs = [weakref.ref(a), weakref.ref(s.linear.src[0].src[1])]
    del a, out, s
    gc.collect()
    assert all(r() is None for r in refs)


def test_bound_variables_share_one_template():
    clear_schedule_cache()
    n = Variable("n", 1, 16)
    a = UOp.new_buffer("CPU", 16, dtypes.float32)
    asts = []
    for v in (3, 7, 3):
        view = a.shrink(((0, n.bind(v)),))
        s = create_schedule(UOp(Ops.SINK, src=(view.alu(Ops.ADD, view),)))
        assert s.var_vals == {"n": v}
        asts.append(s.linear.src[0].src[0])
    assert cache_stats == {"hits": 2, "misses": 1}
    assert asts[0] is asts[1] is asts[2]
    ranges = [u for u in asts[0].toposort() if u.op is Ops.RANGE]
    assert len(ranges) == 1 and ranges[0].src[0].op is Ops.DEFINE_VAR


def test_one_variable_bound_to_two_values_is_an_error():
    n = Variable("n", 1, 16)
    a = UOp.new_buffer("CPU", 16, dtypes.float32)
    x, y = a.shrink(((0, n.bind(3)),)), a.shrink(((0, n.bind(4)),))
    with pytest.raises(ValueError, match="bound to two values"):
        create_schedule(UOp(Ops.SINK, src=(x.alu(Ops.ADD, x), y.alu(Ops.ADD, y))))


# ---- memory planner -----------------------------------------------------------------------------------------


def test_plan_offsets_never_overlaps_live_buffers():
    rnd = random.Random(0)
    for _ in range(50):
        bufs = [UOp.new_buffer("CPU", rnd.randint(1, 300), dtypes.float32) for _ in range(rnd.randint(2, 20))]
        lifetimes, sizes = {}, {}
        for b in bufs:
            first = rnd.randint(0, 15)
            lifetimes[b] = (first, first + rnd.randint(0, 5))
            sizes[b] = ((b.arg * 4 + ALIGN - 1) // ALIGN) * ALIGN
        offsets, total = plan_offsets(lifetimes, sizes)
        assert total <= sum(sizes.values())
        for x in bufs:
            for y in bufs:
                if x is y:
                    continue
                live_together = lifetimes[x][0] <= lifetimes[y][1] and lifetimes[y][0] <= lifetimes[x][1]
                apart = offsets[x] + sizes[x] <= offsets[y] or offsets[y] + sizes[y] <= offsets[x]
                assert apart or not live_together


def matmul(x: UOp, w: UOp) -> UOp:
    (n, k), (_, m) = x.shape, w.shape
    xe = x.reshape((n, 1, k)).expand((n, m, k))
    we = w.permute((1, 0)).reshape((1, m, k)).expand((n, m, k))
    return xe.alu(Ops.MUL, we).r(Ops.ADD, (2,)).reshape((n, m))


def test_chain_intermediates_share_an_arena_and_held_buffers_are_untouched():
    x, w = buf(64, 64), buf(64, 64)
    for _ in range(8):  # each matmul reads the previous one through a broadcast: stored, lives for 2 calls
        x = matmul(x, w)
    s = create_schedule(UOp(Ops.SINK, src=(x,)))
    intermediates = [c.src[1] for c in s.linear.src[:-1]]  # every call but the last writes one
    assert len(intermediates) == 7 and all(v.op is Ops.BUFFER_VIEW for v in intermediates)
    (arena,) = {v.src[0] for v in intermediates}
    assert arena.arg == 2 * 64 * 64 * 4  # two live at a time, instead of 7
    for a, b in itertools.pairwise(intermediates):  # neighbours (alive together) never overlap
        assert a.arg[1] != b.arg[1]
    out = base(s.becomes[x])
    assert out.op is Ops.BUFFER and out is s.linear.src[-1].src[1]  # the output is not planned
    assert base(w) in s.linear.src[0].src[1:]  # inputs are not planned


def test_plan_memory_leaves_disk_and_held_buffers_alone():
    a = UOp.new_buffer("CPU", 8, dtypes.float32)
    b = UOp.new_buffer("CPU", 8, dtypes.float32)
    ast = create_schedule(UOp(Ops.SINK, src=(a.alu(Ops.ADD, a),))).linear.src[0].src[0]
    linear = UOp(
        Ops.LINEAR, dtypes.void, (UOp(Ops.CALL, dtypes.void, (ast, a, b)), UOp(Ops.CALL, dtypes.void, (ast, b, a)))
    )
    assert plan_memory(linear, {a, b}) is linear
