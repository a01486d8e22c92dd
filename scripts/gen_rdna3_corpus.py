"""Developer script: rebuild the RDNA3 decoder corpus (packages/tg-runtime/tests/amd_corpus).

For each `*.ll` kernel module, llvmlite (LLVM 22) writes the gfx1100 object and its own assembly; the assembly's
instructions, normalised (directives, labels and comments dropped, whitespace collapsed, branch targets as
`@<instruction index>`), become `<name>.llvm22.lst`. `clang15.cl` is compiled by clang-15 and disassembled by
llvm-objdump-15 into `clang15.objdump15.lst`. Objects and listings are committed, so the decoder test needs no
LLVM tools:

    /path/to/venv-with-llvmlite/bin/python scripts/gen_rdna3_corpus.py
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

CORPUS = pathlib.Path(__file__).resolve().parent.parent / "packages/tg-runtime/tests/amd_corpus"


def normalise_llvm_assembly(text: str) -> str:
    """Kernel headers and instructions of LLVM's emit_assembly output, in the corpus listing format."""
    from tg.runtime.amd.sim.kernel import normalise_llvm_assembly as per_kernel

    return "".join(f"{name}:\n" + "".join(f"{ins}\n" for ins in lines) for name, lines in per_kernel(text).items())


def normalise_objdump(text: str) -> str:
    """Kernel headers and instructions of llvm-objdump's -d output (encoding comments dropped), same format."""
    out, cur, addrs, pending = [], None, {}, []
    for raw in text.splitlines():
        m = re.match(r"^([0-9a-f]+) <([\w.]+)>:", raw)
        if m:
            cur = m.group(2)
            out.append(f"{cur}:")
            addrs = {}
            continue
        m = re.match(r"^\s+(\S.*?)\s*// ([0-9A-F]+):", raw)
        if cur is None or not m:
            continue
        ins = re.sub(r"\s+", " ", m.group(1))
        addrs[int(m.group(2), 16)] = len(out)
        out.append(ins)
        pending.append((len(out) - 1, int(m.group(2), 16)))
    # branch targets: objdump prints the dword offset; turn it into the instruction index within the kernel
    starts = [i for i, line in enumerate(out) if line.endswith(":")]
    fixed = list(out)
    all_addrs = {}
    for i, a in pending:
        all_addrs[a] = i
    for i, a in pending:
        m = re.match(r"^(s_branch|s_cbranch_\w+) (-?\d+)$", out[i])
        if m:
            target = a + 4 + 4 * int(m.group(2))
            start = max(s for s in starts if s < i)
            if target in all_addrs:
                fixed[i] = f"{m.group(1)} @{all_addrs[target] - start - 1}"
    return "\n".join(fixed) + "\n"


def main() -> None:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(
        cpu="gfx1100", features="", opt=2, reloc="pic", codemodel="default"
    )
    intrinsics = (CORPUS / "intrinsics.ll.inc").read_text()
    for src in sorted(CORPUS.glob("*.ll")):
        mod = llvm.parse_assembly(src.read_text() + intrinsics)
        mod.verify()
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=2))
        pb.getModulePassManager().run(mod, pb)
        optimised = str(mod)
        # code generation mutates the module (control-flow intrinsics): each emit gets a fresh parse
        (CORPUS / f"{src.stem}.o").write_bytes(tm.emit_object(llvm.parse_assembly(optimised)))
        listing = normalise_llvm_assembly(tm.emit_assembly(llvm.parse_assembly(optimised)))
        (CORPUS / f"{src.stem}.llvm22.lst").write_text(listing)
        print(f"{src.stem}: {listing.count(chr(10))} lines")
    cl = CORPUS / "clang15.cl"
    obj = CORPUS / "clang15.o"
    subprocess.run(["clang-15", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100",
                    "-nogpulib", "-O2", "-c", str(cl), "-o", str(obj)], check=True)  # fmt: skip
    dis = subprocess.run(["llvm-objdump-15", "-d", "--mcpu=gfx1100", str(obj)], check=True, capture_output=True,
                         text=True).stdout  # fmt: skip
    (CORPUS / "clang15.objdump15.lst").write_text(normalise_objdump(dis))
    print("clang15: done")


if __name__ == "__main__":
    sys.exit(main())
