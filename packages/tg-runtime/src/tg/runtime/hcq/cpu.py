"""``HCQ+CPU``: the reference HCQ device (hcq.md section 9). ``DEV=HCQ+CPU`` opens it for every ``CPU`` instance.

Same renderer and compiler as ``CPU``, plus the entry wrapper ``<name>_entry(args, core_id)`` on every kernel. Each
queue (``COMPUTE:0``, ``COPY:0``) is a native worker thread (``hcq_worker.c``) executing a ring of 16384 entries of
64 uint64 words against host memory: KERNEL (the entry wrapper, on the C thread pool when threaded), MEMCPY, SIGNAL,
WAIT, TIMESTAMP. The encoder rules below turn queue commands into those entries; the submit rule copies a command
buffer into the ring, fences, and bumps ``put``; ``kick`` wakes a sleeping worker. All ``CPU:n`` instances are one
peer group (one address space). ``has_copy_queue`` is True (a second worker); set it False on an instance to run
copies as copy kernels on ``COMPUTE:0``.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import mmap
import time
from pathlib import Path
from typing import Any

from tg.ir import Ops, PatternMatcher, QOp, UOp, UPat, dtypes
from tg.ir.helpers import DEBUG, HCQ_RUNTIME_DEV, PROFILE
from tg.ir.target import Target
from tg.runtime.backends.cpu import CPUDevice, alloc_host_memory, check_runs_here, clang_renderer
from tg.runtime.backends.cpu_program import c_thread_pool, cpu_count, load_shared_object
from tg.runtime.c_compiler import CCompiler, c_source
from tg.runtime.cpu_arch import cpu_arch
from tg.runtime.device import BufferSpec, Dims, Program, check_device_index, instance_target
from tg.runtime.hcq import ir
from tg.runtime.hcq.alloc import HCQAllocator, HCQBuffer
from tg.runtime.hcq.device import HCQDevice, Region, Signal
from tg.runtime.hcq.encode import EncodeCtx, QueueSpec
from tg.runtime.hcq.exec import execute
from tg.runtime.hcq.run import one_call_program, runtime_name
from tg.runtime.hcq.submit import SubmitCtx
from tg.runtime.hcq.views import HostView

RING_SLOTS, CMD_WORDS = 16 << 10, 64  # tinygrad's RING_SLOTS and CMD_SIZE
MAX_ARGS = CMD_WORDS - 3  # kind, fn, threads, then the arguments
KERNEL, MEMCPY, SIGNAL, WAIT, TIMESTAMP = 1, 2, 3, 4, 5
# the worker's state block (uint64 words; hcq_worker.c ST_*)
ST_PUT, ST_DONE, ST_SLEEPING, ST_ABORT, ST_ERROR, ST_ERROR_WORD, ST_WAIT_ADDR, ST_WAIT_VALUE, ST_EXITED = range(9)
U64 = dtypes.uint64
SPIN_NS = 50_000  # host waits spin this long before sleeping on the signal


@functools.cache
def worker_library() -> ctypes.CDLL:
    """hcq_worker.c compiled by the host compiler (disk-cached) and loaded."""
    lib = load_shared_object(
        "tg_hcq_worker", CCompiler().compile_cached(c_source(Path(__file__).parent / "hcq_worker.c"))
    )
    lib.tg_worker_start.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.tg_worker_start.restype = ctypes.c_int
    for f in (lib.tg_worker_kick, lib.tg_worker_abort):
        f.argtypes, f.restype = [ctypes.c_void_p], None
    lib.tg_wait_signal.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_longlong, ctypes.c_longlong]
    lib.tg_wait_signal.restype = ctypes.c_uint64
    return lib


_live_workers: list[Worker] = []


def _stop_workers() -> None:
    """At exit: every worker thread leaves before the memory it reads is unmapped (work still queued is dropped)."""
    for w in _live_workers:
        w.abort()
    deadline = time.perf_counter() + 1.0
    while any(not w.words[ST_EXITED] for w in _live_workers) and time.perf_counter() < deadline:
        time.sleep(0.001)


class Worker:
    """One queue's ring, state block and native thread (their memory stays mapped until the thread has exited)."""

    def __init__(self, dev: HCQCPUDevice, queue: str) -> None:
        self.dev, self.queue = dev, queue
        self.ring = dev.alloc_region(RING_SLOTS * CMD_WORDS * 8, populate=True)  # no page faults while submitting
        self.state = dev.alloc_region(4096)
        self.words = self.state.u64()
        self.mv = self.words.mv  # the same words as a memoryview (the ring check reads two per replay)
        lib = worker_library()
        pool = c_thread_pool()
        pool_run = ctypes.cast(pool._run, ctypes.c_void_p).value if pool is not None else None
        self.kick_fn = lib.tg_worker_kick
        if not _live_workers:
            atexit.register(_stop_workers)
        if lib.tg_worker_start(self.state.va, self.ring.va, pool_run, cpu_count()) != 0:
            raise RuntimeError(f"{dev.device}: cannot start the {queue} worker thread")
        _live_workers.append(self)

    def abort(self) -> None:
        """Make the thread exit (it leaves a WAIT it is stuck in)."""
        worker_library().tg_worker_abort(self.state.va)


