"""`PythonRenderer`: serialises the linear program for the PYTHON backend, which interprets it exactly.

The "source" is a readable listing (comment lines) followed by one line of base64 of the pickled list of
instructions `(op, dtype, source positions, arg)` in program order; `decode_program` turns it back. It keeps the
dtypes and ops of the linear program unchanged, so the interpreter sees exactly what a C compiler would.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

from tg.codegen.render.renderer import NVIDIA_SM80, Renderer
from tg.ir.dtype import DType, dtypes
from tg.ir.ops import GroupOp, Ops
from tg.ir.uop import UOp

Instruction = tuple[Ops, DType, tuple[int, ...], Any]


class PythonRenderer(Renderer):
    """Renders for the PYTHON reference device: every ALU op is interpreted directly (THREEFRY is decomposed, so
    the interpreter checks the same integer code the C targets run)."""

    device = "PYTHON"
    suffix = "pkl"
    supported_ops = frozenset(GroupOp.ALU - {Ops.THREEFRY})

    def __init__(self, vector_bytes: int = 64, threads: int = 2, fma: bool = True) -> None:
        """Mirrors a CPU with `vector_bytes`-wide vectors and `threads` cores (threads run one after another)."""
        if vector_bytes not in (0, 16, 32, 64):
            raise ValueError(f"vector_bytes must be 0, 16, 32 or 64, got {vector_bytes!r}")
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive int, got {threads!r}")
        self.vector_bytes, self.thread_max, self.has_threads = vector_bytes, threads, threads > 1
        self.vector_registers = 32 if vector_bytes == 64 else 16 if vector_bytes else 0
        self.has_fma = bool(fma)
        ops = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG} | ({Ops.MULACC} if fma else set())
        self.vector_ops = frozenset(ops) if vector_bytes else frozenset()
        # as ClangRenderer: float16 loads that only feed float32 casts are vectors (the casts run lane by lane here),
        # so kernels accumulate in the same order as on the CPU
        self.half_vector_loads = bool(vector_bytes)

    def __reduce__(self) -> tuple[type, tuple[int, int, bool]]:  # type: ignore[override]
        return type(self), (self.vector_bytes, self.thread_max, self.has_fma)

    native_float_dtypes = frozenset({dtypes.float32, dtypes.float64})
    # NVIDIA's mma.m16n8k16, emulated warp-wide (the TC opt's kernels are checked here without a GPU)
    tensor_cores = NVIDIA_SM80

    def render(self, uops: list[UOp]) -> str:
        """Serialise the linear program (a listing, then base64 of a pickle on the last line)."""
        if not uops or uops[-1].op is not Ops.SINK:
            raise ValueError("render needs a linear program ending in SINK (the output of linearize)")
        pos = {u: i for i, u in enumerate(uops)}
        prog: list[Instruction] = []
        for u in uops:
            missing = [s.op for s in u.src if s not in pos]
            if missing:
                raise ValueError(f"{u.op} uses {missing[0]} that is not in the linear program")
            arg = (u.arg if isinstance(u.arg, str) else getattr(u.arg, "function_name", None)) if u.op is Ops.SINK \
                else u.arg  # fmt: skip
            prog.append((u.op, u.dtype, tuple(pos[s] for s in u.src), arg))
        # a readable listing for DEBUG=4 (comment lines), then the payload on the last line
        listing, depth = [], 0
        for i, (op, dt, src, arg) in enumerate(prog):
            depth -= op is Ops.END
            listing.append(f"# {i:4d} {'  ' * depth}{op.name:<12} {dt!s:<34} {list(src)!s:<16} {arg!r}")
            depth += op is Ops.RANGE
        return "\n".join([*listing, base64.b64encode(pickle.dumps(prog)).decode()])


def decode_program(src: str) -> list[Instruction]:
    """Inverse of `PythonRenderer.render`: the instruction list of a rendered program."""
    try:
        prog = pickle.loads(base64.b64decode(src.rsplit("\n", 1)[-1].encode(), validate=True))
    except Exception as e:
        raise ValueError(f"not a PythonRenderer program: {e}") from e
    if not isinstance(prog, list) or not prog or prog[-1][0] is not Ops.SINK:
        raise ValueError("not a PythonRenderer program: expected an instruction list ending in SINK")
    return prog
