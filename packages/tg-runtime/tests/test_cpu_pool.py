"""The CPU thread pool (`cpu_pool.c`): threaded kernels run every thread id once, through their entry wrapper,
with buffers and variables passed intact; many back-to-back launches, more threads than cores, the Python-pool
fallback and a forked child all give the single-threaded result; a kernel whose threaded launches are slower (a worker
stalls holding an id, as a descheduled one does) runs on the caller alone, and every id still runs exactly once."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import threading
import time
from typing import Any

import numpy as np
import pytest

from tg.codegen.opt import split
from tg.codegen.program import get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.ir.dtype import dtypes
from tg.ir.ops import AxisType
from tg.ir.uop import UOp
from tg.runtime.backends.cpu_program import CThreadPool, c_thread_pool
from tg.runtime.device import Buffer, Device
from tg.runtime.engine import CompiledRunner

ROWS, COLS = 12, 16


def renderer(threads: int) -> ClangRenderer:
    ren = Device["CPU"].renderer
    return ClangRenderer(ren.vector_bytes, threads, ren.has_fma)


def add_n_kernel() -> UOp:
    """out[i, j] = src[i, j] * 2 + n for a variable n: a THREAD split of the rows gives each thread a block."""
    n = UOp.variable("n", 0, 100)
    out, src = UOp.param(0, dtypes.float32, ROWS * COLS), UOp.param(1, dtypes.float32, ROWS * COLS)
    r0, r1 = UOp.range(ROWS, 0), UOp.range(COLS, 1)
    idx = r0 * COLS + r1
    val = src.index(idx).load() * UOp.const(dtypes.float32, 2.0) + n.cast(dtypes.float32)
    return UOp.sink(out.index(idx).store(val).end(r0, r1))


def launch(runner: CompiledRunner, src: np.ndarray, n: int) -> np.ndarray:
    out = Buffer("CPU", ROWS * COLS, dtypes.float32).ensure_allocated()
    inp = Buffer("CPU", ROWS * COLS, dtypes.float32).ensure_allocated().copyin(memoryview(src))
    runner([out, inp], {"n": n})
    return np.frombuffer(bytes(out.as_memoryview()), np.float32).reshape(ROWS, COLS)


@pytest.fixture
def src() -> np.ndarray:
    return np.random.default_rng(0).standard_normal(ROWS * COLS).astype(np.float32)


@pytest.mark.parametrize("threads,ids", [(2, 2), (3, 3), (2, 4), (2, 12), (4, 12)])
def test_threaded_kernel_runs_every_thread_id_on_the_c_pool(threads: int, ids: int, src: np.ndarray) -> None:
    """`ids` blocks on a renderer for `threads` cores (more ids than cores: the pool hands them out one by one)."""
    p = get_program(add_n_kernel(), renderer(threads), [split(0, ids, AxisType.THREAD, True)])
    assert p.threads == ids and f"{p.name}_entry(const long long* args, int core_id)" in p.src
    runner = CompiledRunner(p, "CPU")
    assert runner._prg._entry is not None, "a threaded kernel has an entry wrapper for the pool"
    pool = c_thread_pool()
    assert pool is not None, "the C pool builds wherever the CPU device works"
    for n in (0, 7, 100):
        np.testing.assert_array_equal(launch(runner, src, n), src.reshape(ROWS, COLS) * 2 + n)
    assert pool.workers() >= 1


def test_many_back_to_back_launches(src: np.ndarray) -> None:
    runner = CompiledRunner(get_program(add_n_kernel(), renderer(2), [split(0, 2, AxisType.THREAD, True)]), "CPU")
    out = Buffer("CPU", ROWS * COLS, dtypes.float32).ensure_allocated()
    inp = Buffer("CPU", ROWS * COLS, dtypes.float32).ensure_allocated().copyin(memoryview(src))
    for n in range(500):  # the workers spin between launches here, and sleep between tests
        runner([out, inp], {"n": n})
        if n % 97 == 0:
            got = np.frombuffer(bytes(out.as_memoryview()), np.float32)
            np.testing.assert_array_equal(got, src * 2 + n)


def test_python_pool_fallback_gives_the_same_result(src: np.ndarray) -> None:
    runner = CompiledRunner(get_program(add_n_kernel(), renderer(2), [split(0, 6, AxisType.THREAD, True)]), "CPU")
    want = launch(runner, src, 5)
    np.testing.assert_array_equal(want, src.reshape(ROWS, COLS) * 2 + 5)
    runner._prg._entry = None  # as for a kernel without an entry wrapper: the Python ThreadPool runs the ids
    np.testing.assert_array_equal(launch(runner, src, 5), want)


def _child(conn: Any, src: np.ndarray) -> None:
    runner = CompiledRunner(get_program(add_n_kernel(), renderer(2), [split(0, 2, AxisType.THREAD, True)]), "CPU")
    conn.send(launch(runner, src, 3).tolist())
    conn.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_pool_works_in_a_forked_child(src: np.ndarray) -> None:
    runner = CompiledRunner(get_program(add_n_kernel(), renderer(2), [split(0, 2, AxisType.THREAD, True)]), "CPU")
    launch(runner, src, 1)  # the parent's workers exist now; the child has none and must start its own
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child, src))
    proc.start()
    try:
        assert parent.poll(60), "the forked child hung running a threaded kernel"
        np.testing.assert_array_equal(np.array(parent.recv(), np.float32), src.reshape(ROWS, COLS) * 2 + 3)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


# ---- the pool itself, driven with a Python entry (ctypes takes the GIL for each id) ----------------------------------

ENTRY = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_longlong), ctypes.c_int)
_recorders: list[Recorder] = []


class Recorder:
    """An entry for the pool that records which thread ran each id; ids run by a worker sleep `worker_stall` seconds
    (a worker descheduled while it holds an id), ids run by the caller `caller_s`."""

    def __init__(self, worker_stall: float = 0.0, caller_s: float = 0.0) -> None:
        self.worker_stall, self.caller_s = worker_stall, caller_s
        self.runs: list[tuple[int, int]] = []  # (id, thread ident)
        self.caller = threading.get_ident()
        self.entry = ENTRY(self._run)
        self.address = ctypes.cast(self.entry, ctypes.c_void_p).value
        _recorders.append(self)  # kept alive: a new entry at a freed one's address would inherit its timing

    def _run(self, args: Any, t: int) -> None:
        me = threading.get_ident()
        self.runs.append((t, me))
        time.sleep(self.caller_s if me == self.caller else self.worker_stall)

    def launch(self, pool: CThreadPool, ids: int, threads: int) -> list[tuple[int, int]]:
        self.runs = []
        pool.run(self.address, [], ids, threads)
        return self.runs


def c_pool() -> CThreadPool:
    pool = c_thread_pool()
    assert pool is not None, "the C pool builds wherever the CPU device works"
    return pool


@pytest.mark.parametrize("ids,threads", [(37, 2), (37, 4), (5, 8), (12, 1)])
def test_every_id_runs_exactly_once(ids: int, threads: int) -> None:
    """More ids than threads, more threads than ids, and one thread (CPU_COUNT=1): each id once per launch."""
    rec, pool = Recorder(), c_pool()
    for _ in range(20):
        assert sorted(t for t, _ in rec.launch(pool, ids, threads)) == list(range(ids))


def test_one_thread_runs_every_id_on_the_caller() -> None:
    rec, pool = Recorder(), c_pool()
    before = pool.stats()
    assert {who for _, who in rec.launch(pool, 12, 1)} == {rec.caller}
    assert pool.stats()["threaded"] == before["threaded"], "a one-thread launch is not offered to workers"


def test_a_kernel_whose_workers_stall_runs_on_the_caller() -> None:
    """Threaded launches of this kernel wait 50 ms for a worker sleeping in its id, solo ones take 8 ms: after its
    first two launches (one each way) it runs on the caller alone, except every 16th launch, which re-times the
    threaded way; every id still runs exactly once."""
    rec, pool = Recorder(worker_stall=0.05, caller_s=0.001), c_pool()
    first = rec.launch(pool, 8, 2)
    assert sorted(t for t, _ in first) == list(range(8))
    if {who for _, who in first} == {rec.caller}:
        pytest.skip("no worker was scheduled within the caller's 8 ms of ids: nothing stalled")
    rec.launch(pool, 8, 2)  # the second launch times the caller alone
    est = pool.stats(rec.address)
    assert 0 < est["solo_ns"] < est["threaded_ns"], est
    before = pool.stats()
    for _ in range(15):
        runs = rec.launch(pool, 8, 2)
        assert sorted(t for t, _ in runs) == list(range(8)) and {who for _, who in runs} == {rec.caller}
    after = pool.stats()
    assert after["solo"] - before["solo"] == 15 and after["threaded"] == before["threaded"], (before, after)
    rec.launch(pool, 8, 2)  # the 16th: offered to the workers again
    assert pool.stats()["threaded"] == after["threaded"] + 1


def test_a_threaded_kernel_is_exact_both_ways(src: np.ndarray) -> None:
    """A real kernel's results are the same whichever way the pool runs its launches (its first launches try both;
    later ones follow the timing)."""
    runner = CompiledRunner(get_program(add_n_kernel(), renderer(2), [split(0, 6, AxisType.THREAD, True)]), "CPU")
    pool = c_pool()
    before = pool.stats()
    for n in range(40):
        np.testing.assert_array_equal(launch(runner, src, n), src.reshape(ROWS, COLS) * 2 + n)
    after = pool.stats()
    assert after["threaded"] > before["threaded"] and after["solo"] > before["solo"], (before, after)
