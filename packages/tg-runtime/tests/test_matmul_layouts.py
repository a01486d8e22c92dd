"""The CPU heuristic's matmuls in every operand layout: vector loads along a contiguous axis, numpy's results.

A transformer's matmuls come in three layouts: `x @ W.T` (nn.Linear's forward, "NT": both operands contiguous along
the reduce axis), `g @ W` (the input gradient, "NN") and `g.T @ x` (the weight gradient, "TN": both contiguous along
an output axis). The heuristic must vectorise each along an axis its loads read contiguously (no vector assembled
lane by lane from scalar loads) and give numpy's results, at every vector width a renderer may have and at sizes no
vector width divides.
"""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen.opt import OptKernel
from tg.codegen.opt.heuristic import hand_coded_opts
from tg.codegen.opt.kernel import vector_lanes
from tg.codegen.program import ProgramSpec, get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.ir.dtype import dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp
from tg.runtime.device import Buffer, Device
from tg.runtime.engine import CompiledRunner

f32 = dtypes.float32
LAYOUTS = ("NN", "NT", "TN", "TT")  # N: stored as used, T: stored transposed ((K, M) for A, (N, K) for B)
VECTOR_LAYOUTS = ("NN", "NT", "TN")  # the transformer's; TT has no axis contiguous in both its store and loads


def renderers() -> list[ClangRenderer]:
    """The CPU's own renderer and the narrower vector widths it can also compile (SSE's 16 bytes, AVX2's 32)."""
    ren = Device["CPU"].renderer
    widths = sorted({w for w in (16, 32, ren.vector_bytes) if 0 < w <= max(ren.vector_bytes, 16)})
    return [ClangRenderer(w, 2, ren.has_fma) for w in widths]


def matmul_ast(m: int, n: int, k: int, layout: str) -> UOp:
    """out (m, n) = A (m, k) @ B (k, n) with A and B stored as `layout` says."""
    r_m, r_n, r_k = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    a, b, out = UOp.param(1, f32, m * k), UOp.param(2, f32, k * n), UOp.param(0, f32, m * n)
    a_index = r_m * k + r_k if layout[0] == "N" else r_k * m + r_m
    b_index = r_k * n + r_n if layout[1] == "N" else r_n * k + r_k
    product = (a.index(a_index).load() * b.index(b_index).load()).reduce(r_k)
    return UOp.sink(out.index(r_m * n + r_n).store(product).end(r_m, r_n))


def run_cpu(prg: ProgramSpec, out_shape: tuple[int, int], inputs: list[np.ndarray]) -> np.ndarray:
    """Run `prg` on the CPU with `inputs` as buffers 1, 2, ...; its float32 output buffer 0 as an array."""
    bufs = [Buffer("CPU", out_shape[0] * out_shape[1], f32).ensure_allocated()]
    for arr in inputs:
        bufs.append(Buffer("CPU", arr.size, f32).ensure_allocated().copyin(memoryview(np.ascontiguousarray(arr).data)))
    CompiledRunner(prg, "CPU")(bufs, {})
    return np.frombuffer(bytes(bufs[0].as_memoryview()), dtype=np.float32).reshape(out_shape)


def run_numpy_check(m: int, n: int, k: int, layout: str, ren: ClangRenderer) -> ProgramSpec:
    """Compile `matmul_ast` with the heuristic's opts, run it on the CPU and compare with numpy."""
    ast = matmul_ast(m, n, k, layout)
    prg = get_program(ast, ren, list(hand_coded_opts(OptKernel(ast, ren)).applied))
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a_np = rng.standard_normal((m, k) if layout[0] == "N" else (k, m)).astype(np.float32)
    b_np = rng.standard_normal((k, n) if layout[1] == "N" else (n, k)).astype(np.float32)
    got = run_cpu(prg, (m, n), [a_np, b_np])
    want = (a_np if layout[0] == "N" else a_np.T).astype(np.float64) @ (b_np if layout[1] == "N" else b_np.T)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=f"{layout} {ren}")
    return prg


def gathered_vectors(prg: ProgramSpec) -> list[UOp]:
    """Vectors the program assembles from more than one scalar load (a gather, lane by lane)."""
    return [u for u in prg.uops if u.op is Ops.VECTORIZE and len({s for s in u.src if s.op is Ops.LOAD}) > 1]


