"""Run a tg kernel AST on the RDNA3 emulator: render for gfx1100, compile with LLVM, launch on host buffers.

`EmulatedKernel(ast)` renders the kernel with the AMD LLVM renderer (the AMD device's optimisations), compiles it to
a gfx1100 code object with llvmlite (cached on disk like every compile) and checks the kernel descriptor;
`kernel(buffers, var_vals)` runs it with `emu.launch` on bytearrays given per AST buffer slot (PARAM number), which it
updates in place. Used by the differential tests that compare the emulator with the PYTHON device, and handy for
looking at what one kernel does on the GPU without one (`kernel.listing()`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tg.codegen.program import ProgramSpec, get_program
from tg.codegen.render.llvmir import AMDLLVMRenderer
from tg.ir.uop import UOp, sym_infer
from tg.runtime.amd.program import CodeObject
from tg.runtime.amd.sim import emu
from tg.runtime.amd.sim.blockgen import branch_target
from tg.runtime.amd.sim.decode import Program, decode
from tg.runtime.amd.sim.ops.valu import APPROXIMATE
from tg.runtime.llvm import AMDGPU_TRIPLE, LLVMCompiler

_compilers: dict[str, LLVMCompiler] = {}
BUFFER_STRIDE = 1 << 40  # buffer slot k lives at (k + 1) * BUFFER_STRIDE: far apart, so an overrun faults


def _compiler(arch: str) -> LLVMCompiler:
    if arch not in _compilers:
        _compilers[arch] = LLVMCompiler(AMDGPU_TRIPLE, arch)
    return _compilers[arch]


def _dims(dims: Sequence[Any] | None, var_vals: Mapping[str, int]) -> tuple[int, int, int]:
    vals = [int(sym_infer(d, dict(var_vals))) for d in dims or ()]
    return tuple(vals + [1] * (3 - len(vals)))  # type: ignore[return-value]


class EmulatedKernel:
    """A kernel AST compiled for gfx1100 and run on the emulator (see the module docstring)."""

    def __init__(self, ast: UOp, opts: Sequence[Any] | None = None, arch: str = "gfx1100") -> None:
        self.arch = arch
        self.program: ProgramSpec = get_program(ast, AMDLLVMRenderer(arch), opts)
        self.lib = _compiler(arch).compile_cached(self.program.src)
        self.code_object = CodeObject(self.lib, self.program.name)
        self.code_object.check_kernargs(len(self.program.globals), len(self.program.vars))

    @property
    def name(self) -> str:
        return self.program.name

    def decoded(self) -> Program:
        """The kernel's instructions (the whole text section)."""
        text = self.code_object.elf.section(".text")
        assert text is not None
        start = self.code_object.linked.section_offsets[text.index]
        return decode(self.code_object.image[start : start + text.size], start, self.name)

    def listing(self) -> str:
        """The kernel's machine code as LLVM prints it."""
        return self.decoded().listing()

    def decoder_listing(self, align: Sequence[str] = ()) -> list[str]:
        """The decoder's text of the kernel's instructions, branch targets as `@<instruction index>`.

        `align` is LLVM's listing with its `.p2align N` lines: the `s_nop` padding those put in the object is left
        out here, as in LLVM's assembly (where it is a directive)."""
        size = self.code_object.elf.symbol(self.name).size  # type: ignore[union-attr]
        entry = self.code_object.entry_offset
        insts = [i for i in self.decoded().instructions if entry <= i.pc < entry + size]
        if align:
            kept, j = [], 0
            for line in align:
                if line.startswith(".p2align"):  # .p2align N[, fill[, max bytes skipped]]
                    args = [a.strip() for a in line.split(None, 1)[1].split(",")]
                    pad = -insts[j].pc % (1 << int(args[0])) if j < len(insts) else 0
                    if len(args) < 3 or not args[2] or pad <= int(args[2]):
                        end = insts[j].pc + pad if j < len(insts) else 0
                        while j < len(insts) and insts[j].pc < end and insts[j].name == "s_nop":
                            j += 1
                elif j < len(insts):
                    kept.append(insts[j])
                    j += 1
            insts = kept + insts[j:]
        index = {i.pc: n for n, i in enumerate(insts)}
        lines = []
        for i in insts:
            if i.name.startswith(("s_branch", "s_cbranch")) and branch_target(i) in index:
                lines.append(f"{i.name} @{index[branch_target(i)]}")
            else:
                lines.append(i.text)
        return lines

    def llvm_listing(self, align: bool = False) -> list[str]:
        """LLVM's own assembly of the kernel (llvmlite's emit_assembly of the same module), in the decoder's format:
        directives (but `.p2align N` with `align`), labels and comments dropped, whitespace collapsed, branch targets
        as `@<instruction index>`."""
        text = _compiler(self.arch).assembly(self.program.src)
        return normalise_llvm_assembly(text, align).get(self.name, [])

    @property
    def approximate(self) -> bool:
        """Whether the code uses instructions that hardware computes approximately (v_exp_f32, v_rcp_f32...): their
        results may differ from a correctly rounded reference by an ulp (amd.md 4.5)."""
        return any(re.sub(r"_e(32|64)$", "", i.name) in APPROXIMATE for i in self.decoded().instructions)

    def __call__(self, buffers: Mapping[int, bytearray], var_vals: Mapping[str, int] | None = None) -> None:
        """Run on `buffers` (AST buffer slot -> bytes, updated in place) with the values of the kernel's variables."""
        p, vals = self.program, dict(var_vals or {})
        missing = [s for s in p.globals if s not in buffers]
        if missing:
            raise ValueError(f"kernel {p.name} needs buffers for slots {missing}; got slots {sorted(buffers)}")
        names = [v.arg[0] for v in p.vars]
        if unknown := [n for n in names if n not in vals]:
            raise ValueError(f"kernel {p.name} needs values for variables {unknown}; got {sorted(vals)}")
        addrs = [(slot + 1) * BUFFER_STRIDE for slot in p.globals]
        bufs = {addr: buffers[slot] for addr, slot in zip(addrs, p.globals, strict=True)}
        args = emu.pack_args(addrs, [vals[n] for n in names])
        emu.launch(self.lib, p.name, bufs, args, _dims(p.global_size, vals), _dims(p.local_size, vals))


