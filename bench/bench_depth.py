"""Deep graphs: cost against depth and the first call's scheduling cost per kernel. Prints numbers; asserts nothing.

Measures (issue 20; targets: linear growth, 1,000 layers <= 5 s, first-call scheduling <= 5 ms per kernel on a
200-kernel graph):
- backward through `x = (x * w_i).tanh()` (16 floats, every w_i requires grad) at N, 4N and 16N layers on CPU: the
  forward build, `backward()`, and the realize of every gradient (schedule, compile, run), each time and the growth
  per 4x layers (linear: x4); tinygrad 0.14 the same way when importable (same run);
- first-call scheduling: `create_schedule` of a new graph with empty caches, ms per kernel, for the 100-layer
  backward (about 200 kernels) and for the scheduler benchmark's block network (40 blocks, 240 kernels), and the
  whole first realize on NULL (schedule + lower + render) per kernel;
- a 10,000-op elementwise chain on a realized input: one kernel, first realize on CPU.

Run: `hatch run bench:depth [--layers N] [--no-tinygrad]`, or beside tinygrad:
`PYTHONPATH=$(ls -d packages/*/src | paste -sd:) /path/to/venv-with-tinygrad/bin/python bench/bench_depth.py`.
Times are CPU seconds of this process and of the compilers it runs (`resource.getrusage`): the shared development
machine's load inflates wall time much more than these; the tanh table adds the wall time of the whole backward.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
try:
    import tg.tensor  # noqa: F401
except ImportError:
    for src in sorted((ROOT / "packages").glob("*/src")):
        sys.path.insert(0, str(src))


def clock() -> float:
    """CPU seconds of this process and of the compilers it ran (children: C compilers run as subprocesses)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def has_tinygrad() -> bool:
    try:
        import tinygrad  # noqa: F401
    except ImportError:
        return False
    return True


def timed(fn: Callable[[], Any]) -> float:
    start = clock()
    fn()
    return clock() - start


# ---- backward through a deep tanh chain -------------------------------------------------------------------------


def tanh_backward(tensor: Any, layers: int, device: str) -> tuple[float, float, float, float]:
    """(build, backward, realize) CPU seconds for `layers` layers of `x = (x * w).tanh()` and all gradients, and the
    wall seconds of the three together."""
    rng = np.random.default_rng(0)
    x0 = tensor(rng.standard_normal(16).astype(np.float32), device=device)
    ws = [tensor(rng.uniform(0.9, 1.3, 16).astype(np.float32), device=device) for _ in range(layers)]
    for t in (x0, *ws):
        t.requires_grad = True  # (tinygrad 0.14's constructor has no requires_grad argument)
    tensor.realize(x0, *ws)
    wall, start = time.perf_counter(), clock()
    x = x0
    for w in ws:
        x = (x * w).tanh()
    built = clock()
    x.sum().backward()
    differentiated = clock()
    tensor.realize(x0.grad, *[w.grad for w in ws])
    done = clock()
    return built - start, differentiated - built, done - differentiated, time.perf_counter() - wall


def tanh_backward_graph(layers: int) -> Any:
    """The SINK of every gradient of the tanh chain (tg), not realized."""
    from tg.ir import UOp
    from tg.tensor import Tensor

    rng = np.random.default_rng(0)
    x0 = Tensor(rng.standard_normal(16).astype(np.float32), device="NULL", requires_grad=True)
    ws = [Tensor(rng.uniform(0.9, 1.3, 16).astype(np.float32), device="NULL", requires_grad=True)
          for _ in range(layers)]  # fmt: skip
    Tensor.realize(x0, *ws)
    x = x0
    for w in ws:
        x = (x * w).tanh()
    x.sum().backward()
    return UOp.sink(*[t.grad.uop for t in (x0, *ws)])  # type: ignore[union-attr]


def block_network(blocks: int) -> Any:
    from tg.ir import UOp
    from tg.tensor import Tensor

    x, w = Tensor.empty(16, 64, device="NULL"), Tensor.empty(64, 64, device="NULL")
    for _ in range(blocks):
        x = x - x.max(-1, keepdim=True)
        x = x.exp()
        x = x / x.sum(-1, keepdim=True)
        x = x @ w
        m = x.mean(-1, keepdim=True)
        v = ((x - m) * (x - m)).mean(-1, keepdim=True)
        x = (x - m) / (v + 1e-5).sqrt()
    return UOp.sink(x.uop)


