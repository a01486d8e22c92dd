"""A smoke test of one installed distribution: `python scripts/smoke.py tg-tensor`.

Run by `scripts/check_dists.sh` in a fresh venv holding only that distribution's wheel (and its dependencies): it
imports the package and exercises its main path once through the public API, so an undeclared dependency, a file
missing from the wheel or a broken entry point fails here. The packages' own suites run once, from the source tree,
in `hatch test`; this is not a second run of them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def tg_ir() -> None:
    from tg.ir import Target, Variable
    from tg.ir.dtype import dtypes, least_upper_dtype

    i = Variable("i", 0, 10)
    expr = (i * 4 + 3) // 4
    assert expr.simplify() is i or str(expr.simplify()) == str(i), expr.simplify()
    assert least_upper_dtype(dtypes.int8, dtypes.float16) is dtypes.float16
    assert Target.parse("NULL:CUDA:sm_90")[0].arch == "sm_90"


def tg_codegen() -> None:
    from tg.codegen.program import get_program
    from tg.codegen.render.cstyle import ClangRenderer
    from tg.ir.dtype import dtypes
    from tg.ir.uop import UOp

    r = UOp.range(256, 0)
    a = UOp.param(1, dtypes.float32, 256).index(r).load()
    ast = UOp.sink(UOp.param(0, dtypes.float32, 256).index(r).store(a * UOp.const(dtypes.float32, 2.0)).end(r))
    src = get_program(ast, ClangRenderer(32)).src
    assert "void " in src and "data0" in src, src


def tg_runtime() -> None:
    from tg.codegen.program import get_program
    from tg.ir.dtype import dtypes
    from tg.ir.uop import UOp
    from tg.runtime.device import Buffer, Device
    from tg.runtime.engine import CompiledRunner

    r = UOp.range(64, 0)
    a = UOp.param(1, dtypes.int32, 64).index(r).load()
    ast = UOp.sink(UOp.param(0, dtypes.int32, 64).index(r).store(a * UOp.const(dtypes.int32, 3)).end(r))
    for device in ("CPU", "PYTHON"):
        runner = CompiledRunner(get_program(ast, Device[device].renderer), device)
        out, inp = Buffer(device, 64, dtypes.int32), Buffer(device, 64, dtypes.int32)
        inp.copyin(memoryview(bytearray(b"".join(i.to_bytes(4, "little") for i in range(64)))))
        runner([out.ensure_allocated(), inp], {})
        got = [int.from_bytes(bytes(out.as_memoryview())[4 * i : 4 * i + 4], "little") for i in range(64)]
        assert got == [3 * i for i in range(64)], (device, got)


def tg_tensor() -> None:
    import numpy as np

    from tg.tensor import Tensor

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 16), dtype=np.float32), rng.standard_normal((16, 4), dtype=np.float32)
    tw = Tensor(w, requires_grad=True)
    out = (Tensor(x) @ tw).relu().softmax(-1)
    h = np.maximum(x @ w, 0)
    e = np.exp(h - h.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert tw.grad is not None and tw.grad.shape == (16, 4)


def tg_drivers() -> None:
    from tg.drivers.mock import BarSpec, MockPCIDevice

    with MockPCIDevice("SMOKE", "mock:smoke", bars={0: BarSpec(4096)}, lock=False) as dev:
        dev.write_config(0x04, 0x6, 2)
        assert dev.read_config(0x04, 2) & 0x6 == 0x6


def amdflash() -> None:
    exe = shutil.which("amdflash", path=str(Path(sys.executable).parent))
    assert exe is not None, "the amdflash console script is missing from the wheel"
    res = subprocess.run([exe, "--sim", "romsw", "info"], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def tg_pci_server() -> None:
    from tg.drivers.remote import RemotePCIDevice, remote_list

    exe = shutil.which("tg-pci-server", path=str(Path(sys.executable).parent))
    assert exe is not None, "the tg-pci-server console script is missing from the wheel"
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "out"
        env = {**os.environ, "TG_DRIVERS_LOCK_DIR": tmp}
        with open(log, "wb") as out:
            proc = subprocess.Popen([exe, "--port", "0", "--backend", "mock"], stdout=out, stderr=out, env=env)
        try:
            deadline = time.monotonic() + 30
            while "listening on " not in log.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            address = log.read_text().split("listening on ", 1)[1].split()[0]
            ((conn, name),) = remote_list(0x1002, ((0xFFFF, (0x744C,)),), remote=address)
            dev = RemotePCIDevice("SMOKE", name, conn, lock=False)
            assert dev.read_config(0x00, 2) == 0x1002
            dev.close()
        finally:
            proc.terminate()
            proc.wait(10)


def tg_llm() -> None:
    import numpy as np

    from tg.llm.chat import format_chat
    from tg.llm.generate import SamplingParams, sample

    text = format_chat("llama", [{"role": "user", "content": "hi"}])
    assert "<|start_header_id|>user<|end_header_id|>" in text and text.endswith("<|end_header_id|>\n\n"), text
    logits = np.array([0.1, 3.0, -1.0, 2.9], dtype=np.float32)
    assert sample(logits, SamplingParams(), np.random.default_rng(0)) == 1
    assert sample(logits, SamplingParams(temperature=1.0, top_k=2, seed=0), np.random.default_rng(0)) in (1, 3)
    exe = shutil.which("tg-llm", path=str(Path(sys.executable).parent))
    assert exe is not None, "the tg-llm console script is missing from the wheel"
    res = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0 and "--model" in res.stdout, res.stdout + res.stderr


SMOKE: dict[str, Callable[[], None]] = {
    "tg-ir": tg_ir,
    "tg-codegen": tg_codegen,
    "tg-runtime": tg_runtime,
    "tg-tensor": tg_tensor,
    "tg-llm": tg_llm,
    "tg-drivers": tg_drivers,
    "amdflash": amdflash,
    "tg-pci-server": tg_pci_server,
}


def main(names: list[str]) -> None:
    """Run the smoke test of each named distribution (default: all)."""
    for name in names or list(SMOKE):
        if name not in SMOKE:
            sys.exit(f"no smoke test for {name!r}; known: {', '.join(SMOKE)}")
        start = time.perf_counter()
        SMOKE[name]()
        print(f"smoke ok: {name} ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