def normalise_llvm_assembly(text: str, align: bool = False) -> dict[str, list[str]]:
    """Per kernel, the instructions of an LLVM AMDGPU assembly listing: directives (but `.p2align N` lines with
    `align`), labels and comments dropped, whitespace collapsed, branch targets as `@<instruction index>` (the
    decoder corpus's format; indices count instructions only)."""
    kernels: dict[str, list[str]] = {}
    labels: dict[str, dict[str, int]] = {}
    cur = None
    for raw in text.splitlines():
        line = raw.split(";")[0].split("//")[0].rstrip()
        if line.strip() == "---":
            break
        if not line.strip():
            continue
        if not line.startswith(("\t", " ")):
            m = re.match(r"^([A-Za-z_.$][\w.$]*):", line)
            if m and not m.group(1).startswith("."):
                cur = m.group(1)
                kernels[cur], labels[cur] = [], {}
            elif m and cur is not None:
                labels[cur][m.group(1)] = sum(1 for x in kernels[cur] if not x.startswith("."))
            continue
        ins = re.sub(r"\s+", " ", line.strip())
        # an SMEM load with an SGPR offset and immediate offset 0: LLVM prints `offset:0x0` when it chose the
        # SGPR+immediate opcode, whose encoding is the SGPR-only one's; the decoder spells both as the latter
        ins = re.sub(r"^(s_(?:buffer_)?load_\w+ [^ ]+, [^ ]+, s\d+) offset:0x0\b", r"\1", ins)
        if cur is None or (ins.startswith(".") and not (align and ins.startswith(".p2align "))):
            continue
        kernels[cur].append(ins)
    out = {}
    for name, lines in kernels.items():
        if not lines:
            continue
        fixed = []
        for ins in lines:
            m = re.match(r"^(s_branch|s_cbranch_\w+) (\S+)$", ins)
            fixed.append(f"{m.group(1)} @{labels[name][m.group(2)]}" if m and m.group(2) in labels[name] else ins)
        out[name] = fixed
    return out
