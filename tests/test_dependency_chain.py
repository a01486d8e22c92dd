"""Enforces the dependency chain of shared/DESIGN.md by scanning every import in the sources.

tg.ir <- tg.codegen <- tg.runtime <- tg.tensor <- tg.llm; tg.drivers imports nothing from tg.*; the tools
(amdflash, tg_pci_server) import only tg.drivers; tg.runtime may use tg.drivers, but only lazily
(inside a function, never at module level).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# first-party module -> the first-party modules it may import (itself is always allowed)
ALLOWED: dict[str, set[str]] = {
    "tg.ir": set(),
    "tg.codegen": {"tg.ir"},
    "tg.runtime": {"tg.ir", "tg.codegen"},
    "tg.tensor": {"tg.ir", "tg.codegen", "tg.runtime"},
    "tg.llm": {"tg.ir", "tg.codegen", "tg.runtime", "tg.tensor"},
    "tg.drivers": set(),
    "amdflash": {"tg.drivers"},
    "tg_pci_server": {"tg.drivers"},
}
# imports allowed only inside functions (loaded lazily, when a hardware backend is used)
LAZY_ALLOWED: dict[str, set[str]] = {"tg.runtime": {"tg.drivers"}}


def first_party(name: str) -> str | None:
    """The first-party unit (e.g. 'tg.ir') a dotted module name belongs to, or None for third-party."""
    parts = name.split(".")
    if parts[0] == "tg":
        return ".".join(parts[:2]) if len(parts) > 1 else "tg"
    return parts[0] if parts[0] in ALLOWED else None


def imported_modules(source: str) -> list[tuple[str, bool]]:
    """(module, is_lazy) for every absolute import in `source`; lazy means inside a function body."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            lazy = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                found.extend((alias.name, in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module, in_function))
                # `from tg import ir` names the sub-package in the alias
                if child.module == "tg":
                    found.extend((f"tg.{alias.name}", in_function) for alias in child.names)
            visit(child, lazy)

    visit(ast.parse(source), False)
    return found


def violations(unit: str, source: str, filename: str = "<source>") -> list[str]:
    """Messages for every import in `source` (belonging to `unit`) that goes against the chain."""
    problems = []
    for module, lazy in imported_modules(source):
        target = first_party(module)
        if target is None or target == unit:
            continue
        if target == "tg":
            problems.append(f"{filename}: `import {module}` imports the bare namespace `tg`")
        elif target in ALLOWED[unit] or (lazy and target in LAZY_ALLOWED.get(unit, set())):
            continue
        else:
            where = "inside a function" if lazy else "at module level"
            problems.append(f"{filename}: {unit} must not import {module} ({where})")
    return problems


def source_units() -> list[tuple[str, Path]]:
    """(unit, source root) of every workspace member."""
    units = [
        (f"tg.{d.name.removeprefix('tg-')}", d / "src" / "tg" / d.name.removeprefix("tg-"))
        for d in sorted((ROOT / "packages").iterdir())
        if d.is_dir()
    ]
    units += [
        ("amdflash", ROOT / "tools/amdflash/src/amdflash"),
        ("tg_pci_server", ROOT / "tools/pci-server/src/tg_pci_server"),
    ]
    return units


@pytest.mark.parametrize(("unit", "src"), source_units(), ids=lambda v: str(v))
def test_imports_follow_dependency_chain(unit: str, src: Path) -> None:
    assert src.is_dir(), f"missing source directory {src}"
    problems = []
    for path in sorted(src.rglob("*.py")):
        problems += violations(unit, path.read_text(), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_no_tg_init_anywhere() -> None:
    offenders = [p for p in ROOT.glob("*/*/src/tg/__init__.py")]
    assert not offenders, f"tg must stay a PEP 420 namespace package, found {offenders}"


# --- the check is known to bite: synthetic examples -------------------------------------------


@pytest.mark.parametrize(
    ("unit", "source"),
    [
        ("tg.ir", "import tg.codegen\n"),
        ("tg.ir", "from tg.tensor import Tensor\n"),
        ("tg.ir", "from tg import runtime\n"),
        ("tg.codegen", "from tg.runtime.device import Device\n"),
        ("tg.drivers", "from tg.ir.helpers import getenv\n"),
        ("amdflash", "import tg.tensor\n"),
        ("tg_pci_server", "from amdflash.cli import main\n"),
        ("tg.runtime", "import tg.drivers.pci\n"),  # drivers only lazily
        ("tg.runtime", "def f():\n    import tg.tensor\n"),  # upward even when lazy
        ("tg.tensor", "from tg.llm import LLM\n"),
    ],
)
def test_wrong_imports_are_reported(unit: str, source: str) -> None:
    assert violations(unit, source), f"{source!r} in {unit} should be a violation"


@pytest.mark.parametrize(
    ("unit", "source"),
    [
        ("tg.codegen", "from tg.ir.uop import UOp\nimport numpy\n"),
        ("tg.tensor", "import tg.runtime\nfrom tg.ir import dtypes\n"),
        ("tg.runtime", "def open_pci():\n    from tg.drivers.pci import open_device\n"),
        ("amdflash", "from tg.drivers.mmio import MMIOView\nfrom amdflash.regs import X\n"),
    ],
)
def test_allowed_imports_pass(unit: str, source: str) -> None:
    assert violations(unit, source) == []
