"""The execution engine: buffer_for, ExecItem/CompiledRunner with hand-written C, run_schedule, copies, stats."""

import gc
import struct
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tg.ir.dtype import dtypes
from tg.ir.helpers import Context, GlobalCounters
from tg.ir.ops import Ops
from tg.ir.uop import UOp
from tg.runtime.engine import (
    BufferCopy,
    CompiledRunner,
    ExecItem,
    buffer_for,
    capturing,
    has_buffer,
    lower_schedule_item,
    method_cache,
    run_schedule,
)


@dataclass(frozen=True)
class Spec:
    """The fields of tg.codegen's ProgramSpec that the runtime reads, filled in by hand."""

    name: str
    src: str
    device: str = "CPU"
    ast: Any = None
    globals: tuple[int, ...] = (0, 1, 2)
    vars: tuple[UOp, ...] = ()
    ops: Any = 0
    mem: Any = 0
    global_size: Any = None
    local_size: Any = None
    applied_opts: tuple = ()
    outs: tuple[int, ...] = (0,)
    ins: tuple[int, ...] = (1, 2)
    uops: list = field(default_factory=list)


@dataclass(frozen=True)
class Item:
    ast: UOp
    bufs: tuple[UOp, ...]


# out = a * k + b over n elements; the C argument order is (a, out, b) to exercise the slot mapping
AXPY = """
void axpy(const float* restrict a, float* restrict out, const float* restrict b, int k, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] * (float)k + b[i];
}
"""
K, N = UOp.variable("k", 0, 100), UOp.variable("n", 1, 1024)


def floats(*xs: float) -> bytes:
    return struct.pack(f"{len(xs)}f", *xs)


def read(uop: UOp) -> list[float]:
    mv = buffer_for(uop).as_memoryview()
    return list(struct.unpack(f"{mv.nbytes // 4}f", mv))


def new_buffer(values: list[float], device: str = "CPU") -> UOp:
    uop = UOp.new_buffer(device, len(values), dtypes.float32)
    buffer_for(uop).copyin(floats(*values))
    return uop


def axpy_runner(name: str = "axpy") -> CompiledRunner:
    spec = Spec(name, AXPY.replace("axpy", name), globals=(1, 0, 2), vars=(K, N), ops=2 * N, mem=12 * N)
    return CompiledRunner(spec)  # type: ignore[arg-type]


def fake_kernel_ast(name: str) -> UOp:
    """A SINK standing in for a kernel AST (its runner is put in method_cache by hand)."""
    return UOp(Ops.SINK, arg=name)


# ---- buffer_for ----


def test_buffer_for_creates_once_and_follows_reshape() -> None:
    uop = UOp.new_buffer("CPU", 6, dtypes.int32)
    assert not has_buffer(uop)
    buf = buffer_for(uop)
    assert buf is buffer_for(uop) and has_buffer(uop)
    assert (buf.device, buf.size, buf.dtype) == ("CPU", 6, dtypes.int32)
    assert not buf.is_allocated()  # allocation is lazy
    assert buffer_for(uop.reshape((2, 3))) is buf


def test_buffer_for_buffer_view_shares_the_base_memory() -> None:
    base = UOp.new_buffer("CPU", 6, dtypes.int32)
    buffer_for(base).copyin(memoryview(struct.pack("6i", 0, 1, 2, 3, 4, 5)))
    view_uop = UOp(Ops.BUFFER_VIEW, dtypes.int32, (base,), (3, 2))  # 3 elements from element 2
    view = buffer_for(view_uop)
    assert view is buffer_for(view_uop) and view.size == 3
    assert struct.unpack("3i", bytes(view.as_memoryview())) == (2, 3, 4)


def test_buffer_for_is_weak() -> None:
    uop = UOp.new_buffer("CPU", 4, dtypes.float32)
    ref = weakref.ref(buffer_for(uop))
    del uop
    gc.collect()
    assert ref() is None


def test_buffer_for_rejects_non_buffers() -> None:
    with pytest.raises(TypeError, match=r"needs a BUFFER uop, got Ops\.CONST"):
        buffer_for(UOp.const(dtypes.float32, 1.0))


# ---- runners and exec items ----


def test_compiled_runner_maps_slots_and_vars() -> None:
    out, a, b = new_buffer([0, 0, 0]), new_buffer([1, 2, 3]), new_buffer([10, 20, 30])
    runner = axpy_runner()
    ei = ExecItem(runner, [buffer_for(u) for u in (a, out, b)])
    ei.run({"k": 2, "n": 3})
    assert read(out) == [12, 24, 36]
    ei.run({K: 3, N: 2})  # Variable UOps as keys work too
    assert read(out) == [13, 26, 36]
    with pytest.raises(ValueError, match="axpy needs a value for variable 'k'"):
        ei.run({"n": 3})


