"""Differential test of the RDNA3 emulator: tg's kernels compiled for gfx1100 and run on `emu.launch` give the PYTHON
device's results (amd.md 4.7, item 3; the comparison rules are tg.runtime.amd.sim.differential's).

A suite runs in a subprocess with the `kernel_calls` plugin (tests/plugins), which records every kernel call: its AST,
the variable values and the bytes of its buffers before and after. Each recorded call is then run on the emulator
from the recorded inputs and compared with the PYTHON device: the tiny suite runs on PYTHON (its big cases shrink
there) so its recorded outputs are the reference; the tg-tensor suite runs on the CPU and each kernel is run again on
PYTHON.

The tiny suite's kernels run in CI's emulator stage (TG_EMU_DIFF=tiny); the non-slow tg-tensor suite's too in `--full`
(TG_EMU_DIFF=full). Both need llvmlite.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llvmlite")

from tg.runtime.amd.sim.differential import replay

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "test_tiny.py"


def capture(tests: list[str], dev: str, tmp: Path, strict: bool = True) -> dict[str, Any]:
    """Run pytest on `tests` (not slow, not torch) with DEV=dev in a subprocess that records every kernel call.

    strict: the suite must pass; else the calls of a suite with failing tests are used all the same (the failures
    are another test's business), and `failed` says how the suite ended."""
    out = tmp / "calls.pkl"
    env = {**os.environ, "TG_CAPTURE_CALLS": str(out), "DEV": dev}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "plugins"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-q", *(["-x"] if strict else []), "-p", "kernel_calls", "-p",
           "no:randomly", "-p", "no:xdist", "-m", "not slow and not torch", *tests]  # fmt: skip
    res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False)
    assert out.exists(), f"the suite did not finish:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    with open(out, "rb") as f:
        calls = pickle.load(f)
    if strict:
        assert calls["exitstatus"] == 0, f"the suite failed on {dev}:\n{res.stdout[-3000:]}"
    calls["failed"] = res.stdout.strip().splitlines()[-1] if calls["exitstatus"] else ""
    return calls


def check(calls: dict[str, Any]) -> None:
    """Replay the recorded calls on the emulator; fail with the mismatches."""
    failures, counts = replay(calls["records"])
    print(
        f"emulator differential: {dict(counts)}, skipped when captured: {calls['skipped']}"
        + (f"; the captured suite itself ended: {calls['failed']}" if calls.get("failed") else "")
    )
    assert not failures, f"{len(failures)} emulator mismatches:\n" + "\n".join(failures[:40])


@pytest.mark.skipif(os.environ.get("TG_EMU_DIFF") not in ("tiny", "full"), reason="runs in CI's amd-emu stage "
                    "(TG_EMU_DIFF=tiny)")  # fmt: skip
def test_tiny_suite_kernels_match_python(tmp_path: Path) -> None:
    calls = capture([str(TINY)], "PYTHON", tmp_path)
    assert len(calls["records"]) >= 15, f"only {len(calls['records'])} kernel calls recorded"
    check(calls)


@pytest.mark.skipif(os.environ.get("TG_EMU_DIFF") != "full", reason="the tg-tensor differential runs in --full "
                    "(TG_EMU_DIFF=full)")  # fmt: skip
def test_tensor_suite_kernels_match_python(tmp_path: Path) -> None:
    calls = capture([str(ROOT / "packages" / "tg-tensor" / "tests")], "CPU", tmp_path, strict=False)
    assert len(calls["records"]) >= 200, f"only {len(calls['records'])} kernel calls recorded"
    check(calls)
