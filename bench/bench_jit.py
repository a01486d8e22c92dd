"""TinyJit replay cost per call and per kernel, tg vs tinygrad 0.14 in the same run.

The function is a chain of n tiny kernels (`x = (x*1.0001 + 0.5).contiguous()`, 16 floats), n = 1, 50, 200, plus a
50-kernel function with two inputs and one weight. Columns: tg JIT=1 (batch executor), tg JIT=2 (kernel-by-kernel
ExecItem loop), tg eager (scheduler every call), tinygrad 0.14 TinyJit replay (a subprocess with DEV=CPU; skipped
with a note when no Python with tinygrad is found: set TINYGRAD_PYTHON or use /work/scratch/bin/python).
Replays: `--replays` per repetition (default 300), best of 5, after 3 warm-up calls.

Run: `hatch run bench:jit [--replays N]`. Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

SIZES = (1, 50, 200)

# the same measurement for tinygrad, run in a subprocess (it must not share the process with tg)
TINYGRAD_SCRIPT = r"""
import json, sys, time
from tinygrad import Tensor, TinyJit, Device
sizes, replays = json.loads(sys.argv[1]), int(sys.argv[2])
def best(fn):
    for _ in range(3): fn()
    b = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(replays): fn()
        Device[Device.DEFAULT].synchronize()
        b = min(b, (time.perf_counter() - t) / replays)
    return b * 1e6
out = {}
for n in sizes:
    def chain(x, n=n):
        for _ in range(n): x = (x * 1.0001 + 0.5).contiguous()
        return x.realize()
    f = TinyJit(chain)
    x = Tensor.ones(16).contiguous().realize()
    out[str(n)] = best(lambda: f(x))
w = Tensor.ones(16).contiguous().realize()
def two(x, y):
    for _ in range(50): x = (x * y + w).contiguous()
    return x.realize()
