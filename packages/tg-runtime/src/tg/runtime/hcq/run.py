"""Running schedules on HCQ devices: the engine's entry (hcq.md section 10) and the programs HCQ devices keep.

- ``run(linear, var_vals)``: `tg.runtime.engine.run_linear` hands a schedule here when a call targets an HCQ device:
  slot it, and run its :class:`HCQLauncher` (compiled once per slotted schedule, profile flag, runtime and DEV; linked
  once; kept in an LRU of HCQ_LINK_CACHE): execute its batches and run the host calls between them after the **host
  fence rule** (a host call first waits for the stamped epochs of the buffers it reads or writes).
- ``one_call_program(dev, program, shape)``: a kernel called directly (``Program.__call__``: realize plans, BEAM,
  ExecItems) runs as a linked one-call program on the device's COMPUTE:0.
- ``transfer_program(dev)``: the linked one-COPY program of a device (two input patches, one value patch: the byte
  count) behind copyin/copyout through the staging ring and device-to-device transfers.
- ``RuntimeEnv``: the devices and kernel compiler the HCQ compiler stages see at run time.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from tg.ir import Ops, UOp, Variable, dtypes
from tg.ir.helpers import DEBUG, DEV, HCQ_LINK_CACHE, HCQ_RUNTIME_DEV, PROFILE, GlobalCounters
from tg.ir.uop import sym_infer
from tg.runtime.device import Device
from tg.runtime.engine import ExecItemLauncher, buffer_for, get_runner
from tg.runtime.hcq import ir
from tg.runtime.hcq.alloc import HCQBuffer, fence
from tg.runtime.hcq.compile import CompiledBatch, CompiledProgram, compile_batch, compile_linear
from tg.runtime.hcq.exec import execute
from tg.runtime.hcq.link import LinkedBatch, link_batch
from tg.runtime.hcq.prepare import BATCH, ProgramInfo, slot_linear
from tg.runtime.hcq.submit import Submitter, build_submitter

if TYPE_CHECKING:
    from tg.runtime.hcq.device import HCQDevice  # the device runs programs built here (transfers, clocks)


class RuntimeEnv:
    """Devices come from the registry (an HCQ device is an HCQDevice instance); kernels compile through
    ``engine.get_runner`` (the method cache)."""

    def hcq_device(self, device: str) -> HCQDevice | None:
        dev = Device[device]
        return dev if dev.is_hcq else None  # type: ignore[return-value]

    def lower_kernel(self, device: str, ast: UOp) -> ProgramInfo:
        return ProgramInfo.of_runner(get_runner(device, ast))


ENV = RuntimeEnv()


def runtime_name() -> str:
    """HCQ_RUNTIME_DEV: CPU, PYTHON or auto."""
    value = str(HCQ_RUNTIME_DEV.value).upper()
    if value not in ("CPU", "PYTHON", "AUTO"):
        raise ValueError(f"HCQ_RUNTIME_DEV must be CPU, PYTHON or auto, got {HCQ_RUNTIME_DEV.value!r}")
    return "auto" if value == "AUTO" else value


def profiling() -> bool:
    """Whether programs compile with timestamps (PROFILE=1 or DEBUG>=2)."""
    return bool(PROFILE.value) or DEBUG.value >= 2


# ---- compiled and linked schedules ----------------------------------------------------------------------------------

_compiled: dict[tuple[Any, ...], CompiledProgram] = {}
_launchers: collections.OrderedDict[tuple[Any, ...], HCQLauncher] = collections.OrderedDict()


def _program_key(slotted: UOp) -> tuple[Any, ...]:
    """The cache key of a slotted schedule's compiled and linked forms. A schedule names its devices ("AMD"), and the
    device a name opens depends on ``DEV`` (``DEV=MOCKPCI+AMD`` and ``DEV=MOCKUSB+AMD`` give "AMD" two different
    devices, each kept open): the forms hold the devices resolved when they were built, so DEV is part of the key, or
    a schedule run again under another DEV would run on the first device with the second one's buffers."""
    return (slotted, profiling(), runtime_name(), str(DEV.value))


def compiled_program(slotted: UOp, slot_count: int) -> CompiledProgram:
    """The compiled form of a slotted schedule (cached on it, the profile flag, the runtime and DEV)."""
    key = _program_key(slotted)
    if (prog := _compiled.get(key)) is None:
        prog = _compiled[key] = compile_linear(slotted, slot_count, ENV, profiling())
        if len(_compiled) > 4 * HCQ_LINK_CACHE.value:
            _compiled.pop(next(iter(_compiled)))
    return prog


def submitter_of(batch: CompiledBatch) -> Submitter:
    """S5 of a compiled batch (once)."""
    if batch.submitter is None:
        batch.submitter = build_submitter(batch, ENV)
    return batch.submitter


class HCQLauncher:
    """Runs a slotted schedule on HCQ devices: its compiled steps, each batch linked once (HCQ_LINK_COPIES copies);
    host calls between batches run as lowered runners after the host fence. Called with the slot Buffers."""

    def __init__(self, slotted: UOp, slot_count: int) -> None:
        self.prog = compiled_program(slotted, slot_count)
        self.steps: list[tuple[CompiledBatch, LinkedBatch] | Any] = []
        for step in self.prog.steps:
            if isinstance(step, CompiledBatch):
                self.steps.append((step, link_batch(step, submitter_of(step), ENV, runtime_name())))
            else:
                self.steps.append(ExecItemLauncher(UOp(Ops.LINEAR, dtypes.void, (step,))))

    def __call__(self, bufs: list[Any], var_vals: dict[str, int], wait: bool = False) -> float | None:
        opaques: list[Any] = []
        for b in bufs:
            if not b._allocated:
                b.allocate()
            opaques.append(b._opaque)
        total = 0.0
        for step in self.steps:
            if isinstance(step, tuple):
                total += execute(step[1], opaques, var_vals, wait) or 0.0
                _account(step[0], var_vals)
            else:
                for op in opaques:  # the host fence rule
                    if isinstance(op, HCQBuffer) and op.base.stamp:
                        fence(op)
                total += step(bufs, var_vals, wait) or 0.0
        return total if wait else None

    def release(self) -> None:
        """Give the linked batches' memory back once idle."""
        for step in self.steps:
            if isinstance(step, tuple):
                step[1].release()


