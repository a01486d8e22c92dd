"""Kernels thousands of ops deep through every codegen pass (opt, expander, devectorizer, linearizer, renderers) at
every vector width: each walk is iterative, so no depth reaches Python's recursion limit."""

from __future__ import annotations

import pytest

from tg.codegen.program import get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.codegen.render.python import PythonRenderer
from tg.codegen.schedule import create_schedule
from tg.ir import Ops, UOp, dtypes


def _chain_kernel(n: int, size: int = 64) -> UOp:
    a = UOp.new_buffer("CPU", size, dtypes.float32)
    x = a
    for i in range(n):
        c = UOp.full((size,), 1.0001 if i % 2 else 0.0003, dtypes.float32, "CPU")
        x = x.alu(Ops.MUL if i % 2 else Ops.ADD, c)
    (call,) = create_schedule(UOp(Ops.SINK, src=(x,))).linear.src
    return call.src[0]


@pytest.mark.parametrize("vector_bytes", [0, 16, 32, 64])  # scalar, SSE/NEON, AVX2, AVX-512 widths
def test_a_3000_op_kernel_renders_at_every_width(vector_bytes: int) -> None:
    prog = get_program(_chain_kernel(3000), ClangRenderer(vector_bytes=vector_bytes))
    assert prog.src.count("*") >= 1500  # every multiply is in the one kernel
    if vector_bytes:
        assert f"x{vector_bytes // 4}" in prog.src  # and it is vectorised to the renderer's width


def test_a_3000_op_kernel_for_the_python_device() -> None:
    prog = get_program(_chain_kernel(3000), PythonRenderer(vector_bytes=32))
    assert prog.name.startswith("E_")
