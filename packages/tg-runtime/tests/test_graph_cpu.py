"""CapturedProgram (a captured LINEAR of CALLs with buffer roles) and its graph executors: replays equal running
the schedule, slots follow new buffers (also at byte offsets), variables are patched, copies batch, pruning keeps
what depends on slots or state, intermediates are memory-planned, and a program pickles. Every test runs twice:
on CPU (the CPU batch runner) and on HCQ+CPU (the HCQ graph executor), jit-multi.md 3.5."""

from __future__ import annotations

import pickle
import struct
from collections.abc import Iterator

import pytest

from tg.codegen.schedule import create_schedule
from tg.ir import Context, GlobalCounters, Ops, UOp, Variable, dtypes
from tg.runtime.engine import buffer_for, run_linear
from tg.runtime.graph.cpu_batch import CPUBatchExecutor
from tg.runtime.hcq.graph import HCQGraphExecutor
from tg.runtime.jit import CapturedProgram

EXECUTORS = {"CPU": CPUBatchExecutor, "HCQ+CPU": HCQGraphExecutor}


@pytest.fixture(autouse=True, params=list(EXECUTORS))
def executor(request: pytest.FixtureRequest) -> Iterator[type]:
    """The executor under test: each test runs on plain CPU and on HCQ+CPU (the "CPU" devices are HCQ ones)."""
    with Context(DEV=request.param):
        yield EXECUTORS[request.param]


def upload(values: list[float], device: str = "CPU") -> UOp:
    b = UOp.new_buffer(device, len(values), dtypes.float32)
    buffer_for(b).copyin(memoryview(bytearray(struct.pack(f"{len(values)}f", *values))))
    return b


def values(b: UOp) -> list[float]:
    buf = buffer_for(b)
    data = bytearray(buf.nbytes)
    buf.copyout(memoryview(data))
    return list(struct.unpack(f"{buf.size}f", data))


def affine(x: UOp, mul: float, add: float) -> UOp:
    def full(v: float) -> UOp:
        return UOp.full(x.shape, v, dtypes.float32, x.device)

    return x.alu(Ops.MUL, full(mul)).alu(Ops.ADD, full(add))


def schedule(*outs: UOp) -> tuple[UOp, dict[str, int], list[UOp]]:
    """Schedule and run `outs` the way a capture sees it (no memory planning); returns the linear, the variable
    values and each output's BUFFER."""
    with Context(NO_MEMORY_PLANNER=1):
        s = create_schedule(UOp(Ops.SINK, src=outs))
    run_linear(s.linear, s.var_vals)
    bufs = []
    for o in outs:
        b = s.becomes[o]
        while b.op is not Ops.BUFFER:
            b = b.src[0]
        bufs.append(b)
    return s.linear, s.var_vals, bufs


def chain(x: UOp, n: int) -> UOp:
    for _ in range(n):
        x = affine(x, 2, 1).contiguous()
    return x


@pytest.mark.parametrize("mode", [1, 2])
def test_replay_equals_the_schedule_with_new_slots(mode: int, executor: type) -> None:
    x = upload([0.0, 1.0, 2.0])
    linear, _, (out,) = schedule(chain(x, 5))
    assert values(out) == [31.0, 63.0, 95.0] and len(linear.src) == 5
    with Context(JIT=mode):
        program = CapturedProgram(linear, [x, out])
        x2, out2 = upload([1.0, 1.0, 1.0]), upload([0.0] * 3)
        kernels = GlobalCounters.kernel_count
        program.replay([buffer_for(x2), buffer_for(out2)])
        assert GlobalCounters.kernel_count - kernels == 5
    assert values(out2) == [63.0] * 3
    assert values(out) == [31.0, 63.0, 95.0], "the capture-time output slot must not be written"
    assert isinstance(program._executors[0][0], executor) == (mode == 1)


