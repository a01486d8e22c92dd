"""Host-side latency: a tiny eager op, the first run of new shapes, and large creation ops; tg vs tinygrad 0.14
(a subprocess with DEV=CPU, skipped with a note when no Python with tinygrad is found: set TINYGRAD_PYTHON or use
/work/scratch/bin/python) and numpy, in the same run.

Rows:
- eager op: `x = (x + 1).realize()` on 4 floats, best-of-5 mean microseconds (wall and process CPU time).
- new shapes: `x.softmax(-1).realize()` for `--shapes` batch sizes never seen before (64 columns), ms per shape
  (scheduling, code generation and compilation of every kernel of each new shape; CACHELEVEL=0 for both, so the
  on-disk compile cache does not hide it).
- arange / rand at N, 4N, 16N elements (N = 1M; `--smoke`: N = 16K), seconds of create + realize (compiled once
  before timing), to show the growth with size.

Run: `hatch run bench:latency [--smoke] [--shapes K] [--json PATH]`. Prints numbers and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from bench_jit import tinygrad_python

# the same measurements for tinygrad (run in its own process)
TINYGRAD_SCRIPT = r"""
import json, sys, time
from tinygrad import Tensor
cfg = json.loads(sys.argv[1])
exec(cfg["measure"])
print(json.dumps(measure(Tensor, cfg)))
"""

# shared by tg and tinygrad: `measure(Tensor, cfg)` -> {row: value}
MEASURE = r"""
def measure(Tensor, cfg):
    import time
    out = {}
    x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    for _ in range(50):
        x = (x + 1).realize()
    wall, cpu = float("inf"), float("inf")
    for _ in range(5):
        t, c = time.perf_counter(), time.process_time()
        for _ in range(cfg["ops"]):
            x = (x + 1).realize()
        wall = min(wall, (time.perf_counter() - t) / cfg["ops"])
        cpu = min(cpu, (time.process_time() - c) / cfg["ops"])
    out["eager op wall us"], out["eager op cpu us"] = wall * 1e6, cpu * 1e6
    start = time.perf_counter()
    for b in cfg["batches"]:
        Tensor.ones(b, 64).contiguous().softmax(-1).realize()
    out["new shape softmax ms"] = (time.perf_counter() - start) / len(cfg["batches"]) * 1e3
    for n in cfg["sizes"]:
        for name, fn in (("arange", lambda: Tensor.arange(n)), ("rand", lambda: Tensor.rand(n))):
            fn().realize()  # compile
            t = time.perf_counter()
            fn().realize()
            out[f"{name} {n} s"] = time.perf_counter() - t
    return out
"""


def run_tinygrad(cfg: dict[str, Any]) -> dict[str, float] | None:
    py = tinygrad_python()
    if py is None:
        print("tinygrad: not installed (set TINYGRAD_PYTHON to a Python with tinygrad 0.14); column skipped")
        return None
    env = {**os.environ, "DEV": "CPU", "PYTHONPATH": ""}
    res = subprocess.run(
        [py, "-c", TINYGRAD_SCRIPT, json.dumps({**cfg, "measure": MEASURE})],
        capture_output=True, text=True, env=env, check=False, timeout=1200,
    )  # fmt: skip
    if res.returncode != 0:
        print(f"tinygrad: run failed ({res.stderr.strip().splitlines()[-1:]}); column skipped")
        return None
    return {k: float(v) for k, v in json.loads(res.stdout.strip().splitlines()[-1]).items()}


def numpy_rows(sizes: list[int]) -> dict[str, float]:
    import numpy as np

    out: dict[str, float] = {}
    rng = np.random.default_rng(0)
    fns: tuple[tuple[str, Callable[[int], Any]], ...] = (
        ("arange", lambda n: np.arange(n, dtype=np.int32)),
        ("rand", lambda n: rng.random(n, dtype=np.float32)),
    )
    for n in sizes:
        for name, fn in fns:
            t = time.perf_counter()
            fn(n)
            out[f"{name} {n} s"] = time.perf_counter() - t
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI)")
    parser.add_argument("--shapes", type=int, default=None, help="new softmax batch sizes (default 20, smoke 3)")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    base = 1 << 14 if args.smoke else 1 << 20
    shapes = args.shapes if args.shapes is not None else (3 if args.smoke else 20)
    cfg: dict[str, Any] = {
        "ops": 50 if args.smoke else 400,
        # odd batch sizes nobody else in the process uses, so every one is a new shape
        "batches": [1000 + 7 * i for i in range(shapes)],
        "sizes": [base, 4 * base, 16 * base],
    }
    # no on-disk compile cache (tg and tinygrad): every new shape really compiles, on every run of the benchmark
    os.environ["CACHELEVEL"] = "0"
    ns: dict[str, Any] = {}
    exec(MEASURE, ns)
    from tg.tensor import Tensor

    tg = ns["measure"](Tensor, cfg)
    tiny = run_tinygrad(cfg)
    npy = numpy_rows(cfg["sizes"])
    print(f"{'case':>28} {'tg':>12} {'tinygrad':>12} {'numpy':>12} {'tg/tinygrad':>12}")
    for key, value in tg.items():
        t = tiny.get(key) if tiny else None
        n = npy.get(key)
        cells = [f"{value:12.4g}", f"{t:12.4g}" if t is not None else f"{'-':>12}"]
        cells += [f"{n:12.4g}" if n is not None else f"{'-':>12}", f"{value / t:12.3f}" if t else f"{'-':>12}"]
        print(f"{key:>28} " + " ".join(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tg": tg, "tinygrad": tiny, "numpy": npy, "config": cfg}, f, indent=1)


if __name__ == "__main__":
    main()
