"""The kernel optimiser: opts (`Opt`, `OptOps`), the `OptKernel` they apply to, heuristics and `apply_opts`.

`apply_opts(ast, renderer, opts)` picks the opts of a kernel, in this order: `KernelInfo.opts_to_apply` on the
incoming SINK (an exact replay; errors propagate), else the explicit `opts` argument, else the hand-coded heuristics
unless `NOOPT=1`. BEAM search lives in tg.runtime (it times candidates on a device): the runtime passes its pick as
`opts`; nothing here calls back into the runtime. The result records the applied opts in the SINK's
`KernelInfo.applied_opts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tg.codegen.opt.heuristic import hand_coded_opts
from tg.codegen.opt.kernel import OptKernel
from tg.codegen.opt.opts import KernelOptError, Opt, OptOps, split
from tg.codegen.render.renderer import Renderer
from tg.ir.helpers import NOOPT
from tg.ir.ops import KernelInfo
from tg.ir.uop import UOp

__all__ = ["KernelOptError", "Opt", "OptKernel", "OptOps", "apply_opts", "hand_coded_opts", "split"]


def apply_opts(ast: UOp, renderer: Renderer, opts: Sequence[Any] | None = None) -> tuple[UOp, tuple[Opt, ...]]:
    """Apply optimisations to kernel AST `ast` for `renderer`; returns (optimised AST, opts applied).

    `opts=None` lets the kernel's own `opts_to_apply` or the heuristics decide; a sequence (even empty) is applied
    exactly (how the runtime's BEAM search hands over its pick). Illegal explicit opts raise KernelOptError.
    """
    info = ast.arg
    k = OptKernel(ast, renderer)
    if isinstance(info, KernelInfo) and info.opts_to_apply is not None:
        chosen: Sequence[Any] = info.opts_to_apply
    elif opts is not None:
        chosen = opts
    elif NOOPT:
        return ast, ()
    else:
        k = hand_coded_opts(k)
        return (k.get_optimized_ast(), k.applied) if k.applied else (ast, ())
    for o in chosen:
        if not isinstance(o, Opt):
            raise TypeError(f"opts must be Opt instances, got {o!r}")
        k = k.apply(o)
    return (k.get_optimized_ast(), k.applied) if k.applied else (ast, ())
