"""`Renderer`: the base class of every code generator, declaring what the target can do, and the target data that
lowering and the optimiser read from it (tensor-core instructions, the CPU thread-id variable)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from tg.ir.dtype import DType, dtypes
from tg.ir.floats import truncate
from tg.ir.ops import Ops

# most buffers one CPU kernel takes: the CPU device calls kernels through ctypes, which passes at most 1,024
# arguments (buffers, variable values, the thread id); half of that leaves room for the values
CPU_MAX_BUFFERS = 512

if TYPE_CHECKING:
    from tg.ir.pattern import PatternMatcher
    from tg.ir.uop import UOp


# third element of the arg of a RANGE that loops over blocks of a sum (tg.codegen.lower.blocked): kept rolled
BLOCK_LOOP = "block"
# the variable a threaded CPU kernel takes its thread id in (its last int argument; lowering makes THREAD ranges of it)
CORE_ID = "core_id"


class Renderer:
    """Turns a linear program (a list of UOps) into source code for one target, and declares the target's abilities.

    Lowering reads the capability attributes to decide what to decompose: an ALU op missing from `supported_ops`
    is rewritten into ops that are present (e.g. SUB -> ADD+NEG, transcendentals -> polynomials), a dtype missing
    from `native_dtypes` is computed in float32 with conversions at loads, stores and casts.
    """

    device: str = ""  # the device family this renderer targets, e.g. "CPU"
    suffix: str = ""  # source file suffix (for dumps), e.g. "c"
    has_local: bool = False  # has workgroup-local thread ids
    has_shared: bool = False  # has workgroup-shared memory
    has_threads: bool = False  # can run ranges of type THREAD in parallel
    supports_float4: bool = False  # has vector loads/stores
    vector_widths: tuple[int, ...] = (1,)  # vector lane counts the target handles natively
    vector_bytes: int = 0  # bytes in the widest native vector register (0: no vectors; 64 on AVX-512)
    vector_registers: int = 0  # how many of them
    vector_ops: frozenset[Ops] = frozenset()  # ops computed on vector dtypes (the rest are done lane by lane)
    vector_bool_ops: frozenset[Ops] = frozenset()  # of those, the ones computed on or into bool vectors
    # (op, from, to) CAST/BITCAST conversions of scalar dtypes done on whole vectors
    vector_conversions: frozenset[tuple[Ops, DType, DType]] = frozenset()
    has_fma: bool = False  # acc + a*b in reductions becomes MULACC (rendered as a fused multiply-add)
    thread_max: int = 1  # most threads a THREAD axis may use
    global_max: tuple[int, ...] | None = None  # maximum launch grid per dimension, None: the kernel loops itself
    local_max: tuple[int, ...] | None = None  # maximum workgroup size per dimension
    shared_max: int = 0  # bytes of shared memory per workgroup
    max_local_threads: int = 1  # most threads in one workgroup (the product of its local sizes)
    tensor_cores: tuple[TensorCore, ...] = ()  # warp-level matmul instructions the TC opt may use
    # ALU ops the target renders directly; everything else must be decomposed by lowering
    supported_ops: frozenset[Ops] = frozenset()
    # float dtypes the target computes in natively (others are computed in float32 and stored as bits)
    native_float_dtypes: frozenset[DType] = frozenset({dtypes.float32, dtypes.float64})
    # extra renderer-specific rewrite rules run at the end of lowering
    extra_matcher: PatternMatcher | None = None
    # most buffers one kernel may take, output included (None: no limit). The scheduler splits a kernel that would
    # take more by storing intermediates (store rule L1); every subclass that sets it is listed in `buffer_limits`
    max_buffers: int | None = None
    buffer_limits: ClassVar[dict[str, int]] = {}  # device family -> max_buffers, read by the scheduler

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.max_buffers is not None and cls.device:
            Renderer.buffer_limits[cls.device] = cls.max_buffers

    def supported_dtypes(self) -> set[DType]:
        """The scalar dtypes kernels for this target may use (storage and arithmetic, emulated or native)."""
        return {*dtypes.ints, dtypes.bool, *dtypes.fp8s, *dtypes.floats}

    def render(self, uops: list[UOp]) -> str:
        """Render a linear program (the output of `linearize`) to source code."""
        raise NotImplementedError(f"{type(self).__name__} does not implement render")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.device!r})"

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return type(self), ()


# ---- tensor cores: warp-level matmul instructions a renderer may declare in `tensor_cores` (the TC opt uses them) --

WARP_SIZE = 32


@dataclass(frozen=True)
class TensorCore:
    """A warp-level `D = A @ B` instruction: shape (M, N, K), input and accumulator dtypes, renderer-facing name."""

    name: str
    dims: tuple[int, int, int]
    dtype_in: DType
    dtype_out: DType

    # per-thread fragments of mma.m16n8k16: (row, column) of element j held by `lane`
    @staticmethod
    def a_elem(lane: int | UOp, j: int) -> tuple[int | UOp, int | UOp]:
        """(row m, column k) of A's element j in `lane`'s fragment."""
        return lane // 4 + 8 * ((j >> 1) & 1), (lane % 4) * 2 + (j & 1) + 8 * (j >> 2)

    @staticmethod
    def b_elem(lane: int | UOp, j: int) -> tuple[int | UOp, int | UOp]:
        """(row k, column n) of B's element j in `lane`'s fragment."""
        return (lane % 4) * 2 + (j & 1) + 8 * (j >> 1), lane // 4

    @staticmethod
    def d_elem(lane: int | UOp, j: int) -> tuple[int | UOp, int | UOp]:
        """(row m, column n) of D's element j in `lane`'s fragment."""
        return lane // 4 + 8 * (j >> 1), (lane % 4) * 2 + (j & 1)

    def emulate(self, a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
        """The warp's WMMA from all 32 lanes' fragments (lane-major: 8 A and 4 B values per lane): every lane's 4 D
        values, lane-major. Products are exact, summed exactly (fsum) and rounded once to float32."""
        m, n, k = self.dims
        am = [[0.0] * k for _ in range(m)]
        bm = [[0.0] * n for _ in range(k)]
        for lane in range(WARP_SIZE):
            for j in range(8):
                r, c = self.a_elem(lane, j)
                am[r][c] = a[lane * 8 + j]
            for j in range(4):
                r, c = self.b_elem(lane, j)
                bm[r][c] = b[lane * 4 + j]
        out = []
        for lane in range(WARP_SIZE):
            for j in range(4):
                r, c = self.d_elem(lane, j)
                out.append(truncate[dtypes.float32](math.fsum(am[r][x] * bm[x][c] for x in range(k))))
        return tuple(out)


MMA_F16 = TensorCore("mma_m16n8k16_f16_f32", (16, 8, 16), dtypes.float16, dtypes.float32)
MMA_BF16 = TensorCore("mma_m16n8k16_bf16_f32", (16, 8, 16), dtypes.bfloat16, dtypes.float32)
NVIDIA_SM80 = (MMA_F16, MMA_BF16)
TENSOR_CORES = {tc.name: tc for tc in NVIDIA_SM80}
