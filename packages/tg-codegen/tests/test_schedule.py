"""create_schedule: kernel counts (fusion rules), kernel AST shape, ordering of assigns and copies."""

from typing import NamedTuple

import pytest

from tg.codegen.schedule import create_schedule, verify_schedule
from tg.ir import AxisType, Ops, UOp, dtypes


class Step(NamedTuple):
    """A CALL of the schedule, split into its body and buffer arguments."""

    ast: UOp
    bufs: tuple[UOp, ...]


def steps(linear: UOp) -> list[Step]:
    assert linear.op is Ops.LINEAR and all(c.op is Ops.CALL for c in linear.src)
    verify_schedule(linear)
    return [Step(c.src[0], c.src[1:]) for c in linear.src]


def buf(*shape: int, dtype=dtypes.float32, device: str = "CPU") -> UOp:
    n = 1
    for s in shape:
        n *= s
    return UOp.new_buffer(device, n, dtype).reshape(shape)


def sched(*outs: UOp) -> list[Step]:
    return steps(create_schedule(UOp(Ops.SINK, src=outs)).linear)


def kernels(*outs: UOp) -> int:
    return sum(1 for si in sched(*outs) if si.ast.op is Ops.SINK)


def test_elementwise_chain_is_one_kernel():
    a, b, c = buf(4, 8), buf(4, 8), buf(4, 8)
    assert kernels(a.alu(Ops.ADD, b).alu(Ops.MUL, c)) == 1


def test_multiply_sum_is_one_kernel():
    a, b = buf(4, 8), buf(4, 8)
    assert kernels(a.alu(Ops.MUL, b).r(Ops.ADD, (0, 1))) == 1
    assert kernels(a.alu(Ops.MUL, b).r(Ops.ADD, (1,)).reshape((4,))) == 1


def test_sum_plus_one_is_one_kernel():
    a = buf(16)
    s = a.r(Ops.ADD, (0,)).reshape(())
    assert kernels(s.alu(Ops.ADD, UOp.full((), 1.0, dtypes.float32, "CPU"))) == 1


def test_matmul_is_one_kernel():
    a, b = buf(3, 5), buf(5, 4)
    prod = a.reshape((3, 1, 5)).expand((3, 4, 5)).alu(Ops.MUL, b.permute((1, 0)).reshape((1, 4, 5)).expand((3, 4, 5)))
    assert kernels(prod.r(Ops.ADD, (2,))) == 1


def test_movement_ops_make_no_copies():
    a = buf(4, 8)
    t = a.permute((1, 0)).pad(((1, 1), (0, 0))).flip((True, False)).shrink(((1, 9), (0, 4))).reshape((32,))
    items = sched(t)
    assert len(items) == 1 and items[0].ast.op is Ops.SINK
    # one input buffer, one output buffer: the movement ops live in the index math
    assert len(items[0].bufs) == 2


def test_broadcast_reduce_is_stored_once():
    a = buf(4, 8)
    mx = a.r(Ops.MAX, (1,)).expand((4, 8))
    out = a.alu(Ops.ADD, mx)
    assert kernels(out) == 2


def test_softmax_like_kernel_count():
    a = buf(4, 8)
    m = a.r(Ops.MAX, (1,)).expand((4, 8))
    e = a.alu(Ops.ADD, m.alu(Ops.MUL, UOp.full((4, 8), -1.0, dtypes.float32, "CPU"))).alu(Ops.EXP2)
    out = e.alu(Ops.FDIV, e.r(Ops.ADD, (1,)).expand((4, 8)))
    assert kernels(out) == 3


def test_reduce_used_twice_is_stored():
    a = buf(4, 8)
    s = a.r(Ops.ADD, (1,)).reshape((4,))
    assert kernels(s.alu(Ops.ADD, s.flip((True,)))) == 2
    # two outputs reading the same reduction
    assert kernels(s.alu(Ops.MUL, s), s.alu(Ops.ADD, s)) == 3


