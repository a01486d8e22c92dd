"""The whole pipeline (Tensor -> schedule -> kernels -> results): tg next to tinygrad where it is importable.

Measures
- time to first result in a fresh process (import + build + schedule + compile + run), cold (empty kernel
  cache, a temporary TG_CACHE_DIR / tinygrad CACHEDB) and warm (the same cache again),
- per-kernel overhead of realizing a tiny elementwise op whose kernel is already compiled (build + schedule +
  launch), and of launching an already built schedule again (launch only),
- Python scheduling time for a 200-op elementwise graph (one fused kernel).

Run: `python bench/bench_pipeline.py` (tg only), or with tinygrad beside it:
`/tmp/ref/bin/python bench/bench_pipeline.py` (the script puts this checkout's packages on sys.path when tg
is not installed). Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _ensure_tg_importable() -> None:
    try:
        import tg.tensor  # noqa: F401
    except ImportError:
        for src in sorted((ROOT / "packages").glob("*/src")):
            sys.path.insert(0, str(src))


def _has_tinygrad() -> bool:
    try:
        import tinygrad  # noqa: F401
    except ImportError:
        return False
    return True


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    """Median wall time of fn() in seconds over `repeat` runs."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---- time to first result (fresh processes) -------------------------------------------------------------------

FIRST_RESULT = {
    "tg": "from tg.tensor import Tensor\nprint(((Tensor.ones(16, 16, device='CPU') * 2 + 1).sum(1)).tolist()[0])",
    "tinygrad": "from tinygrad import Tensor\nprint(((Tensor.ones(16, 16, device='CPU') * 2 + 1).sum(1)).tolist()[0])",
}


def first_result(which: str, cache_env: dict[str, str]) -> float:
    """Seconds for a fresh interpreter to import, compute and print one small fused result."""
    env = {**os.environ, **cache_env, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("DEV", None)
    code = f"import time\n_t = time.perf_counter()\n{FIRST_RESULT[which]}\nprint(time.perf_counter() - _t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=600)
    return float(out.stdout.split()[-1])


def bench_first_result(frameworks: list[str]) -> None:
    print("time to first result (fresh process: import + schedule + compile + run)")
    for which in frameworks:
        with tempfile.TemporaryDirectory() as tmp:
            env = {"TG_CACHE_DIR": tmp} if which == "tg" else {"CACHEDB": os.path.join(tmp, "cache.db")}
            cold = first_result(which, env)
            warm = statistics.median(first_result(which, env) for _ in range(3))
        print(f"  {which:<9} cold {cold * 1e3:8.1f} ms   warm {warm * 1e3:8.1f} ms")


# ---- per-kernel overheads ---------------------------------------------------------------------------------------


def _overhead_fns(which: str) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
    """(build+schedule+launch, launch only) for a tiny cached elementwise kernel."""
    if which == "tg":
        from tg.codegen.schedule import create_schedule
        from tg.ir import Ops, UOp
        from tg.runtime.engine import run_linear
        from tg.tensor import Tensor

        a = Tensor.ones(16, device="CPU").contiguous().realize()
        linear = create_schedule(UOp(Ops.SINK, src=((a + 1).uop,))).linear
        return (lambda: (a + 1).realize()), (lambda: run_linear(linear))
    from tinygrad import Tensor as TinyTensor

    ta = TinyTensor.ones(16, device="CPU").contiguous().realize()
    return (lambda: (ta + 1).realize()), None


def bench_overheads(frameworks: list[str], iters: int) -> None:
    print(f"per-kernel overhead, tiny elementwise kernel, cached (median of {iters})")
    for which in frameworks:
        realize, launch = _overhead_fns(which)
        realize()
        line = f"  {which:<9} build+schedule+launch {best_of(realize, iters) * 1e6:8.1f} us"
        if launch is not None:
            launch()
            line += f"   launch only {best_of(launch, iters) * 1e6:8.1f} us"
        print(line)


def _chain(x: Any, n_ops: int) -> Any:
    for i in range(n_ops):
        x = x * 1.0001 if i % 2 else x + 0.5
    return x


def _schedule_fns(which: str, n_ops: int) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
    """(build+schedule, schedule only) for an n_ops elementwise chain."""
    if which == "tg":
        from tg.codegen.schedule import create_schedule
        from tg.ir import Ops, UOp
        from tg.tensor import Tensor

        a = Tensor.ones(64, device="CPU").contiguous().realize()
        sink = UOp(Ops.SINK, src=(_chain(a, n_ops).uop,))
        return (lambda: create_schedule(UOp(Ops.SINK, src=(_chain(a, n_ops).uop,)))), (lambda: create_schedule(sink))
    from tinygrad import Tensor as TinyTensor

    ta = TinyTensor.ones(64, device="CPU").contiguous().realize()
    return (lambda: _chain(ta, n_ops).schedule_linear()), None


def bench_schedule(frameworks: list[str], iters: int, n_ops: int = 200) -> None:
    print(f"Python scheduling time, {n_ops}-op elementwise graph (one fused kernel), median of {iters}")
    for which in frameworks:
        build_and_schedule, sched_only = _schedule_fns(which, n_ops)
        build_and_schedule()
        line = f"  {which:<9} build+schedule {best_of(build_and_schedule, iters) * 1e3:8.2f} ms"
        if sched_only is not None:
            line += f"   schedule only {best_of(sched_only, iters) * 1e3:8.2f} ms"
        print(line)


def main() -> None:
    """Run every benchmark for tg and, where importable, tinygrad."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--skip-first-result", action="store_true", help="skip the fresh-process measurements")
    args = parser.parse_args()
    _ensure_tg_importable()
    frameworks = ["tg", *(["tinygrad"] if _has_tinygrad() else [])]
    print(f"python {sys.version.split()[0]}, frameworks: {', '.join(frameworks)}")
    # the numbers scale with how busy the machine is: print the load and a pure-Python yardstick beside them
    start = time.perf_counter()
    sum(range(10**7))
    yardstick = (time.perf_counter() - start) * 1e3
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus; sum(range(10**7)) takes {yardstick:.0f} ms")
    if not args.skip_first_result:
        bench_first_result(frameworks)
    bench_overheads(frameworks, args.iters)
    bench_schedule(frameworks, max(5, args.iters // 5))


if __name__ == "__main__":
    main()
