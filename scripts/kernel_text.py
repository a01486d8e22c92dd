"""Kernel text of captured kernel ASTs for a fixed set of renderers: the before/after check of a codegen refactor.

A change to code generation that should not change behaviour (a pass rewritten as rules, a walk restructured) is
checked by rendering the same kernels before and after it. Capture the ASTs of a workload once with
tests/plugins/kernel_capture.py, then render them with each version of the code and compare:

    TG_CAPTURE_KERNELS=/tmp/asts.pkl PYTHONPATH=tests/plugins pytest -p kernel_capture -m "not slow" FILES...
    python scripts/kernel_text.py render /tmp/asts.pkl before.json     # on the old commit
    python scripts/kernel_text.py render /tmp/asts.pkl after.json      # on the new one
    python scripts/kernel_text.py compare before.json after.json       # exit status 1 on any difference

`render` writes, for every renderer of `RENDERERS`, each kernel's (name, source) in the order of the AST file, with
the optimiser's default choices (no BEAM). A scheduler change compares the AST files themselves (`compare-asts`:
kernel count and the set of ASTs, by their printed form).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tg.codegen.program import get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.codegen.render.cuda import CUDARenderer
from tg.codegen.render.llvmir import AMDLLVMRenderer, CPULLVMRenderer
from tg.codegen.render.opencl import OpenCLRenderer
from tg.codegen.render.python import PythonRenderer
from tg.codegen.render.renderer import Renderer

# one renderer per code path of the lowering: scalar C, 16/32-byte vector C with threads, LLVM IR for x86 and
# gfx1100, CUDA and OpenCL (GPU ids, shared memory), the PYTHON device (warps expanded)
RENDERERS: dict[str, Callable[[], Renderer]] = {
    "clang-scalar": lambda: ClangRenderer(),
    "clang-x86-64-v2": lambda: ClangRenderer(vector_bytes=16, threads=4),
    "clang-x86-64-v3": lambda: ClangRenderer(vector_bytes=32, threads=8, fma=True),
    "llvm-x86-64": lambda: CPULLVMRenderer(features="+avx2,+fma", threads=4),
    "amd-gfx1100": lambda: AMDLLVMRenderer("gfx1100"),
    "cuda-sm_90": lambda: CUDARenderer("sm_90"),
    "opencl": lambda: OpenCLRenderer(),
    "python": lambda: PythonRenderer(),
}


def render_all(asts: list[Any], names: list[str]) -> dict[str, list[tuple[str, str]]]:
    """{renderer name: [(kernel name, source or 'ERROR: ...'), ...] in the order of `asts`} for `RENDERERS[names]`."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name in names:
        renderer, rows = RENDERERS[name](), []
        for ast in asts:
            try:
                p = get_program(ast, renderer)
                rows.append((p.name, p.src))
            except Exception as e:  # a kernel a target cannot take is recorded, not fatal: it must fail the same way
                rows.append(("?", f"ERROR: {type(e).__name__}: {str(e)[:500]}"))
        out[name] = rows
        print(f"{name}: {len(rows)} kernels", file=sys.stderr)
    return out


def compare(before: dict[str, list[list[str]]], after: dict[str, list[list[str]]]) -> int:
    """Print the kernels whose text differs; the number of differences."""
    diffs = 0
    for name in before.keys() | after.keys():
        b, a = before.get(name, []), after.get(name, [])
        if len(b) != len(a):
            print(f"{name}: {len(b)} kernels before, {len(a)} after")
            diffs += 1
            continue
        changed = [i for i, (x, y) in enumerate(zip(b, a, strict=True)) if x != y]
        print(f"{name}: {len(b)} kernels, {len(changed)} differ")
        for i in changed[:5]:
            print(f"  kernel {i}: {b[i][0]} -> {a[i][0]}")
        diffs += len(changed)
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render", help="render every captured AST for every renderer into a JSON file")
    r.add_argument("asts", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--renderers", default=",".join(RENDERERS), help=f"comma-separated, of: {', '.join(RENDERERS)}")
    c = sub.add_parser("compare", help="compare two files written by render")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    ca = sub.add_parser("compare-asts", help="compare two AST files written by kernel_capture")
    ca.add_argument("before", type=Path)
    ca.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.cmd == "render":
        with open(args.asts, "rb") as f:
            asts = pickle.load(f)
        names = args.renderers.split(",")
        if unknown := [n for n in names if n not in RENDERERS]:
            ap.error(f"unknown renderers {unknown}; known: {', '.join(RENDERERS)}")
        args.out.write_text(json.dumps(render_all(asts, names)))
        print(f"{len(asts)} kernels x {len(names)} renderers -> {args.out}")
        return 0
    if args.cmd == "compare":
        diffs = compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
        print(f"{diffs} differences")
        return 1 if diffs else 0
    # by printed form: equal ASTs are one UOp once loaded, except those with a NaN constant (NaN != NaN)
    with open(args.before, "rb") as f:
        before = {str(ast) for ast in pickle.load(f)}
    with open(args.after, "rb") as f:
        after = {str(ast) for ast in pickle.load(f)}
    print(f"{len(before)} kernels before, {len(after)} after; {len(before - after)} only before, "
          f"{len(after - before)} only after")  # fmt: skip
    return 0 if before == after else 1


if __name__ == "__main__":
    sys.exit(main())