def test_nested_reductions():
    a = buf(4, 8, 2)
    # the inner sum depends on the outer max's range: one kernel with nested REDUCEs
    (si,) = sched(a.r(Ops.ADD, (2,)).r(Ops.MAX, (1,)))
    assert len([u for u in si.ast.toposort() if u.op is Ops.REDUCE]) == 2
    # the inner sum broadcast inside the outer sum would be recomputed per element: stored first
    inner = a.r(Ops.ADD, (2,)).expand((4, 8, 2))
    assert kernels(inner.alu(Ops.MUL, a).r(Ops.ADD, (1,))) == 2


def test_contiguous_forces_a_store():
    a, b = buf(8), buf(8)
    x = a.alu(Ops.ADD, b).contiguous()
    assert kernels(x.alu(Ops.MUL, x)) == 2
    # contiguous of something already contiguous costs nothing
    assert sched(a.contiguous()) == []


def test_realized_buffer_needs_no_kernel():
    a = buf(4, 4)
    assert sched(a) == []


def test_kernel_ast_shape():
    a, b = buf(4, 8), buf(4, 8)
    (si,) = sched(a.alu(Ops.MUL, b).r(Ops.ADD, (1,)))
    ast = si.ast
    assert ast.op is Ops.SINK and ast.arg.name.startswith("r_")
    end = ast.src[0]
    assert end.op is Ops.END and end.src[0].op is Ops.STORE
    ranges = [u for u in ast.toposort() if u.op is Ops.RANGE]
    assert sorted(r.arg[1].name for r in ranges) == ["LOOP", "REDUCE"]
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    assert len(reduces) == 1 and reduces[0].arg is Ops.ADD
    params = sorted(u.arg for u in ast.toposort() if u.op is Ops.PARAM)
    assert params == [0, 1, 2] and len(si.bufs) == 3
    assert si.bufs[0].op is Ops.BUFFER and si.bufs[0].arg == 4  # output first
    assert any(r.arg[1] is AxisType.REDUCE for r in ranges)


def test_pad_gates_loads():
    a = buf(4)
    (si,) = sched(a.pad(((2, 1),)))
    loads = [u for u in si.ast.toposort() if u.op is Ops.LOAD]
    assert len(loads) == 1 and len(loads[0].src[0].src) == 3  # INDEX(PARAM, idx, valid)


def test_becomes_map_gives_buffers_with_shape():
    a, b = buf(2, 3), buf(2, 3)
    out = a.alu(Ops.ADD, b)
    linear, _, becomes = create_schedule(UOp(Ops.SINK, src=(out,)))
    items = steps(linear)
    assert becomes[out].shape == (2, 3)
    base = becomes[out]
    while base.op is Ops.RESHAPE:
        base = base.src[0]
    assert base.op is Ops.BUFFER and base is items[0].bufs[0]


def test_assign_runs_after_reads_of_old_value():
    t = buf(8)
    read_old = t.alu(Ops.ADD, UOp.full((8,), 1.0, dtypes.float32, "CPU"))
    assigned = t.assign(UOp.full((8,), 5.0, dtypes.float32, "CPU"))
    items = sched(assigned, read_old)
    assert len(items) == 2
    target = t
    # the reader goes first, the assign (which writes the target buffer) second
    assert items[0].bufs[1] is target and items[1].bufs[0] is target


def test_assign_reading_itself_elsewhere_uses_a_temporary():
    t = buf(8)
    assigned = t.assign(t.flip((True,)))
    items = sched(assigned)
    assert len(items) == 2 and items[1].bufs[0] is t


def test_assign_same_index_is_one_kernel():
    t = buf(8)
    assert kernels(t.assign(t.alu(Ops.ADD, UOp.full((8,), 1.0, dtypes.float32, "CPU")))) == 1


