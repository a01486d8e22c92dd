"""The path of one `realize()` through the packages, traced with `sys.setprofile` (CONTRIBUTING.md has the map).

tg.tensor asks tg.codegen for the schedule (`create_schedule`), then hands it to tg.runtime (`run_linear`); the
runtime's only call back into tg.codegen is code generation of a new kernel (`engine.generate_program` ->
`tg.codegen.program.get_program`: opt, lower, render). Nothing in tg.codegen calls into tg.runtime or tg.tensor: no
hooks installed by a higher layer (BEAM search is called by the runtime, which passes its pick to codegen).
"""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import numpy as np
import pytest

from tg.runtime import engine
from tg.runtime.device import Device
from tg.tensor import Tensor


def _unit(frame: FrameType | None) -> str | None:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "tg" and len(parts) > 1 else None


def _where(frame: FrameType) -> str:
    return f"{frame.f_globals.get('__name__')}:{frame.f_code.co_name}"


def trace_package_calls(fn: Any) -> list[tuple[str, str, str, str]]:
    """Run `fn()` and list, in call order, every call from one tg package into another (tg.ir, used by all, aside):
    (caller package, callee package, caller function, callee function)."""
    calls: list[tuple[str, str, str, str]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee, caller = _unit(frame), _unit(frame.f_back)
        if callee and caller and callee != caller and "tg.ir" not in (callee, caller):
            assert frame.f_back is not None
            calls.append((caller, callee, _where(frame.f_back), _where(frame)))

    # finalizers run wherever the garbage collector happens to run (an object another test left behind): collect
    # first and keep the collector off while tracing, and never count a __del__ as a call of the frame it interrupts
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if was_enabled:
            gc.enable()
    return [c for c in calls if not c[3].endswith(":__del__")]


@pytest.fixture
def fresh_kernels(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(engine, "method_cache", {})  # every kernel of the traced realize is compiled anew
    yield


def test_realize_goes_tensor_codegen_runtime_and_back_into_codegen_only_to_compile(fresh_kernels: None) -> None:
    x = Tensor(np.arange(11 * 37, dtype=np.float32).reshape(11, 37)).realize()
    assert Device[x.device].renderer is not None  # the device and its renderer are set up before the trace
    y = (x * 3.140625 + 1).sum(1)
    calls = trace_package_calls(y.realize)
    np.testing.assert_allclose(y.numpy(), (np.arange(11 * 37, dtype=np.float32).reshape(11, 37) * 3.140625 + 1).sum(1))

    pairs = [(a, b) for a, b, _, _ in calls]
    assert ("tg.tensor", "tg.codegen") in pairs and ("tg.tensor", "tg.runtime") in pairs, calls
    # the schedule is built before the runtime runs it
    schedule = next(i for i, c in enumerate(calls) if c[3].endswith(":create_schedule"))
    run = next(i for i, c in enumerate(calls) if c[3].endswith(":run_linear"))
    assert calls[schedule][0] == "tg.tensor" and calls[run][0] == "tg.tensor" and schedule < run, calls
    # codegen never calls up the chain (no call-backs installed by the runtime or the tensor layer)
    upward = [c for c in calls if c[0] == "tg.codegen" or (c[0] == "tg.runtime" and c[1] == "tg.tensor")]
    assert not upward, upward
    # the runtime returns into codegen only to generate the code of a new kernel
    into_codegen = [c for c in calls if c[:2] == ("tg.runtime", "tg.codegen")]
    assert into_codegen, "the traced realize compiled no kernel (the test needs a new kernel)"
    assert {(c[2], c[3]) for c in into_codegen} == {("tg.runtime.engine:generate_program",
                                                     "tg.codegen.program:get_program")}, into_codegen  # fmt: skip


def test_the_trace_sees_a_call_back() -> None:
    # the tracer itself: a codegen function calling into the runtime is reported as (codegen -> runtime)
    import tg.codegen.schedule as schedule

    code = "def call_back(f):\n    return f()\n"
    namespace: dict[str, Any] = {"__name__": schedule.__name__}
    exec(compile(code, "<codegen>", "exec"), namespace)
    hook = functools.partial(engine.has_buffer, Tensor.empty(1).uop)
    calls = trace_package_calls(lambda: namespace["call_back"](hook))
    assert any(c[:2] == ("tg.codegen", "tg.runtime") for c in calls), calls


def test_beam_search_is_called_by_the_runtime_not_by_codegen(fresh_kernels: None, tmp_path: Any) -> None:
    from tg.ir.helpers import Context

    x = Tensor(np.arange(5 * 19, dtype=np.float32).reshape(5, 19)).realize()
    assert Device[x.device].renderer is not None  # set up before the trace (alone in a worker, it was built in it)
    with Context(BEAM=1, BEAM_TIME=0.5, TG_CACHE_DIR=str(tmp_path)):  # a short search, its cache in tmp_path
        calls = trace_package_calls((x * 0.5078125).sum(1).realize)
    upward = [c for c in calls if c[0] == "tg.codegen" or (c[0] == "tg.runtime" and c[1] == "tg.tensor")]
    assert not upward, upward  # before: codegen's apply_opts called a BEAM hook that tg.runtime.search installed
    callers = {c[2].partition(":")[0] for c in calls if c[:2] == ("tg.runtime", "tg.codegen")}
    assert "tg.runtime.search" in callers and callers <= {"tg.runtime.engine", "tg.runtime.search"}, calls