# ---- encoder rules: queue commands -> 64-word ring entries --------------------------------------------------------


def _entry(name: str, words: list[UOp | int]) -> UOp:
    if len(words) > CMD_WORDS:
        raise RuntimeError(f"HCQ+CPU {name} needs {len(words)} words; entries have {CMD_WORDS}")
    return ir.packet(name, [*words, *([0] * (CMD_WORDS - len(words)))], U64)


def _kernel(ctx: EncodeCtx, call: UOp, prg: UOp) -> UOp:
    info = prg.arg
    bufs = [ir.getaddr(call.src[1 + g], ctx.device) for g in info.globals]
    args = bufs + [v.cast(U64) for v in info.vars]
    if len(args) > MAX_ARGS:
        raise RuntimeError(f"kernel {info.name} has {len(args)} arguments; HCQ+CPU entries take at most {MAX_ARGS}")
    fn = ir.getaddr(ir.hcqbuf(ctx.device, "program", info), ctx.device)
    return _entry(f"KERNEL {info.name}", [KERNEL, fn, max(int(info.threads), 1), *args])


def copy_nbytes(call: UOp) -> UOp | int:
    """The byte count of a copy CALL: a uint64 DEFINE_VAR given as its third argument (transfer programs), else the
    destination's size."""
    if len(call.src) > 3 and call.src[3].op is Ops.DEFINE_VAR:
        return call.src[3].cast(U64)
    return ir.nbytes_of(call.src[1])


pm_encode = PatternMatcher([
    # coherent host memory: a barrier needs no command
    (UPat(Ops.QCMD, arg=QOp.BARRIER), lambda ctx: UOp(Ops.NOOP)),
    (UPat(Ops.QCMD, arg=QOp.WAIT, src=(UPat.var("s"), UPat.var("v"))),
     lambda ctx, s, v: _entry("WAIT", [WAIT, ir.getaddr(s, ctx.device), v.cast(U64)])),
    (UPat(Ops.QCMD, arg=QOp.SIGNAL, src=(UPat.var("s"), UPat.var("v"))),
     lambda ctx, s, v: _entry("SIGNAL", [SIGNAL, ir.getaddr(s, ctx.device), v.cast(U64)])),
    (UPat(Ops.QCMD, arg=QOp.TIMESTAMP, src=(UPat.var("s"),)),
     lambda ctx, s: _entry("TIMESTAMP", [TIMESTAMP, ir.getaddr(s, ctx.device) + UOp.const(U64, 8)])),
    (UPat(Ops.CALL, src=(UPat(Ops.PROGRAM, name="prg"),), allow_any_len=True, name="call"), _kernel),
    (UPat(Ops.CALL, src=(UPat(Ops.COPY),), allow_any_len=True, name="call"),
     lambda ctx, call: _entry("MEMCPY", [MEMCPY, ir.getaddr(call.src[1], ctx.device),
                                         ir.getaddr(call.src[2], ctx.device), copy_nbytes(call)])),
])  # fmt: skip


# ---- submit rule: copy the command buffer into the ring, fence, bump put ------------------------------------------


