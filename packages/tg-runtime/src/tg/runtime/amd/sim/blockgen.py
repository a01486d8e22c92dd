"""The code generator of one RDNA3 basic block (`BlockGen`) and what the per-class generators share: the block
functions' globals, the end-of-program and branch-target conventions, the message for an unsupported instruction.

translate.py drives it over a code image; gen_valu.py, gen_scalar.py and gen_memory.py emit each instruction class
through it (they import this module, never translate.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from tg.runtime.amd.sim.decode import EmulatorError, Instruction
from tg.runtime.amd.sim.ops import numerics as N
from tg.runtime.amd.sim.ops.valu import LANE_HELPERS
from tg.runtime.amd.sim.wave import EXEC, FULL, NULL, POW2, ZEROS, Ctx, Wave, lane_bits, lanes_of, merge

ENDPGM = -1
BlockFn = Callable[[Wave], int]
TERMINATORS = ("s_endpgm", "s_barrier", "s_branch", "s_cbranch_", "s_setpc", "s_swappc", "s_trap", "s_rfe")

# globals every block function sees: lane helpers of the op tables, conversions, masks
BASE_NAMESPACE: dict[str, Any] = {
    **LANE_HELPERS,
    "FULL": FULL, "ZEROS": ZEROS, "POW2": POW2, "merge": merge, "lane_bits": lane_bits, "lanes_of": lanes_of,
    "f32s": N.f32s, "f16s": N.f16s, "f64s": N.f64s, "b32f": N.b32f, "b32s": N.b32s, "b16s": N.b16s, "b64s": N.b64s,
    "bits_f32": N.bits_f32, "bits_f16": N.bits_f16, "bits_f64": N.bits_f64, "fma32v": N.fma32v, "ftz": N.ftz,
    "b32f_ftz": N.b32f_ftz, "b16s_ftz": N.b16s_ftz, "b64s_ftz": N.b64s_ftz,
    "EmulatorError": EmulatorError,
}  # fmt: skip


def unsupported(inst: Instruction, ctx: Ctx, why: str = "") -> str:
    """The message for an instruction the emulator does not implement (naming word, pc and kernel)."""
    where = f" in {ctx.kernel}" if ctx.kernel else ""
    return (f"unsupported rdna3 instruction {inst.name} word=0x{inst.words[0]:08x} at pc=0x{inst.pc:x}{where}"
            + (f" ({why})" if why else ""))  # fmt: skip


class BlockGen:
    """The source of one block function under construction, with its namespace and the block's register views."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.lines: list[str] = []
        self.ns: dict[str, Any] = dict(BASE_NAMESPACE)
        self.f32_views: dict[int, tuple[str, bool]] = {}  # VGPR -> (local holding its f32 values, surely not None)
        self._names = itertools.count()
        self._consts: dict[Any, str] = {}

    def emit(self, line: str) -> None:
        self.lines.append(line)

    def tmp(self, prefix: str = "t") -> str:
        """A fresh local name."""
        return f"{prefix}{next(self._names)}"

    def const(self, value: Any) -> str:
        """A global name bound to `value` (floats such as inf and NaN, functions, tables)."""
        key = (type(value), value) if isinstance(value, (int, float, str)) else id(value)
        name = self._consts.get(key)
        if name is None:
            name = self._consts[key] = f"K{len(self._consts)}"
            self.ns[name] = value
        return name

    def raise_error(self, message: str) -> None:
        self.emit(f"raise EmulatorError({message!r})")

    # ---- VGPR views and writes

    def f32_view(self, n: int) -> str:
        """A local holding VGPR n's 32 lanes as f32 values (converted once per block until the register changes)."""
        name, certain = self.f32_views.get(n, ("", False))
        if not name:
            name = f"f{n}"
            self.emit(f"{name} = {self._f32s(n)}")
        elif not certain:
            self.emit(f"if {name} is None: {name} = {self._f32s(n)}")
        self.f32_views[n] = (name, True)
        return name

    def _f32s(self, n: int) -> str:
        return f"ftz(f32s(v[{n}]), 32)" if self.ctx.flush32 else f"f32s(v[{n}])"

    def changed(self, *regs: int) -> None:
        """Forget the views of VGPRs that an instruction writes."""
        for n in regs:
            self.f32_views.pop(n, None)

    def write(self, n: int, values: str) -> None:
        """Write a sequence of 32 lane values (a local name) to VGPR n in the active lanes."""
        self.emit(f"v[{n}] = {values} if ex == FULL else merge({values}, v[{n}], ex)")
        self.changed(n)

    def write_f32(self, n: int, bits: str, floats: str) -> None:
        """Write f32 results (their bits and rounded values) to VGPR n, keeping the values as its view."""
        view = f"f{n}"
        self.emit(f"if ex == FULL: v[{n}] = {bits}; {view} = {floats}")
        self.emit(f"else: v[{n}] = merge({bits}, v[{n}], ex); {view} = None")
        self.f32_views[n] = (view, False)

    # ---- SGPR writes

    def write_sgpr(self, n: int, value: str, width: int = 32) -> None:
        """Write a scalar result (an expression evaluated once) to SGPR n (a pair for 64 bits)."""
        if n == NULL:
            return
        if n >= 128:
            self.raise_error(f"write to unsupported scalar register {n}")
            return
        if width == 64:
            t = self.tmp()
            self.emit(f"{t} = {value}")
            self.emit(f"s[{n}] = {t} & 0xFFFFFFFF; s[{n + 1}] = {t} >> 32 & 0xFFFFFFFF")
        else:
            self.emit(f"s[{n}] = {value}")
        if n in (EXEC, EXEC - 1):
            self.emit(f"ex = s[{EXEC}]")


def is_terminator(inst: Instruction) -> bool:
    return inst.encoding == "SOPP" and inst.name.startswith(TERMINATORS)


def branch_target(inst: Instruction) -> int:
    imm = inst.fields["simm16"]
    return inst.pc + 4 + 4 * (imm - 0x10000 if imm & 0x8000 else imm)
