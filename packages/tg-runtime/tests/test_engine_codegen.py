"""run_schedule/run_linear end to end with real code generation: hand-built kernel ASTs -> C -> results."""

import struct

import pytest

from tg.ir.dtype import dtypes
from tg.ir.helpers import Context, GlobalCounters
from tg.ir.ops import AxisType, KernelInfo, Ops
from tg.ir.uop import UOp
from tg.runtime.engine import buffer_for, get_runner, run_schedule

N = 16


def call(ast: UOp, bufs: tuple[UOp, ...]) -> UOp:
    """A schedule step: CALL(body, *buffers)."""
    return UOp(Ops.CALL, dtypes.void, (ast, *bufs))


def axpy_ast(name: str = "axpy") -> UOp:
    """data0[i] = data1[i] * 2 + data2[i] for i < N."""
    out, a, b = (UOp.param(i, dtypes.float32, N) for i in range(3))
    i = UOp.range(N, 0, AxisType.LOOP)
    value = a.index(i).load() * UOp.const(dtypes.float32, 2.0) + b.index(i).load()
    return UOp.sink(out.index(i).store(value).end(i), arg=KernelInfo(name=name))


def buffers(device: str, *contents: list[float] | None) -> tuple[UOp, ...]:
    uops = tuple(UOp.new_buffer(device, N, dtypes.float32) for _ in contents)
    for uop, values in zip(uops, contents, strict=True):
        if values is not None:
            buffer_for(uop).copyin(struct.pack(f"{N}f", *values))
    return uops


def read(uop: UOp) -> list[float]:
    mv = buffer_for(uop).as_memoryview()
    return list(struct.unpack(f"{mv.nbytes // 4}f", mv))


XS, YS = [float(i) for i in range(N)], [0.25 * i - 1 for i in range(N)]
EXPECTED = [x * 2 + y for x, y in zip(XS, YS, strict=True)]


@pytest.mark.parametrize("device", ["CPU", "CPU:1", "PYTHON"])
def test_elementwise_kernel(device: str) -> None:
    out, a, b = buffers(device, None, XS, YS)
    run_schedule([call(axpy_ast(), (out, a, b))])
    assert read(out) == EXPECTED


def test_runner_cached_per_device_and_ast(capsys: pytest.CaptureFixture[str]) -> None:
    ast = axpy_ast("axpy_cached")
    with Context(DEBUG=4):
        first = get_runner("CPU", ast)
    assert "void axpy_cached(" in capsys.readouterr().out
    assert get_runner("cpu", ast) is first
    assert get_runner("CPU:1", ast) is not first


def test_variable_and_reduction_kernels() -> None:
    n = UOp.variable("n", 1, N)
    out, src = UOp.param(0, dtypes.float32, N), UOp.param(1, dtypes.float32, N)
    i = UOp.range(n, 0, AxisType.LOOP)
    add_one = UOp.sink(out.index(i).store(src.index(i).load() + UOp.const(dtypes.float32, 1.0)).end(i))
    total, xs = UOp.param(0, dtypes.float32, 1), UOp.param(1, dtypes.float32, N)
    r = UOp.range(N, 1, AxisType.REDUCE)
    sum_all = UOp.sink(total.index(UOp.const(dtypes.int32, 0)).store(xs.index(r).load().reduce(r, arg=Ops.ADD)))
    dst, data = buffers("CPU", [0.0] * N, XS)
    result = UOp.new_buffer("CPU", 1, dtypes.float32)
    GlobalCounters.reset()
    run_schedule([call(add_one, (dst, data)), call(sum_all, (result, data))], {"n": 5})
    assert read(dst) == [x + 1 for x in XS[:5]] + [0.0] * (N - 5)
    assert read(result) == [sum(XS)]
    assert GlobalCounters.kernel_count == 2 and GlobalCounters.global_mem > 0
    with pytest.raises(ValueError, match="needs a value for variable 'n'"):
        run_schedule([call(add_one, (dst, data))])


def test_copy_then_kernel_across_devices(capsys: pytest.CaptureFixture[str]) -> None:
    host_x, host_y = buffers("CPU:1", XS, YS)
    out, a, b = buffers("CPU", None, None, None)
    pairs = ((a, host_x), (b, host_y))
    copies = [call(UOp(Ops.COPY, dtypes.float32, (src,)), (dst, src)) for dst, src in pairs]
    with Context(DEBUG=2):
        run_schedule([*copies, call(axpy_ast(), (out, a, b))])
    lines = capsys.readouterr().out.splitlines()
    assert sum("copy" in line for line in lines) == 2 and any("axpy" in line for line in lines)
    assert read(out) == EXPECTED


def test_null_device_runs_nothing() -> None:
    out, a, b = buffers("NULL", None, None, None)
    GlobalCounters.reset()
    run_schedule([call(axpy_ast("axpy_null"), (out, a, b))])
    assert GlobalCounters.kernel_count == 1
    with pytest.raises(RuntimeError, match="NULL device holds no data"):
        read(out)


def test_new_kernels_of_a_schedule_compile_together(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.runtime import engine

    compiled: list[str] = []
    real = engine.CompiledRunner.__init__

    def spy(self, p, device=None, lib=None):  # type: ignore[no-untyped-def]
        compiled.append(f"{p.name}:{'pre' if lib is not None else 'alone'}")
        real(self, p, device, lib)

    monkeypatch.setattr(engine.CompiledRunner, "__init__", spy)
    out1, out2, a, b = buffers("CPU", None, None, XS, YS)
    run_schedule([call(axpy_ast("pre_a"), (out1, a, b)), call(axpy_ast("pre_b"), (out2, b, a))])
    assert sorted(compiled) == ["pre_a:pre", "pre_b:pre"]
    assert read(out1) == EXPECTED
    assert read(out2) == [y * 2 + x for x, y in zip(XS, YS, strict=True)]
