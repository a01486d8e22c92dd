"""Scheduling cost: tg next to tinygrad 0.14 (when importable) in the same process. Prints numbers; asserts nothing.

Measures (targets from shared/specs/scheduler.md):
- the block network (softmax, matmul, mean/var normalisation per block: 7 kernels) at 10/40/160/640 blocks on
  NULL: `create_schedule` first call and cache hit (tinygrad: `schedule_linear`), then a full realize on NULL
  (schedule + lower + render of the distinct kernels); ms per block and the growth 640 vs 160 (linear = 4x);
- the max-chain `x = x - x.max(1, keepdim=True)` (64x64) at 10/40/160 steps, realized on CPU (warm);
- a training step (2-layer MLP, loss, backward, SGD update) scheduled on NULL;
- the cost of one tiny realize with nothing else alive, with 20,000 unrelated realized tensors, and with 5,000
  unrelated lazy tensors alive (per realize, best of many).

Run: `hatch run bench:schedule`, or beside tinygrad: `PYTHONPATH=$(ls -d packages/*/src | paste -sd:)
/work/scratch/bin/python bench/bench_schedule.py` (DEV=CPU is set for tinygrad).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("DEV", "CPU")
ROOT = Path(__file__).resolve().parents[1]
try:
    import tg.tensor  # noqa: F401
except ImportError:
    for src in sorted((ROOT / "packages").glob("*/src")):
        sys.path.insert(0, str(src))


def has_tinygrad() -> bool:
    try:
        import tinygrad  # noqa: F401
    except ImportError:
        return False
    return True


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def best(fn: Callable[[], Any], repeat: int) -> float:
    return min(timed(fn) for _ in range(repeat))


def block(x: Any, w: Any) -> Any:
    x = x - x.max(-1, keepdim=True)
    x = x.exp()
    x = x / x.sum(-1, keepdim=True)
    x = x @ w
    m = x.mean(-1, keepdim=True)
    v = ((x - m) * (x - m)).mean(-1, keepdim=True)
    return (x - m) / (v + 1e-5).sqrt()


def network(tensor: Any, n: int) -> Any:
    x, w = tensor.empty(16, 64, device="NULL"), tensor.empty(64, 64, device="NULL")
    for _ in range(n):
        x = block(x, w)
    return x


# ---- frameworks ------------------------------------------------------------------------------------------------


def tg_schedule(n: int) -> tuple[float, float, int]:
    from tg.codegen.schedule import clear_schedule_cache, create_schedule
    from tg.ir import Ops, UOp
    from tg.tensor import Tensor

    clear_schedule_cache()
    sink = UOp(Ops.SINK, src=(network(Tensor, n).uop,))
    first = timed(lambda: create_schedule(sink))
    sink2 = UOp(Ops.SINK, src=(network(Tensor, n).uop,))  # same structure, new buffers
    hit = timed(lambda: create_schedule(sink2))
    kernels = sum(1 for c in create_schedule(sink).linear.src if c.src[0].op is Ops.SINK)
    return first, hit, kernels


def tiny_schedule(n: int) -> tuple[float, float, int]:
    from tinygrad import Tensor

    x = network(Tensor, n)
    first = timed(lambda: x.schedule_linear())
    y = network(Tensor, n)
    hit = timed(lambda: y.schedule_linear())
    return first, hit, -1


def tg_realize(n: int) -> float:
    from tg.codegen.schedule import clear_schedule_cache
    from tg.tensor import Tensor

    clear_schedule_cache()
    x = network(Tensor, n)
    return timed(x.realize)


def tiny_realize(n: int) -> float:
    from tinygrad import Tensor

    x = network(Tensor, n)
    return timed(x.realize)


def max_chain(tensor: Any, steps: int) -> float:
    def build() -> Any:
        x = tensor.ones(64, 64, device="CPU").contiguous()
        for _ in range(steps):
            x = x - x.max(1, keepdim=True)
        return x

    build().realize()  # compile the kernels once
    return timed(build().realize)


def train_step(tensor: Any) -> float:
    def step() -> None:
        x = tensor.empty(32, 64, device="NULL")
        w1, w2 = tensor.empty(64, 64, device="NULL"), tensor.empty(64, 10, device="NULL")
        w1.requires_grad = w2.requires_grad = True
        loss = ((x @ w1).relu() @ w2).softmax(-1).sum()
        loss.backward()
        w1.assign(w1.detach() - w1.grad * 0.01)
        w2.assign(w2.detach() - w2.grad * 0.01)
        tensor.realize(w1, w2)

    step()
    return best(step, 3)


def realize_cost(tensor: Any, extra: str) -> float:
    a = tensor.ones(16, device="CPU").contiguous().realize()
    keep: list[Any] = []
    if extra == "realized":
        keep = [tensor.ones(4, device="CPU").contiguous().realize() for _ in range(20000)]
    elif extra == "lazy":
        base = tensor.ones(4, device="CPU").contiguous().realize()
        keep = [base + i for i in range(5000)]
    (a + 1).realize()
    cost = best(lambda: (a + 1).realize(), 200)
    del keep
    return cost


# ---- report ----------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", default="10,40,160,640", help="comma-separated block counts")
    ap.add_argument("--no-tinygrad", action="store_true")
    args = ap.parse_args()
    blocks = [int(b) for b in args.blocks.split(",")]
    tiny = has_tinygrad() and not args.no_tinygrad
    if tiny:
        sys.setrecursionlimit(100000)  # tinygrad's recursive passes on the 640-block graph; tg's walks need none
    print(f"load average {os.getloadavg()[0]:.2f}; tinygrad", "in this run" if tiny else "not installed: tg only")

    print(
        "\n| blocks | kernels | tg first | tg hit | tg ms/block | tinygrad first | tinygrad hit | tinygrad ms/block |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    firsts: dict[int, float] = {}
    for n in blocks:
        f, h, k = tg_schedule(n)
        firsts[n] = f
        row = f"| {n} | {k} | {f:.3f} s | {h:.3f} s | {f / n * 1e3:.2f} |"
        if tiny:
            tf, th, _ = tiny_schedule(n)
            row += f" {tf:.3f} s | {th:.3f} s | {tf / n * 1e3:.2f} |"
        else:
            row += " - | - | - |"
        print(row, flush=True)
    if 160 in firsts and 640 in firsts:
        ratio = firsts[640] / firsts[160]
        print(f"growth 160 -> 640 blocks: x{ratio:.2f} (linear: x4, target <= 4.4; exponent {math.log(ratio, 4):.2f})")

    print("\nrealize on NULL (schedule + lower + render), first call:")
    for n in blocks[:3]:
        line = f"  {n:4d} blocks: tg {tg_realize(n):.3f} s"
        if tiny:
            line += f"   tinygrad {tiny_realize(n):.3f} s"
        print(line, flush=True)

    from tg.tensor import Tensor

    print("\nmax chain x = x - x.max(1, keepdim=True), 64x64, realize on CPU (kernels compiled):")
    for steps in (10, 40, 160):
        line = f"  {steps:4d} steps: tg {max_chain(Tensor, steps):.3f} s"
        if tiny:
            from tinygrad import Tensor as TinyTensor

            line += f"   tinygrad {max_chain(TinyTensor, steps):.3f} s"
        print(line, flush=True)

    print("\ntraining step (2-layer MLP, backward, SGD assign), scheduled + realized on NULL:")
    line = f"  tg {train_step(Tensor) * 1e3:.1f} ms"
    if tiny:
        from tinygrad import Tensor as TinyTensor

        line += f"   tinygrad {train_step(TinyTensor) * 1e3:.1f} ms"
    print(line)

    print("\n(a + 1).realize() per call, with unrelated tensors alive:")
    for extra in ("nothing", "realized", "lazy"):
        what = {"nothing": "nothing else", "realized": "20,000 realized", "lazy": "5,000 lazy"}[extra]
        line = f"  {what:16s} tg {realize_cost(Tensor, extra) * 1e3:.3f} ms"
        if tiny:
            from tinygrad import Tensor as TinyTensor

            line += f"   tinygrad {realize_cost(TinyTensor, extra) * 1e3:.3f} ms"
        print(line, flush=True)


if __name__ == "__main__":
    main()
