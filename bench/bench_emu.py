"""Speed of the RDNA3 emulator (tg.runtime.amd.sim) on tg's own gfx1100 kernels, in lane-ops per second.

Two kernels are rendered by the AMD LLVM renderer and compiled by llvmlite (LLVM 22), then run with `emu.launch`:
a 64x64x64 float32 matmul (the renderer's default optimisations: locals, upcasts) and an elementwise kernel over 2^16
float32 elements (`max(a*b + 1, 0)`). A lane-op is one instruction executed by one lane of a wave (a wave of 32 lanes
running one instruction is 32 lane-ops); amd.md 4.8 asks for at least 1.5 M lane-ops/s on the 2-core dev machine
(each line ends with the measured rate divided by that target). Each result is checked against numpy before its
time is printed. The first run of a kernel includes its translation; the printed figures are the best of `--repeat`
runs after it, in wall-clock time and in the process's CPU time (the second does not depend on how many other
processes share the machine).

Run: `hatch run bench:emu [--repeat N]`. Prints numbers; asserts nothing. Needs llvmlite (the dev env has it).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from tg.codegen.program import get_program
from tg.codegen.render.llvmir import AMDLLVMRenderer
from tg.ir.dtype import dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp
from tg.runtime.amd.sim import emu
from tg.runtime.llvm import AMDGPU_TRIPLE, LLVMCompiler

TARGET = 1.5e6  # lane-ops/s, amd.md 4.8 (2-core dev machine)


def matmul_ast(n: int) -> UOp:
    i, j, r = UOp.range(n, 0), UOp.range(n, 1), UOp.range(n, 2, AxisType.REDUCE)
    a = UOp.param(1, dtypes.float32, n * n).index(i * n + r).load()
    b = UOp.param(2, dtypes.float32, n * n).index(r * n + j).load()
    return UOp.sink(
        UOp.param(0, dtypes.float32, n * n).index(i * n + j).store((a * b).reduce(r, arg=Ops.ADD)).end(i, j)
    )


def elementwise_ast(n: int) -> UOp:
    i = UOp.range(n, 0)
    a = UOp.param(1, dtypes.float32, n).index(i).load()
    b = UOp.param(2, dtypes.float32, n).index(i).load()
    val = (a * b + UOp.const(dtypes.float32, 1.0)).maximum(UOp.const(dtypes.float32, 0.0))
    return UOp.sink(UOp.param(0, dtypes.float32, n).index(i).store(val).end(i))


def measure(name: str, ast: UOp, inputs: list[np.ndarray], out_elems: int, want: np.ndarray, repeat: int) -> None:
    renderer, compiler = AMDLLVMRenderer("gfx1100"), LLVMCompiler(AMDGPU_TRIPLE, "gfx1100")
    p = get_program(ast, renderer)
    lib = compiler.compile(p.src)
    groups = tuple(int(g) for g in p.global_size or (1, 1, 1)) + (1,) * (3 - len(p.global_size or ()))
    local = tuple(int(s) for s in p.local_size or (1, 1, 1)) + (1,) * (3 - len(p.local_size or ()))
    addrs = [0x10_0000 * (k + 1) for k in range(1 + len(inputs))]
    best, best_cpu = float("inf"), float("inf")
    for run in range(repeat + 1):
        bufs = {addrs[0]: bytearray(4 * out_elems)} | {
            a: bytearray(x.tobytes()) for a, x in zip(addrs[1:], inputs, strict=False)
        }
        emu.stats.update(instructions=0, lane_ops=0)
        t, c = time.perf_counter(), time.process_time()
        emu.launch(lib, p.name, bufs, emu.pack_args(addrs), groups[:3], local[:3])
        dt, dc = time.perf_counter() - t, time.process_time() - c
        out = np.frombuffer(bytes(bufs[addrs[0]]), np.float32)
        if not np.allclose(out, want.ravel(), rtol=1e-5, atol=1e-5):
            raise SystemExit(f"{name}: wrong result (max error {np.abs(out - want.ravel()).max()})")
        if run == 0:
            first = dt
        else:
            best, best_cpu = min(best, dt), min(best_cpu, dc)
    lane_ops, insts = emu.stats["lane_ops"], emu.stats["instructions"]
    print(f"{name:<28} groups {groups} local {local}: {insts:>8} wave-instructions, {lane_ops / 1e6:6.2f} M lane-ops, "
          f"first run {first:5.2f} s, best {best:5.2f} s wall ({lane_ops / best / 1e6:5.2f} M lane-ops/s), "
          f"{best_cpu:5.2f} s CPU ({lane_ops / best_cpu / 1e6:5.2f} M lane-ops/s); vs the 1.5 M/s target: "
          f"{lane_ops / best / TARGET:4.2f}x wall, {lane_ops / best_cpu / TARGET:4.2f}x CPU")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2, help="timed runs after the first (default 2)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    measure("matmul 64x64x64 f32", matmul_ast(64), [a, b], 64 * 64, a @ b, args.repeat)
    n = 1 << 16
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    measure("elementwise 2^16 f32", elementwise_ast(n), [x, y], n, np.maximum(x * y + 1, 0), args.repeat)


if __name__ == "__main__":
    main()
