"""`get_program`: kernel AST -> `ProgramSpec` (lowered, linearized, rendered source plus what the runtime needs).

Pipeline: `opt.apply_opts` (opts: given, e.g. by the runtime's BEAM search, or heuristics) -> `lower.lower_kernel`
(rewrite passes) -> `linearize.linearize` (the linear program) -> `renderer.render` (source).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tg.codegen.linearize import linearize
from tg.codegen.lower import kernel_name, lower_kernel
from tg.codegen.lower.gpudims import launch_dims
from tg.codegen.opt import apply_opts
from tg.codegen.render.renderer import CORE_ID, Renderer
from tg.ir.dtype import PtrDType
from tg.ir.helpers import SPEC
from tg.ir.ops import GroupOp, Ops
from tg.ir.spec import kernel_spec, program_spec, verify
from tg.ir.uop import UOp, sint


@dataclass(frozen=True)
class ProgramSpec:
    """A rendered kernel and everything needed to run it.

    `globals` are the PARAM slots in argument order (the runtime passes `bufs[slot]` for each), `vars` the
    DEFINE_VAR uops passed after the buffers as ints, `ops`/`mem` estimated FLOPs and bytes moved per run.
    `global_size`/`local_size` are None for targets whose kernels loop over everything themselves (the CPU).
    """

    name: str
    src: str
    device: str
    ast: UOp
    uops: list[UOp] = field(repr=False)
    global_size: tuple[sint, ...] | None = None
    local_size: tuple[sint, ...] | None = None
    globals: tuple[int, ...] = ()
    outs: tuple[int, ...] = ()
    ins: tuple[int, ...] = ()
    vars: tuple[UOp, ...] = ()
    ops: sint = 0
    mem: sint = 0
    applied_opts: tuple[Any, ...] = ()
    threads: int = 1  # >1: the kernel takes `core_id` as its last int argument and runs once per id in [0, threads)

    @property
    def function_name(self) -> str:
        """The name of the compiled function (same as `name`)."""
        return self.name


def indexed_buffer(index: UOp) -> UOp:
    """The PARAM/DEFINE_REG an INDEX points into (looking through AFTER)."""
    buf = index.src[0] if index.op is Ops.INDEX else index
    while buf.op is Ops.AFTER:
        buf = buf.src[0]
    return buf


def _function_name(ast: UOp) -> str:
    given = getattr(ast.arg, "name", None)
    name = given if isinstance(given, str) and given else kernel_name(ast)
    name = re.sub(r"\W", "_", name)
    return name if not name[0].isdigit() else f"k_{name}"


def estimate(uops: Sequence[UOp], threads: int = 1) -> tuple[sint, sint]:
    """(FLOPs, bytes) one run of a linear program does: ALU ops outside index math and loads/stores of PARAMs,
    each times the trip counts of the loops around it and the lanes it works on (bytes per buffer capped at the
    buffer's size); a threaded kernel's body runs `threads` times."""
    index_math: set[UOp] = set()
    for u in uops:
        if u.op is Ops.INDEX:
            index_math.update(x for s in u.src[1:] for x in s.toposort() if x.op in GroupOp.ALU)
        if u.op is Ops.RANGE:
            index_math.update(x for x in u.src[0].toposort() if x.op in GroupOp.ALU)
    flops: sint = 0
    touched: dict[tuple[UOp, Ops], sint] = {}
    mults: list[sint] = [threads]
    for u in uops:
        if u.op is Ops.RANGE:
            end = u.src[0]
            mults.append(mults[-1] * (end.arg if end.op is Ops.CONST else end))
        elif u.op is Ops.END:
            mults.pop()
        elif u.op in GroupOp.ALU and u not in index_math:
            flops = flops + mults[-1] * u.dtype.count * (2 if u.op is Ops.MULACC else 1)
        elif u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX:
            buf = indexed_buffer(u.src[0])
            if buf.op is not Ops.PARAM:
                continue
            assert isinstance(buf.dtype, PtrDType)
            lanes = (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count
            nbytes = touched.get((buf, u.op), 0) + mults[-1] * buf.dtype.base.itemsize * lanes
            if buf.dtype.size > 0 and isinstance(nbytes, int):
                nbytes = min(nbytes, buf.dtype.size * buf.dtype.base.itemsize)
            touched[(buf, u.op)] = nbytes
    mem: sint = 0
    for v in touched.values():
        mem = mem + v
    return _concrete(flops), _concrete(mem)


def _concrete(x: sint) -> sint:
    if isinstance(x, UOp):
        s = x.simplify()
        return s.arg if s.op is Ops.CONST else s
    return x


def get_program(ast: UOp, renderer: Renderer, opts: Sequence[Any] | None = None) -> ProgramSpec:
    """Lower, linearize and render kernel AST `ast` (a SINK of stores, see the README) with `renderer`."""
    if not isinstance(renderer, Renderer):
        raise TypeError(f"get_program needs a Renderer, got {type(renderer).__name__}")
    if SPEC:  # SPEC=1 (on in the test suites): check the stage's input and output against tg.ir's specs
        verify(ast, kernel_spec)
    optimized, applied = apply_opts(ast, renderer, opts)
    lowered = lower_kernel(optimized, renderer)
    name = _function_name(ast)
    lowered = lowered.replace(arg=name)  # the SINK of a lowered kernel carries its function name
    uops = linearize(lowered)
    if SPEC:
        verify(uops, program_spec)
    src = renderer.render(uops)
    params = [u for u in uops if u.op is Ops.PARAM]
    outs = sorted({b.arg for u in uops if u.op is Ops.STORE and (b := indexed_buffer(u.src[0])).op is Ops.PARAM})
    ins = sorted({b.arg for u in uops if u.op is Ops.LOAD and (b := indexed_buffer(u.src[0])).op is Ops.PARAM})
    variables = tuple(sorted((u for u in uops if u.op is Ops.DEFINE_VAR and u.arg[0] != CORE_ID),
                             key=lambda v: v.arg[0]))  # fmt: skip
    threads = next((int(u.arg[2]) + 1 for u in uops if u.op is Ops.DEFINE_VAR and u.arg[0] == CORE_ID), 1)
    ops, mem = estimate(uops, threads)
    global_size, local_size = launch_dims(uops) or (None, None)
    return ProgramSpec(
        name=name, src=src, device=renderer.device, ast=ast, uops=uops, global_size=global_size,
        local_size=local_size, globals=tuple(sorted(p.arg for p in params)), outs=tuple(outs), ins=tuple(ins),
        vars=variables, ops=ops, mem=mem, applied_opts=applied, threads=threads,
    )  # fmt: skip
