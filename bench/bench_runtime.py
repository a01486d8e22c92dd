"""tg.runtime overheads: per-kernel launch cost of a trivial compiled C kernel, and compile time cold vs warm cache.

Run: `hatch run bench:python bench/bench_runtime.py [--iters N] [--kernels K]`. Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tg.ir.dtype import dtypes
from tg.ir.helpers import Context
from tg.ir.ops import Ops
from tg.ir.uop import UOp
from tg.runtime.c_compiler import CCompiler
from tg.runtime.device import Buffer, Device
from tg.runtime.engine import CompiledRunner, ExecItem, method_cache, run_schedule

TRIVIAL = "void trivial(float* restrict out, const float* restrict a, int n) { if (n > 0) out[0] = a[0]; }"


@dataclass(frozen=True)
class _Spec:
    """Just the ProgramSpec fields the runtime reads."""

    name: str
    src: str
    device: str = "CPU"
    ast: Any = None
    globals: tuple[int, ...] = (0, 1)
    vars: tuple[UOp, ...] = (UOp.variable("n", 0, 1 << 20),)
    ops: int = 1
    mem: int = 8
    global_size: Any = None
    local_size: Any = None
    applied_opts: tuple = ()


@dataclass(frozen=True)
class _Item:
    ast: UOp
    bufs: tuple[UOp, ...]


def per_call_us(fn: Callable[[], Any], iters: int) -> float:
    """Best-of-5 mean time of one call in microseconds."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - start) / iters)
    return best * 1e6


def bench_launch(iters: int) -> None:
    print(f"launch overhead of a trivial C kernel on CPU (best of 5 x {iters} calls)")
    runner = CompiledRunner(_Spec("trivial", TRIVIAL))  # type: ignore[arg-type]
    out, a = Buffer("CPU", 1, dtypes.float32).ensure_allocated(), Buffer("CPU", 1, dtypes.float32).ensure_allocated()
    raw: Any = runner._prg
    out_addr, a_addr = out._buf.addr, a._buf.addr
    fxn = raw.fxn
    raw(out._buf, a._buf, vals=(1,))  # set argtypes
    rows = [
        ("ctypes call (floor)", lambda: fxn(out_addr, a_addr, 1)),
        ("CPUProgram.__call__", lambda: raw(out._buf, a._buf, vals=(1,))),
        ("CompiledRunner", lambda: runner([out, a], {"n": 1})),
    ]
    ei = ExecItem(runner, [out, a])
    rows.append(("ExecItem.run (+stats)", lambda: ei.run({"n": 1})))
    ast = UOp(Ops.SINK, arg="bench_trivial")
    method_cache[("CPU", ast)] = runner
    out_u, a_u = UOp.new_buffer("CPU", 1, dtypes.float32), UOp.new_buffer("CPU", 1, dtypes.float32)
    items = [_Item(ast, (out_u, a_u))]
    rows.append(("run_schedule, 1 item", lambda: run_schedule(items, {"n": 1})))
    null_prg = Device["NULL"].runtime("trivial", b"")
    rows.append(("NULL program call", lambda: null_prg(out._buf, a._buf, vals=(1,))))
    for name, fn in rows:
        print(f"  {name:24s} {per_call_us(fn, iters):8.2f} us/kernel")


def bench_compile(n_kernels: int) -> None:
    print(f"compile time of small C kernels ({n_kernels} distinct sources)")
    compiler = CCompiler()
    print(f"  compiler: {compiler.cc} {' '.join(compiler.flags)}")
    sources = [TRIVIAL.replace("out[0] = a[0]", f"out[0] = a[0] * {i + 1}.0f") for i in range(n_kernels)]
    with tempfile.TemporaryDirectory(prefix="tg-bench-cache-") as cache:
        old = os.environ.get("TG_CACHE_DIR")
        os.environ["TG_CACHE_DIR"] = cache
        try:
            start = time.perf_counter()
            for src in sources:
                compiler.compile_cached(src)
            cold = (time.perf_counter() - start) / n_kernels
            fresh = CCompiler()  # as a new process would: nothing in memory, everything on disk
            start = time.perf_counter()
            for src in sources:
                fresh.compile_cached(src)
            warm = (time.perf_counter() - start) / n_kernels
            with Context(CACHELEVEL=0):
                start = time.perf_counter()
                compiler.compile_cached(sources[0])
                uncached = time.perf_counter() - start
        finally:
            if old is None:
                del os.environ["TG_CACHE_DIR"]
            else:
                os.environ["TG_CACHE_DIR"] = old
    print(f"  cold (compile + store)   {cold * 1e3:8.2f} ms/kernel")
    print(f"  warm (disk cache hit)    {warm * 1e3:8.3f} ms/kernel   ({cold / warm:6.0f}x faster)")
    print(f"  CACHELEVEL=0             {uncached * 1e3:8.2f} ms/kernel")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iters", type=int, default=20000, help="kernel launches per timing run")
    parser.add_argument("--kernels", type=int, default=8, help="distinct kernels for the compile benchmark")
    args = parser.parse_args()
    bench_launch(args.iters)
    bench_compile(args.kernels)


if __name__ == "__main__":
    main()