def test_copy_item():
    a = buf(4, device="CPU")
    c = a.alu(Ops.ADD, a).copy_to_device("PYTHON")
    items = sched(c)
    assert [si.ast.op for si in items] == [Ops.SINK, Ops.COPY]
    assert items[1].bufs[1] is items[0].bufs[0]


def test_copy_of_a_reshaped_computed_value():
    a = buf(6, device="CPU")
    c = a.alu(Ops.ADD, a).reshape((3, 2)).copy_to_device("PYTHON")
    items = sched(c)
    assert [si.ast.op for si in items] == [Ops.SINK, Ops.COPY]
    assert items[1].bufs[1] is items[0].bufs[0]


@pytest.mark.parametrize(
    "view,offset,size",
    [
        (lambda t: t.shrink(((1, 3), (0, 6))), 6, 12),  # whole rows
        (lambda t: t.shrink(((2, 3), (1, 4))), 13, 3),  # part of one row
        (lambda t: t.shrink(((1, 3), (0, 6))).reshape((12,)).shrink(((3, 5),)), 9, 2),  # a view of a view
    ],
)
def test_contiguous_disk_slices_copy_without_a_kernel(tmp_path, view, offset, size):
    disk = UOp.new_buffer(f"DISK:{tmp_path / 'w.bin'}", 24, dtypes.float32)
    items = sched(view(disk.reshape((4, 6))).copy_to_device("CPU"))
    assert [si.ast.op for si in items] == [Ops.COPY]
    src = items[0].bufs[1]
    assert src.op is Ops.BUFFER_VIEW and src.src[0] is disk and src.arg == (size, offset)


def test_strided_disk_slices_copy_the_covering_span_then_finish_on_the_destination(tmp_path):
    disk = UOp.new_buffer(f"DISK:{tmp_path / 'w.bin'}", 24, dtypes.float32)
    items = sched(disk.reshape((4, 6)).shrink(((1, 3), (2, 4))).copy_to_device("CPU"))
    assert [si.ast.op for si in items] == [Ops.COPY, Ops.SINK]
    span = items[0].bufs[1]  # rows 1..2, columns 2..3: elements 8 to 15 of the file, nothing else
    assert span.op is Ops.BUFFER_VIEW and span.src[0] is disk and span.arg == (8, 8)
    assert str(items[1].bufs[0].device) == "CPU" and items[1].bufs[1] is items[0].bufs[0]


def test_not_a_sink():
    with pytest.raises(TypeError, match="SINK"):
        create_schedule(buf(4))


def test_200_op_chain_is_one_kernel():
    a = buf(64)
    x = a
    for i in range(200):
        x = x.alu(Ops.ADD if i % 2 else Ops.MUL, a)
    assert kernels(x) == 1


def test_constants_fold():
    c = UOp.full((4,), 2.0, dtypes.float32, "CPU")
    out = c.alu(Ops.MUL, UOp.full((4,), 3.0, dtypes.float32, "CPU")).alu(Ops.ADD, c)
    (si,) = sched(out)
    store = next(u for u in si.ast.toposort() if u.op is Ops.STORE)
    assert store.src[1].op is Ops.CONST and store.src[1].arg == 8.0
    assert len(si.bufs) == 1  # nothing to load


def test_deep_graph_does_not_hit_the_recursion_limit():
    a = buf(8)
    x = a
    for _ in range(3000):
        x = x.alu(Ops.ADD, a)
    assert kernels(x) == 1


def test_work_after_a_broadcast_reduction_is_stored_with_it():
    a = buf(4, 8)
    s = a.r(Ops.ADD, (1,))
    post = s.alu(Ops.ADD, UOp.full((4, 1), 1.0, dtypes.float32, "CPU")).alu(Ops.EXP2)
    items = sched(a.alu(Ops.MUL, post.expand((4, 8))))
    assert len(items) == 2
    # the first kernel stores exp2(sum + 1), not just the sum
    first_store = next(u for u in items[0].ast.toposort() if u.op is Ops.STORE)
    assert first_store.src[1].op is Ops.EXP2