g = TinyJit(two)
a, b = Tensor.ones(16).contiguous().realize(), Tensor.ones(16).contiguous().realize()
out["two"] = best(lambda: g(a, b))
print(json.dumps(out))
"""


def best_us(fn: Callable[[], Any], replays: int) -> float:
    """Best-of-5 mean microseconds of one call, after 3 warm-up calls."""
    from tg.runtime.device import Device

    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(replays):
            fn()
        Device["CPU"].synchronize()
        best = min(best, (time.perf_counter() - start) / replays)
    return best * 1e6


def tinygrad_python() -> str | None:
    """A Python interpreter that can import tinygrad, or None."""
    candidates = [
        os.environ.get("TINYGRAD_PYTHON"),
        sys.executable,
        "/work/scratch/bin/python",
        shutil.which("python3"),
    ]
    for py in candidates:
        if py and os.path.exists(py):
            probe = subprocess.run([py, "-c", "import tinygrad"], capture_output=True, check=False)
            if probe.returncode == 0:
                return py
    return None


def run_tinygrad(replays: int) -> dict[str, float] | None:
    py = tinygrad_python()
    if py is None:
        print("tinygrad: not installed (set TINYGRAD_PYTHON to a Python with tinygrad 0.14); column skipped")
        return None
    env = {**os.environ, "DEV": "CPU", "PYTHONPATH": ""}
    res = subprocess.run(
        [py, "-c", TINYGRAD_SCRIPT, json.dumps(list(SIZES)), str(replays)],
        capture_output=True, text=True, env=env, check=False, timeout=600,
    )  # fmt: skip
    if res.returncode != 0:
        print(f"tinygrad: run failed ({res.stderr.strip().splitlines()[-1:]}); column skipped")
        return None
    return {k: float(v) for k, v in json.loads(res.stdout.strip().splitlines()[-1]).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=300)
    args = parser.parse_args()
    from tg.ir.helpers import Context
    from tg.tensor import Tensor, TinyJit

    def make_chain(n: int) -> Callable[[Tensor], Tensor]:
        def chain(x: Tensor) -> Tensor:
            for _ in range(n):
                x = (x * 1.0001 + 0.5).contiguous()
            return x.realize()

        return chain

    w = Tensor.ones(16).contiguous().realize()

    def two(x: Tensor, y: Tensor) -> Tensor:
        for _ in range(50):
            x = (x * y + w).contiguous()
        return x.realize()

    rows: list[tuple[str, int, Callable[..., Tensor], tuple[Tensor, ...]]] = [
        (f"chain {n}", n, make_chain(n), (Tensor.ones(16).contiguous().realize(),)) for n in SIZES
    ]
    rows.append(("2 inputs + weight", 50, two, tuple(Tensor.ones(16).contiguous().realize() for _ in range(2))))
    tiny = run_tinygrad(args.replays)
    header = f"{'function':>18} {'kernels':>7} {'tg JIT=1 us/call':>17} {'us/kernel':>9} {'tg JIT=2 us/call':>17}"
    header += f" {'tg eager us/call':>17} {'tinygrad us/call':>17} {'us/kernel':>9} {'tg/tinygrad':>11}"
    print(header)
    for (name, n, fn, inputs), key in zip(rows, [*map(str, SIZES), "two"], strict=True):
        results = {}
        for mode in (1, 2):
            with Context(JIT=mode):
                jit = TinyJit(fn)
                results[mode] = best_us(lambda jit=jit, inputs=inputs: jit(*inputs), args.replays)
        eager = best_us(lambda fn=fn, inputs=inputs: fn(*inputs), max(3, args.replays // 30))
        line = f"{name:>18} {n:7d} {results[1]:17.1f} {results[1] / n:9.2f} {results[2]:17.1f} {eager:17.1f}"
        if tiny is not None:
            line += f" {tiny[key]:17.1f} {tiny[key] / n:9.2f} {results[1] / tiny[key]:11.3f}"
        print(line)


def bench_allreduce() -> None:
    """Copies and time of a sum over the sharded axis (64n x 4096 floats) on 2, 3, 4 CPU devices, naive vs ring."""
    from tg.ir.helpers import Context
    from tg.runtime import engine
    from tg.runtime.engine import BufferCopy
    from tg.tensor import Tensor

    class Recorder:
        def __init__(self) -> None:
            self.items: list[Any] = []

        def add(self, ei: Any) -> None:
            self.items.append(ei)

    print(f"\n{'devices':>7} {'allreduce':>9} {'copies':>6} {'kernels':>7} {'ms':>8}")
    for n in (2, 3, 4):
        devs = ("CPU", *[f"CPU:{i}" for i in range(1, n)])
        t = Tensor.ones(64 * n, 4096).contiguous().shard(devs, axis=0).realize()
        for mode in ("naive", "ring"):
            with Context(ALLREDUCE=mode):
                t.sum(0).realize()  # compile
                rec = Recorder()
                engine.capturing.append(rec)
                start = time.perf_counter()
                t.sum(0).realize()
                ms = (time.perf_counter() - start) * 1e3
                engine.capturing.remove(rec)
            copies = sum(isinstance(ei.runner, BufferCopy) for ei in rec.items)
            print(f"{n:7d} {mode:>9} {copies:6d} {len(rec.items) - copies:7d} {ms:8.2f}")


def bench_function() -> None:
    """@function on a 200-op body: the first call traces, later calls substitute (no Python of the body)."""
    from tg.tensor import Tensor, function

    def body(x: Tensor) -> Tensor:
        for _ in range(200):
            x = x * 1.0001 + 0.5
        return x

    fn = function(body)
    x = Tensor.ones(16).contiguous().realize()
    start = time.perf_counter()
    fn(x)
    trace_us = (time.perf_counter() - start) * 1e6
    hit_us = best_us(lambda: fn(x), 50)
    plain_us = best_us(lambda: body(x), 50)
    print(
        f"\n@function, 200-op body (graph only, nothing realized): trace {trace_us:.0f} us, reuse {hit_us:.0f} us/call,"
    )
    print(f"  the plain function builds the same graph in {plain_us:.0f} us/call")


if __name__ == "__main__":
    main()
    bench_allreduce()
    bench_function()
