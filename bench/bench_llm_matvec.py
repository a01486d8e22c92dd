"""tg-llm's decode matrix-vector kernels on their own: GB/s of the weight stream, beside a numpy read of the bytes.

    hatch run bench:llm-matvec [--types F16,Q8_0,Q4_K,Q6_K] [--rows 4096] [--cols 1024] [--launches 120]

For each weight type: 12 random (rows, cols) matrices in rotation (more bytes than the caches hold), one `linear`
each, captured by TinyJit; the captured kernels are launched one by one and the minimum time of the matrix kernel is
taken (a loaded machine's scheduling noise only adds time); printed: the matrix kernel (the slowest kernel of a
matrix) and all kernels of a matrix (helpers such as the input's quantisation, shared by the 12 matrices where they
read one input, counted once). The numpy read is `a.sum()` of a float32 array of the same
bytes as one matrix, 12 arrays in rotation, best of the same number of reads, in the same process. Run with
`CPU_COUNT=1` to measure one thread. Numbers only: no asserts.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

MATRICES = 12


def random_blocks(rng: np.random.Generator, wtype: str, rows: int, cols: int) -> np.ndarray:
    """Raw GGUF data of a random (rows, cols) matrix of `wtype`: float16 values, or uint8 blocks with sane scales."""
    if wtype == "F16":
        return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float16)
    elements, size = {"Q8_0": (32, 34), "Q4_K": (256, 144), "Q6_K": (256, 210)}[wtype]
    blocks = rng.integers(0, 256, (rows, cols // elements, size), dtype=np.uint8)
    scale_at = {"Q8_0": [0], "Q4_K": [0, 2], "Q6_K": [208]}[wtype]
    for at in scale_at:  # finite float16 scales around 1e-3
        blocks[..., at : at + 2] = (rng.random((rows, cols // elements, 1)) * 1e-3).astype(np.float16).view(np.uint8)
    return blocks


def measure(wtype: str, rows: int, cols: int, launches: int) -> None:
    from tg.llm.quant import GGML_TYPES, Weight, linear
    from tg.runtime.engine import CompiledRunner
    from tg.tensor import Tensor, TinyJit

    ggml_type = next(t for t, v in GGML_TYPES.items() if v[0] == wtype)
    rng = np.random.default_rng(0)
    weights = [Weight(Tensor(random_blocks(rng, wtype, rows, cols)), ggml_type, rows, cols) for _ in range(MATRICES)]
    x = Tensor(rng.standard_normal((1, cols)).astype(np.float32)).realize()

    @TinyJit
    def step(x: Tensor) -> list[Tensor]:
        return [linear(x, w).realize() for w in weights]

    for _ in range(3):
        step(x)
    program = step.captured
    items = program.instantiate(program.slot_buffers)
    best = [float("inf")] * len(items)
    for _ in range(max(1, launches // MATRICES)):
        for i, ei in enumerate(items):
            best[i] = min(best[i], ei.run({}, wait=True, update_stats=False) or 0.0)
    size = weights[0].nbytes  # the matrix kernels: the 12 slowest of the kernels reading a buffer of that size
    readers = [i for i, ei in enumerate(items) if any(b.nbytes == size for b in ei.bufs[1:])]
    matrix = sorted(readers, key=lambda i: -best[i])[:MATRICES]
    runner = items[matrix[0]].runner
    name = runner.p.name if isinstance(runner, CompiledRunner) else "?"
    t_matrix = min(best[i] for i in matrix)
    t_all = sum(best) / MATRICES
    nbytes = weights[0].nbytes
    arrays = [np.ones(nbytes // 4, np.float32) for _ in range(MATRICES)]
    t_read = float("inf")
    for _ in range(max(1, launches // MATRICES)):
        for a in arrays:
            start = time.perf_counter()
            a.sum()
            t_read = min(t_read, time.perf_counter() - start)
    print(f"{wtype} {rows}x{cols} ({nbytes / 1e6:.2f} MB): kernel {name} {t_matrix * 1e3:.3f} ms "
          f"({nbytes / t_matrix / 1e9:.2f} GB/s); all kernels per matrix {t_all * 1e3:.3f} ms "
          f"({nbytes / t_all / 1e9:.2f} GB/s); numpy read {t_read * 1e3:.3f} ms ({nbytes / t_read / 1e9:.2f} GB/s): "
          f"the matrix kernel at {100 * t_read / t_matrix:.0f}% of its rate")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", default="F16,Q8_0,Q4_K,Q6_K")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--launches", type=int, default=120)
    args = parser.parse_args()
    for wtype in args.types.split(","):
        measure(wtype, args.rows, args.cols, args.launches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