def test_huge_buffers_are_refused_clearly():
    a = UOp.new_buffer("CPU", 2**31, dtypes.uint8)
    with pytest.raises(NotImplementedError, match="64-bit"):
        sched(a.alu(Ops.ADD, a))


def test_reshaped_output_of_a_stored_value_gets_its_buffer():
    a = buf(4, 8)
    s = a.r(Ops.ADD, (1,))
    flat = s.reshape((4,))
    linear, _, becomes = create_schedule(UOp(Ops.SINK, src=(s, flat)))
    items = steps(linear)
    assert len(items) == 1

    def base(u: UOp) -> UOp:
        while u.op is Ops.RESHAPE:
            u = u.src[0]
        return u

    assert becomes[flat].shape == (4,) and base(becomes[flat]) is base(becomes[s]) is items[0].bufs[0]


def test_computation_on_disk_data_runs_on_the_copy_destination(tmp_path):
    disk = UOp.new_buffer(f"DISK:{tmp_path / 'w.bin'}", 64, dtypes.uint8)
    lo = disk.shrink(((8, 16),)).cast(dtypes.uint16)
    hi = disk.shrink(((16, 24),)).cast(dtypes.uint16)
    value = lo.alu(Ops.OR, hi.alu(Ops.SHL, UOp.full((8,), 8, dtypes.uint16, f"DISK:{tmp_path / 'w.bin'}")))
    items = sched(value.copy_to_device("CPU"))
    assert [si.ast.op for si in items] == [Ops.COPY, Ops.COPY, Ops.SINK]
    assert sorted(si.bufs[1].arg for si in items[:2]) == [(8, 8), (8, 16)]  # only the bytes read, never a kernel
    assert all(str(b.device) == "CPU" for b in items[2].bufs)


def test_long_reductions_with_few_outputs_are_split_once():
    from tg.codegen.schedule.policy import SPLIT_MAX_OUTPUTS, SPLIT_MIN, SPLIT_PARTIALS

    assert kernels(buf(SPLIT_MIN - 1).r(Ops.ADD, (0,))) == 1
    assert kernels(buf(SPLIT_MIN).r(Ops.ADD, (0,))) == 2  # partials of contiguous chunks, then their sum
    assert kernels(buf(SPLIT_PARTIALS**2 * 2 + 5).r(Ops.ADD, (0,))) == 2  # one level at any size (padded chunks)
    assert kernels(buf(4, SPLIT_MIN).r(Ops.ADD, (1,))) == 2  # few outputs
    assert kernels(buf(SPLIT_MIN, 3).r(Ops.ADD, (0,))) == 2  # a strided reduce axis too
    assert kernels(buf(SPLIT_MIN, dtype=dtypes.int32).r(Ops.ADD, (0,))) == 1  # int sums: exact, not split
    assert kernels(buf(SPLIT_MIN + 7).r(Ops.MAX, (0,))) == 2  # max too (for the threads; padded with -inf)
    assert kernels(buf(SPLIT_MAX_OUTPUTS + 1, SPLIT_MIN).r(Ops.ADD, (1,))) == 1  # enough outputs to run in parallel


def test_long_sum_of_a_broadcast_constant_folds_to_a_constant():
    from tg.codegen.schedule.policy import SPLIT_MIN

    ones = UOp.const(dtypes.float32, 1.0, "CPU").reshape((1,)).expand((SPLIT_MIN,))
    assert kernels(ones.r(Ops.ADD, (0,))) <= 1  # no partial sums: at most the store of the constant
    padded = UOp.const(dtypes.float32, 1.0, "CPU").reshape((1,)).expand((SPLIT_MIN,)).pad(((0, 3),))
    assert kernels(padded.r(Ops.ADD, (0,))) == 2  # a pad masks elements: summed as usual (split)