def test_slots_become_params_and_intermediates_share_one_planned_arena() -> None:
    x = upload([0.0, 1.0, 2.0])
    linear, _, (out,) = schedule(chain(x, 6))
    program = CapturedProgram(linear, [x, out])
    args = [a for c in program.linear.src for a in c.src[1:]]
    assert {a.arg[0] for a in args if a.op is Ops.PARAM} == {0, 1}
    views = [a for a in args if a.op is Ops.BUFFER_VIEW]
    arenas = {v.src[0] for v in views}
    assert len(views) == 2 * 5 and len(arenas) == 1  # 5 intermediates, each written once and read once
    (arena,) = arenas
    assert arena.dtype is dtypes.uint8 and arena.arg < 5 * 256  # lifetimes overlap pairwise only: reused memory
    assert set(program.fixed) == {arena}
    # planned views with overlapping lifetimes never overlap in bytes
    first: dict[UOp, tuple[int, int]] = {}
    for i, c in enumerate(program.linear.src):
        for a in c.src[1:]:
            if a.op is Ops.BUFFER_VIEW:
                first[a] = (first.get(a, (i, i))[0], i)
    spans = [(lt, (a.arg[1], a.arg[1] + a.arg[0] * a.dtype.itemsize)) for a, lt in first.items()]
    for (lt1, b1), (lt2, b2) in ((s, t) for s in spans for t in spans if s is not t):
        if lt1[0] <= lt2[1] and lt2[0] <= lt1[1]:
            assert b1[1] <= b2[0] or b2[1] <= b1[0]


def test_a_slot_used_through_a_view_follows_the_new_buffer_at_its_byte_offset() -> None:
    x = upload([1.0, 2.0, 3.0, 4.0])
    linear, _, (out,) = schedule(affine(upload([0.0, 0.0]), 10, 0))
    call = linear.src[0]
    inp = call.src[2]  # the kernel's input: read through a view of x's elements 2..3 instead
    view = UOp(Ops.BUFFER_VIEW, dtypes.float32, (x,), (2, 2))
    linear = linear.replace(src=(call.replace(src=(call.src[0], call.src[1], view)),))
    assert inp.op is Ops.BUFFER
    program = CapturedProgram(linear, [x, out])
    assert [(u.pos, u.byte_offset) for u in program.uses[0]] == [(1, 8)]
    x2, out2 = upload([0.0, 0.0, 5.0, 6.0]), upload([0.0, 0.0])
    program.replay([buffer_for(x2), buffer_for(out2)])
    assert values(out2) == [50.0, 60.0]


def test_variables_are_patched_per_replay_and_fixed_values_kept() -> None:
    x = upload([1.0, 2.0, 3.0, 4.0])
    n = Variable("n", 1, 4)
    part = x.shrink(((0, n.bind(2)),))
    linear, var_vals, (out,) = schedule(affine(part, 3, 0).contiguous())
    assert var_vals == {"n": 2}
    program = CapturedProgram(linear, [x, out], var_vals=var_vals)
    target = upload([0.0] * 4)
    program.replay([buffer_for(x), buffer_for(target)])  # the captured value
    assert values(target)[:2] == [3.0, 6.0] and values(target)[2:] == [0.0, 0.0]
    program.replay([buffer_for(x), buffer_for(target)], {"n": 4})
    assert values(target) == [3.0, 6.0, 9.0, 12.0]


def test_copies_between_cpu_devices_batch_with_kernels(executor: type) -> None:
    x = upload([1.0, 2.0])
    on1 = affine(x.copy_to_device("CPU:1"), 2, 0).contiguous()
    back = affine(on1.copy_to_device("CPU"), 1, 1)
    linear, _, (out,) = schedule(back)
    assert values(out) == [3.0, 5.0]
    program = CapturedProgram(linear, [x, out])
    out2 = upload([0.0, 0.0])
    program.replay([buffer_for(upload([5.0, 6.0])), buffer_for(out2)])
    assert values(out2) == [11.0, 13.0]
    assert len(program._executors) == 1 and isinstance(program._executors[0][0], executor)


