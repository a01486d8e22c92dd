"""The CPU thread pool (`cpu_pool.c`): threaded kernels run every thread id once, through their entry wrapper,
with buffers and variables passed intact; many back-to-back launches, more threads than cores, the Python-pool
fallback and a forked child all give the single-threaded result."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

import numpy as np
import pytest

from tg.codegen.opt import split
from tg.codegen.program import get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.ir.dtype import dtypes
from tg.ir.ops import AxisType
from tg.ir.uop import UOp
from tg.runtime.backends.cpu_program import c_thread_pool
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
