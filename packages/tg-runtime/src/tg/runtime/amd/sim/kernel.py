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