def test_stats_and_debug_output(capsys: pytest.CaptureFixture[str]) -> None:
    out, a, b = new_buffer([0] * 4), new_buffer([1] * 4), new_buffer([2] * 4)
    ei = ExecItem(axpy_runner("axpy_stats"), [buffer_for(u) for u in (a, out, b)])
    GlobalCounters.reset()
    ei.run({"k": 1, "n": 4})
    assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_ops == 8 and GlobalCounters.global_mem == 48
    with Context(DEBUG=2):
        ei.run({"k": 1, "n": 4})
    line = capsys.readouterr().out
    assert "axpy_stats" in line and "GFLOPS" in line and "GB/s" in line and "CPU" in line
    assert GlobalCounters.kernel_count == 2 and GlobalCounters.time_sum_s > 0
    ei.run({"k": 1, "n": 4}, update_stats=False)
    assert GlobalCounters.kernel_count == 2


def test_debug_levels_print_opts_source_and_ast(capsys: pytest.CaptureFixture[str]) -> None:
    ast = fake_kernel_ast("the_ast")
    spec = Spec("axpy_dbg", AXPY.replace("axpy", "axpy_dbg"), ast=ast, applied_opts=("SPLIT(0, 4)",), vars=(K, N))
    with Context(DEBUG=3):
        CompiledRunner(spec)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "applied opts" in out and "SPLIT(0, 4)" in out and "void axpy_dbg(" not in out
    with Context(DEBUG=4):
        CompiledRunner(spec)  # type: ignore[arg-type]
    assert "void axpy_dbg(" in capsys.readouterr().out
    with Context(DEBUG=5):
        CompiledRunner(spec)  # type: ignore[arg-type]
    assert "the_ast" in capsys.readouterr().out


def test_buffer_copy_between_devices(tmp_path: Path) -> None:
    src = new_buffer([1, 2, 3])
    for device in ("CPU:1", f"DISK:{tmp_path / 'c.bin'}"):
        dest = UOp.new_buffer(device, 3, dtypes.float32)
        ExecItem(BufferCopy(12, device, "CPU"), [buffer_for(dest), buffer_for(src)]).run()
        assert read(dest) == [1, 2, 3]
    assert (tmp_path / "c.bin").read_bytes() == floats(1, 2, 3)


# ---- run_schedule ----


def test_run_schedule_kernel_and_copy(tmp_path: Path) -> None:
    ast = fake_kernel_ast("axpy_sched")
    method_cache[("CPU", ast)] = axpy_runner("axpy_sched")
    disk = UOp.new_buffer(f"DISK:{tmp_path / 'w.bin'}", 3, dtypes.float32)
    (tmp_path / "w.bin").write_bytes(floats(5, 6, 7))
    a = UOp.new_buffer("CPU", 3, dtypes.float32)
    out, b = new_buffer([0, 0, 0]), new_buffer([1, 1, 1])
    copy_ast = UOp(Ops.COPY, dtypes.float32, (disk, UOp(Ops.DEVICE, arg="CPU")))
    # item buffers are in PARAM slot order (out, a, b); the program wants (a, out, b)
    run_schedule([Item(copy_ast, (a, disk)), Item(ast, (out, a, b))], {"k": 10, "n": 3})
    assert read(a) == [5, 6, 7]
    assert read(out) == [51, 61, 71]


def test_run_schedule_capturing_hook() -> None:
    ast = fake_kernel_ast("axpy_capture")
    method_cache[("CPU", ast)] = axpy_runner("axpy_capture")
    out, a, b = new_buffer([0]), new_buffer([1]), new_buffer([2])

    class Recorder:
        def __init__(self) -> None:
            self.items: list[ExecItem] = []

        def add(self, ei: ExecItem) -> None:
            self.items.append(ei)

    rec = Recorder()
    capturing.append(rec)
    try:
        run_schedule([Item(ast, (out, a, b))], {"k": 1, "n": 1})
    finally:
        capturing.clear()
    assert len(rec.items) == 1
    buffer_for(b).copyin(floats(5))
    rec.items[0].run({"k": 2, "n": 1})  # replay without the scheduler
    assert read(out) == [7]


def test_lower_schedule_item_errors() -> None:
    ast = fake_kernel_ast("axpy_err")
    method_cache[("CPU", ast)] = axpy_runner("axpy_err")
    with pytest.raises(ValueError, match="uses buffer slots"):
        lower_schedule_item(Item(ast, (new_buffer([0]),)))
    with pytest.raises(ValueError, match="all be on one device"):
        lower_schedule_item(Item(ast, (new_buffer([0]), new_buffer([0], "CPU:1"), new_buffer([0]))))
    with pytest.raises(ValueError, match="at least one buffer"):
        lower_schedule_item(Item(ast, ()))
    with pytest.raises(ValueError, match="destination, source"):
        lower_schedule_item(Item(UOp(Ops.COPY, dtypes.float32), (new_buffer([0]),)))
    with pytest.raises(NotImplementedError, match=r"Ops\.CONST"):
        lower_schedule_item(Item(UOp.const(dtypes.float32, 1.0), (new_buffer([0]),)))
