"""A pytest plugin that records kernel calls with their data (tg.runtime.amd.sim.differential.record_calls).

`pytest -p kernel_calls` with this folder on PYTHONPATH and `TG_CAPTURE_CALLS=/path/file.pkl` in the environment:
every call of a compiled kernel in the session is recorded (AST, variable values, buffer bytes before and after; at
most 2 calls per kernel, none over 1 MiB of buffers) and pickled at the end with the session's exit status.
tests/test_amd_emu_diff.py replays them on the RDNA3 emulator.
"""

from __future__ import annotations

import os
import pickle

import pytest

from tg.runtime.amd.sim.differential import record_calls

_recording = record_calls()
_recorded = _recording.__enter__()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if path := os.environ.get("TG_CAPTURE_CALLS"):
        with open(path, "wb") as f:
            pickle.dump({"records": _recorded.calls, "skipped": _recorded.skipped_too_big,
                         "exitstatus": int(exitstatus)}, f)  # fmt: skip
