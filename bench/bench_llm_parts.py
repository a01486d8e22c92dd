"""The two costs of tg-llm measured on their own: the KV-cache write of a decode step and loading weights.

    hatch run bench:llm-parts [--model PATH] [--layers 24] [--steps 64]

KV cache: a (2, 4 KV heads, positions + 32, 64) float32 cache per layer (the bench model's), one position written
per step through `cache[:, :, p:p+1].assign(kv)` under TinyJit with a Variable position, as tg.llm's decode does:
milliseconds per token for `--layers` layers and the bytes each write moves (GlobalCounters.global_mem).
Weights: the seconds `LLM(path)` takes for a GGUF file (F16 or Q8_0: weights copied from the DISK device to the
CPU as stored), as MB/s of the file, and a DISK->CPU copy of one 64 MiB region. Numbers only: no asserts; compare
runs of two versions on one machine in one sitting.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def kv_write(positions: int, layers: int, steps: int) -> tuple[float, float]:
    """(ms per token for `layers` cache writes, MB moved per write)."""
    from tg.tensor import GlobalCounters, Tensor, TinyJit, Variable

    caches = [Tensor.zeros(2, 4, positions + 32, 64).contiguous().realize() for _ in range(layers)]
    kv = Tensor.ones(2, 4, 1, 64).contiguous().realize()
    pos = Variable("pos", 0, positions - 1)

    @TinyJit
    def step(value: Tensor, p: object) -> Tensor:
        for cache in caches:
            cache[:, :, p : p + 1].assign(value)  # type: ignore[misc]
        return (value + 1).realize()

    for p in range(3):  # run, capture, replay
        step(kv, pos.bind(p))
    times = []
    GlobalCounters.reset()
    for p in range(3, 3 + steps):
        start = time.perf_counter()
        step(kv, pos.bind(p % positions))
        times.append(time.perf_counter() - start)
    moved = GlobalCounters.global_mem / steps / (layers + 1)
    return statistics.median(times) * 1e3, moved / 1e6


def disk_copy(size: int) -> float:
    """MB/s of a DISK -> CPU copy of `size` bytes (the file in the page cache; best of 3)."""
    from tg.tensor import Tensor, dtypes

    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        f.write(os.urandom(size + 4096))
        path = f.name
    try:
        disk = Tensor.empty(size + 4096, dtype=dtypes.uint8, device=f"disk:{path}")
        best = float("inf")
        for i in range(3):
            start = time.perf_counter()
            disk[4096 - i : 4096 - i + size].to("CPU").realize()
            best = min(best, time.perf_counter() - start)
        return size / best / 1e6
    finally:
        os.unlink(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a GGUF file to load (default: bench_llm's F16 model when it was written)")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()

    from tg.ir.helpers import cache_dir

    for positions in (512, 4096):
        ms, mb = kv_write(positions, args.layers, args.steps)
        print(f"KV cache write, {positions} positions x {args.layers} layers: {ms:.2f} ms/token, {mb:.3f} MB per write")
    print(f"DISK -> CPU copy of 64 MiB: {disk_copy(64 << 20):.0f} MB/s")
    model = Path(args.model) if args.model else cache_dir() / "bench-llm" / "llama-f16.gguf"
    if model.exists():
        from tg.llm import LLM

        start = time.perf_counter()
        llm = LLM(model, max_context=64)
        seconds = time.perf_counter() - start
        mb = model.stat().st_size / 1e6
        print(f"load {model.name}: {mb:.0f} MB in {seconds:.1f} s ({mb / seconds:.0f} MB/s)")
        del llm
    else:
        print(f"no model at {model} (hatch run bench:llm writes it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
