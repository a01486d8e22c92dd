"""Kernel optimisation hook (OptOps land here later: SPLIT/UPCAST/UNROLL/LOCAL/...).

Today `apply_opts` only checks its input and returns the kernel unchanged: the lowering pipeline calls it so that
adding optimisations later does not change `get_program`'s shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tg.codegen.render.renderer import Renderer
from tg.ir.uop import UOp


def apply_opts(ast: UOp, renderer: Renderer, opts: Sequence[Any] | None = None) -> tuple[UOp, tuple[Any, ...]]:
    """Apply optimisations `opts` to kernel AST `ast` for `renderer`; returns (new ast, opts applied)."""
    if opts:
        raise NotImplementedError(f"kernel optimisations are not implemented yet, got opts={list(opts)!r}")
    return ast, ()
