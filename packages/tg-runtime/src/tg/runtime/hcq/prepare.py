"""Stage S0 of the HCQ pipeline: slot the buffers of a schedule, lower its kernels, mark its HCQ batches.

``slot_linear`` replaces every buffer argument of a ``LINEAR`` of ``CALL``s by a slot ``PARAM`` (a view keeps its
byte offset over its base's slot), so schedules of one structure over different buffers are one key: they compile
and link once and an execution only patches addresses. ``prepare`` then, on the slotted LINEAR:

- lowers each kernel ``CALL(SINK)`` to ``CALL(PROGRAM)`` whose arg is a :class:`ProgramInfo` (the compiled runner
  and its argument order);
- turns a copy on a device without a copy queue into a generated copy kernel (uint32 words when sizes and offsets
  allow, else bytes);
- sends a copy between HCQ devices of different peer groups through the schedule staging buffer (2 slots of 64 MiB,
  chunks alternating, each a copy source -> slot on the source device, then slot -> destination on the destination);
- groups maximal runs of HCQ-able calls into ``LINEAR(..., arg="hcq")`` batches; every other call (a copy to DISK,
  a kernel on a non-HCQ device) stays a host ``CALL`` between them.

Which devices are HCQ devices, and how kernels compile, comes from a :class:`PrepareEnv` (the runtime's uses the
device registry; the IR tests pass fakes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tg.ir import KernelInfo, Ops, UOp, dtypes
from tg.ir.dtype import DType
from tg.runtime.hcq.ir import base_of, device_of, hcqbuf, nbytes_of, slot_param, view_byte_offset

STAGING_SIZE, STAGING_SLOTS = 128 << 20, 2  # the schedule staging buffer (seed's HCQ2 values)
BATCH = "hcq"  # the arg of a LINEAR that is one HCQ batch


@dataclass(frozen=True, eq=False)
class ProgramInfo:
    """The arg of a ``PROGRAM``: a compiled kernel as the encoders need it.

    ``device`` is the device it runs on, ``globals`` the call-argument positions passed to the kernel in its
    argument order, ``outs``/``ins`` the positions it writes/reads, ``vars`` the DEFINE_VARs passed after the
    buffers, ``threads`` the thread ids of a THREAD axis (CPU), ``global_size``/``local_size`` the launch grid
    (GPUs). ``runner`` is the runtime's CompiledRunner (None in IR tests). Compared by identity: one object per
    runner.
    """

    name: str
    device: str
    globals: tuple[int, ...]
    outs: tuple[int, ...]
    ins: tuple[int, ...]
    vars: tuple[UOp, ...] = ()
    threads: int = 1
    global_size: tuple[Any, ...] | None = None
    local_size: tuple[Any, ...] | None = None
    runner: Any = None

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def of_runner(runner: Any) -> ProgramInfo:
        """The ProgramInfo of a CompiledRunner (made once per runner)."""
        if (info := getattr(runner, "_hcq_info", None)) is None:
            p = runner.p
            info = ProgramInfo(p.name, runner.device, tuple(p.globals), tuple(p.outs), tuple(p.ins), tuple(p.vars),
                               getattr(p, "threads", 1), p.global_size, p.local_size, runner)  # fmt: skip
            runner._hcq_info = info
        return info


class HCQTargetLike(Protocol):
    """What stages S0-S4 ask of an HCQ device (tg.runtime.hcq.device.HCQDevice; fakes in the IR tests)."""

    device: str
    has_copy_queue: bool
    can_map_host: bool
    peer_group: str
    queues: dict[str, Any]
    pm_encode: Any
    encode_facts: dict[str, Any]


class PrepareEnv(Protocol):
    """The devices and the kernel compiler stage S0 works with."""

    def hcq_device(self, device: str) -> Any:
        """The HCQ device named ``device`` (an HCQTargetLike), or None when it is not an HCQ device."""
        ...

    def lower_kernel(self, device: str, ast: UOp) -> ProgramInfo:
        """Compile kernel ``ast`` for ``device``."""
        ...


# ---- slotting -----------------------------------------------------------------------------------------------------


def slot_linear(linear: UOp) -> tuple[UOp, list[UOp]]:
    """(the LINEAR with every buffer argument a slot PARAM, the base buffer uop of each slot in slot order).

    Slots are numbered by first appearance; a BUFFER_VIEW becomes the same view of its base's slot. Base buffers
    may be BUFFERs or PARAMs (a JIT's captured program): both become slots.
    """
    if linear.op is not Ops.LINEAR:
        raise TypeError(f"slot_linear needs a LINEAR of CALLs, got {linear.op}")
    slots: list[UOp] = []
    new: dict[UOp, UOp] = {}

    def sub(a: UOp) -> UOp:
        if (r := new.get(a)) is not None:
            return r
        if a.op is Ops.BUFFER_VIEW:
            r = a.replace(src=(sub(a.src[0]),))
        elif a.op in (Ops.BUFFER, Ops.PARAM):
            size = int(a.arg) if a.op is Ops.BUFFER else int(a.arg[1])
            r = slot_param(len(slots), device_of(a), a.dtype, size)
            slots.append(a)
        else:
            r = a  # a bound variable passed as an argument
        new[a] = r
        return r

    calls = []
    for call in linear.src:
        if call.op is not Ops.CALL:
            raise TypeError(f"a schedule step must be a CALL, got {call.op}")
        calls.append(call.replace(src=(call.src[0], *(sub(a) for a in call.src[1:]))))
    return linear.replace(src=tuple(calls)), slots


# ---- lowering -----------------------------------------------------------------------------------------------------


def copy_kernel_ast(nbytes: int, dst_offset: int, src_offset: int) -> tuple[UOp, DType]:
    """A kernel ``d[i] = s[i]`` moving ``nbytes``: over uint32 words when size and both offsets allow, else bytes."""
    dt = dtypes.uint32 if nbytes % 4 == 0 and dst_offset % 4 == 0 and src_offset % 4 == 0 else dtypes.uint8
    n = nbytes // dt.itemsize
    d, s = UOp.param(0, dt, n), UOp.param(1, dt, n)
    r = UOp.range(n, 0)
    ast = d.index(r).store(s.index(r).load()).end(r).sink(arg=KernelInfo(name=f"copy_{nbytes}"))
    return ast, dt


def copy_device(call: UOp) -> str:
    """The device whose queue runs a copy CALL: the source pushes between two devices (peer writes beat reads);
    with one end in the staging buffer (host memory), the device end."""
    dst, src = call.src[1], call.src[2]
    if base_of(src).op is Ops.HCQBUF:
        return device_of(dst)
    return device_of(src)


def _byte_view(buf: UOp, offset: int, nbytes: int) -> UOp:
    """``nbytes`` bytes at ``offset`` of a buffer argument, as a uint8 BUFFER_VIEW over its whole bytes."""
    whole = UOp(Ops.BUFFER_VIEW, dtypes.uint8, (buf,), (nbytes_of(buf), 0)) if buf.dtype is not dtypes.uint8 else buf
    return UOp(Ops.BUFFER_VIEW, dtypes.uint8, (whole,), (nbytes, offset))


def staged_copies(call: UOp, src_dev: str) -> list[UOp]:
    """A copy between devices that cannot map each other, through the schedule staging buffer: per chunk of
    STAGING_SIZE / STAGING_SLOTS bytes, source -> staging slot, then staging slot -> destination."""
    dst, src = call.src[1], call.src[2]
    staging = hcqbuf(src_dev, "staging", 0, dtypes.uint8, STAGING_SIZE)
    chunk, total = STAGING_SIZE // STAGING_SLOTS, nbytes_of(src)
    out = []
    for i, off in enumerate(range(0, total, chunk)):
        n = min(chunk, total - off)
        slot = UOp(Ops.BUFFER_VIEW, dtypes.uint8, (staging,), (n, (i % STAGING_SLOTS) * chunk))
        body = UOp(Ops.COPY, dtypes.uint8, (UOp(Ops.DEVICE, arg=src_dev),))
        out.append(UOp(Ops.CALL, dtypes.void, (body, slot, _byte_view(src, off, n))))
        body = UOp(Ops.COPY, dtypes.uint8, (UOp(Ops.DEVICE, arg=device_of(dst)),))
        out.append(UOp(Ops.CALL, dtypes.void, (body, _byte_view(dst, off, n), slot)))
    return out


def _lower_call(call: UOp, env: PrepareEnv) -> list[UOp] | None:
    """The HCQ form of one slotted call (kernels as PROGRAM, copies as pushes, copy kernels or staged chunks), or
    None when it must run on the host."""
    body, args = call.src[0], call.src[1:]
    bufs = [a for a in args if a.op in (Ops.PARAM, Ops.BUFFER_VIEW)]
    if body.op is Ops.SINK:
        devices = {device_of(b) for b in bufs}
        if len(devices) != 1 or env.hcq_device(dev := devices.pop()) is None:
            return None
        return [call.replace(src=(UOp(Ops.PROGRAM, dtypes.void, (), env.lower_kernel(dev, body)), *args))]
    if body.op is not Ops.COPY or len(args) != 2:
        return None
    dst, src = args
    dd, sd = env.hcq_device(device_of(dst)), env.hcq_device(device_of(src))
    if dd is None or sd is None:
        return None
    staged = base_of(dst).op is Ops.HCQBUF or base_of(src).op is Ops.HCQBUF
    if not staged and dd.peer_group != sd.peer_group:
        return [c for part in staged_copies(call, sd.device) for c in _lower_call(part, env) or [part]]
    on = env.hcq_device(copy_device(call))
    assert on is not None
    if on.has_copy_queue:
        return [call]
    nbytes = nbytes_of(dst)
    if nbytes_of(src) != nbytes:
        raise ValueError(f"copy size mismatch: {nbytes} bytes <- {nbytes_of(src)} bytes")
    ast, _ = copy_kernel_ast(nbytes, view_byte_offset(dst), view_byte_offset(src))
    return [call.replace(src=(UOp(Ops.PROGRAM, dtypes.void, (), env.lower_kernel(on.device, ast)), dst, src))]


def prepare(slotted: UOp, env: PrepareEnv) -> UOp:
    """S0 on a slotted LINEAR: ``LINEAR(LINEAR(hcq calls..., arg="hcq") | host CALL, ...)``."""
    steps: list[UOp] = []
    batch: list[UOp] = []

    def flush() -> None:
        if batch:
            steps.append(UOp(Ops.LINEAR, dtypes.void, tuple(batch), BATCH))
            batch.clear()

    for call in slotted.src:
        lowered = _lower_call(call, env)
        if lowered is None:
            flush()
            steps.append(call)
        else:
            batch.extend(lowered)
    flush()
    return UOp(Ops.LINEAR, dtypes.void, tuple(steps))


def batches(prepared: UOp) -> Sequence[UOp]:
    """The HCQ batches of a prepared LINEAR."""
    return [s for s in prepared.src if s.op is Ops.LINEAR and s.arg == BATCH]


def call_access(call: UOp) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(written, read) argument positions of a lowered call: a kernel's outs/ins, a copy writes 0 and reads 1."""
    body = call.src[0]
    if body.op is Ops.PROGRAM:
        return body.arg.outs, body.arg.ins
    return (0,), (1,)


def resource_of(arg: UOp) -> tuple[UOp, int, int]:
    """(base, first byte, end byte) a buffer argument covers: views cover their byte range of the base."""
    return base_of(arg), view_byte_offset(arg), view_byte_offset(arg) + nbytes_of(arg)
