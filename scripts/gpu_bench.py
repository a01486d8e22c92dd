"""Matmul and elementwise throughput of tg on a GPU device against torch on the same GPU (when torch is there).

Run from the repository without installing:
`PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python scripts/gpu_bench.py` (`DEV=CL` for OpenCL; default CUDA).
Prints GFLOP/s (matmul, float32 and float16 inputs) and GB/s (elementwise: bytes read + written) per size at N,
4N, 16N and the ratio tg / torch measured in the same run. Wall time per iteration after a warm-up, synchronised
at the end, so it includes tg's per-call overhead (small next to these kernels).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

from tg.runtime.device import Device
from tg.tensor import Tensor

DEV = os.environ.get("DEV", "CUDA")


def timeit(fn: Callable[[], object], sync: Callable[[], None], min_time: float = 0.5) -> float:
    """Seconds per call (minimum over 3 batches after a warm-up)."""
    fn()
    sync()
    best, n = float("inf"), 1
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        dt = (time.perf_counter() - start) / n
        best = min(best, dt)
        if dt * n < min_time / 3:
            n = max(n * 2, int(min_time / 3 / max(dt, 1e-6)))
    return best


def torch_device():  # type: ignore[no-untyped-def]
    try:
        import torch
    except ImportError:
        return None, None
    if DEV.startswith("CUDA") and torch.cuda.is_available():
        return torch, "cuda"
    return None, None


def report(line: str, tg_rate: float, torch_rate: float | None, extra: str = "") -> None:
    """One table row: tg's rate, torch's (or `-`) and their ratio."""
    if torch_rate is None:
        print(f"{line:<28}{tg_rate:12.1f}{'-':>12}{'-':>10}{extra}")
    else:
        print(f"{line:<28}{tg_rate:12.1f}{torch_rate:12.1f}{tg_rate / torch_rate:10.2f}{extra}")


def matmul_row(n: int, dtype: type, dev: object, torch, tdev, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    """GFLOP/s of an n^3 matmul with inputs of `dtype` (float32 math), error relative to numpy in float32."""
    a = rng.standard_normal((n, n), np.float32).astype(dtype)
    b = rng.standard_normal((n, n), np.float32).astype(dtype)
    ta, tb = Tensor(a, device=DEV).realize(), Tensor(b, device=DEV).realize()
    want = a.astype(np.float32) @ b.astype(np.float32)
    err = float(np.abs((ta @ tb).numpy().astype(np.float32) - want).max() / (np.abs(want).max() + 1e-9))
    flops = 2 * n**3 / timeit(lambda: (ta @ tb).realize(), dev.synchronize) * 1e-9  # type: ignore[attr-defined]
    tflops = None
    if torch is not None:
        xa, xb = torch.from_numpy(a).to(tdev), torch.from_numpy(b).to(tdev)
        tflops = 2 * n**3 / timeit(lambda: xa @ xb, torch.cuda.synchronize) * 1e-9
    name = "fp32" if dtype is np.float32 else "fp16"
    report(f"matmul {n}^3 {name} (GFLOP/s)", flops, tflops, f"  rel.err {err:.1e}")


def add_row(n: int, dev: object, torch, tdev, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    """GB/s (bytes read + written) of an elementwise add of n float32 values, checked against numpy."""
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    tx, ty = Tensor(x, device=DEV).realize(), Tensor(y, device=DEV).realize()
    np.testing.assert_array_equal((tx + ty).numpy(), x + y)
    gbs = 3 * 4 * n / timeit(lambda: (tx + ty).realize(), dev.synchronize) * 1e-9  # type: ignore[attr-defined]
    tgbs = None
    if torch is not None:
        px, py = torch.from_numpy(x).to(tdev), torch.from_numpy(y).to(tdev)
        tgbs = 3 * 4 * n / timeit(lambda: px + py, torch.cuda.synchronize) * 1e-9
    report(f"add 2^{n.bit_length() - 1} fp32 (GB/s)", gbs, tgbs)


def main() -> None:
    dev = Device[DEV]
    print(f"device {DEV}: {dev!r}")
    torch, tdev = torch_device()
    if torch is None:
        print("torch with this GPU is not available: tg numbers only")
    rng = np.random.default_rng(0)
    print(f"{'workload':<28}{'tg':>12}{'torch':>12}{'tg/torch':>10}")
    for n in (512, 1024, 2048, 4096):
        matmul_row(n, np.float32, dev, torch, tdev, rng)
    for n in (1024, 2048, 4096):  # float16 inputs, float32 accumulation (tensor cores through TC on CUDA sm_80+)
        matmul_row(n, np.float16, dev, torch, tdev, rng)
    for n in (1 << 20, 1 << 22, 1 << 24, 1 << 26):
        add_row(n, dev, torch, tdev, rng)


if __name__ == "__main__":
    main()
