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


def main() -> None:
    dev = Device[DEV]
    print(f"device {DEV}: {dev!r}")
    torch, tdev = torch_device()
    if torch is None:
        print("torch with this GPU is not available: tg numbers only")
    rng = np.random.default_rng(0)
    print(f"{'workload':<28}{'tg':>12}{'torch':>12}{'tg/torch':>10}")
    for n in (512, 1024, 2048, 4096):
        a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
        ta, tb = Tensor(a, device=DEV).realize(), Tensor(b, device=DEV).realize()
        got = (ta @ tb).numpy()
        err = float(np.abs(got - a @ b).max() / (np.abs(a @ b).max() + 1e-9))
        t = timeit(lambda ta=ta, tb=tb: (ta @ tb).realize(), dev.synchronize)
        flops = 2 * n**3 / t * 1e-9
        line = f"matmul {n}^3 fp32 (GFLOP/s)"
        if torch is not None:
            xa, xb = torch.from_numpy(a).to(tdev), torch.from_numpy(b).to(tdev)
            tt = timeit(lambda xa=xa, xb=xb: xa @ xb, torch.cuda.synchronize)
            tflops = 2 * n**3 / tt * 1e-9
            print(f"{line:<28}{flops:12.1f}{tflops:12.1f}{flops / tflops:10.2f}  rel.err {err:.1e}")
        else:
            print(f"{line:<28}{flops:12.1f}{'-':>12}{'-':>10}  rel.err {err:.1e}")
    for n in (1024, 2048, 4096):  # half inputs: float16 storage, float32 math (no tensor cores yet)
        a, b = rng.standard_normal((n, n), np.float32).astype(np.float16), rng.standard_normal((n, n), np.float32)
        b = b.astype(np.float16)
        ta, tb = Tensor(a, device=DEV).realize(), Tensor(b, device=DEV).realize()
        want = a.astype(np.float32) @ b.astype(np.float32)
        err = float(np.abs((ta @ tb).numpy().astype(np.float32) - want).max() / (np.abs(want).max() + 1e-9))
        t = timeit(lambda ta=ta, tb=tb: (ta @ tb).realize(), dev.synchronize)
        flops = 2 * n**3 / t * 1e-9
        line = f"matmul {n}^3 fp16 (GFLOP/s)"
        if torch is not None:
            xa, xb = torch.from_numpy(a).to(tdev), torch.from_numpy(b).to(tdev)
            tt = timeit(lambda xa=xa, xb=xb: xa @ xb, torch.cuda.synchronize)
            tflops = 2 * n**3 / tt * 1e-9
            print(f"{line:<28}{flops:12.1f}{tflops:12.1f}{flops / tflops:10.2f}  rel.err {err:.1e}")
        else:
            print(f"{line:<28}{flops:12.1f}{'-':>12}{'-':>10}  rel.err {err:.1e}")
    for n in (1 << 20, 1 << 22, 1 << 24, 1 << 26):
        x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
        tx, ty = Tensor(x, device=DEV).realize(), Tensor(y, device=DEV).realize()
        np.testing.assert_array_equal((tx + ty).numpy(), x + y)
        t = timeit(lambda tx=tx, ty=ty: (tx + ty).realize(), dev.synchronize)
        gbs = 3 * 4 * n / t * 1e-9
        line = f"add 2^{n.bit_length() - 1} fp32 (GB/s)"
        if torch is not None:
            px, py = torch.from_numpy(x).to(tdev), torch.from_numpy(y).to(tdev)
            tt = timeit(lambda px=px, py=py: px + py, torch.cuda.synchronize)
            tgbs = 3 * 4 * n / tt * 1e-9
            print(f"{line:<28}{gbs:12.1f}{tgbs:12.1f}{gbs / tgbs:10.2f}")
        else:
            print(f"{line:<28}{gbs:12.1f}{'-':>12}{'-':>10}")


if __name__ == "__main__":
    main()