def _submit(ctx: SubmitCtx, q: UOp) -> UOp:
    cmdbuf, after = q.src[0], q.src[1:]
    ring = ir.hcqbuf(ctx.device, "ring", ctx.queue, U64, RING_SLOTS * CMD_WORDS)
    put = ir.hcqbuf(ctx.device, "put", ctx.queue)
    i32 = dtypes.int32
    base = put.after(*after).index(UOp.const(i32, 0)).load()
    n = ctx.nentries
    # only the words some entry of this submit uses: a 64-word entry is mostly padding the worker never reads
    e, w = UOp.range(UOp.const(i32, n), 2000), UOp.range(UOp.const(i32, ctx.used_words or CMD_WORDS), 2001)
    slot = ((base + e.cast(U64)) & UOp.const(U64, RING_SLOTS - 1)).cast(i32)
    src = cmdbuf.after(*after).index(e * UOp.const(i32, CMD_WORDS) + w).load()
    copied = ring.index(slot * UOp.const(i32, CMD_WORDS) + w).store(src).end(w, e)
    fence = UOp(Ops.BARRIER, dtypes.void, (copied,))
    return put.after(fence).index(UOp.const(i32, 0)).store(base + UOp.const(U64, n))


pm_submit = PatternMatcher([(UPat(Ops.QUEUE, name="q"), _submit)])


# ---- the device ----------------------------------------------------------------------------------------------------


class HCQCPUAllocator(HCQAllocator):
    """Host memory (page-aligned) for HCQ+CPU buffers."""


_ARG_NAMES = tuple(f"_a{i}" for i in range(MAX_ARGS))  # the variables of one-call programs (run.one_call_program)


