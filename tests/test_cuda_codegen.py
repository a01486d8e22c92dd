"""CUDA code generation checked without a GPU: every distinct kernel of the op tests compiles with NVRTC for sm_90.

The op tests run on the CPU in a subprocess that records each kernel AST (tests/plugins/kernel_capture.py); each
distinct AST is then rendered with CUDARenderer, compiled by NVRTC to PTX and to an sm_90 cubin, and the PTX is
assembled by `ptxas -arch=sm_90` when a ptxas at least as new as NVRTC is on PATH. Skipped without NVRTC.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tg.codegen.program import get_program
from tg.codegen.render.cuda import CUDARenderer
from tg.runtime.device import DeviceUnavailable

ROOT = Path(__file__).resolve().parent.parent
OP_TESTS = ["test_tensor_ops.py", "test_tensor_movement.py", "test_tensor_creation.py", "test_numerics_nan.py"]
ARCH = "sm_90"


@pytest.fixture(scope="module")
def compiler():  # type: ignore[no-untyped-def]
    from tg.runtime.backends._cuda import CUDACompiler

    if os.environ.get("DEV", "").strip().upper() not in ("", "CPU"):
        pytest.skip("the CUDA compile check captures kernels on the CPU: it runs in the default pass, not with DEV set")
    try:
        return CUDACompiler(ARCH)
    except DeviceUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def op_kernels(tmp_path_factory: pytest.TempPathFactory) -> list:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("capture") / "kernels.pkl"
    env = {**os.environ, "TG_CAPTURE_KERNELS": str(out), "DEV": "CPU"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "plugins"), env.get("PYTHONPATH", "")])
    tests = [str(ROOT / "packages" / "tg-tensor" / "tests" / t) for t in OP_TESTS]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "kernel_capture", "-p", "no:randomly", "-p", "no:xdist", *tests]
    res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert out.exists(), f"the op tests did not finish:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    with open(out, "rb") as f:
        kernels = pickle.load(f)
    assert len(kernels) > 50, f"only {len(kernels)} kernels captured"
    return kernels


def _ptxas_at_least(version: tuple[int, int]) -> str | None:
    """ptxas on PATH if its CUDA release is >= version (older ones reject newer PTX ISA versions)."""
    if (ptxas := shutil.which("ptxas")) is None:
        return None
    out = subprocess.run([ptxas, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    return ptxas if m and (int(m[1]), int(m[2])) >= version else None


# slow: the op suites in a subprocess, then NVRTC per kernel (the default run compiles a model: test_null_targets)
@pytest.mark.slow
def test_every_op_kernel_compiles_for_sm90(compiler, op_kernels, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tg.runtime.backends._cuda import NVRTC_OPTIONS, nvrtc_compile, nvrtc_version

    renderer = CUDARenderer(ARCH)
    sources = sorted({get_program(ast, renderer).src for ast in op_kernels})
    ptxas = _ptxas_at_least(nvrtc_version())

    def check(i_src: tuple[int, str]) -> str | None:
        i, src = i_src
        try:
            ptx, cubin = nvrtc_compile(src, ARCH, NVRTC_OPTIONS)  # one compile gives both
            assert cubin is not None and cubin[:4] == b"\x7fELF"
        except Exception as e:  # collect every failure, not just the first
            return f"kernel {i}: {e}"
        if ptxas is not None:
            path = tmp_path / f"k{i}.ptx"
            path.write_bytes(ptx)
            res = subprocess.run([ptxas, f"-arch={ARCH}", str(path), "-o", os.devnull], capture_output=True, text=True)
            if res.returncode != 0:
                return f"kernel {i}: ptxas failed: {res.stderr}\n{src}"
        return None

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f for f in pool.map(check, enumerate(sources)) if f is not None]
    assert not failures, f"{len(failures)} of {len(sources)} kernels failed:\n" + "\n\n".join(failures[:5])


def _matmul_ast(m: int, n: int, k: int, dtype=None):  # type: ignore[no-untyped-def]
    from tg.ir.dtype import dtypes
    from tg.ir.ops import AxisType, Ops
    from tg.ir.uop import UOp

    dt = dtype or dtypes.float32
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    a = UOp.param(1, dt, m * k).index(i * k + r).load().cast(dtypes.float32)
    b = UOp.param(2, dt, k * n).index(r * n + j).load().cast(dtypes.float32)
    out = (a * b).reduce(r, arg=Ops.ADD)
    return UOp.sink(UOp.param(0, dtypes.float32, m * n).index(i * n + j).store(out).end(i, j))


def _ptx_and_ptxas(compiler, src: str, tmp_path: Path) -> str:  # type: ignore[no-untyped-def]
    from tg.runtime.backends._cuda import NVRTC_OPTIONS, nvrtc_compile, nvrtc_version

    ptx, cubin = nvrtc_compile(src, ARCH, NVRTC_OPTIONS)
    assert cubin is not None and cubin[:4] == b"\x7fELF"
    if (ptxas := _ptxas_at_least(nvrtc_version())) is not None:
        (tmp_path / "k.ptx").write_bytes(ptx)
        res = subprocess.run([ptxas, f"-arch={ARCH}", str(tmp_path / "k.ptx"), "-o", os.devnull], capture_output=True,
                             text=True, check=False)  # fmt: skip
        assert res.returncode == 0, res.stderr
    return ptx.decode()


def test_matmul_tile_uses_16_byte_loads_and_stores(compiler, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = get_program(_matmul_ast(256, 256, 64), CUDARenderer(ARCH))
    assert "tg_vload_float4(" in p.src and "tg_vstore_float4(" in p.src and p.local_size == (16, 16)
    ptx = _ptx_and_ptxas(compiler, p.src, tmp_path)
    assert re.search(r"ld\.global(\.nc)?\.v4\.f32", ptx) and "st.global.v4.f32" in ptx


def test_half_kernels_convert_with_cvt_instructions(compiler, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tg.ir.dtype import dtypes

    # without opts (the heuristic would put this matmul on tensor cores, which take the halves as they are)
    src = get_program(_matmul_ast(64, 64, 32, dtypes.float16), CUDARenderer(ARCH), []).src
    ptx = _ptx_and_ptxas(compiler, src, tmp_path)
    assert "cvt.f32.f16" in ptx


@pytest.mark.parametrize("dtype_name, ptx_type", [("float16", "f16"), ("bfloat16", "bf16")])
def test_tensor_core_matmul_assembles_for_sm90(compiler, tmp_path: Path, dtype_name: str, ptx_type: str) -> None:  # type: ignore[no-untyped-def]
    from tg.codegen.opt.opts import Opt, OptOps
    from tg.ir.dtype import dtypes

    p = get_program(_matmul_ast(128, 64, 256, getattr(dtypes, dtype_name)), CUDARenderer(ARCH))
    assert p.applied_opts == (Opt(OptOps.TC, 2),)  # the heuristic picks the tensor cores
    ptx = _ptx_and_ptxas(compiler, p.src, tmp_path)
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx_type}.{ptx_type}.f32" in ptx
