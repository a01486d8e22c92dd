"""A pytest plugin that records the AST of every kernel compiled during a test run (deduplicated).

`pytest -p kernel_capture` with this folder on PYTHONPATH and `TG_CAPTURE_KERNELS=/path/file.pkl` in the
environment: at the end of the session the distinct kernel ASTs are pickled to that file. tests/test_cuda_codegen.py
runs the op tests this way on the CPU and then renders and compiles every captured kernel for CUDA.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import pytest

import tg.codegen.program as program

_captured: dict[Any, None] = {}
_original = program.get_program


def _recording_get_program(ast: Any, renderer: Any, opts: Any = None) -> Any:
    _captured[ast] = None
    return _original(ast, renderer, opts)


program.get_program = _recording_get_program  # type: ignore[assignment]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if path := os.environ.get("TG_CAPTURE_KERNELS"):
        with open(path, "wb") as f:
            pickle.dump(list(_captured), f)
