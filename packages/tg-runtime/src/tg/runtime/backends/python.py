"""The PYTHON device: a reference emulator that runs the linear program exactly, element by element.

It is the correctness oracle: every kernel that runs on CPU must give the same bits here (up to libm's last-ulp
differences in EXP2/LOG2/SIN, which this device computes with Python's double math then rounds, and NaN bits).
ALU semantics come from `tg.ir.alu` (what `exec_alu`, and so constant folding, uses): ints wrap to their dtype,
floats round to their dtype after every op, IDIV/MOD truncate toward zero. The program is translated once into a
Python function (loops become `for` loops). Buffers are bytearrays, every access is bounds-checked; float16,
bfloat16 and fp8 live in memory as their bit patterns and in registers as correctly rounded Python floats.
"""

from __future__ import annotations

import array
import math
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

from tg.ir.alu import python_alu
from tg.ir.dtype import DType, PtrDType, dtypes
from tg.ir.floats import (
    bf16_bits_to_float,
    bitcast_scalar,
    f32_to_bf16_bits,
    float_to_fp8,
    fp8_to_float,
    storage_fmt,
    truncate,
)
from tg.ir.ops import GroupOp, Ops
from tg.ir.target import Target
from tg.runtime.device import BufferSpec, Compiled, Compiler, Dims, LRUAllocator, Program, check_device_index


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

    def load(self, i: int) -> Any:
        if 0 <= i < self.size:
            return self.decode(self.view[i])
        raise IndexError(f"{self.name}: index {i} out of bounds [0, {self.size})")

    def store(self, i: int, v: Any) -> None:
        if 0 <= i < self.size:
            self.view[i] = self.encode(v)
            return
        raise IndexError(f"{self.name}: index {i} out of bounds [0, {self.size})")


def _typed_memory(name: str, mv: memoryview, dt: DType) -> _Memory:
    if dt == dtypes.float16:
        return _Memory(name, mv.cast("H"), _half_bits_to_float, _float_to_half_bits)
    if dt == dtypes.bfloat16:
        return _Memory(name, mv.cast("H"), bf16_bits_to_float, f32_to_bf16_bits)
    if dt in dtypes.fp8s:
        return _Memory(name, mv.cast("B"), lambda c: fp8_to_float(c, dt), lambda v: float_to_fp8(v, dt))
    fmt = storage_fmt(dt)
    if mv.nbytes % dt.itemsize:
        raise ValueError(f"{name}: {mv.nbytes} bytes is not a whole number of {dt} elements")
    return _Memory(name, mv.cast(fmt), lambda v: v, truncate[dt])  # type: ignore[call-overload]


def python_cast(x: Any, src: DType, dst: DType) -> Any:
    """Convert a scalar like the C renderer's code does on x86-64.

    float -> int truncates toward zero and wraps (the C goes through `long long`); NaN, inf and values beyond
    int64 become int64's minimum first (what the hardware conversion yields), so 0 for narrower types.
    """
    if dst == dtypes.bool:
        return bool(x)
    if dtypes.is_int(dst):
        if isinstance(x, float):
            return truncate[dst](math.trunc(x) if math.isfinite(x) and abs(x) < 2.0**63 else -(2**63))
        return truncate[dst](int(x))
    if dtypes.is_float(dst):
        return truncate[dst](float(x))
    raise NotImplementedError(f"the PYTHON device can't cast {src} -> {dst}")


def _int_result(tr: Callable[[Any], Any]) -> Callable[[Any], Any]:
    # exec_alu's rule for an int dtype: a float result truncates (non-finite -> 0), then wraps
    def fix(r: Any) -> Any:
        if isinstance(r, float):
            r = int(r) if math.isfinite(r) else 0
        return tr(r)

    return fix


