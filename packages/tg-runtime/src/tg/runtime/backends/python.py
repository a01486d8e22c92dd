"""The PYTHON device: a reference emulator that interprets the linear program exactly, element by element.

It is the correctness oracle: every kernel that runs on CPU must give the same bits here (up to libm's last-ulp
differences in EXP2/LOG2/SIN, which this device computes with Python's correctly rounded double math then rounds).
ALU semantics come from `tg.ir.alu.exec_alu`, the same table constant folding uses: ints wrap to their dtype,
floats round to their dtype after every op, IDIV/MOD truncate toward zero. Buffers are bytearrays; float16 and
bfloat16 live in memory as 16-bit patterns and as correctly rounded Python floats in registers.
"""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Callable
from typing import Any

from tg.ir.alu import exec_alu
from tg.ir.dtype import DType, PtrDType, dtypes
from tg.ir.floats import bf16_bits_to_float, bitcast_scalar, f32_to_bf16_bits, storage_fmt, truncate
from tg.ir.ops import GroupOp, Ops
from tg.runtime.device import BufferSpec, Compiled, Compiler, LRUAllocator, Program, check_device_index


class PythonAllocator(LRUAllocator["PYTHONDevice"]):
    """Host bytearrays, handed around as flat byte memoryviews."""

    def _alloc(self, size: int, options: BufferSpec) -> memoryview:
        return memoryview(bytearray(size))

    def _offset(self, buf: memoryview, size: int, offset: int) -> memoryview:
        return buf[offset : offset + size]

    def _copyin(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def _copyout(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def _as_buffer(self, src: memoryview) -> memoryview:
        return src


def _half_bits_to_float(bits: int) -> float:
    return float(struct.unpack("<e", struct.pack("<H", bits))[0])


def _float_to_half_bits(x: float) -> int:
    return int(struct.unpack("<H", struct.pack("<e", truncate[dtypes.float16](x)))[0])


class _Memory:
    """Typed element access to one buffer: bounds-checked, converting 16-bit floats to and from their bits."""

    __slots__ = ("decode", "encode", "name", "size", "view")

    def __init__(self, name: str, view: Any, decode: Callable[[Any], Any], encode: Callable[[Any], Any]) -> None:
        self.name, self.view, self.size, self.decode, self.encode = name, view, len(view), decode, encode

    def _check(self, i: int) -> None:
        if not 0 <= i < self.size:
            raise IndexError(f"{self.name}: index {i} out of bounds [0, {self.size})")

    def load(self, i: int) -> Any:
        self._check(i)
        return self.decode(self.view[i])

    def store(self, i: int, v: Any) -> None:
        self._check(i)
        self.view[i] = self.encode(v)


def _typed_memory(name: str, mv: memoryview, dt: DType) -> _Memory:
    if dt == dtypes.float16:
        return _Memory(name, mv.cast("H"), _half_bits_to_float, _float_to_half_bits)
    if dt == dtypes.bfloat16:
        return _Memory(name, mv.cast("H"), bf16_bits_to_float, f32_to_bf16_bits)
    if dt in dtypes.fp8s:
        raise NotImplementedError(f"the PYTHON device does not support {dt} buffers")
    fmt = storage_fmt(dt)
    if mv.nbytes % dt.itemsize:
        raise ValueError(f"{name}: {mv.nbytes} bytes is not a whole number of {dt} elements")
    return _Memory(name, mv.cast(fmt), lambda v: v, truncate[dt])  # type: ignore[call-overload]


def python_cast(x: Any, src: DType, dst: DType) -> Any:
    """Convert a scalar like C does: float -> int truncates toward zero (non-finite: undefined in C, 0 here)."""
    if dst == dtypes.bool:
        return bool(x)
    if dtypes.is_int(dst):
        if isinstance(x, float):
            return truncate[dst](math.trunc(x)) if math.isfinite(x) else 0
        return truncate[dst](int(x))
    if dtypes.is_float(dst):
        return truncate[dst](float(x))
    raise NotImplementedError(f"the PYTHON device can't cast {src} -> {dst}")


class PythonProgram(Program):
    """Interprets a program rendered by `PythonRenderer`; called with byte memoryviews and variable values."""

    def __init__(self, name: str, lib: bytes) -> None:
        from tg.codegen.render.python import decode_program

        super().__init__(name, lib)
        self.prog = decode_program(lib.decode())
        self.params = sorted((i for i, ins in enumerate(self.prog) if ins[0] is Ops.PARAM),
                             key=lambda i: self.prog[i][3])  # fmt: skip
        self.variables = sorted((i for i, ins in enumerate(self.prog) if ins[0] is Ops.DEFINE_VAR),
                                key=lambda i: self.prog[i][3][0])  # fmt: skip
        # loop structure: where each RANGE's END is
        self.end_of: dict[int, int] = {}
        open_loops: list[int] = []
        for i, (op, _, src, _) in enumerate(self.prog):
            if op is Ops.RANGE:
                open_loops.append(i)
            elif op is Ops.END:
                if not open_loops or src[-1] != open_loops[-1]:
                    raise ValueError(f"{name}: END at {i} does not close the innermost open RANGE")
                self.end_of[open_loops.pop()] = i
        if open_loops:
            raise ValueError(f"{name}: RANGE at {open_loops[-1]} is never closed")

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        if len(bufs) != len(self.params):
            raise ValueError(f"{self.name} takes {len(self.params)} buffers, got {len(bufs)}")
        if len(vals) != len(self.variables):
            raise ValueError(f"{self.name} takes {len(self.variables)} variable values, got {len(vals)}")
        start = time.perf_counter()
        self._run(bufs, vals)
        return time.perf_counter() - start if wait else None

    def _run(self, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> None:
        prog = self.prog
        regs: list[Any] = [None] * len(prog)
        for i, b in zip(self.params, bufs, strict=True):
            dt = prog[i][1]
            assert isinstance(dt, PtrDType)
            regs[i] = _typed_memory(f"data{prog[i][3]}", b if isinstance(b, memoryview) else memoryview(b), dt.base)
        for i, v in zip(self.variables, vals, strict=True):
            name, lo, hi = prog[i][3]
            if not lo <= v <= hi:
                raise ValueError(f"{self.name}: variable {name}={v} outside its range [{lo}, {hi}]")
            regs[i] = v
        range_end: dict[int, int] = {}
        pc, n = 0, len(prog)
        while pc < n:
            op, dt, src, arg = prog[pc]
            if op in GroupOp.ALU:
                regs[pc] = exec_alu(op, dt, [regs[s] for s in src])
            elif op is Ops.LOAD:
                mem, idx = regs[src[0]]
                regs[pc] = mem.load(idx) if len(src) == 1 or regs[src[2]] else regs[src[1]]
            elif op is Ops.STORE:
                if len(src) == 2 or regs[src[2]]:
                    mem, idx = regs[src[0]]
                    mem.store(idx, regs[src[1]])
            elif op is Ops.INDEX:
                regs[pc] = (regs[src[0]], regs[src[1]])
            elif op is Ops.RANGE:
                range_end[pc] = end = regs[src[0]]
                regs[pc] = 0
                if end <= 0:
                    pc = self.end_of[pc]
            elif op is Ops.END:
                r = src[-1]
                regs[r] += 1
                if regs[r] < range_end[r]:
                    pc = r
            elif op is Ops.CONST:
                regs[pc] = truncate[dt](arg)
            elif op is Ops.CAST:
                regs[pc] = python_cast(regs[src[0]], prog[src[0]][1], dt)
            elif op is Ops.BITCAST:
                regs[pc] = bitcast_scalar(regs[src[0]], prog[src[0]][1], dt)
            elif op is Ops.AFTER:
                regs[pc] = regs[src[0]]
            elif op is Ops.DEFINE_REG:
                assert isinstance(dt, PtrDType)
                regs[pc] = _Memory(f"acc{pc}", [dt.base.min] * max(dt.size, 1), lambda v: v, truncate[dt.base])
            elif op not in (Ops.PARAM, Ops.DEFINE_VAR, Ops.SINK, Ops.GROUP, Ops.NOOP):
                raise NotImplementedError(f"the PYTHON device can't run {op}")
            pc += 1


def python_renderer() -> Any:
    """A PythonRenderer (tg.codegen is imported only when a renderer is first needed)."""
    from tg.codegen.render.python import PythonRenderer

    return PythonRenderer()


class PYTHONDevice(Compiled):
    """The reference emulator device: kernels rendered by PythonRenderer, interpreted in Python."""

    def __init__(self, device: str = "PYTHON") -> None:
        check_device_index(device)
        super().__init__(device, PythonAllocator(self), Compiler(), PythonProgram, python_renderer)
