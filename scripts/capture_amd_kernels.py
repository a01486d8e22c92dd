"""Compile captured kernels for gfx1100 (`NULL:AMD:gfx1100`'s renderer and compiler) and keep the code objects.

Input: kernel ASTs pickled by tests/plugins/kernel_capture.py (`TG_CAPTURE_KERNELS=asts.pkl pytest -p kernel_capture
...`, any device). Output folder: `<name>-<sha>.bin` (the code object, checked by tg.runtime.amd.program with its
kernarg layout), `.src` (the LLVM IR), `.s` (LLVM's own assembly listing of the same module, with --listing) and
`index.json` (name, files, buffer slots, variables, launch sizes). Exit status 1 if any kernel fails, listing them.

    python scripts/capture_amd_kernels.py asts.pkl out/ [--listing] [--arch gfx1100]

tests/test_amd_codegen.py does the same for the op tests; the CI's CPU:LLVM stage runs it on every kernel of the
suites it runs.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "plugins"))

from kernel_capture import record_binary, write_binaries

from tg.codegen.program import get_program
from tg.codegen.render.llvmir import AMDLLVMRenderer
from tg.runtime.amd.program import CodeObject
from tg.runtime.llvm import AMDGPU_TRIPLE, LLVMCompiler


def compile_for_amd(asts: list, arch: str = "gfx1100", listing: bool = False) -> tuple[dict, list[str]]:  # type: ignore[type-arg]
    """(recorded binaries, failure messages) for every AST."""
    renderer, compiler = AMDLLVMRenderer(arch), LLVMCompiler(AMDGPU_TRIPLE, arch)
    binaries: dict = {}  # type: ignore[type-arg]
    failures = []
    try:
        from tqdm import tqdm

        items = tqdm(asts, desc=f"compile for {arch}", unit="kernel", file=sys.stderr)
    except ImportError:
        items = asts
    for ast in items:
        try:
            p = get_program(ast, renderer)
            lib = compiler.compile_cached(p.src)
            CodeObject(lib, p.name).check_kernargs(len(p.globals), len(p.vars))
        except Exception as e:  # collect every failure, not just the first
            failures.append(f"{type(e).__name__}: {str(e)[:2000]}")
            continue
        record_binary(binaries, p, lib)
        entry = binaries[hashlib.sha256(lib).hexdigest()[:16]]
        if listing and "asm" not in entry:
            entry["asm"] = compiler.assembly(p.src)
    return binaries, failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("asts", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--arch", default="gfx1100")
    ap.add_argument("--listing", action="store_true", help="also write LLVM's assembly listing of each kernel (.s)")
    args = ap.parse_args()
    with open(args.asts, "rb") as f:
        asts = pickle.load(f)
    binaries, failures = compile_for_amd(asts, args.arch, args.listing)
    for entry in binaries.values():
        if "asm" in entry:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / entry["file"].replace(".bin", ".s")).write_text(entry.pop("asm"))
    write_binaries(args.out, binaries)
    print(f"{len(asts)} kernels: {len(binaries)} distinct code objects in {args.out}, {len(failures)} failures")
    for msg in failures[:10]:
        print(msg, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