@pytest.mark.parametrize("ren", renderers(), ids=lambda r: f"{r.vector_bytes}B")
@pytest.mark.parametrize("layout", VECTOR_LAYOUTS)
@pytest.mark.parametrize("shape", [(64, 48, 64), (32, 64, 256)])
def test_every_transformer_layout_loads_whole_vectors(ren: ClangRenderer, layout: str,
                                                       shape: tuple[int, int, int]) -> None:  # fmt: skip
    """Each layout's loads are vectors along an axis they read contiguously: no vector gathered from scalar loads."""
    m, n, k = shape
    prg = run_numpy_check(m, n, k, layout, ren)
    lanes = vector_lanes(ren, 4)
    vector_loads = [u for u in prg.uops if u.op is Ops.LOAD and u.dtype.count > 1]
    assert vector_loads and all(u.dtype.count <= lanes for u in vector_loads), [str(o) for o in prg.applied_opts]
    assert not gathered_vectors(prg), f"{layout}: gathers with {[str(o) for o in prg.applied_opts]}"


@pytest.mark.parametrize("ren", renderers(), ids=lambda r: f"{r.vector_bytes}B")
def test_linear_forward_reduces_along_the_shared_contiguous_axis(ren: ClangRenderer) -> None:
    """`x @ W.T`: the vector lanes run along the reduce axis (both operands contiguous there), several outputs'
    accumulators at once; the columns of W are not gathered."""
    prg = run_numpy_check(48, 64, 128, "NT", ren)
    kinds = [o.arg[1] for o in prg.applied_opts]
    assert AxisType.GROUP_REDUCE in kinds and kinds.count(AxisType.UPCAST) == 2, [str(o) for o in prg.applied_opts]


@pytest.mark.parametrize("ren", renderers(), ids=lambda r: f"{r.vector_bytes}B")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(37, 29, 41), (13, 100, 36), (100, 3, 52), (1, 64, 96), (24, 40, 1)])
def test_odd_sizes_match_numpy(ren: ClangRenderer, layout: str, shape: tuple[int, int, int]) -> None:
    """Sizes no vector width divides (or only half of one), a single row, a reduce of one: numpy's results."""
    run_numpy_check(*shape, layout, ren)


@pytest.mark.parametrize("ren", renderers(), ids=lambda r: f"{r.vector_bytes}B")
@pytest.mark.parametrize("layout", VECTOR_LAYOUTS)
def test_fused_row_operand_matches_numpy(ren: ClangRenderer, layout: str) -> None:
    """A row operand summed from two buffers in the matmul (a gradient accumulated by autograd, fused into its
    consumer): numpy's results, and the columns still load whole vectors."""
    m, n, k = 24, 48, 40
    r_m, r_n, r_k = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    a1, a2 = UOp.param(1, f32, m * k), UOp.param(3, f32, m * k)
    b, out = UOp.param(2, f32, k * n), UOp.param(0, f32, m * n)
    a_index = r_m * k + r_k if layout[0] == "N" else r_k * m + r_m
    b_index = r_k * n + r_n if layout[1] == "N" else r_n * k + r_k
    row = a1.index(a_index).load() + a2.index(a_index).load()
    ast = UOp.sink(out.index(r_m * n + r_n).store((row * b.index(b_index).load()).reduce(r_k)).end(r_m, r_n))
    prg = get_program(ast, ren, list(hand_coded_opts(OptKernel(ast, ren)).applied))
    rng = np.random.default_rng(7)
    a_shape = (m, k) if layout[0] == "N" else (k, m)
    a1_np, a2_np = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(a_shape).astype(np.float32)
    b_np = rng.standard_normal((k, n) if layout[1] == "N" else (n, k)).astype(np.float32)
    got = run_cpu(prg, (m, n), [a1_np, b_np, a2_np])
    a_sum = (a1_np + a2_np) if layout[0] == "N" else (a1_np + a2_np).T
    want = a_sum.astype(np.float64) @ (b_np if layout[1] == "N" else b_np.T)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert not gathered_vectors(prg), f"{layout}: gathers with {[str(o) for o in prg.applied_opts]}"
