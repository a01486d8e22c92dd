"""Translate RDNA3 basic blocks to Python functions, once per code image (the PYTHON backend's technique).

A basic block runs from an instruction to the next branch, `s_endpgm` or `s_barrier` (inclusive), or up to the next
branch target; blockgen.py's `BlockGen` writes its code. Its function `block(w)` runs the instructions on wave `w` and
returns the next pc (`ENDPGM` = -1 ends the wave; `-(pc + 2)` parks it at a barrier that resumes at pc). Inside, VALU
instructions are list comprehensions over the 32 lanes (gen_valu.py), scalar ones Python statements (gen_scalar.py),
memory ones calls of the access helpers (gen_memory.py). SCC and EXEC live in locals (`scc`, `ex`); f32 views of VGPRs
made in the block are kept in locals (`f<n>`) so a chain of float ops converts each register's bits once. `w.pc` is
set before each instruction, so any error names the instruction that raised it.
"""

from __future__ import annotations

from tg.runtime.amd.sim.blockgen import BlockFn, BlockGen, branch_target, is_terminator
from tg.runtime.amd.sim.decode import EmulatorError, Instruction, Program
from tg.runtime.amd.sim.gen_memory import gen_memory
from tg.runtime.amd.sim.gen_scalar import SCALAR_ENCODINGS, gen_scalar
from tg.runtime.amd.sim.gen_valu import gen_valu
from tg.runtime.amd.sim.wave import EXEC, Ctx


class Translation:
    """The basic blocks of one code image, translated on first use (see the module docstring)."""

    def __init__(self, program: Program, ctx: Ctx) -> None:
        self.program, self.ctx = program, ctx
        self.blocks: dict[int, tuple[BlockFn, int]] = {}
        self.sources: dict[int, str] = {}  # pc -> the block's Python source (for debugging: DEBUG output, tests)
        self.targets = {branch_target(i) for i in program.instructions if i.encoding == "SOPP"
                        and i.name.startswith(("s_branch", "s_cbranch"))}  # fmt: skip

    def block(self, pc: int) -> tuple[BlockFn, int]:
        """(function, instruction count) of the block starting at pc."""
        blk = self.blocks.get(pc)
        if blk is None:
            blk = self.blocks[pc] = self._translate(pc)
        return blk

    def _instructions(self, pc: int) -> list[Instruction]:
        by_pc = self.program.by_pc
        if pc not in by_pc:
            raise EmulatorError(
                f"jump to pc=0x{pc:x}, not the start of an instruction in {self.ctx.kernel or 'kernel'}"
            )
        out = []
        while True:
            inst = by_pc.get(pc)
            if inst is None:
                raise EmulatorError(f"pc=0x{pc:x} runs past the end of the code of {self.ctx.kernel or 'kernel'}")
            out.append(inst)
            pc += inst.size
            if is_terminator(inst) or pc in self.targets:
                return out

    def _translate(self, pc: int) -> tuple[BlockFn, int]:
        insts = self._instructions(pc)
        g = BlockGen(self.ctx)
        end = None
        for inst in insts:
            g.emit(f"w.pc = {inst.pc:#x}")
            if inst.encoding in SCALAR_ENCODINGS:
                end = gen_scalar(inst, g)
            elif inst.encoding in ("DS", "FLAT", "MUBUF"):
                gen_memory(inst, g)
            else:
                gen_valu(inst, g)
        if end is None:  # fell through to the next block
            end = f"{insts[-1].pc + insts[-1].size:#x}"
        body = "\n    ".join(g.lines)
        src = (f"def block(w):\n    s = w.s; v = w.v; scc = w.scc; ex = s[{EXEC}]\n    {body}\n"
               f"    w.scc = scc\n    return {end}\n")  # fmt: skip
        self.sources[pc] = src
        try:
            code = compile(src, f"<rdna3 block 0x{pc:x} of {self.ctx.kernel or 'kernel'}>", "exec")
        except SyntaxError as e:  # a translator bug: show the source
            raise EmulatorError(f"internal error translating the block at pc=0x{pc:x}: {e}\n{src}") from e
        exec(code, g.ns)
        return g.ns["block"], len(insts)