def first_schedule(sink: Any) -> tuple[float, int]:
    """(seconds, kernels) of `create_schedule` with empty caches."""
    from tg.codegen.schedule import clear_schedule_cache, create_schedule
    from tg.ir import Ops

    clear_schedule_cache()
    start = clock()
    sched = create_schedule(sink)
    seconds = clock() - start
    return seconds, sum(1 for c in sched.linear.src if c.src[0].op is Ops.SINK)


def first_realize_null(make: Callable[[], Any]) -> float:
    """Seconds of the first realize on NULL (schedule + lower + render of each distinct kernel), empty caches."""
    from tg.codegen.schedule import clear_schedule_cache
    from tg.runtime.engine import method_cache
    from tg.tensor import Tensor

    sink = make()
    clear_schedule_cache()
    method_cache.clear()
    start = clock()
    Tensor(sink.src[0]).realize() if len(sink.src) == 1 else Tensor.realize(*[Tensor(u) for u in sink.src])
    return clock() - start


def chain_realize(length: int) -> float:
    from tg.tensor import Tensor

    x = Tensor(np.linspace(-1, 1, 64, dtype=np.float32)).realize()
    for i in range(length):
        x = x * 1.0001 + 0.0001 if i % 2 else x - 0.0003
    return timed(x.realize)


def tinygrad_tanh_backward(layers: int) -> tuple[float, float, float, float]:
    from tinygrad import Tensor as TinyTensor

    return tanh_backward(TinyTensor, layers, "CPU")


# ---- report ----------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=64, help="N: the tanh chain runs N, 4N and 16N layers")
    ap.add_argument("--no-tinygrad", action="store_true")
    ap.add_argument("--chain", type=int, default=10_000, help="length of the elementwise chain (0: skip)")
    args = ap.parse_args()
    tiny = has_tinygrad() and not args.no_tinygrad
    print(f"load average {os.getloadavg()[0]:.2f}; recursion limit {sys.getrecursionlimit()}; tinygrad",
          "0.14 in this run" if tiny else "not installed: tg only")  # fmt: skip
    from tg.tensor import Tensor

    tanh_backward(Tensor, 4, "CPU")  # compile the kernels' first versions outside the measurement
    print("\nbackward through x = (x * w_i).tanh(), 16 floats, realize of every gradient on CPU (CPU seconds; wall):")
    print("| layers | tg build | tg backward | tg realize | tg total | tg wall | growth | tinygrad total | growth |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    prev: tuple[float, float] | None = None
    for layers in (args.layers, 4 * args.layers, 16 * args.layers):
        b, g, r, wall = tanh_backward(Tensor, layers, "CPU")
        total = b + g + r
        row = f"| {layers} | {b:.2f} s | {g:.2f} s | {r:.2f} s | {total:.2f} s | {wall:.2f} s | "
        row += f"x{total / prev[0]:.2f} |" if prev else "- |"
        tiny_total = math.nan
        if tiny:
            tiny_total = sum(tinygrad_tanh_backward(layers)[:3])
            row += f" {tiny_total:.2f} s | " + (f"x{tiny_total / prev[1]:.2f} |" if prev else "- |")
        else:
            row += " - | - |"
        print(row, flush=True)
        prev = (total, tiny_total)

    print("\nfirst-call scheduling (create_schedule, empty caches), ms per kernel:")
    for name, make in (("tanh backward, 100 layers", lambda: tanh_backward_graph(100)),
                       ("block network, 40 blocks", lambda: block_network(40))):  # fmt: skip
        sink = make()
        seconds, kernels = first_schedule(sink)
        whole = first_realize_null(make)
        print(f"  {name}: {kernels} kernels, schedule {seconds:.3f} s = {seconds / kernels * 1e3:.2f} ms/kernel; "
              f"first realize on NULL {whole:.3f} s = {whole / kernels * 1e3:.2f} ms/kernel", flush=True)  # fmt: skip

    if args.chain:
        print(f"\n{args.chain}-op elementwise chain on a realized input, first realize on CPU (one kernel): "
              f"{chain_realize(args.chain):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
