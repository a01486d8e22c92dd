"""CapturedProgram and the CPU batch runner: replays equal the ExecItem loop (slots, views, vars, copies, pruning)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tg.ir.dtype import dtypes
from tg.ir.helpers import Context, GlobalCounters
from tg.ir.uop import UOp
from tg.runtime.device import Buffer
from tg.runtime.engine import BufferCopy, CompiledRunner, ExecItem
from tg.runtime.graph.cpu_batch import CPUBatchExecutor
from tg.runtime.jit import CapturedProgram

SRC = """void {name}(float* restrict out, const float* restrict a, int n) {{
  for (int i = 0; i < n; i++) out[i] = a[i] * {mul:.1f}f + {add:.1f}f;
}}"""


@dataclass(frozen=True)
class _Spec:
    """The ProgramSpec fields the runtime reads, for a hand-written kernel `out[i] = a[i]*mul + add, i < n`."""

    name: str
    src: str
    device: str = "CPU"
    ast: Any = None
    globals: tuple[int, ...] = (0, 1)
    outs: tuple[int, ...] = (0,)
    ins: tuple[int, ...] = (1,)
    vars: tuple[UOp, ...] = (UOp.variable("n", 0, 1 << 20),)
    ops: int = 2
    mem: int = 8
    global_size: Any = None
    local_size: Any = None
    applied_opts: tuple = ()


def kernel(mul: float, add: float, device: str = "CPU") -> CompiledRunner:
    name = f"affine_{int(mul)}_{int(add)}"
    return CompiledRunner(_Spec(name, SRC.format(name=name, mul=mul, add=add), device), device)  # type: ignore[arg-type]


def buf(values: list[float], device: str = "CPU") -> Buffer:
    b = Buffer(device, len(values), dtypes.float32).ensure_allocated()
    b.copyin(memoryview(bytearray(len(values) * 4)).cast("f").cast("B"))
    mv = b.as_memoryview(allow_zero_copy=True).cast("f")
    for i, v in enumerate(values):
        mv[i] = v
    return b


def values(b: Buffer) -> list[float]:
    return list(b.as_memoryview().cast("f"))


def chain(x: Buffer, n: int, device: str = "CPU") -> tuple[list[ExecItem], Buffer]:
    """x -> (x*2+1) -> (*2+1) ... n kernels; returns the items and the last buffer."""
    items, cur = [], x
    for _ in range(n):
        out = Buffer(device, x.size, dtypes.float32).ensure_allocated()
        items.append(ExecItem(kernel(2, 1, device), [out, cur], {"n": x.size}))
        cur = out
    return items, cur


@pytest.mark.parametrize("mode", [1, 2])
def test_replay_equals_exec_item_loop_with_new_slots(mode: int) -> None:
    x = buf([0.0, 1.0, 2.0])
    items, out = chain(x, 5)
    for ei in items:
        ei.run()
    assert values(out) == [31.0, 63.0, 95.0]
    with Context(JIT=mode):
        program = CapturedProgram(items, [x, out], persistent=set())
        x2, out2 = buf([1.0, 1.0, 1.0]), buf([0.0] * 3)
        kernels = GlobalCounters.kernel_count
        program.replay([x2, out2])
        assert GlobalCounters.kernel_count - kernels == 5
    assert values(out2) == [63.0] * 3
    assert values(out) == [31.0, 63.0, 95.0], "the capture-time output slot must not be written"
    assert isinstance(program._executors[0][0], CPUBatchExecutor) == (mode == 1)


def test_slot_used_at_a_byte_offset_follows_the_new_buffer() -> None:
    x = buf([1.0, 2.0, 3.0, 4.0])
    out = buf([0.0, 0.0])
    view = x.view(2, dtypes.float32, 8)  # elements 2..3
    items = [ExecItem(kernel(10, 0), [out, view], {"n": 2}), ExecItem(kernel(1, 1), [out, out], {"n": 2})]
    program = CapturedProgram(items, [x, out], persistent=set())
    assert [(u.pos, u.byte_offset) for u in program.uses[0]] == [(1, 8)]
    x2, out2 = buf([0.0, 0.0, 5.0, 6.0]), buf([0.0, 0.0])
    program.replay([x2, out2])
    assert values(out2) == [51.0, 61.0] and values(out) == [0.0, 0.0]


def test_variables_are_patched_per_replay() -> None:
    x, out = buf([1.0] * 4), buf([0.0] * 4)
    items = [ExecItem(kernel(3, 0), [out, x]), ExecItem(kernel(1, 1), [out, out])]
    program = CapturedProgram(items, [x, out], persistent=set())
    program.replay([x, out], {"n": 2})
    assert values(out) == [4.0, 4.0, 0.0, 0.0]
    program.replay([x, out], {"n": 4})
    assert values(out) == [4.0] * 4


def test_copies_between_cpu_devices_batch_with_kernels() -> None:
    x = buf([1.0, 2.0])
    on1 = Buffer("CPU:1", 2, dtypes.float32).ensure_allocated()
    back = Buffer("CPU", 2, dtypes.float32).ensure_allocated()
    out = Buffer("CPU", 2, dtypes.float32).ensure_allocated()
    items = [
        ExecItem(BufferCopy(8, "CPU:1", "CPU"), [on1, x]),
        ExecItem(kernel(2, 0, "CPU:1"), [on1, on1], {"n": 2}),
        ExecItem(BufferCopy(8, "CPU", "CPU:1"), [back, on1]),
        ExecItem(kernel(1, 1), [out, back], {"n": 2}),
    ]
    program = CapturedProgram(items, [x, out], persistent=set())
    program.replay([buf([5.0, 6.0]), out2 := buf([0.0, 0.0])])
    assert values(out2) == [11.0, 13.0]
    assert len(program._executors) == 1 and isinstance(program._executors[0][0], CPUBatchExecutor)


def test_pruning_keeps_slot_and_weight_users_and_their_producers() -> None:
    x, out = buf([1.0]), buf([0.0])
    const_src, const = buf([2.0]), buf([0.0])
    weight = buf([7.0])
    weighted = buf([0.0])
    items = [
        ExecItem(kernel(3, 0), [const, const_src], {"n": 1}),  # capture-local only: pruned
        ExecItem(kernel(1, 0), [weighted, weight], {"n": 1}),  # reads a weight: kept
        ExecItem(kernel(1, 0), [out, x], {"n": 1}),  # reads the input slot: kept
    ]
    program = CapturedProgram(items, [x, out], persistent={id(weight)})
    assert program.pruned_count == 1 and program.kernel_count == 2
    assert CapturedProgram(items, [x, out], persistent={id(weight)}, prune=False).kernel_count == 3


def test_replay_checks_slot_count() -> None:
    x, out = buf([1.0]), buf([0.0])
    items, last = chain(x, 2)
    program = CapturedProgram(items, [x, last], persistent=set())
    with pytest.raises(ValueError, match="replay needs 2 slot buffers, got 1"):
        program.replay([x])
    del out


def test_writes_into_an_arena_shared_with_kept_items_are_not_pruned() -> None:
    # memory planning packs values into one arena: a skipped write there could be overwritten between replays
    x, out = buf([1.0]), buf([0.0])
    arena = buf([0.0, 0.0])
    first, second = arena.view(1, dtypes.float32, 0), arena.view(1, dtypes.float32, 4)
    const_src = buf([2.0])
    items = [
        ExecItem(kernel(3, 0), [first, const_src], {"n": 1}),  # input independent, but writes the arena
        ExecItem(kernel(1, 0), [second, x], {"n": 1}),  # kept: reads the input, writes the arena
        ExecItem(kernel(1, 0), [out, first], {"n": 1}),
    ]
    program = CapturedProgram(items, [x, out], persistent=set())
    assert program.pruned_count == 0


def test_captured_program_pickles_with_binaries_and_buffer_contents() -> None:
    import pickle

    x, out = buf([1.0, 2.0]), buf([0.0, 0.0])
    weight = buf([10.0, 10.0])
    items = [ExecItem(kernel(1, 0), [out, x], {"n": 2}), ExecItem(BufferCopy(8, "CPU", "CPU"), [weight, out])]
    program = CapturedProgram(items, [x, out], persistent={id(weight)})
    program.replay([x, out])
    loaded = pickle.loads(pickle.dumps(program))
    loaded_weight = loaded.items[1].bufs[0]
    assert loaded_weight is not weight and values(loaded_weight) == [1.0, 2.0]
    x2, out2 = buf([5.0, 6.0]), buf([0.0, 0.0])
    loaded.replay([x2, out2])
    assert values(out2) == [5.0, 6.0] and values(loaded_weight) == [5.0, 6.0] and values(weight) == [1.0, 2.0]