def test_pruning_keeps_slot_and_state_users_and_their_producers() -> None:
    x, weight, const_src = upload([1.0]), upload([7.0]), upload([2.0])
    const = affine(const_src, 3, 0).contiguous()  # capture-local only: pruned, its result kept as a constant
    weighted = affine(weight, 1, 0).contiguous()  # reads state: kept
    out = x.alu(Ops.ADD, const).alu(Ops.ADD, weighted)
    linear, _, (out_buf,) = schedule(out)
    assert values(out_buf) == [14.0]
    program = CapturedProgram(linear, [x, out_buf], persistent=[weight])
    assert program.pruned_count == 1 and program.kernel_count == 2
    buffer_for(weight).copyin(memoryview(bytearray(struct.pack("f", 100.0))))
    out2 = upload([0.0])
    program.replay([buffer_for(upload([2.0])), buffer_for(out2)])
    assert values(out2) == [108.0]  # the new input and the weight's new value; the constant from the capture
    assert CapturedProgram(linear, [x, out_buf], persistent=[weight], prune=False).kernel_count == 3


def test_replay_checks_slot_count() -> None:
    x = upload([1.0])
    linear, _, (out,) = schedule(chain(x, 2))
    program = CapturedProgram(linear, [x, out])
    with pytest.raises(ValueError, match="replay needs 2 slot buffers, got 1"):
        program.replay([buffer_for(x)])
    with pytest.raises(TypeError, match="LINEAR"):
        CapturedProgram(linear.src[0], [x, out])


def test_a_buffer_read_before_any_write_keeps_its_memory() -> None:
    # an upload that the program then updates in place carries values in: it must not move into the shared arena
    x = upload([1.0, 1.0])
    acc = upload([5.0, 5.0])
    first = acc.assign(acc.alu(Ops.ADD, x))
    linear, _, (out,) = schedule(affine(first, 2, 0).contiguous())
    program = CapturedProgram(linear, [x, out])
    assert any(buf is buffer_for(acc) for buf in program.fixed.values())


def test_instantiate_linear_runs_the_program_over_new_buffer_uops() -> None:
    x = upload([0.0, 1.0])
    linear, _, (out,) = schedule(chain(x, 3))
    program = CapturedProgram(linear, [x, out])
    x2, out2 = upload([1.0, 2.0]), upload([0.0, 0.0])
    run_linear(program.instantiate_linear([x2, out2]))
    assert values(out2) == [15.0, 23.0]


def test_captured_program_pickles_with_binaries_and_buffer_contents() -> None:
    x, weight = upload([1.0, 2.0]), upload([10.0, 10.0])
    out = weight.assign(affine(x, 1, 0))  # writes the weight in place
    linear, _, (out_buf,) = schedule(affine(out, 1, 1).contiguous())
    program = CapturedProgram(linear, [x, out_buf], persistent=[weight])
    loaded = pickle.loads(pickle.dumps(program))
    (loaded_weight,) = [b for b in loaded.fixed.values() if b.size == 2]
    assert loaded_weight is not buffer_for(weight)
    x2, out2 = upload([5.0, 6.0]), upload([0.0, 0.0])
    loaded.replay([buffer_for(x2), buffer_for(out2)])
    data = bytearray(8)
    loaded_weight.copyout(memoryview(data))
    assert values(out2) == [6.0, 7.0] and list(struct.unpack("2f", data)) == [5.0, 6.0]
    assert values(weight) == [1.0, 2.0]


def test_an_upload_updated_in_place_is_restored_before_each_replay() -> None:
    x = upload([1.0, 1.0])
    acc = upload([5.0, 5.0])
    linear, _, (out,) = schedule(affine(acc.assign(acc.alu(Ops.ADD, x)), 2, 0).contiguous())
    assert values(out) == [12.0, 12.0]
    program = CapturedProgram(linear, [x, out], initial={acc: struct.pack("2f", 5.0, 5.0)})
    assert program.linear.src[0].src[0].op is Ops.COPY  # the restore runs first
    for _ in range(3):
        out2 = upload([0.0, 0.0])
        program.replay([buffer_for(upload([2.0, 3.0])), buffer_for(out2)])
        assert values(out2) == [14.0, 16.0]
