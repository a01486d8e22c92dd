"""Kernel speed: tg's optimised CPU kernels next to numpy, torch and tinygrad, measured in the same run.

Cases (GFLOP/s or GB/s, higher is better; the ratio columns divide tg by the others, measured in
alternating blocks, see `interleaved`):
- matmul N^3 fp32 for N in 256, 512, 1000, 1024 (and 2048 unless --quick): the targets are >= 0.8x numpy at 256
  and 1024 by default heuristics, >= 0.9x with BEAM=2 (search <= 10 s) (issue 26);
- sum of 1M / 16M / 64M fp32 (GB/s of input read), and the same-size copy bandwidth (numpy copy, read+write):
  the target is tg sum >= 0.9x copy bandwidth;
- elementwise a*b+c on 16M fp32 (GB/s moved);
- eager op cost: `x = (x + 1).realize()` on 16 floats (us per op; target < 50 us);
- compile latency: softmax over a new batch size each time (ms per new shape);
- BEAM (with --beam N): wall time of the search for a 1024 matmul (empty BEAM cache), the GFLOP/s of its pick and
  of the heuristic kernel in the same run, and the search's own final timings of both.

numpy uses OpenBLAS with its own kernel choice: the script drops OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE from its own
environment before importing numpy (benchmark process only; tests and CI never change them) unless --keep-blas-env.
torch and tinygrad (`DEV=CPU`) join when importable, e.g. run with `/work/scratch/bin/python` and
PYTHONPATH set to this checkout's packages. `--smoke` runs every case once at tiny sizes (CI); `--json PATH`
writes the results. Prints numbers; asserts nothing.

Run: `hatch run bench:optimizer` (or `python bench/bench_optimizer.py --quick`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _setup(keep_blas_env: bool) -> None:
    if not keep_blas_env:
        for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            os.environ.pop(k, None)
    os.environ.setdefault("DEV", "CPU")  # tinygrad would pick OpenCL (PoCL) otherwise
    try:
        import tg.tensor  # noqa: F401
    except ImportError:
        for src in sorted((ROOT / "packages").glob("*/src")):
            sys.path.insert(0, str(src))


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int, block_s: float = 0.1,
                idle_s: float = 0.3) -> dict[str, float]:  # fmt: skip
    """Best wall time (s) of one call of each function.

    The functions take turns in blocks, `repeat` rounds (so load drifts hit all alike); a block calls one function
    back to back for at least `block_s` seconds and twice, and only its calls count. Calls are not interleaved one by
    one, and each block starts after `idle_s` seconds of sleep: a library's worker threads keep spinning for a while
    after its call returns (OpenBLAS's threads for ~0.1-0.3 s) and would steal a core from whichever library runs
    next. Measured on the 2-core box: without the pause, the kernel timed right after numpy's block ran at 155 instead
    of 195 GFLOP/s (1024^3 matmul, same kernel).
    """
    for f in fns.values():
        f()  # warm-up: compile, allocate
    best = {k: float("inf") for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():
            time.sleep(idle_s)
            block_start, calls = time.perf_counter(), 0
            while calls < 2 or time.perf_counter() - block_start < block_s:
                st = time.perf_counter()
                f()
                best[k] = min(best[k], time.perf_counter() - st)
                calls += 1
    return best


def _optional(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        return None


class Row(dict):  # a result row: case, unit, and one value per framework
    pass


def bench_matmul(n: int, repeat: int, libs: dict[str, Any]) -> Row:
    import numpy as np

    from tg.tensor import Tensor

    rng = np.random.default_rng(n)
    an, bn = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    fns: dict[str, Callable[[], Any]] = {"tg": lambda: (a @ b).realize(), "numpy": lambda: an @ bn}
    if (torch := libs.get("torch")) is not None:
        at, bt = torch.from_numpy(an), torch.from_numpy(bn)
        fns["torch"] = lambda: at @ bt
    if (tiny := libs.get("tinygrad")) is not None:
        ta, tb = tiny.Tensor(an).realize(), tiny.Tensor(bn).realize()
        fns["tinygrad"] = lambda: (ta @ tb).realize()
    times = interleaved(fns, repeat)
    return Row(case=f"matmul {n}^3 fp32", unit="GFLOP/s", **{k: 2 * n**3 / t / 1e9 for k, t in times.items()})


def bench_sum(n: int, repeat: int, libs: dict[str, Any]) -> Row:
    import numpy as np

    from tg.tensor import Tensor

    xn = np.random.default_rng(n).random(n, dtype=np.float32)
    x = Tensor(xn).realize()
    fns: dict[str, Callable[[], Any]] = {"tg": lambda: x.sum().realize(), "numpy": lambda: xn.sum(),
                                         "copy": lambda: xn.copy()}  # fmt: skip
    if (torch := libs.get("torch")) is not None:
        xt = torch.from_numpy(xn)
        fns["torch"] = lambda: xt.sum()
    if (tiny := libs.get("tinygrad")) is not None:
        tx = tiny.Tensor(xn).realize()
        fns["tinygrad"] = lambda: tx.sum().realize()
    times = interleaved(fns, repeat)
    row = Row(case=f"sum {n >> 20}M fp32" if n >= 1 << 20 else f"sum {n} fp32", unit="GB/s")
    for k, t in times.items():
        row[k] = (2 if k == "copy" else 1) * 4 * n / t / 1e9  # copy: read + write
    return row


def bench_elementwise(n: int, repeat: int, libs: dict[str, Any]) -> Row:
    import numpy as np

    from tg.tensor import Tensor

    rng = np.random.default_rng(1)
    an, bn, cn = (rng.random(n, dtype=np.float32) for _ in range(3))
    a, b, c = (Tensor(x).realize() for x in (an, bn, cn))
    fns: dict[str, Callable[[], Any]] = {"tg": lambda: (a * b + c).realize(), "numpy": lambda: an * bn + cn}
    if (torch := libs.get("torch")) is not None:
        at, bt, ct = (torch.from_numpy(x) for x in (an, bn, cn))
        fns["torch"] = lambda: at * bt + ct
    times = interleaved(fns, repeat)
    return Row(case=f"a*b+c {n >> 20}M fp32", unit="GB/s", **{k: 16 * n / t / 1e9 for k, t in times.items()})


def bench_eager_op(repeat: int, libs: dict[str, Any]) -> Row:
    from tg.tensor import Tensor

    state = {"x": Tensor([0.0] * 16).realize()}

    def step() -> None:
        for _ in range(100):
            state["x"] = (state["x"] + 1).realize()

    fns: dict[str, Callable[[], Any]] = {"tg": step}
    if (tiny := libs.get("tinygrad")) is not None:
        tstate = {"x": tiny.Tensor([0.0] * 16).realize()}

        def tstep() -> None:
            for _ in range(100):
                tstate["x"] = (tstate["x"] + 1).realize()

        fns["tinygrad"] = tstep
    times = interleaved(fns, repeat)
    return Row(case="eager (x+1).realize() 16 floats", unit="us/op", **{k: t / 100 * 1e6 for k, t in times.items()})


def bench_compile_latency(shapes: int) -> Row:
    import numpy as np

    from tg.tensor import Tensor

    rng = np.random.default_rng(2)
    st = time.perf_counter()
    for b in range(3, 3 + shapes):
        Tensor(rng.random((b * 7 + 1, 64), dtype=np.float32)).softmax(-1).realize()
    return Row(case="softmax on a new batch size", unit="ms/shape", tg=(time.perf_counter() - st) / shapes * 1e3)


def bench_beam(n: int, width: int, repeat: int) -> Row:
    """BEAM search of an n^3 matmul with an empty BEAM cache (its wall time), then the kernel it picked timed beside
    the heuristic kernel and numpy in the same run. The `BEAM` context only applies to kernels compiled inside it:
    the searched kernel stays in the method cache, so later calls run the pick."""
    import numpy as np

    from tg.ir.helpers import Context
    from tg.runtime import search
    from tg.runtime.engine import method_cache
    from tg.tensor import Tensor

    rng = np.random.default_rng(3)
    an, bn = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    method_cache.clear()
    (a @ b).realize()  # the heuristic kernel
    heuristic = dict(method_cache)
    method_cache.clear()  # search this kernel again
    os.environ["IGNORE_BEAM_CACHE"] = "1"
    try:
        with Context(BEAM=width):
            st = time.perf_counter()
            (a @ b).realize()
            search_s = time.perf_counter() - st
    finally:
        os.environ.pop("IGNORE_BEAM_CACHE")
    beam = dict(method_cache)

    def run_with(runners: dict[Any, Any]) -> Callable[[], Any]:
        def run() -> Any:
            method_cache.clear()
            method_cache.update(runners)
            return (a @ b).realize()

        return run

    times = interleaved({"tg": run_with(beam), "heuristic": run_with(heuristic), "numpy": lambda: an @ bn}, repeat)
    row = Row(case=f"BEAM={width} matmul {n}^3", unit="GFLOP/s", search_s=search_s,
              **{k: 2 * n**3 / t / 1e9 for k, t in times.items()})  # fmt: skip
    if search.last_search:
        row["search_heuristic_ms"] = search.last_search["heuristic_s"] * 1e3
        row["search_best_ms"] = search.last_search["best_s"] * 1e3
        row["opts"] = " ".join(str(o) for o in search.last_search["opts"])
    return row


def print_table(rows: list[Row]) -> None:
    cols = ["tg", "numpy", "copy", "torch", "tinygrad"]
    print(f"{'case':36s} {'unit':9s} " + " ".join(f"{c:>9s}" for c in cols) + "  ratios (tg / other)")
    for r in rows:
        vals = " ".join(f"{r[c]:9.1f}" if c in r else f"{'':9s}" for c in cols)
        lower_better = r["unit"].startswith(("us", "ms"))
        ratios = ", ".join(f"{(r[c] / r['tg'] if lower_better else r['tg'] / r[c]):.2f}x {c}"
                           for c in cols[1:] if c in r and r.get("tg"))  # fmt: skip
        extra = f"  search {r['search_s']:.1f} s" if "search_s" in r else ""
        if "heuristic" in r:
            extra += f", heuristic kernel {r['heuristic']:.1f} {r['unit']} ({r['tg'] / r['heuristic']:.2f}x)"
        if "search_best_ms" in r:
            extra += f", search's own timing {r['search_best_ms']:.3g} vs {r['search_heuristic_ms']:.3g} ms"
        print(f"{r['case']:36s} {r['unit']:9s} {vals}  {ratios}{extra}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="every case once at tiny sizes (CI)")
    ap.add_argument("--quick", action="store_true", help="skip the 2048 matmul and the 64M sum")
    ap.add_argument("--beam", type=int, default=0, help="also time a BEAM=N search of a 1024 matmul")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of timing blocks per case")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--keep-blas-env", action="store_true", help="keep OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE")
    args = ap.parse_args()
    _setup(args.keep_blas_env or args.smoke)
    libs = {name: _optional(name) for name in ("torch", "tinygrad")}
    rep = 1 if args.smoke else args.repeat
    rows: list[Row] = []
    matmuls = [64] if args.smoke else [256, 512, 1000, 1024] + ([] if args.quick else [2048])
    sums = [1 << 16] if args.smoke else [1 << 20, 1 << 24] + ([] if args.quick else [1 << 26])
    for n in matmuls:
        rows.append(bench_matmul(n, rep, libs))
    for n in sums:
        rows.append(bench_sum(n, rep, libs))
    rows.append(bench_elementwise(1 << 16 if args.smoke else 1 << 24, rep, libs))
    rows.append(bench_eager_op(rep, libs))
    rows.append(bench_compile_latency(2 if args.smoke else 20))
    if args.beam or args.smoke:
        if args.smoke:
            os.environ.setdefault("BEAM_TIME", "2")  # CI: a short search of a tiny kernel
        rows.append(bench_beam(64 if args.smoke else 1024, args.beam or 1, rep))
    import numpy as np

    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}, numpy {np.__version__}, "
          f"torch {'-' if libs['torch'] is None else libs['torch'].__version__}, "
          f"tinygrad {'-' if libs['tinygrad'] is None else getattr(libs['tinygrad'], '__version__', '?')}")  # fmt: skip
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"date": time.time(), "load": os.getloadavg()[0], "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
