"""The execution engine: run a schedule (a ``LINEAR`` of ``CALL``s) step by step.

``buffer_for`` gives the device Buffer behind a tensor-level BUFFER uop (allocated on first use, released when
the uop dies). ``run_linear`` lowers each ``CALL(body, *buffers)`` to an :class:`ExecItem` — a runner (a compiled
kernel or a copy) plus its buffers — and runs it, updating ``GlobalCounters``. ExecItems hold everything needed
to run again, so a JIT can capture and replay them without the scheduler (``capturing``), or take the LINEAR
itself and substitute its buffer arguments.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tg.ir.helpers import DEBUG, TRANSCENDENTAL, GlobalCounters, ansilen, colored
from tg.ir.ops import Ops
from tg.ir.uop import UOp, sym_infer
from tg.runtime.device import Buffer, Device

if TYPE_CHECKING:
    from tg.codegen.program import ProgramSpec

# **************** buffers behind BUFFER uops ****************

_buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


def buffer_for(buffer_uop: UOp) -> Buffer:
    """The Buffer behind a BUFFER uop (reshapes of it are accepted) or a BUFFER_VIEW of one, created on first use.

    The registry holds the uop weakly: when the last reference to the BUFFER uop goes, so does the Buffer and
    its memory returns to the allocator.
    """
    uop = buffer_uop.unreshaped
    if uop.op is Ops.BUFFER_VIEW:  # arg (size, offset) in elements of its source buffer
        if (view := _buffers.get(uop)) is None:
            size, offset = (int(a) for a in uop.arg)
            view = _buffers[uop] = buffer_for(uop.src[0]).view(size, uop.dtype, offset * uop.src[0].dtype.itemsize)
        return view
    if uop.op is not Ops.BUFFER:
        raise TypeError(f"buffer_for needs a BUFFER uop, got {buffer_uop.op}")
    if (buf := _buffers.get(uop)) is None:
        device = uop.src[1].arg if len(uop.src) > 1 and uop.src[1].op is Ops.DEVICE else None
        if not isinstance(device, str):
            raise ValueError(f"buffer_for: BUFFER must be on a single device (a DEVICE src with a str), got {device!r}")
        buf = _buffers[uop] = Buffer(device, int(uop.arg), uop.dtype)
    return buf


def bind_buffer(buffer_uop: UOp, buf: Buffer) -> None:
    """Make ``buf`` the Buffer behind the (new, unbound) BUFFER uop ``buffer_uop`` (a JIT hands out its outputs so)."""
    if buffer_uop.op is not Ops.BUFFER:
        raise TypeError(f"bind_buffer needs a BUFFER uop, got {buffer_uop.op}")
    if (old := _buffers.get(buffer_uop)) is not None and old is not buf:
        raise ValueError("bind_buffer: this BUFFER uop already has a different Buffer")
    if buf.size != int(buffer_uop.arg) or buf.dtype != buffer_uop.dtype:
        raise ValueError(f"bind_buffer: {buf!r} does not match BUFFER({buffer_uop.dtype}, {buffer_uop.arg})")
    _buffers[buffer_uop] = buf


def has_buffer(buffer_uop: UOp) -> bool:
    """Whether ``buffer_for`` has already created a Buffer for this BUFFER uop."""
    return buffer_uop in _buffers


# **************** runners ****************


def _var_name(var: UOp) -> str:
    return str(var.arg[0]) if isinstance(var.arg, tuple) else str(var.arg)


def _normalize_var_vals(var_vals: dict[Any, int] | None) -> dict[str, int]:
    if not var_vals:
        return {}
    if all(k.__class__ is str and v.__class__ is int for k, v in var_vals.items()):
        return var_vals
    return {(_var_name(k) if isinstance(k, UOp) else str(k)): int(v) for k, v in var_vals.items()}


class Runner:
    """Something an ExecItem runs: a name for DEBUG output, the device, and op/memory estimates."""

    def __init__(self, display_name: str, device: str, ops: Any = 0, mem: Any = 0) -> None:
        self.display_name, self.device, self.ops, self.mem = display_name, device, ops, mem

    def __call__(self, bufs: Sequence[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        raise NotImplementedError(f"{type(self).__name__} cannot run")


class CompiledRunner(Runner):
    """A kernel compiled and loaded for one device; call it with buffers in program-argument order."""

    def __init__(self, p: ProgramSpec, device: str | None = None, lib: bytes | None = None) -> None:
        self.p = p
        dev = Device[device if device is not None else p.device]
        if DEBUG.value >= 5:
            print(p.ast)
        if DEBUG.value >= 3:  # printed even when empty, so DEBUG=3 always says which opts a kernel got
            print(f"{p.name}: applied opts {tuple(p.applied_opts)}: {' '.join(str(o) for o in p.applied_opts)}")
        if DEBUG.value >= 4:
            print(p.src)
        self.lib = lib if lib is not None else dev.compiler.compile_cached(p.src)
        self._prg = dev.runtime(p.name, self.lib)
        self.var_names = tuple(_var_name(v) for v in p.vars)
        super().__init__(p.name, dev.device, p.ops, p.mem)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles the program and its binary, tagged with the compiler's cachekey (recompiled if it differs)."""
        return _load_compiled_runner, (self.p, self.device, self.lib, Device[self.device].compiler.cachekey)

    def __call__(self, bufs: Sequence[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        try:
            vals = tuple(var_vals[name] for name in self.var_names) if self.var_names else ()
        except KeyError as e:
            raise ValueError(f"kernel {self.p.name} needs a value for variable {e.args[0]!r}; got {var_vals}") from None
        p = self.p
        if p.global_size is None and p.local_size is None:
            if (threads := getattr(p, "threads", 1)) > 1:  # only CPU-like programs (CPU, PYTHON) take threads=
                prg: Any = self._prg
                return prg(*[b._opaque for b in bufs], vals=vals, wait=wait, threads=threads)
            return self._prg(*[b._opaque for b in bufs], vals=vals, wait=wait)
        global_size = None if p.global_size is None else tuple(sym_infer(g, var_vals) for g in p.global_size)
        local_size = None if p.local_size is None else tuple(sym_infer(s, var_vals) for s in p.local_size)
        return self._prg(*[b._buf for b in bufs], global_size=global_size, local_size=local_size, vals=vals, wait=wait)


def _load_compiled_runner(p: ProgramSpec, device: str, lib: bytes, cachekey: str | None) -> CompiledRunner:
    """Inverse of `CompiledRunner.__reduce__`: the stored binary when this compiler made it, else compile again."""
    same = Device[device].compiler.cachekey == cachekey
    return CompiledRunner(p, device, lib if same else None)


class BufferCopy(Runner):
    """Copies ``bufs[1]`` into ``bufs[0]`` (any devices): directly when both allocators are of one kind and have a
    ``transfer`` method (CUDA to CUDA), else through host memory."""

    def __init__(self, nbytes: int, dest_device: str, src_device: str) -> None:
        name = f"copy {nbytes:8d}, {dest_device[:7]:>7s} <- {src_device[:7]:7s}"
        super().__init__(colored(name, "yellow"), dest_device, 0, nbytes)

    def __call__(self, bufs: Sequence[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        dest, src = bufs[0].ensure_allocated(), bufs[1].ensure_allocated()
        if dest.nbytes != src.nbytes:
            raise ValueError(f"copy size mismatch: {dest!r} <- {src!r}")
        start = time.perf_counter()
        assert dest.allocator is not None
        transfer = getattr(dest.allocator, "transfer", None)  # device to device without the host (CUDA peer copies)
        if transfer is not None and type(src.allocator) is type(dest.allocator):
            transfer(dest._buf, src._buf, dest.nbytes, Device[src.device])
        elif (host_view := dest.allocator._as_buffer(dest._buf)) is not None:
            src.copyout(host_view)  # straight into the host-visible destination memory
        else:
            dest.copyin(src.as_memoryview(allow_zero_copy=True))
        if wait:  # a device-side transfer may still run (HCQ devices): time it to the end
            Device[src.device].synchronize()
            Device[dest.device].synchronize()
        return time.perf_counter() - start if wait else None


# **************** exec items ****************


@dataclass
class ExecItem:
    """A runner and its buffers (kernels: in program-argument order; copies: destination, source)."""

    runner: Runner
    bufs: list[Buffer]
    fixedvars: dict[str, int] = field(default_factory=dict)

    def run(
        self, var_vals: dict[Any, int] | None = None, wait: bool = False, update_stats: bool = True
    ) -> float | None:
        """Run once (allocating buffers as needed) and account it in GlobalCounters; returns seconds if timed."""
        return self._run(_normalize_var_vals(var_vals), wait, update_stats)

    def _run(self, var_vals: dict[str, int], wait: bool = False, update_stats: bool = True) -> float | None:
        vals = {**self.fixedvars, **var_vals} if self.fixedvars else var_vals
        return launch(self.runner, self.bufs, vals, wait, update_stats)


def launch(
    runner: Runner, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False, update_stats: bool = True
) -> float | None:
    """Run ``runner`` once on ``bufs`` (allocating them as needed) and account it in GlobalCounters; returns seconds
    if timed (``wait`` or ``DEBUG>=2``)."""
    for b in bufs:
        if not b._allocated:
            b.allocate()
    et = runner(bufs, var_vals, wait=wait or DEBUG.value >= 2)
    if update_stats:
        _update_stats(runner, len(bufs), var_vals, et)
    return et


def _update_stats(runner: Runner, nbufs: int, var_vals: dict[str, int], et: float | None) -> None:
    ops = runner.ops if runner.ops.__class__ is int else sym_infer(runner.ops, var_vals)
    mem = runner.mem if runner.mem.__class__ is int else sym_infer(runner.mem, var_vals)
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += ops
    GlobalCounters.global_mem += mem
    if et is not None:
        GlobalCounters.time_sum_s += et
    if DEBUG.value >= 2:
        t = et if et is not None else 0.0
        gflops, gbs = (ops / t * 1e-9, mem / t * 1e-9) if t > 0 else (0.0, 0.0)
        name = runner.display_name
        print(
            f"{colored(f'*** {runner.device[:7]:7s} {GlobalCounters.kernel_count:4d}', 'green')} "
            f"{name}{' ' * max(0, 40 - ansilen(name))} arg {nbufs:2d} mem {GlobalCounters.mem_used / 1e9:6.2f} GB "
            f"tm {t * 1e6:9.2f}us/{GlobalCounters.time_sum_s * 1e3:9.2f}ms ({gflops:9.2f} GFLOPS {gbs:7.2f} GB/s)"
        )


# **************** lowering schedule items ****************


class ScheduleItemLike(Protocol):
    """A step given as (ast, bufs): what ``lower_schedule_item`` takes besides a CALL uop."""

    @property
    def ast(self) -> UOp: ...
    @property
    def bufs(self) -> tuple[UOp, ...]: ...


# compiled kernels by (device target, ast): ASTs are hash-consed, so an equal kernel is the same key; the device is
# named by the target it is opened with ("CPU", or "CPU:CLANG:x86-64-v2" under that DEV: the target changes the code),
# and code generated under a non-default TRANSCENDENTAL is kept under "TARGET+TRANSCENDENTAL=n"
method_cache: dict[tuple[str, UOp], CompiledRunner] = {}


def _runner_key(device: str, ast: UOp) -> tuple[str, UOp]:
    """The method_cache key of ``ast`` compiled for ``device`` (a canonical name) under the current settings."""
    target = str(Device.target(device))
    return (target if TRANSCENDENTAL.value == 1 else f"{target}+TRANSCENDENTAL={TRANSCENDENTAL.value}", ast)


def get_runner(device: str, ast: UOp) -> CompiledRunner:
    """The compiled kernel for ``ast`` on ``device`` (code generation and compilation happen once per pair)."""
    device = Device.canonicalize(device)
    key = _runner_key(device, ast)
    if (runner := method_cache.get(key)) is None:
        runner = method_cache[key] = CompiledRunner(generate_program(ast, device), device)
    return runner


def generate_program(ast: UOp, device: str) -> ProgramSpec:
    """Code generation of one kernel for ``device``: the runtime's one call into tg.codegen's opt/lower/render.
    With ``BEAM>=1`` the search (tg.runtime.search, which times candidates here) picks the opts and hands them over
    explicitly; otherwise codegen's heuristics do."""
    from tg.codegen.program import get_program
    from tg.runtime.search import beam_opts

    renderer = Device[device].renderer
    return get_program(ast, renderer, beam_opts(ast, renderer))


def precompile(items: Sequence[ScheduleItemLike | UOp]) -> None:
    """Compile the new kernels of a schedule together: code generation one after another, then the compiler runs
    (C compiler processes, NVRTC calls) in parallel threads; the runners land in ``method_cache``. A kernel that
    fails to compile raises its ``CompileError`` (the compiler's log and the numbered source) from here, once the
    other compiles have finished and been stored; it is not compiled a second time. Items that are not kernels
    (or whose buffers name no single device) are left to ``lower_schedule_item``."""
    if len(items) < 2:  # nothing to overlap (and eager single ops stay cheap)
        return
    new: dict[tuple[str, UOp], None] = {}
    for item in items:
        ast, buf_uops = (item.src[0], item.src[1:]) if isinstance(item, UOp) else (item.ast, tuple(item.bufs))
        if not isinstance(ast, UOp) or ast.op is not Ops.SINK or not buf_uops:
            continue
        try:
            device = Device.canonicalize(buffer_for(buf_uops[0]).device)
        except (TypeError, ValueError):
            continue
        if _runner_key(device, ast) not in method_cache:
            new[(device, ast)] = None
    if len(new) < 2:
        return
    from concurrent.futures import ThreadPoolExecutor

    progs = [(dev, ast, generate_program(ast, dev)) for dev, ast in new]
    failed: BaseException | None = None
    with ThreadPoolExecutor(max(1, min(len(progs), os.cpu_count() or 1))) as pool:
        futures = [pool.submit(Device[dev].compiler.compile_cached, p.src) for dev, _, p in progs]
        for (dev, ast, p), fut in zip(progs, futures, strict=True):
            try:
                lib = fut.result()
            except Exception as e:  # the first failure is raised once every compile is done
                failed = failed or e
                continue
            method_cache[_runner_key(dev, ast)] = CompiledRunner(p, dev, lib)
    if failed is not None:
        raise failed


def lower_schedule_item(item: ScheduleItemLike | UOp) -> ExecItem:
    """Turn one step (a ``CALL(body, *buffers)`` uop, or an object with ``ast`` and ``bufs``) into an ExecItem,
    compiling the kernel if it is new."""
    if isinstance(item, UOp):
        if item.op is not Ops.CALL or not item.src:
            raise ValueError(f"a schedule step must be a CALL(body, *buffers), got {item.op}")
        ast, buf_uops = item.src[0], item.src[1:]
    else:
        ast, buf_uops = item.ast, tuple(item.bufs)
    bufs = [buffer_for(b) for b in buf_uops]
    if ast.op is Ops.SINK:
        if not bufs:
            raise ValueError("a kernel schedule item needs at least one buffer (its output)")
        if len(devices := {b.device for b in bufs}) > 1:
            raise ValueError(f"a kernel's buffers must all be on one device, got {sorted(devices)}; copy them first")
        runner = get_runner(bufs[0].device, ast)
        try:
            kernel_bufs = [bufs[slot] for slot in runner.p.globals]
        except IndexError:
            raise ValueError(
                f"kernel {runner.p.name} uses buffer slots {list(runner.p.globals)}, the item has {len(bufs)} buffers"
            ) from None
        return ExecItem(runner, kernel_bufs)
    if ast.op is Ops.COPY:
        if len(bufs) != 2:
            raise ValueError(f"a COPY schedule item needs (destination, source) buffers, got {len(bufs)}")
        return ExecItem(BufferCopy(bufs[0].nbytes, bufs[0].device, bufs[1].device), bufs)
    raise NotImplementedError(f"run_schedule cannot run a schedule item with a {ast.op} AST (expected SINK or COPY)")


# a JIT appends a recorder here to capture what runs: ``add_linear(linear, var_vals)`` receives every LINEAR that
# ``run_linear`` runs, ``add(ExecItem)`` every lowered step (either method may be absent)
capturing: list[Any] = []


def run_linear(linear: UOp, var_vals: dict[Any, int] | None = None) -> None:
    """Run a schedule, ``LINEAR(CALL(body, *buffers), ...)``, in order: compile (cached) and run kernels, do copies,
    update GlobalCounters."""
    if not isinstance(linear, UOp) or linear.op is not Ops.LINEAR:
        raise TypeError(f"run_linear needs a LINEAR of CALLs, got {getattr(linear, 'op', type(linear).__name__)}")
    if capturing and (add_linear := getattr(capturing[0], "add_linear", None)) is not None:
        add_linear(linear, _normalize_var_vals(var_vals))
    # HCQ devices run the schedule as queue programs; call by call instead at DEBUG>=2 (each timed) and for
    # recorders that count lowered steps (add)
    if DEBUG.value < 2 and not (capturing and hasattr(capturing[0], "add")) and (dev := _hcq_device(linear)):
        precompile(linear.src)
        dev.run_linear(linear, _normalize_var_vals(var_vals))
        return
    run_schedule(linear.src, var_vals)


def _hcq_device(linear: UOp) -> Any:
    """The first HCQ device a call of the schedule has a buffer on (it runs the schedule as queue programs:
    ``HCQDevice.run_linear``), else None."""
    for call in linear.src:
        for a in call.src[1:]:
            a = a.under((Ops.BUFFER_VIEW,))
            if a.op is Ops.BUFFER and (dev := a.src[1].arg).__class__ is str and (d := Device[dev]).is_hcq:
                return d
    return None


def run_schedule(items: Sequence[ScheduleItemLike | UOp], var_vals: dict[Any, int] | None = None) -> None:
    """Run steps in order (CALL uops, or objects with ``ast``/``bufs``): compile (cached) and run kernels, do
    copies, update GlobalCounters."""
    vals = _normalize_var_vals(var_vals)
    precompile(items)
    add = getattr(capturing[0], "add", None) if capturing else None
    for item in items:
        ei = lower_schedule_item(item)
        if add is not None:
            add(ei)
        ei._run(vals)


# ---- the replay launcher of non-HCQ schedules (tg.runtime.replay picks it; HCQ launchers run host steps on it) ----


class ExecItemLauncher:
    """Runs a slotted schedule call by call (compiled runner or copy), its buffers the slot buffers of the run (views
    rebuilt at their byte offsets). A kernel's runner is looked up in `method_cache` at every run, under the settings
    of that run (TRANSCENDENTAL, a cleared cache): the replay runs what a fresh schedule would."""

    def __init__(self, slotted: UOp) -> None:
        from tg.runtime.hcq.ir import base_of, device_of, nbytes_of, view_byte_offset

        self.steps: list[_Step] = []
        for call in slotted.src:
            body, args = call.src[0], [a for a in call.src[1:] if a.op in (Ops.PARAM, Ops.BUFFER_VIEW)]
            refs = [(int(base_of(a).arg[0]), view_byte_offset(a), nbytes_of(a), a) for a in args]
            if body.op is Ops.SINK:
                self.steps.append(_Step(refs, device=device_of(args[0]), ast=body))
            elif body.op is Ops.COPY:
                copy = BufferCopy(nbytes_of(args[0]), device_of(args[0]), device_of(args[1]))
                self.steps.append(_Step(refs, bound=(copy, refs)))
            else:
                raise NotImplementedError(f"cannot replay a CALL of {body.op}")

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        total = 0.0
        for step in self.steps:
            bound = step.bound
            if step.ast is not None and bound[0] is not (runner := get_runner(step.device, step.ast)):
                # another runner than last time (first run, cleared cache, other settings): its argument order
                bound = step.bound = (runner, [step.refs[g] for g in runner.p.globals])
            runner, refs = bound
            args = []
            for slot, offset, nbytes, a in refs:
                base = bufs[slot]
                whole = offset == 0 and nbytes == base.nbytes and a.dtype == base.dtype
                args.append(base if whole else base.view(nbytes // a.dtype.itemsize, a.dtype, offset))
            total += launch(runner, args, var_vals, wait) or 0.0
        return total if wait else None


class _Step:
    """One call of an ExecItemLauncher: a kernel (`ast` on `device`) or a copy, over argument `refs` (slot, byte
    offset, bytes, argument uop). `bound` is (runner, refs in the runner's argument order), replaced as one value
    when the runner changes, so a concurrent reader never pairs the two wrongly."""

    __slots__ = ("ast", "bound", "device", "refs")

    def __init__(self, refs: list[tuple[int, int, int, UOp]], device: str = "", ast: UOp | None = None,
                 bound: tuple[Any, list[tuple[int, int, int, UOp]]] = (None, [])) -> None:  # fmt: skip
        self.refs, self.device, self.ast, self.bound = refs, device, ast, bound
