"""Every documented environment setting is real (issue 27, item 5).

The README tables whose first column is `variable` (the root README and every package's and tool's README, so
settings other developers document are checked too) list settings. For the packages on the tg.ir chain each one
must be a ContextVar registered by `import tg.ir` alone, so `Context(NAME=...)` works whatever was imported
before. The standalone packages (tg-drivers and the tools import nothing from tg.*) read their settings from the
environment themselves: each one they document must be read in their source. A setting in the root README's table
belongs to one of the two. And every ContextVar is documented somewhere.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# packages that may not import tg.ir (the dependency chain): they read the environment themselves
STANDALONE = ("packages/tg-drivers", "tools/amdflash", "tools/pci-server")
_NAME = re.compile(r"`([A-Z][A-Z0-9_]*)`")


def _readmes() -> list[Path]:
    return [ROOT / "README.md", *sorted(ROOT.glob("packages/*/README.md")), *sorted(ROOT.glob("tools/*/README.md"))]


def documented_settings(readme: Path) -> list[str]:
    """The names in the first column of every table whose header's first cell is `variable` or `setting`."""
    names: list[str] = []
    in_table = False
    for line in readme.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
        if cells is None:
            in_table = False
        elif cells[0].lower() in ("variable", "setting", "environment variable"):
            in_table = True
        elif in_table and not set(cells[0]) <= set("-: "):
            names += _NAME.findall(cells[0])
    return names


def _registered(modules: str) -> set[str]:
    code = f"import json, {modules}; from tg.ir.helpers import ContextVar; print(json.dumps(sorted(ContextVar._cache)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout))


def _standalone_sources(pkg: str) -> str:
    """The package's source and tests, and tg-drivers' (the tools run on it and document its settings too)."""
    dirs = {ROOT / pkg, ROOT / "packages/tg-drivers"}
    return "\n".join(p.read_text() for d in sorted(dirs) for p in sorted(d.rglob("*.py")))


def test_the_tables_are_found() -> None:
    found = {p.relative_to(ROOT).as_posix(): documented_settings(p) for p in _readmes()}
    assert {"DEBUG", "DEV", "CC"} <= set(found["README.md"])
    assert "IGNORE_BEAM_CACHE" in found["packages/tg-runtime/README.md"]
    assert "REMOTE" in found["packages/tg-drivers/README.md"]


def test_documented_chain_settings_are_context_vars() -> None:
    known = _registered("tg.ir")
    standalone = {n for pkg in STANDALONE if (ROOT / pkg / "README.md").exists()
                  for n in documented_settings(ROOT / pkg / "README.md")}  # fmt: skip
    missing = []
    for readme in _readmes():
        rel = readme.relative_to(ROOT).as_posix()
        if rel.rsplit("/", 1)[0] in STANDALONE:
            continue
        for name in documented_settings(readme):
            if name not in known and not (rel == "README.md" and name in standalone):
                missing.append(f"{rel}: {name}")
    assert not missing, f"documented settings that are not ContextVars registered by `import tg.ir`: {missing}"


@pytest.mark.parametrize("pkg", STANDALONE)
def test_standalone_settings_are_read_by_their_package(pkg: str) -> None:
    readme = ROOT / pkg / "README.md"
    source = _standalone_sources(pkg)
    unread = [n for n in documented_settings(readme) if f'"{n}"' not in source and n != "DEBUG"]
    assert not unread, f"{pkg}/README.md documents settings its source never reads: {unread}"


def test_every_context_var_is_documented() -> None:
    everything = _registered("tg.ir, tg.codegen, tg.runtime, tg.tensor, tg.tensor.nn")
    documented = {n for p in _readmes() for n in documented_settings(p)}
    missing = sorted(everything - documented)
    assert not missing, f"ContextVars missing from every README's settings table: {missing}"


def test_context_accepts_the_issue_settings() -> None:
    code = (
        "from tg.tensor import Context\n"
        "with Context(IGNORE_BEAM_CACHE=1, BEAM_TIME=2.5, TG_CACHE_DIR='/tmp/x', TRAINING=1, FUSE_OPTIM=1):\n"
        "    from tg.ir.helpers import BEAM_TIME, IGNORE_BEAM_CACHE, TG_CACHE_DIR, cache_dir\n"
        "    assert IGNORE_BEAM_CACHE.value == 1 and BEAM_TIME.value == 2.5 and str(cache_dir()) == '/tmp/x'\n"
        "import os\n"
        "os.environ['BEAM_TIME'] = '7'\n"  # read at each use once the Context is gone
        "assert BEAM_TIME.value == 7.0 and IGNORE_BEAM_CACHE.value == 0\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_tinygrad_style_nn_access() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import tg.tensor as tg; print(tg.nn.Linear.__name__, tg.nn.optim.SGD.__name__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.split() == ["Linear", "SGD"], out.stderr