def _fma64(a: float, b: float, c: float) -> float:
    """a*b+c rounded once to float64 (exact rational arithmetic; non-finite operands as IEEE says)."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def _fma32(a: float, b: float, c: float) -> float:
    """a*b+c for float32 operands rounded once to float32: the product is exact in float64, the sum is rounded to
    odd in float64 (TwoSum finds its error), and a round-to-odd double rounds correctly to float32."""
    p = a * b
    s = p + c
    if math.isfinite(s):
        bb = s - p
        err = (p - (s - bb)) + (c - bb)
        if err != 0 and not struct.unpack("<Q", struct.pack("<d", s))[0] & 1:
            s = math.nextafter(s, math.inf if err > 0 else -math.inf)
    return s


def _alu_impl(op: Ops, dt: DType) -> tuple[Callable[..., Any], Callable[[Any], Any]]:
    """(compute, truncate) with exactly `exec_alu(op, dt, args) == truncate(compute(*args))`, except MULACC on
    floats, which is a fused multiply-add here as in the C the renderers emit for it."""
    if dt.count != 1:
        raise NotImplementedError(f"the PYTHON device does not run vector dtype {dt}")
    if op is Ops.MULACC and dt in (dtypes.float32, dtypes.float64):
        return (_fma32 if dt is dtypes.float32 else _fma64), truncate[dt]
    if op not in python_alu:
        raise NotImplementedError(f"the PYTHON device can't run {op}")
    tr = truncate.get(dt, lambda x: x)
    return python_alu[op], (_int_result(tr) if dtypes.is_int(dt) else tr)


# ops whose tg.ir.alu semantics are a plain Python operator on already-truncated operands: written inline
_INLINE = {
    Ops.ADD: "({0} + {1})", Ops.MUL: "({0} * {1})", Ops.SUB: "({0} - {1})", Ops.XOR: "({0} ^ {1})",
    Ops.OR: "({0} | {1})", Ops.AND: "({0} & {1})", Ops.SHL: "({0} << {1})", Ops.SHR: "({0} >> {1})",
    Ops.CMPLT: "({0} < {1})", Ops.CMPNE: "({0} != {1})", Ops.CMPEQ: "({0} == {1})", Ops.WHERE: "({1} if {0} else {2})",
}  # fmt: skip


def _wrap_int(expr: str, dt: DType) -> str:
    """Python for `truncate[dt](expr)` on an int result (two's complement wrap), without a call."""
    bits = 8 * dt.itemsize
    if dtypes.is_unsigned(dt):
        return f"({expr}) & {(1 << bits) - 1}"
    half = 1 << (bits - 1)
    return f"((({expr}) + {half}) & {(1 << bits) - 1}) - {half}"


def _float32_rounder() -> Callable[[float], float]:
    """A function equal to `truncate[float32]` (round to nearest even, overflow to inf), through a 1-float array."""
    cell = array.array("f", [0.0])

    def round_f32(x: float) -> float:
        cell[0] = x
        return cell[0]

    return round_f32


# the counters of the active `count_ops` blocks (innermost last); kernels count their ALU ops only while one is open,
# into `_counting_sink` (bound into the counting translations), added to every open counter after each run
_op_counters: list[Counter[Ops]] = []
_counting_sink: Counter[Ops] = Counter()


@contextmanager
def count_ops() -> Iterator[Counter[Ops]]:
    """Count the float ALU operations PYTHON kernels execute inside the block, per op and lane (a vector op of 8
    lanes counts 8; comparisons of floats count too, index arithmetic does not): how tests check that a value is
    evaluated once per element (e.g. that a fused producer is not recomputed inside a matmul). Counting runs a second
    translation of each kernel, made on first use. Example: `with count_ops() as n:
    Tensor.ones(4, device="PYTHON").exp().realize()` leaves `n[Ops.EXP2] == 4`.
    """
    counter: Counter[Ops] = Counter()
    _op_counters.append(counter)
    try:
        yield counter
    finally:
        _op_counters.remove(counter)


def _is_reg(prog: list[Any], index: int) -> bool:
    """Whether INDEX instruction `index` points into a DEFINE_REG (through AFTERs)."""
    b = prog[index][2][0]
    while prog[b][0] is Ops.AFTER:
        b = prog[b][2][0]
    return prog[b][0] is Ops.DEFINE_REG


class PythonProgram(Program):
    """Runs a program rendered by `PythonRenderer`; called with byte memoryviews and variable values.

    The linear program is translated once into a Python function (RANGE/END become `for` loops, every ALU op a
    call of its `tg.ir.alu` semantics followed by the dtype's truncation), so each element costs a few calls.
    `pysrc` holds that function's source for debugging.
    """

    def __init__(self, name: str, lib: bytes) -> None:
        from tg.codegen.render.python import decode_program

        super().__init__(name, lib)
        self.prog = decode_program(lib.decode())
        self.params = sorted((i for i, ins in enumerate(self.prog) if ins[0] is Ops.PARAM),
                             key=lambda i: self.prog[i][3])  # fmt: skip
        # variables by name, then the thread id of a THREAD axis (passed per thread, not by the caller)
        variables = sorted((i for i, ins in enumerate(self.prog) if ins[0] is Ops.DEFINE_VAR),
                           key=lambda i: (self.prog[i][3][0] == "core_id", self.prog[i][3][0]))  # fmt: skip
        self.core_id = variables.pop() if variables and self.prog[variables[-1]][3][0] == "core_id" else None
        self.variables = variables
        self.pysrc, self._fxn = self._translate()
        self._counting_fxn: Callable[[list[_Memory], tuple[int, ...]], None] | None = None

    def _translate(
        self, counts: Counter[Ops] | None = None
    ) -> tuple[str, Callable[[list[_Memory], tuple[int, ...]], None]]:
        """The kernel as a Python function; with `counts`, one that adds every ALU op it executes (times its lanes)
        to that counter."""
        prog, name = self.prog, self.name
        env: dict[str, Any] = {"_Memory": _Memory, "_cast": python_cast, "_bitcast": bitcast_scalar,
                               "_round_f32": _float32_rounder(), "_counts": counts}  # fmt: skip
        lines = ["def _kernel(_mem, _vals):"]
        depth, open_loops = 1, []

        def emit(line: str) -> None:
            lines.append("    " * depth + line)

        for i, (op, dt, src, arg) in enumerate(prog):
            v = [f"v{s}" for s in src]
            if counts is not None and op in GroupOp.ALU and dtypes.is_float(prog[src[-1]][1].scalar()):
                env[f"_op{i}"] = op
                emit(f"_counts[_op{i}] += {dt.count}")
            if op is Ops.PARAM:
                emit(f"v{i} = _mem[{self.params.index(i)}]")
            elif op is Ops.DEFINE_VAR:
                emit(f"v{i} = _vals[{self.variables.index(i) if i != self.core_id else len(self.variables)}]")
            elif op in (Ops.CONST, Ops.VCONST):
                lanes = arg if isinstance(arg, tuple) else (arg,) * dt.count
                vals_ = tuple(truncate[dt.scalar()](x) for x in lanes)
                env[f"_c{i}"] = vals_ if dt.count > 1 else vals_[0]
                emit(f"v{i} = _c{i}")
            elif op is Ops.VECTORIZE:
                emit(f"v{i} = ({', '.join(v)},)")
            elif op is Ops.GEP:
                emit(
                    f"v{i} = {v[0]}[{arg[0]}]"
                    if len(arg) == 1
                    else f"v{i} = ({', '.join(f'{v[0]}[{k}]' for k in arg)},)"
                )
            elif op is Ops.WMMA:  # a whole warp's matrix multiply (tensor cores), from every lane's fragments
                from tg.codegen.render.renderer import TENSOR_CORES

                env[f"_w{i}"] = TENSOR_CORES[arg].emulate
                emit(f"v{i} = _w{i}({v[0]}, {v[1]})")
            elif dt.count > 1 and op in GroupOp.ALU:  # a vector op: the scalar op lane by lane
                env[f"_f{i}"], env[f"_t{i}"] = _alu_impl(op, dt.scalar())
                lanes_ = ", ".join(f"_l{k}" for k in range(len(v)))
                emit(f"v{i} = tuple(_t{i}(_f{i}({lanes_})) for {lanes_} in zip({', '.join(v)}))")
            elif op in _INLINE and dt.count == 1:
                expr = _INLINE[op].format(*v)
                if op in GroupOp.Comparison or dt is dtypes.float64:
                    emit(f"v{i} = {expr}")  # already what truncate[bool] / truncate[float64] would give
                elif dtypes.is_int(dt):
                    emit(f"v{i} = {_wrap_int(expr, dt)}")
                elif dt is dtypes.float32:
                    emit(f"v{i} = _round_f32({expr})")
                else:
                    env[f"_t{i}"] = truncate[dt]
                    emit(f"v{i} = _t{i}({expr})")
            elif op in GroupOp.ALU:
                env[f"_f{i}"], env[f"_t{i}"] = _alu_impl(op, dt)
                emit(f"v{i} = _t{i}(_f{i}({', '.join(v)}))")
            elif op is Ops.CAST:
                env[f"_d{i}"] = (prog[src[0]][1], dt)
                emit(f"v{i} = _cast({v[0]}, *_d{i})")
            elif op is Ops.BITCAST:
                env[f"_d{i}"] = (prog[src[0]][1], dt)
                emit(f"v{i} = _bitcast({v[0]}, *_d{i})")
            elif op is Ops.INDEX:
                if len(src) != 2:
                    raise ValueError(f"{name}: INDEX at {i} still has a gate (lowering moves it to the LOAD/STORE)")
                emit(f"v{i} = ({v[0]}, {v[1]})")
            elif op is Ops.LOAD:
                buf, idx = (f"v{s}" for s in prog[src[0]][2])
                load = f"{buf}.load({idx})"
                if dt.count > 1 and not _is_reg(prog, src[0]):  # a vector: consecutive elements
                    load = f"tuple({buf}.load({idx} + _k) for _k in range({dt.count}))"
                emit(f"v{i} = {load}" if len(src) == 1 else f"v{i} = {load} if {v[2]} else {v[1]}")
            elif op is Ops.STORE:
                buf, idx = (f"v{s}" for s in prog[src[0]][2])
                store = f"{buf}.store({idx}, {v[1]})"
                if prog[src[1]][1].count > 1 and not _is_reg(prog, src[0]):
                    store = f"[{buf}.store({idx} + _k, _x) for _k, _x in enumerate({v[1]})]"
                emit(store if len(src) == 2 else f"if {v[2]}: {store}")
            elif op is Ops.RANGE:
                emit(f"for v{i} in range({v[0]}):")
                depth += 1
                emit("pass")
                open_loops.append(i)
            elif op is Ops.END:
                if not open_loops or src[-1] != open_loops[-1]:
                    raise ValueError(f"{name}: END at {i} does not close the innermost open RANGE")
                open_loops.pop()
                depth -= 1
            elif op is Ops.AFTER:
                emit(f"v{i} = {v[0]}")
            elif op is Ops.DEFINE_REG:
                assert isinstance(dt, PtrDType)
                reg_tr = truncate[dt.base] if dt.base.count == 1 else (lambda x: x)
                env[f"_d{i}"] = (f"acc{i}", [dt.base.scalar().min] * max(dt.size, 1), reg_tr)
                emit(f"v{i} = _Memory(_d{i}[0], list(_d{i}[1]), lambda x: x, _d{i}[2])")
            elif op not in (Ops.SINK, Ops.GROUP, Ops.NOOP, Ops.BARRIER):  # one thread: a barrier orders nothing more
                raise NotImplementedError(f"the PYTHON device can't run {op}")
        if open_loops:
            raise ValueError(f"{name}: RANGE at {open_loops[-1]} is never closed")
        lines.append("    return None")
        pysrc = "\n".join(lines) + "\n"
        exec(compile(pysrc, f"<PYTHON kernel {name}>", "exec"), env)  # our own generated code, no user input
        return pysrc, env["_kernel"]

    def run_on(self, memories: list[Any], vals: tuple[int, ...]) -> None:
        """Run the program (no THREAD axis) on objects with ``load(i)`` and ``store(i, value)`` of elements, one per
        buffer parameter: the HCQ submitters run so over MMIO views, every access going through the view in
        program order. ``vals`` are the variable values in name order."""
        if len(memories) != len(self.params) or len(vals) != len(self.variables) or self.core_id is not None:
            raise ValueError(f"{self.name} takes {len(self.params)} memories and {len(self.variables)} values "
                             f"(and no thread id), got {len(memories)} and {len(vals)}")  # fmt: skip
        self._fxn(memories, tuple(vals))

    def launch(self, bufs: tuple, gs: Dims, ls: Dims, vals: tuple[int, ...], wait: bool, threads: int) -> float | None:
        """Run the kernel; a threaded kernel runs once per thread id, in reverse order (so a kernel whose threads
        depend on each other's results gives wrong answers here instead of by luck)."""
        if len(bufs) != len(self.params):
            raise ValueError(f"{self.name} takes {len(self.params)} buffers, got {len(bufs)}")
        if len(vals) != len(self.variables):
            raise ValueError(f"{self.name} takes {len(self.variables)} variable values, got {len(vals)}")
        mems = []
        for i, b in zip(self.params, bufs, strict=True):
            dt = self.prog[i][1]
            assert isinstance(dt, PtrDType)
            mems.append(_typed_memory(f"data{self.prog[i][3]}", b if isinstance(b, memoryview) else memoryview(b),
                                      dt.base))  # fmt: skip
        for i, v in zip(self.variables, vals, strict=True):
            vname, lo, hi = self.prog[i][3]
            if not lo <= v <= hi:
                raise ValueError(f"{self.name}: variable {vname}={v} outside its range [{lo}, {hi}]")
        fxn = self._fxn
        if _op_counters:
            if self._counting_fxn is None:
                self._counting_fxn = self._translate(_counting_sink)[1]
            fxn = self._counting_fxn
        start = time.perf_counter()
        if self.core_id is None:
            fxn(mems, tuple(vals))
        else:
            if threads != self.prog[self.core_id][3][2] + 1:
                raise ValueError(
                    f"{self.name} runs on {self.prog[self.core_id][3][2] + 1} threads, got threads={threads}"
                )
            for t in reversed(range(threads)):
                fxn(mems, (*vals, t))
        if _op_counters:
            for c in _op_counters:
                c.update(_counting_sink)
            _counting_sink.clear()
        return time.perf_counter() - start if wait else None


def python_renderer() -> Any:
    """A PythonRenderer (tg.codegen is imported only when a renderer is first needed)."""
    from tg.codegen.render.python import PythonRenderer

    return PythonRenderer()


class PYTHONDevice(Compiled):
    """The reference emulator device: kernels rendered by PythonRenderer, interpreted in Python."""

    renderers = ("PYTHON",)

    def __init__(self, device: str = "PYTHON", target: Target | None = None) -> None:
        check_device_index(device)
        super().__init__(device, PythonAllocator(self), Compiler(), PythonProgram, python_renderer, target)
