"""The CPU's kernel program: a C kernel in a shared object called through ctypes (`CPUProgram`), and the thread
pools its THREAD axes run on. Shared by the CPU device (cpu.py), CPU:LLVM (_cpu_llvm.py, whose program subclasses
this one) and HCQ+CPU, so none of them imports another's device module for it.
"""

from __future__ import annotations

import ctypes
import os
import queue
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tg.ir.helpers import CPU_COUNT, DEBUG, cache_dir
from tg.runtime.c_compiler import CCompiler, c_source
from tg.runtime.device import Dims, Program


def load_shared_object(name: str, lib: bytes) -> ctypes.CDLL:
    """dlopen the bytes of a shared object (through a temporary file, unlinked once loaded).

    The system temp dir is tried first, then the tg cache dir (for systems whose /tmp is mounted noexec).
    """
    errors = []
    for folder in (None, str(cache_dir() / "tmp")):
        try:
            if folder is not None:
                os.makedirs(folder, exist_ok=True)
            fd, path = tempfile.mkstemp(prefix=f"tg-{name}-", suffix=".so", dir=folder)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(lib)
                return ctypes.CDLL(path)
            finally:
                os.unlink(path)
        except OSError as e:
            errors.append(f"{folder or tempfile.gettempdir()}: {e}")
    raise RuntimeError(f"cannot load the compiled kernel {name!r}: " + "; ".join(errors))


def cpu_count() -> int:
    """Threads a CPU kernel may use: ``CPU_COUNT`` if set, else the cores this process may run on."""
    n = CPU_COUNT.value
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"CPU_COUNT must be a positive int, got {n!r}")
    if n:
        return n
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class ThreadPool:
    """Persistent worker threads that run the thread ids of a kernel (ctypes releases the GIL during the call).

    ``run(fxn, args, n, threads)`` calls ``fxn(*args, t)`` for t in [0, n), the ids strided over the calling thread
    and workers created at first use and kept for the life of the process (no thread creation per launch). This is
    the fallback for kernels without an entry wrapper; threaded kernels normally run on the C pool (`CThreadPool`).
    """

    def __init__(self) -> None:
        self._queues: list[queue.SimpleQueue[Any]] = []
        self._done: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._lock = threading.Lock()

    def _worker(self, q: queue.SimpleQueue[Any]) -> None:
        while True:
            fxn, args, ids, t = q.get()
            try:
                for i in ids:
                    fxn(*args, i)
            finally:
                self._done.put(t)

    def run(self, fxn: Any, args: list[Any], n: int, threads: int | None = None) -> None:
        """``fxn(*args, i)`` for every i in [0, n), on min(n, threads) threads (default n), ids strided over them."""
        used = n if threads is None else max(1, min(n, threads))
        with self._lock:  # one kernel at a time per pool
            while len(self._queues) < used - 1:
                q: queue.SimpleQueue[Any] = queue.SimpleQueue()
                threading.Thread(target=self._worker, args=(q,), daemon=True, name="tg-cpu-worker").start()
                self._queues.append(q)
            for t in range(1, used):
                self._queues[t - 1].put((fxn, args, range(t, n, used), t))
            try:
                for i in range(0, n, used):
                    fxn(*args, i)
            finally:
                for _ in range(used - 1):
                    self._done.get()


class CThreadPool:
    """The persistent thread pool of `cpu_pool.c`: workers spin briefly between launches, then sleep, so a launch
    costs about a microsecond and involves no Python (measured: the Python pool's queue hand-off cost ~100 us per
    launch, more than a 256^3 matmul kernel takes on one core).

    ``run(entry, args, n, threads)`` calls the kernel's entry wrapper ``entry(args, t)`` once for every t in [0, n) on
    up to `threads` OS threads (the caller is one) and returns once all are done; `args` are the buffer addresses then
    the variable values. Ids are handed out one at a time, so a kernel split into more ids than cores keeps every
    core busy even when another process takes one of them for a while. Each kernel's launches are timed both threaded
    and on the caller alone, and run the way that has been faster lately (on a loaded machine, often the caller
    alone; `stats` counts both). Which thread runs an id never changes the result.
    """

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._run = lib.tg_pool_run
        self._run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        self._run.restype = ctypes.c_int
        self._lock = threading.Lock()

    def run(self, entry: int, args: list[int], n: int, threads: int) -> None:
        arr = (ctypes.c_longlong * max(len(args), 1))(*args)
        with self._lock:  # one kernel at a time (the C side has one job slot)
            self._run(entry, arr, n, threads)

    def workers(self) -> int:
        """Worker threads started so far (they live as long as the process)."""
        return int(self._lib.tg_pool_workers())

    def stats(self, entry: int | None = None) -> dict[str, int]:
        """Launch counters since the process started: ``threaded`` (launches offered to the workers) and ``solo``
        (multi-id launches run on the caller alone, because that had been faster for the kernel lately); with an
        `entry`, also that kernel's current launch-time estimates in ns, ``solo_ns`` and ``threaded_ns`` (0: not
        measured yet)."""
        out = (ctypes.c_longlong * 4)()
        self._lib.tg_pool_stats(ctypes.c_void_p(entry), out)
        return dict(zip(("threaded", "solo", "solo_ns", "threaded_ns"), map(int, out), strict=True))


