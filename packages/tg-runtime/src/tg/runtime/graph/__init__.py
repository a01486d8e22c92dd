"""Graph executors: run a batch of captured calls with few host round trips.

``EXECUTORS`` is the registry `tg.runtime.jit.CapturedProgram` splits a program with: ``"module:Class"`` names,
tried in order, of classes with ``supports(exec_item) -> bool`` and ``build(program, indices) -> executor``; an
executor is called ``executor(slot_buffers, var_vals)`` per replay. Consecutive items one class supports form one
batch (of at least two items; single items stay ExecItems). Built in: `CPUBatchExecutor` (CPU kernels in one native
call) and `tg.runtime.hcq.graph.HCQGraphExecutor` (kernels and copies on HCQ devices as one linked HCQ program).
A backend appends its own.
"""

from __future__ import annotations

import importlib
from typing import Any

from tg.runtime.graph.cpu_batch import CPUBatchExecutor

__all__ = ["EXECUTORS", "CPUBatchExecutor", "executor_classes"]

EXECUTORS: list[str] = ["tg.runtime.graph.cpu_batch:CPUBatchExecutor", "tg.runtime.hcq.graph:HCQGraphExecutor"]

_loaded: dict[str, Any] = {}


def executor_classes() -> list[Any]:
    """The registered executor classes, imported on first use."""
    out = []
    for path in EXECUTORS:
        if (cls := _loaded.get(path)) is None:
            module, _, name = path.partition(":")
            cls = _loaded[path] = getattr(importlib.import_module(module), name)
        out.append(cls)
    return out