class HCQCPUProgram(Program):
    """A CPU kernel loaded for HCQ+CPU: called directly (``prg(*bufs, vals=...)``), it runs as a one-call HCQ
    program on the device's COMPUTE:0 queue (compiled and linked once per argument shape)."""

    def __init__(self, dev: HCQCPUDevice, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        self.dev = dev
        self._dll = load_shared_object(name, lib)
        entry = getattr(self._dll, f"{name}_entry", None)
        if entry is None:
            raise RuntimeError(f"compiled library has no function {name}_entry (HCQ+CPU kernels need the wrapper)")
        self.entry: int = ctypes.cast(entry, ctypes.c_void_p).value or 0
        self._linked: dict[tuple[Any, ...], Any] = {}

    def launch(self, bufs: tuple, gs: Dims, ls: Dims, vals: tuple[int, ...], wait: bool, threads: int) -> float | None:
        # timed calls (wait: BEAM, DEBUG=2) get the program with timestamps: the device's own time is returned
        key = (len(bufs), len(vals), threads, wait or PROFILE.value or DEBUG.value >= 2, HCQ_RUNTIME_DEV.value)
        if (lb := self._linked.get(key)) is None:
            lb = self._linked[key] = one_call_program(self.dev, self, (*key[:3], bool(key[3]), runtime_name()))
        return execute(lb, bufs, dict(zip(_ARG_NAMES, vals, strict=False)) if vals else None, wait)


class HCQCPUDevice(HCQDevice):
    """The HCQ reference device on the host CPU (see the module docstring)."""

    renderers = ("CLANG",)
    queues = {"COMPUTE:0": QueueSpec("compute", U64, RING_SLOTS * CMD_WORDS, CMD_WORDS),
              "COPY:0": QueueSpec("copy", U64, RING_SLOTS * CMD_WORDS, CMD_WORDS)}  # fmt: skip
    pm_encode = pm_encode
    pm_submit = pm_submit
    can_map_host = True
    timestamp_divider = 1000.0  # CLOCK_MONOTONIC nanoseconds

    @classmethod
    def check_arch(cls, target: Target) -> None:
        """CLANG archs: as the CPU device."""
        CPUDevice.check_arch(target)

    def __init__(self, device: str = "CPU", target: Target | None = None) -> None:
        check_device_index(device)
        target = target if target is not None else instance_target(device)
        self.arch = arch = cpu_arch(target)
        compiler = CCompiler(flags=arch.flags)
        check_runs_here(target, arch, compiler)

        def renderer() -> Any:
            r: Any = clang_renderer(compiler, arch)
            r.entry_wrappers = True  # every kernel gets <name>_entry(args, core_id): what the worker calls
            return r

        self.has_copy_queue = True
        self.workers: dict[str, Worker] = {}
        super().__init__(device, HCQCPUAllocator(self), compiler, lambda name, lib: HCQCPUProgram(self, name, lib),
                         renderer, target)  # fmt: skip

    @property
    def peer_group(self) -> str:
        """Every HCQ+CPU instance shares the host's address space."""
        return "HCQ+CPU"

    # ---- memory ----------------------------------------------------------------------------------------------------

    def alloc_region(self, size: int, populate: bool = False) -> Region:
        populate_flag = getattr(mmap, "MAP_POPULATE", 0) if populate else 0
        if populate_flag:
            mem = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS | populate_flag)
        else:
            mem = mmap.mmap(-1, size)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
        return Region(addr, size, HostView(addr, size, "B", owner=mem), self, mem)

    def alloc_buffer(self, size: int, options: BufferSpec) -> HCQBuffer:
        """A buffer of host memory (zero-filled, page-aligned)."""
        mem = alloc_host_memory(size)
        return HCQBuffer(mem.addr, size, HostView(mem.addr, size, "B", owner=mem.mv), self, keep=mem)

    def free_buffer(self, buf: HCQBuffer) -> None:
        """Host memory goes with its last reference."""

    def map_buffer(self, buf: HCQBuffer, dev: Any) -> int:
        """Host memory: every instance uses the same address."""
        return buf.va

    def staging_region(self) -> Region:
        """The schedule staging buffer (never used on one peer group: copies between instances are plain)."""
        raise RuntimeError("HCQ+CPU instances map each other's memory; no schedule staging is needed")

    def worker(self, queue: str) -> Worker:
        """The worker of ``queue`` (started on first use)."""
        if (w := self.workers.get(queue)) is None:
            if queue not in self.queues:
                raise RuntimeError(f"{self.device} has no queue {queue}")
            w = self.workers[queue] = Worker(self, queue)
        return w

    def queue_region(self, queue: str, role: str) -> Region:
        w = self.worker(queue)
        if role == "ring":
            return w.ring
        if role in ("put", "wptr"):
            return w.state.sub(ST_PUT * 8, 8)
        if role == "rptr":
            return w.state.sub(ST_DONE * 8, 8)
        raise RuntimeError(f"HCQ+CPU queues have no {role}")

    def program_address(self, info: Any) -> int:
        prg = getattr(info.runner, "_prg", info.runner)
        if not isinstance(prg, HCQCPUProgram):
            raise RuntimeError(f"kernel {info.name} was not compiled for HCQ+CPU ({type(prg).__name__})")
        return prg.entry

    def measure_clock_offset(self) -> float:
        """TIMESTAMP writes CLOCK_MONOTONIC nanoseconds: the host's perf_counter clock where that is what it reads."""
        if "CLOCK_MONOTONIC" in time.get_clock_info("perf_counter").implementation:
            return 0.0
        return super().measure_clock_offset()

    def ring_pointers(self, queue: str) -> tuple[int, int]:
        mv = (self.workers.get(queue) or self.worker(queue)).mv
        return mv[ST_PUT] * CMD_WORDS, mv[ST_DONE] * CMD_WORDS

    def wait_ring(self, queue: str, rptr: int) -> None:
        """Wait until the worker of ``queue`` read up to word ``rptr``."""
        w = self.worker(queue)
        self.wait_signal(Signal(w.state.sub(ST_DONE * 8, 16)), -(-rptr // CMD_WORDS), what="read pointer", queue=queue)

    # ---- interface hooks -------------------------------------------------------------------------------------------

    def kick(self, queue: str) -> None:
        w = self.workers.get(queue)
        if w is not None:
            w.kick_fn(w.state.va)

    def iface_sleep(self, ms: float, sig: Signal, value: int) -> None:
        worker_library().tg_wait_signal(sig.va, value, SPIN_NS, int(ms * 1e6))

    def pump(self) -> None:
        for w in self.workers.values():
            if w.words[ST_ERROR]:
                raise RuntimeError(f"{self.device} {w.queue} worker stopped at an unknown command kind "
                                   f"{int(w.words[ST_ERROR_WORD])}")  # fmt: skip

    def hang_detail(self) -> str:
        stuck = []
        for w in self.workers.values():
            if addr := int(w.words[ST_WAIT_ADDR]):
                now = int(ctypes.c_uint64.from_address(addr).value)
                stuck.append(f"{w.queue} is stuck in WAIT(signal at {addr:#x} >= {int(w.words[ST_WAIT_VALUE])}, now "
                             f"{now})")  # fmt: skip
        return "; ".join(stuck) + ("." if stuck else "")

    def abandon(self) -> None:
        """A hung queue's worker is told to exit; the device stays in its error state."""
        for w in self.workers.values():
            w.abort()
        deadline = time.perf_counter() + 1.0
        while any(not w.words[ST_EXITED] for w in self.workers.values()) and time.perf_counter() < deadline:
            time.sleep(0.001)
