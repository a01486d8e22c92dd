"""GPU code generation without a GPU: work-item ids (SPECIAL), launch dims and the OpenCL/CUDA C spellings."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tg.codegen.lower.gpudims import add_gpudims
from tg.codegen.program import get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.codegen.render.opencl import OpenCLRenderer
from tg.ir.dtype import dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp

f32 = dtypes.float32


def elementwise(*shape: int, types: tuple[AxisType, ...] | None = None) -> UOp:
    """out[i, j, ...] = in[i, j, ...] * 2 over ranges of the given sizes (and axis types)."""
    types = types or (AxisType.LOOP,) * len(shape)
    rngs = [UOp.range(s, i, t) for i, (s, t) in enumerate(zip(shape, types, strict=True))]
    idx: UOp | int = 0
    for r, s in zip(rngs, shape, strict=True):
        idx = idx * s + r
    assert isinstance(idx, UOp)
    n = 1
    for s in shape:
        n *= s
    val = UOp.param(1, f32, n).index(idx).load() * UOp.const(f32, 2.0)
    return UOp.sink(UOp.param(0, f32, n).index(idx).store(val).end(*rngs))


def test_grid_ranges_become_group_and_local_ids() -> None:
    p = get_program(elementwise(6, 1024), OpenCLRenderer())
    assert "get_group_id(0)" in p.src and "get_local_id(0)" in p.src and "for (" not in p.src
    assert p.global_size == (4, 6) and p.local_size == (256, 1)
    assert "__kernel void E_6_1024(__global float* restrict data0" in p.src


def test_local_size_respects_the_thread_budget_and_divisibility() -> None:
    ren = OpenCLRenderer(max_local_threads=64)
    p = get_program(elementwise(7, 12), ren)  # 12 = 4*3: the largest power-of-two divisor is 4
    assert p.local_size == (4, 1) and p.global_size == (3, 7)
    p = get_program(elementwise(31), OpenCLRenderer())  # a prime: no work-group, one group per item
    assert p.local_size == (1,) and p.global_size == (31,)


def test_more_ranges_than_dimensions_are_merged() -> None:
    p = get_program(elementwise(2, 3, 5, 7), OpenCLRenderer())
    assert len(p.global_size or ()) == 3
    assert p.global_size == (7, 5, 3) and p.local_size == (1, 1, 2)  # 2*3 share dimension 2: 6 = 3 groups of 2
    assert "/3" in p.src.replace(" ", "") or "%3" in p.src.replace(" ", "")


def test_explicit_local_ranges_map_to_local_ids() -> None:
    ast = elementwise(8, 4, types=(AxisType.GLOBAL, AxisType.LOCAL))
    p = get_program(ast, OpenCLRenderer())
    assert p.global_size == (8,) and p.local_size == (4,)
    assert "get_local_id(0)" in p.src and "get_group_id(0)" in p.src


def test_reduce_loops_stay_loops_inside_a_work_item() -> None:
    ro, rr = UOp.range(64, 0), UOp.range(8, 1, AxisType.REDUCE)
    red = UOp.param(1, f32, 512).index(ro * 8 + rr).load().reduce(rr, arg=Ops.ADD)
    p = get_program(UOp.sink(UOp.param(0, f32, 64).index(ro).store(red).end(ro)), OpenCLRenderer())
    assert p.global_size == (1,) and p.local_size == (64,)
    assert "for (int ridx1 = 0; ridx1 < 8; ridx1++)" in p.src


def test_cpu_renderer_keeps_loops() -> None:
    ast = elementwise(6, 1024)
    assert add_gpudims(ast, ClangRenderer()) is ast
    p = get_program(ast, ClangRenderer())
    assert p.global_size is None and p.local_size is None


def test_stores_over_different_loops_keep_their_loops() -> None:
    r0, r1 = UOp.range(4, 0), UOp.range(6, 1)
    a = UOp.param(0, f32, 4).index(r0).store(UOp.const(f32, 1.0)).end(r0)
    b = UOp.param(1, f32, 6).index(r1).store(UOp.const(f32, 2.0)).end(r1)
    p = get_program(UOp.sink(a, b), OpenCLRenderer())
    assert p.global_size is None and "for (" in p.src


def test_opencl_spellings() -> None:
    ren = OpenCLRenderer()
    assert ren.render_const(2**64 - 1, dtypes.uint64) == "18446744073709551615ul"
    assert ren.render_const(-(2**63), dtypes.int64) == "(-9223372036854775807l-1l)"
    assert ren.render_cast("x", dtypes.float32, dtypes.bool) == "((x)!=0)"
    assert ren.render_bitcast("x", f32, dtypes.uint32) == "as_uint(x)"
    assert ren.render_dtype(dtypes.bool.ptr()) == "uchar" and ren.render_dtype(dtypes.bool) == "bool"
    r = UOp.range(8, 0)
    src = get_program(
        UOp.sink(
            UOp.param(0, dtypes.float64, 8)
            .index(r)
            .store(UOp.param(1, dtypes.float64, 8).index(r).load().sqrt())
            .end(r)
        ),
        ren,
    ).src
    assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in src and "sqrt(" in src and "#include" not in src


def test_local_ranges_must_close_every_store() -> None:
    rl = UOp.range(4, 0, AxisType.LOCAL)
    r1 = UOp.range(4, 1)
    a = UOp.param(0, f32, 4).index(rl).store(UOp.const(f32, 1.0)).end(rl)
    b = UOp.param(1, f32, 4).index(r1).store(UOp.const(f32, 1.0)).end(r1)
    with pytest.raises(ValueError, match="LOCAL"):
        get_program(UOp.sink(a, b), OpenCLRenderer())


def test_cuda_spellings_and_launch_dims() -> None:
    from tg.codegen.render.cuda import CUDARenderer

    ren = CUDARenderer("sm_90")
    p = get_program(elementwise(6, 1024), ren)
    assert 'extern "C" __global__ void E_6_1024(float* __restrict__ data0' in p.src
    assert "blockIdx.x" in p.src and "threadIdx.x" in p.src and "blockIdx.y" in p.src
    assert p.global_size == (4, 6) and p.local_size == (256, 1)
    assert ren.render_bitcast("x", f32, dtypes.uint32) == "tg_bitcast<unsigned int>((float)(x))"
    assert ren.render_const(float("inf"), f32) == "__int_as_float(0x7f800000)"
    assert ren.workitem("i", 2) == "((int)(blockIdx.z*blockDim.z+threadIdx.z))"
    half = UOp.range(8, 0)
    src = get_program(
        UOp.sink(
            UOp.param(0, dtypes.float16, 8)
            .index(half)
            .store(UOp.param(1, dtypes.float16, 8).index(half).load() * 2)
            .end(half)
        ),
        ren,
    ).src
    assert "cvt.f32.f16" in src and "#include" not in src and "__builtin" not in src
    with pytest.raises(ValueError, match="sm_90"):
        CUDARenderer("gfx1100")


def test_cuda_grid_limits_merge_large_outer_dimensions() -> None:
    from tg.codegen.render.cuda import CUDARenderer

    p = get_program(elementwise(70000, 3, 4), CUDARenderer())  # 70000 > 65535 blocks in y/z: one dimension
    assert p.global_size is not None and len(p.global_size) == 1


def _row_sums(n_out: int, n_red: int) -> UOp:
    o, r = UOp.range(n_out, 0), UOp.range(n_red, 1, AxisType.REDUCE)
    red = UOp.param(1, f32, n_out * n_red).index(o * n_red + r).load().reduce(r, arg=Ops.ADD)
    return UOp.sink(UOp.param(0, f32, n_out).index(o).store(red).end(o))


def test_group_reduce_goes_through_local_memory_and_a_barrier() -> None:
    from tg.codegen.opt.opts import split
    from tg.codegen.render.cuda import CUDARenderer

    opts = [split(1, 64, AxisType.GROUP_REDUCE)]
    p = get_program(_row_sums(8, 512), OpenCLRenderer(), opts)
    assert "__local float temp0[64];" in p.src and p.src.count("barrier(CLK_LOCAL_MEM_FENCE);") == 1
    assert "temp0[lidx0] = " in p.src and p.global_size == (8,) and p.local_size == (64,)
    cu = get_program(_row_sums(8, 512), CUDARenderer(), opts).src
    assert "__shared__ float temp0[64];" in cu and "__syncthreads();" in cu
    with pytest.raises(ValueError, match="64 work-items per work-group > 32"):
        get_program(_row_sums(8, 512), OpenCLRenderer(max_local_threads=32), opts)


def test_gpu_heuristic_groups_long_reductions_with_few_outputs() -> None:
    p = get_program(_row_sums(2, 4096), OpenCLRenderer())
    assert [o.arg[:2] for o in p.applied_opts] == [(256, AxisType.GROUP_REDUCE)]
    assert get_program(_row_sums(4096, 64), OpenCLRenderer()).applied_opts == ()  # many outputs: one item each
    assert get_program(_row_sums(2, 4096), ClangRenderer()).src.count("__local") == 0


# *** float4 spellings, padded work-groups, half conversions ***


def _upcast4(ren: object) -> str:
    from tg.codegen.opt.opts import split

    return get_program(elementwise(64), ren, [split(0, 4, AxisType.UPCAST)]).src  # type: ignore[arg-type]


def test_opencl_vectors_use_vload_vstore_and_lane_selectors() -> None:
    src = _upcast4(OpenCLRenderer())
    assert (
        "float4 val0 = vload4(0, &data1[" in src and "vstore4(val0*((float4)(2.0f,2.0f,2.0f,2.0f)), 0, &data0[" in src
    )
    ren = OpenCLRenderer()
    assert ren.render_gep("v", 11, dtypes.float32.vec(16)) == "v.sb" and ren.vector_type(dtypes.int64.vec(2)) == "long2"
    with pytest.raises(NotImplementedError, match="no vector type"):
        ren.vector_type(dtypes.float16.vec(4))


def test_cuda_vectors_check_alignment_and_have_scalar_lane_math() -> None:
    from tg.codegen.render.cuda import CUDARenderer

    src = _upcast4(CUDARenderer())
    assert "float4 val0 = tg_vload_float4(&data1[" in src and "tg_vstore_float4(&data0[" in src
    assert "if (((unsigned long long)p & 15ull) == 0) return *(const float4*)p;" in src  # unaligned views: lanes
    assert "make_float4(" in src and "val0.x" in src  # CUDA's float4 has no arithmetic: lane by lane
    assert CUDARenderer().vector_type(dtypes.int64.vec(2)) == "longlong2"


@pytest.mark.parametrize("n, local, groups", [(1000, 256, 4), (1023, 256, 4), (4097, 256, 17), (300, 64, 5)])
def test_odd_sizes_get_padded_work_groups_with_gated_accesses(n: int, local: int, groups: int) -> None:
    p = get_program(elementwise(n), OpenCLRenderer())
    assert p.local_size == (local,) and p.global_size == (groups,)
    gated = [u for u in p.uops if u.op in (Ops.LOAD, Ops.STORE) and len(u.src) == 3]
    assert len(gated) == 2 and f"<{n}" in p.src.replace(" ", "")


def test_sizes_with_a_large_power_of_two_divisor_are_not_padded() -> None:
    p = get_program(elementwise(6, 1024), OpenCLRenderer())
    assert not [u for u in p.uops if u.op in (Ops.LOAD, Ops.STORE) and len(u.src) == 3]
    p = get_program(elementwise(31), OpenCLRenderer())  # small odd sizes: one item per group, nothing to gate
    assert p.local_size == (1,) and "<31" not in p.src.replace(" ", "")


def test_opencl_half_rendering_with_and_without_cl_khr_fp16() -> None:
    i, f16 = UOp.range(64, 0), dtypes.float16
    val = (UOp.param(1, f16, 64).index(i).load().cast(f32) * UOp.const(f32, 2.0)).cast(f16)
    half = UOp.sink(UOp.param(0, f16, 64).index(i).store(val).end(i))
    storage = get_program(half, OpenCLRenderer(has_half=False)).src
    assert "vload_half(0, (const half*)&h)" in storage and "vstore_half_rte(f, 0, (half*)&h)" in storage
    assert "cl_khr_fp16" not in storage and "hlf" not in storage
    native = get_program(half, OpenCLRenderer(has_half=True)).src
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in native and "convert_half_rte(f)" in native
    if (clang := shutil.which("clang")) is None:
        pytest.skip("clang not installed: the OpenCL C compile check needs it")
    # both compile as OpenCL C 1.2 (the native one with the extension switched on, as on a GPU that has it)
    for src, ext in ((storage, []), (native, ["-Xclang", "-cl-ext=+cl_khr_fp16"])):
        cmd = [clang, "-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header", *ext, "-fsyntax-only", "-"]
        res = subprocess.run(cmd, input=src, capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stderr
