"""A pytest plugin that records every kernel compiled during a test run (deduplicated).

`pytest -p kernel_capture` with this folder on PYTHONPATH, and in the environment:

- `TG_CAPTURE_KERNELS=/path/file.pkl`: at the end of the session the distinct kernel ASTs are pickled to that file
  (under pytest-xdist, each worker's to `/path/file.pkl.<worker id>`: scripts/check_amd_listings.py reads them all).
  tests/test_cuda_codegen.py and tests/test_amd_codegen.py run the op tests this way on the CPU, then render and
  compile every captured kernel for CUDA and for gfx1100.
- `TG_CAPTURE_BINARIES=/path/dir`: every distinct compiled kernel is written there as `<name>-<sha>.bin` (what the
  device's compiler produced: a shared object, an x86-64 object, a gfx1100 code object) with its source beside it
  (`.src`) and one `index.json` listing name, files, buffer slots, variables and launch sizes. The suites run under
  `DEV=CPU:LLVM` this way give the x86-64 objects; compiling their ASTs for `NULL:AMD:gfx1100`
  (`scripts/capture_amd_kernels.py`) gives the code objects an RDNA3 decoder or emulator is checked on.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import types
from pathlib import Path
from typing import Any

import pytest

import tg.codegen.program as program
from tg.runtime import engine

_captured: dict[Any, None] = {}
_binaries: dict[str, dict[str, Any]] = {}
_original = program.get_program
_original_runner_init = engine.CompiledRunner.__init__


def _recording_get_program(ast: Any, renderer: Any, opts: Any = None) -> Any:
    _captured[ast] = None
    return _original(ast, renderer, opts)


def _recording_runner_init(self: Any, p: Any, device: str | None = None, lib: bytes | None = None) -> None:
    _original_runner_init(self, p, device, lib)
    if os.environ.get("TG_CAPTURE_BINARIES"):
        record_binary(_binaries, p, self.lib)


def record_binary(into: dict[str, dict[str, Any]], p: Any, lib: bytes) -> None:
    """Remember one compiled kernel (ProgramSpec `p`, binary `lib`) under its content hash."""
    sha = hashlib.sha256(lib).hexdigest()[:16]
    if sha in into:
        return
    sizes = {k: None if v is None else [int(x) if isinstance(x, int) else str(x) for x in v]
             for k, v in (("global_size", p.global_size), ("local_size", p.local_size))}  # fmt: skip
    files = {"file": f"{p.name}-{sha}.bin", "source": f"{p.name}-{sha}.src"}
    into[sha] = {"name": p.name, **files, "lib": lib, "src": p.src, "globals": list(p.globals),
                 "vars": [str(v.arg[0]) for v in p.vars], **sizes}  # fmt: skip


def write_binaries(folder: str | Path, binaries: dict[str, dict[str, Any]]) -> None:
    """Write recorded kernels and their index.json into `folder`."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for entry in binaries.values():
        (out / entry["file"]).write_bytes(entry["lib"])
        (out / entry["source"]).write_text(entry["src"])
        index.append({k: v for k, v in entry.items() if k not in ("lib", "src")})
    (out / "index.json").write_text(json.dumps(sorted(index, key=lambda e: e["file"]), indent=1))


def _disguised(fn: Any, wrapped: Any) -> Any:
    """`fn` under the name of the function it wraps, with globals named like that function's module (and holding
    this plugin's names): a test tracing calls between tg's packages by their frames (tests/test_realize_path.py)
    then sees the wrapper as the function it wraps, not as a call out of tg and back."""
    scope = {**globals(), "__name__": wrapped.__module__}
    code = fn.__code__.replace(co_name=wrapped.__name__)
    return types.FunctionType(code, scope, wrapped.__name__, fn.__defaults__, fn.__closure__)


program.get_program = _disguised(_recording_get_program, _original)
engine.CompiledRunner.__init__ = _disguised(_recording_runner_init, _original_runner_init)  # type: ignore[method-assign]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if path := os.environ.get("TG_CAPTURE_KERNELS"):
        # each pytest-xdist worker of this session keeps its own kernels (not PYTEST_XDIST_WORKER: a pytest run in a
        # subprocess of a worker inherits that variable, e.g. tests/test_amd_codegen.py's op-test capture)
        if worker := getattr(session.config, "workerinput", {}).get("workerid"):
            path = f"{path}.{worker}"
        with open(path, "wb") as f:
            pickle.dump(list(_captured), f)
    if folder := os.environ.get("TG_CAPTURE_BINARIES"):
        write_binaries(folder, _binaries)
