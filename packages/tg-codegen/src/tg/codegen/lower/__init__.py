"""Lowering: kernel AST -> a graph the linearizer can order and a renderer can print.

`lower_kernel` runs the passes in order; each pass is a PatternMatcher (or a whole-graph function) from one of the
modules beside this one. The kernel AST it accepts is described in the package README ("Lowering and rendering").
"""

from __future__ import annotations

import functools
import itertools

from tg.codegen.lower.blocked import block_reduces
from tg.codegen.lower.decompositions import (
    float_emulation,
    op_decompositions,
    pm_cleanups,
    pm_gates,
    pm_int_div_guards,
    readable_forms,
)
from tg.codegen.lower.devectorize import devectorize_rules
from tg.codegen.lower.expand import expand_kernel
from tg.codegen.lower.gpudims import add_gpudims
from tg.codegen.lower.structure import pm_reduce_to_accumulator, pm_split_ends, unify_ends
from tg.codegen.lower.transcendental import POLY_OPS, pm_vector_transcendentals, transcendental_rules
from tg.codegen.render.renderer import Renderer
from tg.ir.dtype import DType
from tg.ir.helpers import TRANSCENDENTAL
from tg.ir.ops import Ops
from tg.ir.pattern import PatternMatcher, graph_rewrite
from tg.ir.uop import UOp

_KERNEL_ROOTS = (Ops.END, Ops.STORE, Ops.GROUP)


def check_kernel_ast(ast: UOp) -> None:
    """Raise a ValueError naming the problem if `ast` is not a kernel AST (SINK of stores / ENDs of stores)."""
    if not isinstance(ast, UOp):
        raise TypeError(f"kernel AST must be a UOp, got {type(ast).__name__}")
    if ast.op is not Ops.SINK:
        raise ValueError(f"kernel AST must be a SINK, got {ast.op}")
    if not ast.src:
        raise ValueError("kernel AST SINK has no stores")
    for s in ast.src:
        if s.op not in _KERNEL_ROOTS:
            raise ValueError(f"kernel AST SINK sources must be STORE or END(STORE, ...), got {s.op}")
    for u in ast.toposort():
        if u.op in (Ops.BUFFER, Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.REDUCE_AXIS):
            raise ValueError(f"kernel AST contains tensor-level {u.op}; schedule it into a kernel first")
        if u.op is Ops.RANGE and not (isinstance(u.arg, tuple) and len(u.arg) >= 2):
            raise ValueError(f"RANGE arg must be (axis_id, AxisType), got {u.arg!r}")
        if u.op is Ops.STORE and (not u.src or u.src[0].op is not Ops.INDEX):
            raise ValueError(f"STORE must write through an INDEX, got {u.src[0].op if u.src else 'nothing'}")


def kernel_name(ast: UOp) -> str:
    """A readable name from the loops: `E_4_4` for elementwise kernels, `r_16_4` when the kernel reduces."""
    ranges = sorted({u for u in ast.toposort() if u.op is Ops.RANGE}, key=lambda r: r.axis_id)
    prefix = "r" if any(u.op is Ops.REDUCE for u in ast.toposort()) else "E"

    def size(r: UOp) -> str:
        end = r.src[0]
        if end.op is Ops.CONST:
            return str(end.arg)
        names = sorted(v.arg[0] for v in end.toposort() if v.op is Ops.DEFINE_VAR)
        return "_".join(names) or "n"

    return "_".join([prefix, *(size(r) for r in ranges)]) if ranges else f"{prefix}_1"


def lower_kernel(ast: UOp, renderer: Renderer) -> UOp:
    """Run every lowering pass on kernel AST `ast` for `renderer`; returns the lowered SINK (not yet linear)."""
    check_kernel_ast(ast)
    # GPU targets: the output loops become work-item ids (SPECIAL)
    ast = add_gpudims(ast, renderer)
    # long float sums become nested sums of short blocks (accuracy: no long serial rounding chain)
    ast = block_reduces(ast, renderer)
    regs = itertools.count()
    # UPCAST/UNROLL ranges become unrolled copies and vector lanes, THREAD ranges the core_id variable
    sink = expand_kernel(ast, renderer, regs)
    # loops: one END per range, REDUCE becomes accumulator registers, ranges shared by two loops get unshared
    sink = graph_rewrite(sink, pm_split_ends)
    sink = graph_rewrite(sink, pm_reduce_to_accumulator, ctx=(regs, renderer))
    sink = graph_rewrite(sink, pm_split_ends)
    sink = unify_ends(sink)
    # gated loads/stores take the gate as their own source
    sink = graph_rewrite(sink, pm_gates)
    # CPUs: float32 EXP2/LOG2 on vectors stay vectors (float32 polynomials, not one libm call per lane)
    if Ops.MUL in renderer.vector_ops and not renderer.has_local and TRANSCENDENTAL < 2:
        sink = graph_rewrite(sink, pm_vector_transcendentals)
    # vector ops the target can't do in vector form are done lane by lane
    rules = devectorize_rules(frozenset(renderer.vector_ops), frozenset(renderer.vector_bool_ops),
                              frozenset(renderer.vector_conversions))  # fmt: skip
    sink = graph_rewrite(sink, rules)
    # ops and dtypes the target lacks become ones it has (repeated to a fixed point by graph_rewrite)
    supported = renderer.supported_ops
    if TRANSCENDENTAL >= 2:  # force the polynomial decompositions (to check them where libm exists)
        supported = supported - POLY_OPS
    decompose, readable = _matchers(supported, renderer.native_float_dtypes, renderer.extra_matcher)
    sink = graph_rewrite(sink, decompose)
    # exact rewrites into forms that read better (x - y instead of x + y*-1)
    return graph_rewrite(sink, readable)


@functools.lru_cache(maxsize=64)
def _matchers(supported: frozenset[Ops], native: frozenset[DType], extra: PatternMatcher | None
              ) -> tuple[PatternMatcher, PatternMatcher]:  # fmt: skip
    # building (compiling) a matcher costs more than running it on a kernel: one set per renderer capability set
    decompose = pm_int_div_guards + op_decompositions(supported) + transcendental_rules(supported, native)
    decompose = decompose + float_emulation(native) + pm_cleanups
    if extra is not None:
        decompose = decompose + extra
    return decompose, readable_forms(supported)
