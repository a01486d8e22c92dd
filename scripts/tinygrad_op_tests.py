"""Run tinygrad's own op tests (`test_ops.py`) against tg through an import shim that maps `tinygrad` to tg.tensor.

tinygrad's test file is not part of this repository (its code is not ours to copy): this script finds it and runs it
unchanged. Where it looks, in order:

1. the path given on the command line: the file itself, or a tinygrad source tree (a clone) holding
   `test/backend/test_ops.py` (tinygrad 0.14's layout) or `test/test_ops.py` (older releases);
2. `$TINYGRAD_SRC` (a tinygrad source tree);
3. GitHub: the file at tag v0.14.0 (`raw.githubusercontent.com/tinygrad/tinygrad/v0.14.0/...`, both layouts).

tinygrad's source distribution on the package index ships only `test/test_tiny.py`, so a clone or GitHub is needed.

The file needs torch (its reference): run it with the `torch` hatch environment, `hatch run torch:op-tests [PATH]`,
or any Python that has torch and tg installed. It prints the pass counts and one line per failure (`--json PATH`
writes the per-test outcomes and messages; `-k EXPR` selects tests as pytest does).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import types
import urllib.request
from pathlib import Path
from typing import Any

TEST_PATHS = ("test/backend/test_ops.py", "test/test_ops.py")
RAW_BASE = "https://raw.githubusercontent.com/tinygrad/tinygrad/v0.14.0/"


# ---- finding the test file -----------------------------------------------------------------------------------------


def _in_tree(root: Path) -> Path | None:
    return next((root / p for p in TEST_PATHS if (root / p).is_file()), None)


def _from_github(work: Path) -> tuple[Path, str] | None:
    for rel in TEST_PATHS:
        try:
            with urllib.request.urlopen(RAW_BASE + rel, timeout=30) as r:
                data = r.read()
        except OSError:
            continue
        (out := work / "test_ops.py").write_bytes(data)
        return out, RAW_BASE + rel
    return None


def locate(arg: str | None, work: Path) -> tuple[Path, str]:
    """(the test file, where it came from); SystemExit naming every place tried when there is none."""
    tried = []
    for candidate, label in ((arg, "command line"), (os.environ.get("TINYGRAD_SRC"), "$TINYGRAD_SRC")):
        if not candidate:
            continue
        path = Path(candidate).expanduser()
        found = path if path.is_file() else _in_tree(path)
        if found is not None:
            return found, f"{label}: {found}"
        tried.append(f"{label} {path} (no {' or '.join(TEST_PATHS)})")
    if (got := _from_github(work)) is not None:
        return got
    tried.append(f"{RAW_BASE}{{{','.join(TEST_PATHS)}}} (not reachable)")
    raise SystemExit("tinygrad's test_ops.py was not found; tried: " + "; ".join(tried) + ". Pass a tinygrad source "
                     "tree or the file: python scripts/tinygrad_op_tests.py ~/src/tinygrad")  # fmt: skip


# ---- the shim -------------------------------------------------------------------------------------------------


class _DevInfo:
    """tinygrad's parsed DEV setting: the parts test_ops.py asks about."""

    def __init__(self) -> None:
        from tg.ir.helpers import dev_targets

        targets = dev_targets()
        first = targets[0] if targets else None
        self.interface = (getattr(first, "interface", None) or "") if first else ""
        self.renderer = (getattr(first, "renderer", None) or "") if first else ""
        self.arch = (getattr(first, "arch", None) or "") if first else ""
        self.device = (getattr(first, "device", None) or "") if first else ""


class NIRRenderer:
    """Stands in for tinygrad's Mesa NIR renderer: no tg device renders NIR, so `isinstance` checks are False."""


