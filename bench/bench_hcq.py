"""HCQ launch overhead and staging-ring bandwidth (shared/specs/hcq.md section 13), all measured in one run.

Chains of n tiny kernels (`x = (x*1.0001 + 0.5).contiguous()`, 16 floats), n = 1, 50, 200; `--calls` calls per
repetition (default 300; the interpreted submitter gets a tenth), best of 5 after 3 warm-up calls, the device
synchronized inside the clock. Columns, microseconds per call (and per kernel):

- CPU eager / JIT=2 / JIT=1: plain CPU, a realize per call; the JIT's ExecItem loop; the CPU batch executor;
- HCQ+CPU eager: a realize per call on the reference HCQ device (realize plans: linked one-call programs);
- HCQ+CPU graphed (runtime CPU / PYTHON): TinyJit replays through the HCQ graph executor, the submitter compiled C
  or interpreted Python;
- MOCKKFD+AMD graphed, emulation off (runtime CPU / PYTHON): the AMD device's submit cost on the mock KFD, whose GPU
  parses every PM4/SDMA packet but retires dispatches without running them (TG_MOCKGPU_EMU=0).

Then the split of one graphed 50-kernel replay's exec (host fence, input table, submitter, kick, wait), copyin/copyout
GB/s through the staging ring for 64 MiB, and the compile time of a new submitter. Targets (hcq.md H3): graphed
HCQ+CPU <= 3 us/kernel at 50 kernels and <= 1.5x the CPU batch executor; eager tiny op <= 1.5x plain CPU.

Run: `hatch run bench:hcq [--calls N] [--smoke]`. Prints numbers and ratios; asserts nothing. `--device DEV` prints
one line for that device only (eager and graphed tiny chains, staging-ring GB/s): what scripts/amd_check.sh reports
for `DEV=AMD`.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

SIZES = (1, 50, 200)


def best_us(fn: Callable[[], Any], calls: int, sync: Callable[[], None]) -> float:
    """Best-of-5 mean microseconds per call after 3 warm-up calls, synchronizing inside the clock."""
    for _ in range(3):
        fn()
    sync()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def chain(n: int) -> Callable[[Any], Any]:
    def f(x: Any) -> Any:
        for _ in range(n):
            x = (x * 1.0001 + 0.5).contiguous()
        return x

    return f


def measure(dev: str, n: int, calls: int, mode: str, runtime: str = "CPU") -> tuple[float, Any]:
    """us/call of the n-kernel chain on ``dev``: mode eager, jit1 or jit2 (the jit returned for inspection)."""
    from tg.ir.helpers import Context
    from tg.runtime.device import Device
    from tg.tensor import Tensor, TinyJit

    with Context(DEV=dev, HCQ_RUNTIME_DEV=runtime, JIT=2 if mode == "jit2" else 1):
        x = Tensor.ones(16).contiguous().realize()
        sync = Device[Device.DEFAULT].synchronize
        if mode == "eager":
            f = chain(n)
            return best_us(lambda: f(x).realize(), calls, sync), None
        jit = TinyJit(chain(n))
        return best_us(lambda: jit(x), calls, sync), jit


def exec_split(jit: Any, reps: int = 200) -> dict[str, float]:
    """Microseconds per replay of each step of the HCQ exec (fence, table, submit, kick, wait) of a captured jit."""
    from tg.ir.helpers import Context
    from tg.runtime.hcq.exec import execute
    from tg.runtime.hcq.graph import HCQGraphExecutor

    executor = next(e for e, _ in jit.captured._executors if isinstance(e, HCQGraphExecutor))
    opaques = [b.ensure_allocated()._buf for b in executor.replay.buffers(jit.captured.slot_buffers)]
    phases: dict[str, float] = {}
    with Context(DEV="HCQ+CPU"):
        for _, lb in executor.replay.launcher.steps:
            for _ in range(reps):
                execute(lb, opaques, {}, wait=True, phases=phases)
    return {k: v / reps * 1e6 for k, v in phases.items()}


def staging_gbs(nbytes: int, device: str = "HCQ+CPU") -> tuple[float, float]:
    """(copyin, copyout) GB/s of ``nbytes`` through the staging ring of ``device`` (a DEV string)."""
    from tg.ir import dtypes
    from tg.ir.helpers import Context
    from tg.runtime.device import Buffer, Device

    with Context(DEV=device):
        dev = Device[Device.DEFAULT]
        buf = Buffer(dev.device, nbytes, dtypes.uint8).ensure_allocated()
        host = bytearray(b"\x5a" * nbytes)
        out = memoryview(bytearray(nbytes))
        best_in = best_out = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            buf.copyin(host)
            dev.synchronize()
            best_in = min(best_in, time.perf_counter() - start)
            start = time.perf_counter()
            buf.copyout(out)
            best_out = min(best_out, time.perf_counter() - start)
        assert bytes(out[:16]) == bytes(host[:16])
    return nbytes / best_in / 1e9, nbytes / best_out / 1e9


def submitter_compile_ms(jit: Any) -> float:
    """Milliseconds to generate and compile a new submitter (no caches) for the 50-kernel graph."""
    from tg.ir.helpers import Context
    from tg.runtime.hcq.graph import HCQGraphExecutor
    from tg.runtime.hcq.submit import _program

    executor = next(e for e, _ in jit.captured._executors if isinstance(e, HCQGraphExecutor))
    batch, _ = executor.replay.launcher.steps[0]
    with Context(CACHELEVEL=0):
        start = time.perf_counter()
        _program.__wrapped__(batch.submitter.ast, "CPU")
        return (time.perf_counter() - start) * 1e3


def device_line(dev: str, calls: int, smoke: bool) -> None:
    """One line for ``dev``: eager and graphed chains of 1 and 50 kernels (us/call), staging-ring GB/s."""
    from tg.runtime.hcq.run import runtime_name

    parts = []
    for n in (1, 50):
        eager, _ = measure(dev, n, max(calls // 10, 3), "eager", runtime_name())
        graphed, _ = measure(dev, n, calls, "jit1", runtime_name())
        parts.append(f"n={n}: eager {eager:.0f} us, graphed {graphed:.0f} us ({graphed / n:.1f} us/kernel)")
    nbytes = (1 << 20) if smoke else (64 << 20)
    cin, cout = staging_gbs(nbytes, dev)
    print(f"{dev} (HCQ_RUNTIME_DEV={runtime_name()}): " + "; ".join(parts) +
          f"; staging {nbytes >> 20} MiB: copyin {cin:.2f} GB/s, copyout {cout:.2f} GB/s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=300, help="calls per repetition (default 300)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes and few calls: check that it runs")
    ap.add_argument("--device", help="only this device (a DEV string, e.g. AMD): one line of numbers")
    args = ap.parse_args()
    sizes, calls = ((1, 5), 10) if args.smoke else (SIZES, args.calls)
    py_calls = max(calls // 10, 3)
    if args.device:
        device_line(args.device, calls, args.smoke)
        return

    from tg.ir.helpers import Context

    rows = []
    jit50 = None
    for n in sizes:
        row: dict[str, Any] = {"n": n}
        row["cpu eager"], _ = measure("CPU", n, calls, "eager")
        row["cpu jit2"], _ = measure("CPU", n, calls, "jit2")
        row["cpu jit1"], _ = measure("CPU", n, calls, "jit1")
        row["hcq eager"], _ = measure("HCQ+CPU", n, calls, "eager")
        row["hcq graph C"], jit = measure("HCQ+CPU", n, calls, "jit1", "CPU")
        row["hcq graph PY"], _ = measure("HCQ+CPU", n, py_calls, "jit1", "PYTHON")
        with Context(TG_MOCKGPU_EMU=0):  # read when the mock KFD starts (its first device)
            row["amd graph C"], _ = measure("MOCKKFD+AMD", n, py_calls, "jit1", "CPU")
            row["amd graph PY"], _ = measure("MOCKKFD+AMD", n, py_calls, "jit1", "PYTHON")
        if n > 1 and (jit50 is None or n <= 50):
            jit50 = jit
        rows.append(row)

    cols = ["cpu eager", "cpu jit2", "cpu jit1", "hcq eager", "hcq graph C", "hcq graph PY", "amd graph C",
            "amd graph PY"]  # fmt: skip
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"us per call (us per kernel), chains of n tiny kernels; best of 5; {os.cpu_count()} cores, load "
        f"average {load:.1f} (HCQ+CPU hands work to worker threads: on a busy machine each hand-off waits)"
    )
    print(f"{'n':>4} " + " ".join(f"{c:>22}" for c in cols))
    for row in rows:
        cells = [f"{row[c]:10.1f} ({row[c] / row['n']:8.2f})" for c in cols]
        print(f"{row['n']:>4} " + " ".join(f"{c:>22}" for c in cells))
    print("amd graph: MOCKKFD+AMD with emulation off (the mock parses every packet, runs no kernel)")
    print("\nratios in this run:")
    for row in rows:
        n = row["n"]
        print(f"  n={n:<4} graphed HCQ+CPU / CPU batch executor = {row['hcq graph C'] / row['cpu jit1']:.2f} "
              f"(target <= 1.5); graphed us/kernel = {row['hcq graph C'] / n:.2f} (target <= 3 at n=50); "
              f"HCQ+CPU eager / CPU eager = {row['hcq eager'] / row['cpu eager']:.2f} (target <= 1.5)")  # fmt: skip
    if jit50 is not None:
        split = exec_split(jit50)
        print(f"\nexec split of one graphed {jit50.captured.kernel_count}-kernel replay (us, wait=True): "
              + ", ".join(f"{k} {v:.2f}" for k, v in split.items()))  # fmt: skip
        print(f"new submitter, generated and compiled with no cache: {submitter_compile_ms(jit50):.0f} ms")
    nbytes = (1 << 20) if args.smoke else (64 << 20)
    cin, cout = staging_gbs(nbytes)
    print(f"staging ring, {nbytes >> 20} MiB: copyin {cin:.2f} GB/s, copyout {cout:.2f} GB/s")


if __name__ == "__main__":
    main()
