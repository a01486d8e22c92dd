"""AMD code generation checked without a GPU: every distinct kernel of the op tests compiles for gfx1100.

The op tests run on the CPU in a subprocess that records each kernel AST (tests/plugins/kernel_capture.py); each
distinct AST is rendered by AMDLLVMRenderer, compiled by llvmlite (LLVM 22) into a gfx1100 code object and loaded by
tg.runtime.amd.program (header, kernel descriptor, kernarg layout of amd.md 2.4), as `DEV=NULL:AMD:gfx1100` does.
Skipped without llvmlite. Marked slow (the capture runs the op tests once more); the CI's CPU:LLVM stage runs it.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OP_TESTS = ["test_tensor_ops.py", "test_numerics_nan.py"]

pytest.importorskip("llvmlite")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def op_kernels(tmp_path_factory: pytest.TempPathFactory) -> list:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("capture") / "kernels.pkl"
    env = {**os.environ, "TG_CAPTURE_KERNELS": str(out), "DEV": "CPU"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "plugins"), env.get("PYTHONPATH", "")])
    tests = [str(ROOT / "packages" / "tg-tensor" / "tests" / t) for t in OP_TESTS]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "kernel_capture", "-p", "no:randomly", "-p", "no:xdist",
           "-m", "not slow and not torch", *tests]  # fmt: skip
    res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert out.exists(), f"the op tests did not finish:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    with open(out, "rb") as f:
        kernels = pickle.load(f)
    assert len(kernels) > 50, f"only {len(kernels)} kernels captured"
    return kernels


def test_every_op_kernel_compiles_for_gfx1100(op_kernels: list, tmp_path: Path) -> None:  # type: ignore[type-arg]
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from capture_amd_kernels import compile_for_amd
    finally:
        sys.path.pop(0)
    binaries, failures = compile_for_amd(op_kernels)
    assert not failures, f"{len(failures)} of {len(op_kernels)} kernels failed:\n" + "\n\n".join(failures[:5])
    assert len(binaries) > 50
    for entry in binaries.values():
        assert entry["lib"][:4] == b"\x7fELF" and "amdgpu_kernel" in entry["src"]
