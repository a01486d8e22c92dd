"""No import cycles inside a package: the modules of each package import each other in one direction.

`tests/test_dependency_chain.py` keeps the packages in their chain (tg.ir <- tg.codegen <- tg.runtime <- ...); this
test looks inside each package. A module's imports are every import in its source, including those inside function
bodies (a lazy import hides a cycle from Python's import machinery, not from the reader), except those under
`if TYPE_CHECKING:` (never executed). Modules that import each other directly or through others form a cycle (a
strongly connected component of the import graph).

The cycles that exist today are listed in `KNOWN_CYCLES`, each with the reason it is still there: the test fails
when a new cycle appears or a known one gains a module, and also when a known one shrinks or goes away, so that the
list stays the true record of what is left to untangle (remove the entry or its modules then).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cycle(package: str, modules: str) -> frozenset[str]:
    """The modules (space-separated, relative to `package`) of one cycle."""
    return frozenset(f"{package}.{m}" for m in modules.split())


# package -> the cycles it still has; a package not listed must have none (tg.ir: tg.ir.symbolic installs its
# simplifier as UOp.simplify, so uop.py imports neither symbolic nor pattern; tg.runtime: the engine hands HCQ
# schedules to HCQDevice.run_linear, ExecItemLauncher lives beside the engine's runners, and an HCQ device sits above
# the queue stack it runs its transfers and clock reads on (run, link, exec take devices by duck type; regions and
# signals live in hcq.region, profile records in hcq.profile); tg.codegen, tg.drivers, tg.llm and the
# tools have none: renderers hold the target data that lowering and the optimiser read, tensor cores and CORE_ID;
# PCI discovery and the Linux device layer both take the sysfs root from tg.drivers.pci.sysfs; the AM driver's IP
# blocks log through their device; the RDNA3 generators build on amd.sim.blockgen, not the translator; CPU:LLVM's
# program subclasses backends.cpu_program's, not the CPU device module's; the state-dict walk and loader live in
# nn.module beside Module, and nn.state re-exports them with the file formats; tg.tensor's topic modules, @function
# and the traced-call argument walk build results with `_tensor_class()` and recognise tensors as args.TensorBase,
# so only tensor.py and the user-level modules above it (jit, nn, ...) import tensor.py)
KNOWN_CYCLES: dict[str, list[frozenset[str]]] = {}


def packages() -> list[tuple[str, Path]]:
    """(package name, source directory) of every workspace member."""
    found = [(f"tg.{d.name.removeprefix('tg-')}", d / "src" / "tg" / d.name.removeprefix("tg-"))
             for d in sorted((ROOT / "packages").iterdir()) if d.is_dir()]  # fmt: skip
    found += [("amdflash", ROOT / "tools/amdflash/src/amdflash"),
              ("tg_pci_server", ROOT / "tools/pci-server/src/tg_pci_server")]  # fmt: skip
    return found


def module_name(package: str, src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def imports_of(module: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` that `module`'s source imports (at any depth, lazily or not, TYPE_CHECKING aside).

    `from a.b import c` counts as importing `a.b.c` when that is a module, else `a.b`."""
    found: set[str] = set()
    todo: list[ast.AST] = [ast.parse(source)]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child):
                todo.extend(child.orelse)  # type: ignore[attr-defined]
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:  # relative: resolve against this module's package
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for alias in child.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in known else target)
            todo.append(child)
    return {m for m in found if m in known and m != module}


def import_graph(package: str, src: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports."""
    paths = {module_name(package, src, p): p for p in sorted(src.rglob("*.py"))}
    known = set(paths)
    return {m: imports_of(m, p.read_text(), p.name == "__init__.py", known) for m, p in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in graph[v]:
                    found.append(frozenset(comp))
    return found


@pytest.mark.parametrize(("package", "src"), packages(), ids=lambda v: str(v))
def test_no_new_import_cycles(package: str, src: Path) -> None:
    assert src.is_dir(), f"missing source directory {src}"
    found = set(cycles(import_graph(package, src)))
    known = set(KNOWN_CYCLES.get(package, []))
    new = [sorted(c) for c in found - known]
    gone = [sorted(c) for c in known - found]
    assert not new, f"{package}: import cycles that are not in KNOWN_CYCLES (break them): {new}"
    assert not gone, f"{package}: KNOWN_CYCLES lists cycles that changed or no longer exist (update it): {gone}"


# --- the finder itself: synthetic graphs and sources -------------------------------------------------------------


def test_cycles_found_through_lazy_imports_not_type_checking() -> None:
    known = {"p.a", "p.b", "p.c"}
    a = "from p.b import f\n"
    b = "def g():\n    from p.a import f\n"  # lazy: still a cycle a -> b -> a
    c = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import f\n"
    graph = {"p.a": imports_of("p.a", a, False, known), "p.b": imports_of("p.b", b, False, known),
             "p.c": imports_of("p.c", c, False, known)}  # fmt: skip
    assert graph == {"p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": set()}
    assert cycles(graph) == [frozenset({"p.a", "p.b"})]


def test_relative_and_submodule_imports_resolve() -> None:
    known = {"p", "p.x", "p.x.y", "p.z"}
    assert imports_of("p.x.y", "from . import y\nfrom .. import z\n", False, known) == {"p.z"}
    assert imports_of("p.x", "from p.x import y\nfrom p import z\n", True, known) == {"p.x.y", "p.z"}


def test_long_chain_and_disjoint_cycles() -> None:
    n = 3000  # deeper than Python's recursion limit: the search is iterative
    graph = {f"m{i}": {f"m{i + 1}"} for i in range(n)} | {f"m{n}": {"m0"}, "x": {"y"}, "y": {"x"}, "z": set()}
    found = cycles(graph)
    assert sorted(len(c) for c in found) == [2, n + 1]