def launcher_for(slotted: UOp, slot_count: int) -> HCQLauncher:
    """The launcher of a slotted schedule (an LRU of HCQ_LINK_CACHE; an evicted one is released once idle)."""
    key = _program_key(slotted)
    if (launcher := _launchers.get(key)) is not None:
        _launchers.move_to_end(key)
        return launcher
    launcher = _launchers[key] = HCQLauncher(slotted, slot_count)
    while len(_launchers) > HCQ_LINK_CACHE.value:
        _, old = _launchers.popitem(last=False)
        old.release()
    return launcher


# ---- running a schedule --------------------------------------------------------------------------------------------


def run(linear: UOp, var_vals: dict[str, int]) -> None:
    """Run a schedule that touches HCQ devices (see the module docstring)."""
    slotted, slots = slot_linear(linear)
    launcher_for(slotted, len(slots))([buffer_for(u) for u in slots], var_vals)


def _account(batch: CompiledBatch, var_vals: dict[str, int]) -> None:
    stats = batch.__dict__.get("_stats")
    if stats is None:
        ops: Any = 0
        mem: Any = 0
        for q in batch.queues:
            for c in q.src:
                if c.op is not Ops.CALL:
                    continue
                body = c.src[0]
                if body.op is Ops.PROGRAM and body.arg.runner is not None and hasattr(body.arg.runner, "ops"):
                    ops, mem = ops + body.arg.runner.ops, mem + body.arg.runner.mem
                elif body.op is Ops.COPY:
                    mem = mem + ir.nbytes_of(c.src[1])
        stats = batch.__dict__["_stats"] = (len(batch.call_names), ops, mem)
    n, ops, mem = stats
    GlobalCounters.kernel_count += n
    GlobalCounters.global_ops += ops if isinstance(ops, int) else sym_infer(ops, var_vals)
    GlobalCounters.global_mem += mem if isinstance(mem, int) else sym_infer(mem, var_vals)


# ---- programs a device keeps ---------------------------------------------------------------------------------------


def one_call_program(dev: HCQDevice, program: Any, shape: tuple[Any, ...], global_size: tuple[int, ...] | None = None,
                     local_size: tuple[int, ...] | None = None) -> LinkedBatch:  # fmt: skip
    """A linked program running ``program`` (a loaded kernel) once on COMPUTE:0 of ``dev``: ``shape`` = (buffers,
    int arguments, thread ids[, with timestamps]); buffers are slots 0.., the int arguments variables ``_a0``.. (each
    call patches them); GPUs also take the launch grid (work-groups) and work-group size."""
    nbufs, nvals, threads = shape[:3]
    variables = tuple(Variable(f"_a{i}", -(2**31), 2**31 - 1) for i in range(nvals))
    everything = tuple(range(nbufs))
    info = ProgramInfo(program.name, dev.device, everything, everything, everything, variables, threads, global_size,
                       local_size, program)  # fmt: skip
    params = [ir.slot_param(i, dev.device, dtypes.uint8, 1) for i in range(nbufs)]
    call = UOp(Ops.CALL, dtypes.void, (UOp(Ops.PROGRAM, dtypes.void, (), info), *params))
    batch = compile_batch([call], ENV, profile=bool(shape[3]) if len(shape) > 3 else profiling())
    return link_batch(batch, submitter_of(batch), ENV, runtime_name())


def transfer_program(dev: HCQDevice, dst_device: str | None = None) -> LinkedBatch:
    """The device's linked one-COPY program into memory of ``dst_device`` (default: its own): slot 0 the
    destination, slot 1 the source, variable ``_nbytes`` the byte count."""
    cached: dict[tuple[str, Any, str], LinkedBatch] = dev.__dict__.setdefault("_transfer_programs", {})
    dst_name = dst_device or dev.device
    # keyed on the device the name opens now, not the name alone: link_batch resolves names under the current DEV,
    # and the same name is another device under another DEV (DEV=HCQ+CPU vs HCQ+CPU:CLANG:x86-64-v2 for CPU:1)
    key = (dst_name, ENV.hcq_device(dst_name), runtime_name())
    if (lb := cached.get(key)) is None:
        nbytes = Variable("_nbytes", 0, 2**62, dtypes.uint64)
        dst, src = ir.slot_param(0, key[0], dtypes.uint8, 1), ir.slot_param(1, dev.device, dtypes.uint8, 1)
        body = UOp(Ops.COPY, dtypes.uint8, (UOp(Ops.DEVICE, arg=key[0]),))
        call = UOp(Ops.CALL, dtypes.void, (body, dst, src, nbytes))
        batch = compile_batch([call], ENV, profile=False)
        dev.__dict__.setdefault("_transfer_batches", []).append(batch)
        lb = cached[key] = link_batch(batch, submitter_of(batch), ENV, key[2])
        lb.name = f"transfer to {key[0]}"
    return lb


def is_batch(step: UOp) -> bool:
    """Whether a prepared step is an HCQ batch."""
    return step.op is Ops.LINEAR and step.arg == BATCH
