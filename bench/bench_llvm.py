"""CPU:LLVM against the C path (CPU:CLANG) on the optimiser benchmark's cases, measured in the same run.

For each case: the kernels it runs are captured once, then for both targets
- compile: ms per kernel to render and compile each captured kernel from scratch (no disk cache), the LLVM side with
  llvmlite in-process, the C side with the host compiler in a subprocess;
- run: the best wall time of the realized operation (interleaved blocks, as bench_optimizer), as GFLOP/s or GB/s,
  and the ratio LLVM / C.
Prints numbers; asserts nothing. `--smoke` runs tiny sizes once (CI); `--json PATH` writes the rows.

Run: `hatch run bench:llvm` (or `python bench/bench_llvm.py --quick`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_optimizer import _setup, interleaved

TARGETS = ("CPU:CLANG", "CPU:LLVM")


def _capture(make: Callable[[], Any]) -> list[Any]:
    """The kernel ASTs one realize of `make()` compiles (CPU:CLANG, cache off so every kernel is lowered)."""
    import tg.codegen.program as program
    from tg.ir.helpers import Context

    seen: list[Any] = []
    original = program.get_program

    def record(ast: Any, renderer: Any, opts: Any = None) -> Any:
        seen.append(ast)
        return original(ast, renderer, opts)

    program.get_program = record  # type: ignore[assignment]
    try:
        with Context(DEV="CPU:CLANG", CACHELEVEL=0):
            from tg.runtime.engine import method_cache

            method_cache.clear()
            make().realize()
    finally:
        program.get_program = original  # type: ignore[assignment]
    return list(dict.fromkeys(seen))


def compile_ms(asts: list[Any], target: str) -> tuple[float, float]:
    """(ms per kernel to render + compile, ms per kernel to compile alone) for `target`, no disk cache."""
    from tg.codegen.program import get_program
    from tg.ir.helpers import Context
    from tg.runtime.device import Device

    with Context(DEV=target):
        dev = Device["CPU"]
        render = comp = 0.0
        for ast in asts:
            t0 = time.perf_counter()
            p = get_program(ast, dev.renderer)
            t1 = time.perf_counter()
            dev.compiler.compile(p.src)
            t2 = time.perf_counter()
            render, comp = render + t1 - t0, comp + t2 - t1
    n = max(len(asts), 1)
    return (render + comp) * 1e3 / n, comp * 1e3 / n


def run_case(name: str, make: Callable[[], Any], work: float, unit: str, repeat: int) -> dict[str, Any]:
    """Compile and run times of one case on both targets."""
    from tg.ir.helpers import Context

    asts = _capture(make)
    row: dict[str, Any] = {"case": name, "kernels": len(asts), "unit": unit}
    for target in TARGETS:
        row[f"{target} compile ms"], row[f"{target} compile-only ms"] = compile_ms(asts, target)

    def runner(target: str) -> Callable[[], Any]:
        def call() -> Any:
            with Context(DEV=target):
                return make().realize()

        return call

    for target in TARGETS:  # warm up: compile (disk cache) before timing
        runner(target)()
    best = interleaved({t: runner(t) for t in TARGETS}, repeat)
    for target in TARGETS:
        row[f"{target} {unit}"] = work / best[target] / 1e9
    row["run LLVM/C"] = row[f"CPU:LLVM {unit}"] / row[f"CPU:CLANG {unit}"]
    row["compile LLVM/C"] = row["CPU:LLVM compile ms"] / row["CPU:CLANG compile ms"]
    return row


def cases(smoke: bool, quick: bool) -> list[tuple[str, Callable[[], Any], float, str]]:
    from tg.tensor import Tensor

    out: list[tuple[str, Callable[[], Any], float, str]] = []
    for n in (32,) if smoke else (256, 512) if quick else (256, 512, 1000, 1024):
        a, b = Tensor.rand(n, n).realize(), Tensor.rand(n, n).realize()
        out.append((f"matmul {n}^3", lambda a=a, b=b: a @ b, 2 * n**3, "GFLOP/s"))
    for n in (1 << 10,) if smoke else (1 << 20, 1 << 24):
        x = Tensor.rand(n).realize()
        out.append((f"sum {n >> 20 or n}{'M' if n >= 1 << 20 else ''} fp32", lambda x=x: x.sum(), 4 * n, "GB/s"))
    n = 1 << 10 if smoke else 1 << 24
    a, b, c = (Tensor.rand(n).realize() for _ in range(3))
    out.append(("a*b+c 16M" if not smoke else "a*b+c", lambda: a * b + c, 16 * n, "GB/s"))
    x = Tensor.rand(n).realize()
    out.append(("exp 16M" if not smoke else "exp", lambda: x.exp(), 8 * n, "GB/s"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller matmuls")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one round (CI)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    _setup(keep_blas_env=True)
    rows = [run_case(*c, repeat=1 if args.smoke else args.repeat) for c in cases(args.smoke, args.quick)]
    cols = ["case", "kernels", "CPU:CLANG compile ms", "CPU:LLVM compile ms", "compile LLVM/C"]
    print(" | ".join([*cols, "CPU:CLANG run", "CPU:LLVM run", "run LLVM/C"]))
    for r in rows:
        u = r["unit"]
        cells = [str(r["case"]), str(r["kernels"]), *(f"{r[c]:.1f}" for c in cols[2:4]), f"{r['compile LLVM/C']:.2f}x"]
        cells += [f"{r[f'CPU:CLANG {u}']:.1f} {u}", f"{r[f'CPU:LLVM {u}']:.1f} {u}", f"{r['run LLVM/C']:.2f}x"]
        print(" | ".join(cells))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