_pool = ThreadPool()
_c_pool: CThreadPool | None = None
_os_thread_count: list[int] = []


def _os_threads() -> int:
    """OS threads a kernel's thread ids run on: `cpu_count()` (read once)."""
    if not _os_thread_count:
        _os_thread_count.append(cpu_count())
    return _os_thread_count[0]


_c_pool_state = {"tried": False}
_c_pool_lock = threading.Lock()


def c_thread_pool(compiler: CCompiler | None = None) -> CThreadPool | None:
    """The C thread pool, compiled (and disk-cached) at first use; None where it cannot be built (no compiler,
    no pthreads): kernels then run their thread ids on the Python `ThreadPool`."""
    global _c_pool
    if _c_pool is None and not _c_pool_state["tried"]:
        with _c_pool_lock:
            if not _c_pool_state["tried"]:
                try:
                    src = c_source(Path(__file__).parent / "cpu_pool.c")
                    lib = (compiler or CCompiler()).compile_cached(src)
                    _c_pool = CThreadPool(load_shared_object("tg_cpu_pool", lib))
                except Exception as e:  # any failure: keep the Python pool (slower launches, same results)
                    if DEBUG >= 1:
                        print(f"CPU: no C thread pool ({e}); kernels use the Python pool", file=sys.stderr)
                _c_pool_state["tried"] = True
    return _c_pool


CTYPES_MAX_ARGS = 1024  # ctypes refuses calls with more arguments ("too many arguments")


class CPUProgram(Program):
    """A C kernel in a shared object, loaded with ctypes.

    Called with HostMemory buffers (or raw addresses) then the int variable values: ``prg(*bufs, vals=(n,))``;
    a kernel with a THREAD axis also gets ``threads=n`` and runs its thread ids on the persistent thread pool.
    Returns the elapsed seconds when ``wait=True``.
    """

    def __init__(self, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        self._dll = load_shared_object(name, lib)
        try:
            self.fxn: Any = getattr(self._dll, name)
        except AttributeError as e:
            raise RuntimeError(f"compiled library has no function named {name!r}") from e
        self.fxn.restype = None
        self._nargs: tuple[int, int] | None = None
        entry = getattr(self._dll, f"{name}_entry", None)  # kernels with a THREAD axis have an entry wrapper
        self._entry: int | None = None if entry is None else ctypes.cast(entry, ctypes.c_void_p).value

    def launch(self, bufs: tuple, gs: Dims, ls: Dims, vals: tuple[int, ...], wait: bool, threads: int) -> float | None:
        if self._nargs != (nargs := (len(bufs), len(vals) + (threads > 1))):
            if sum(nargs) > CTYPES_MAX_ARGS:  # the scheduler keeps kernels below this (renderer max_buffers)
                raise RuntimeError(
                    f"kernel {self.name} takes {nargs[0]} buffers and {nargs[1]} int arguments: ctypes "
                    f"passes at most {CTYPES_MAX_ARGS} (split it, e.g. MAX_KERNEL_BUFFERS)"
                )
            self.fxn.argtypes = [ctypes.c_void_p] * nargs[0] + [ctypes.c_int] * nargs[1]
            self._nargs = nargs
        args = [b if b.__class__ is int else b.addr for b in bufs]
        args.extend(vals)
        start = time.perf_counter() if wait else 0.0
        if threads > 1:
            if self._entry is not None and (pool := c_thread_pool()) is not None:
                pool.run(self._entry, args, threads, _os_threads())
            else:
                _pool.run(self.fxn, args, threads, _os_threads())
        else:
            self.fxn(*args)
        return time.perf_counter() - start if wait else None