def install_shim() -> None:
    """Make `import tinygrad` (and the submodules test_ops.py uses) give tg's objects."""
    import tg.tensor as tgt
    from tg.ir import helpers as tg_helpers
    from tg.tensor import nn as tg_nn
    from tg.tensor.data import to_numpy_dtype

    def module(name: str, **attrs: Any) -> types.ModuleType:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__path__ = []  # a package: submodules resolve through sys.modules
        sys.modules[name] = m
        return m

    helpers = module("tinygrad.helpers", **{k: v for k, v in vars(tg_helpers).items() if not k.startswith("__")})
    helpers.DEV = _DevInfo()
    helpers.IMAGE = 0
    helpers.CI = bool(os.environ.get("CI"))
    top = module(
        "tinygrad",
        Tensor=tgt.Tensor, Device=tgt.Device, dtypes=tgt.dtypes, Context=tgt.Context, GlobalCounters=tgt.GlobalCounters,
        TinyJit=tgt.TinyJit, Variable=tgt.Variable, nn=tg_nn, helpers=helpers,
    )  # fmt: skip
    top.tensor = module("tinygrad.tensor", Tensor=tgt.Tensor, _to_np_dtype=to_numpy_dtype)
    top.dtype = module("tinygrad.dtype", dtypes=tgt.dtypes, DType=type(tgt.dtypes.float32))
    top.device = module("tinygrad.device", Device=tgt.Device, is_dtype_supported=_is_dtype_supported)
    top.renderer = module("tinygrad.renderer")
    top.renderer.nir = module("tinygrad.renderer.nir", NIRRenderer=NIRRenderer)
    sys.modules["tinygrad.nn"] = tg_nn


def _is_dtype_supported(dtype: Any, device: str | None = None) -> bool:
    from tg.tensor import Device

    return dtype in Device[device or Device.DEFAULT].renderer.supported_dtypes()


# ---- running ----------------------------------------------------------------------------------------------------


class _Recorder:
    """A pytest plugin keeping each test's outcome and, for failures, the last line of the error."""

    def __init__(self) -> None:
        self.results: dict[str, dict[str, str]] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        name = report.nodeid.split("::", 1)[-1]
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            message = ""
            if report.failed:
                text = str(report.longrepr).strip().splitlines()
                errors = [ln[2:].strip() for ln in text if ln.startswith("E ")]
                named = [ln for ln in errors if "Error" in ln.split(":")[0] or "Exception" in ln.split(":")[0]]
                message = (named[0] if named else errors[0] if errors else text[-1]).strip()[:300]
            elif report.skipped and isinstance(report.longrepr, tuple):
                message = str(report.longrepr[2])[:200]
            self.results[name] = {"outcome": report.outcome, "message": message}


def run(test_file: Path, keyword: str | None, extra: list[str]) -> dict[str, dict[str, str]]:
    """Run the test file under the shim; per-test outcome and message."""
    import pytest

    install_shim()
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "test_ops.py"
        shutil.copy(test_file, target)
        recorder = _Recorder()
        args = [str(target), "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "--rootdir", tmp, "-o",
                "addopts=", *(["-k", keyword] if keyword else []), *extra]  # fmt: skip
        pytest.main(args, plugins=[recorder])
    return recorder.results


def main(argv: list[str] | None = None) -> int:
    """Command line entry: locate, run, report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", help="test_ops.py, or a tinygrad source tree holding it")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression selecting tests")
    parser.add_argument("--json", type=Path, help="write {test: {outcome, message}} here")
    args, pytest_args = parser.parse_known_args(argv)  # anything else goes to pytest (e.g. -x, --maxfail 5)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("tinygrad's op tests compare against torch: run with `hatch run torch:op-tests`") from None
    with tempfile.TemporaryDirectory() as work:
        test_file, origin = locate(args.source, Path(work))
        print(f"tinygrad op tests from {origin}")
        results = run(test_file, args.keyword, [a for a in pytest_args if a != "--"])
    counts = {k: sum(r["outcome"] == k for r in results.values()) for k in ("passed", "failed", "skipped")}
    ran = counts["passed"] + counts["failed"]
    failures = {name: r["message"] for name, r in results.items() if r["outcome"] == "failed"}
    for name, message in sorted(failures.items()):
        print(f"FAILED {name}: {message}")
    pct = 100 * counts["passed"] / ran if ran else 0.0
    print(f"\n{counts['passed']} of {ran} passed ({pct:.1f}%), {counts['failed']} failed, {counts['skipped']} skipped")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
