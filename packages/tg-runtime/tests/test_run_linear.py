"""run_linear: executing the scheduler's LINEAR of CALLs; symbolic shapes end to end (one compile for every value
of a bound Variable); memory-planned intermediates give the same results."""

import struct

import pytest

from tg.codegen.schedule import cache_stats, clear_schedule_cache, create_schedule, replace_buffers
from tg.ir import Context, GlobalCounters, Ops, UOp, Variable, dtypes
from tg.runtime.engine import buffer_for, method_cache, run_linear


def upload(values: list[float], device: str) -> UOp:
    b = UOp.new_buffer(device, len(values), dtypes.float32)
    buffer_for(b).copyin(memoryview(bytearray(struct.pack(f"{len(values)}f", *values))))
    return b


def read(view: UOp, n: int) -> list[float]:
    b = view
    while b.op is not Ops.BUFFER:
        b = b.src[0]
    data = bytearray(b.arg * 4)
    buffer_for(b).copyout(memoryview(data))
    return list(struct.unpack(f"{b.arg}f", data))[:n]


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_symbolic_shape_compiles_once_for_every_value(device):
    clear_schedule_cache()
    data = upload([float(i) for i in range(32)], device)
    n = Variable("n", 1, 32)
    before = len(method_cache)
    for v in (3, 17, 32, 5):
        x = data.shrink(((0, n.bind(v)),))
        out = x.alu(Ops.MUL, x).alu(Ops.ADD, UOp.full((n.bind(v),), 1.0, dtypes.float32, device))
        s = create_schedule(UOp(Ops.SINK, src=(out,)))
        assert s.var_vals == {"n": v}
        run_linear(s.linear, s.var_vals)
        assert read(s.becomes[out], v) == [float(i * i + 1) for i in range(v)]
    assert len(method_cache) == before + 1  # one kernel, compiled once, served every n
    assert cache_stats["misses"] == 1 and cache_stats["hits"] == 3


def test_symbolic_reduction():
    data = upload([float(i) for i in range(16)], "CPU")
    n = Variable("n", 1, 16)
    for v in (1, 4, 16):
        total = data.shrink(((0, n.bind(v)),)).r(Ops.ADD, (0,))
        s = create_schedule(UOp(Ops.SINK, src=(total,)))
        run_linear(s.linear, s.var_vals)
        assert read(s.becomes[total], 1) == [float(sum(range(v)))]


def test_memory_planned_chain_gives_the_same_results():
    def graph() -> tuple[UOp, UOp]:
        x = upload([float(i % 7) / 7 for i in range(64)], "CPU").reshape((8, 8))
        out = x
        for _ in range(5):  # reduce-then-broadcast steps: stored intermediates with short lifetimes
            out = out.alu(Ops.ADD, out.r(Ops.MAX, (1,)).expand((8, 8))).alu(
                Ops.MUL, UOp.full((8, 8), 0.5, dtypes.float32, "CPU")
            )
        return x, out

    results = []
    for planner_off in (0, 1):
        with Context(NO_MEMORY_PLANNER=planner_off):
            _, out = graph()
            s = create_schedule(UOp(Ops.SINK, src=(out,)))
            planned = any(a.op is Ops.BUFFER_VIEW for c in s.linear.src for a in c.src[1:])
            assert planned == (not planner_off)
            run_linear(s.linear)
            results.append(read(s.becomes[out], 64))
    assert results[0] == results[1]


def test_run_linear_counts_kernels_and_rejects_non_linear():
    a = upload([1.0, 2.0], "CPU")
    s = create_schedule(UOp(Ops.SINK, src=(a.alu(Ops.ADD, a),)))
    k = GlobalCounters.kernel_count
    run_linear(s.linear)
    assert GlobalCounters.kernel_count == k + 1
    with pytest.raises(TypeError, match="LINEAR"):
        run_linear(s.linear.src[0])  # type: ignore[arg-type]


def test_a_schedule_runs_again_on_new_buffers():
    a = upload([1.0, 2.0, 3.0], "CPU")
    out = a.alu(Ops.MUL, a)
    s = create_schedule(UOp(Ops.SINK, src=(out,)))
    run_linear(s.linear)
    b = upload([4.0, 5.0, 6.0], "CPU")
    dest = UOp.new_buffer("CPU", 3, dtypes.float32)
    out_buf = s.linear.src[0].src[1]
    run_linear(replace_buffers(s.linear, {a: b, out_buf: dest}))
    assert read(s.becomes[out], 3) == [1.0, 4.0, 9.0] and read(dest, 3) == [16.0, 25.0, 36.0]
