"""LLVMCompiler (llvmlite) and the LLVM IR renderers: compile errors, cache keys, the missing-llvmlite message, what the
rendered IR may contain (no library calls, no fast-math, fma for MULACC, AMD attributes), and CPU kernels run through
the ELF loader against numpy and tg.ir.floats (the storage-float conversions bit for bit)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys

import numpy as np
import pytest

from tg.codegen.program import get_program
from tg.codegen.render.llvmir import AMDLLVMRenderer, CPULLVMRenderer
from tg.ir.dtype import DType, dtypes
from tg.ir.floats import float_to_fp8, fp8_to_float
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp
from tg.runtime.amd.program import CodeObject
from tg.runtime.device import CompileError
from tg.runtime.llvm import AMDGPU_TRIPLE, LLVMCompiler, host_target, llvm_version

pytest.importorskip("llvmlite")

X86_64 = platform.machine().lower() in ("x86_64", "amd64")


def _elementwise(n: int, src: DType, dst: DType, fn=lambda x: x) -> UOp:  # type: ignore[no-untyped-def]
    i = UOp.range(n, 0)
    val = fn(UOp.param(1, src, n).index(i).load())
    return UOp.sink(UOp.param(0, dst, n).index(i).store(val).end(i))


def _matmul(m: int, n: int, k: int) -> UOp:
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    a = UOp.param(1, dtypes.float32, m * k).index(i * k + r).load()
    b = UOp.param(2, dtypes.float32, k * n).index(r * n + j).load()
    return UOp.sink(
        UOp.param(0, dtypes.float32, m * n).index(i * n + j).store((a * b).reduce(r, arg=Ops.ADD)).end(i, j)
    )


@pytest.fixture(scope="module")
def cpu() -> tuple[CPULLVMRenderer, LLVMCompiler]:
    triple, cpu_name, features = host_target()
    return CPULLVMRenderer(triple, cpu_name, features, threads=2), LLVMCompiler(triple, cpu_name, features)


@pytest.fixture(scope="module")
def amd() -> tuple[AMDLLVMRenderer, LLVMCompiler]:
    return AMDLLVMRenderer("gfx1100"), LLVMCompiler(AMDGPU_TRIPLE, "gfx1100")


def test_compile_error_shows_llvm_message_and_numbered_ir(cpu) -> None:  # type: ignore[no-untyped-def]
    bad = "define void @k(ptr %p) {\nentry:\n  store float %missing, ptr %p\n  ret void\n}\n"
    with pytest.raises(CompileError) as e:
        cpu[1].compile(bad)
    msg = str(e.value)
    assert "missing" in msg and "error" in msg
    assert "   3   store float %missing, ptr %p" in msg  # the IR, numbered


def test_cachekey_names_llvm_version_triple_cpu_and_features(cpu, amd) -> None:  # type: ignore[no-untyped-def]
    key = cpu[1].cachekey
    assert key.startswith(f"llvm-{llvm_version()}-{cpu[1].triple}-{cpu[1].cpu}-") and key.endswith("-O2")
    assert cpu[1].features in key
    assert amd[1].cachekey == f"llvm-{llvm_version()}-amdgcn-amd-amdhsa-gfx1100--O2"


def test_missing_llvmlite_says_how_to_install() -> None:
    code = ("import sys; sys.modules['llvmlite'] = None\n"
            "from tg.runtime.llvm import LLVMCompiler\n"
            "try:\n    LLVMCompiler('x86_64-unknown-linux-gnu')\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True)
    assert "DeviceUnavailable the LLVM renderer needs llvmlite: pip install 'tg-runtime[llvm]'" in out.stdout


def _kernels() -> list[UOp]:
    f32 = dtypes.float32
    return [
        _matmul(16, 16, 16),
        _elementwise(37, f32, f32, lambda x: (x.alu(Ops.EXP2) + x.alu(Ops.SIN)) / x.alu(Ops.LOG2)),
        _elementwise(37, dtypes.float64, dtypes.float64, lambda x: x.alu(Ops.EXP2) * x.alu(Ops.SQRT)),
        _elementwise(37, dtypes.float16, dtypes.float16, lambda x: x.alu(Ops.SIN) + x * x),
        _elementwise(37, dtypes.bfloat16, dtypes.fp8e4m3, lambda x: x.cast(dtypes.fp8e4m3)),
        _elementwise(37, dtypes.int32, dtypes.int32, lambda x: x // UOp.const(dtypes.int32, 7) + (x << x)),
    ]


def test_rendered_ir_calls_only_intrinsics_and_has_no_fast_math(cpu, amd) -> None:  # type: ignore[no-untyped-def]
    for ren, _ in (cpu, amd):
        for ast in _kernels():
            src = get_program(ast, ren).src
            calls = re.findall(r"call \S+ (@[\w.]+)\(", src)
            assert all(c.startswith("@llvm.") or c.endswith("_r_16_16_16") for c in calls), calls
            for flag in (" fast ", " contract ", " reassoc ", " afn ", " nnan ", " ninf "):
                assert flag not in src


def test_mulacc_is_llvm_fma_and_fdiv_is_plain(amd) -> None:  # type: ignore[no-untyped-def]
    src = get_program(_matmul(16, 16, 16), amd[0]).src
    assert "@llvm.fma.f32" in src
    div = get_program(_elementwise(8, dtypes.float32, dtypes.float32, lambda x: x / (x + x)), amd[0]).src
    assert re.search(r"= fdiv float %", div)


def test_amd_kernel_attributes_and_code_object(amd) -> None:  # type: ignore[no-untyped-def]
    p = get_program(_matmul(64, 64, 32), amd[0])
    assert "define amdgpu_kernel void" in p.src and "ptr addrspace(1) noalias %data0" in p.src
    local = 1
    for s in p.local_size or ():
        local *= int(s)
    assert f'"amdgpu-flat-work-group-size"="1,{local}"' in p.src
    co = CodeObject(amd[1].compile(p.src), p.name)
    co.check_kernargs(len(p.globals), len(p.vars))
    asm = amd[1].assembly(p.src)
    assert ".amdhsa_kernel " + p.name in asm and "s_endpgm" in asm


def test_amd_lds_and_barrier(amd) -> None:  # type: ignore[no-untyped-def]
    from tg.codegen.opt.opts import Opt, OptOps

    ast = _elementwise(256, dtypes.float32, dtypes.float32)
    i, r = UOp.range(64, 0), UOp.range(256, 1, AxisType.REDUCE)
    val = UOp.param(1, dtypes.float32, 64 * 256).index(i * 256 + r).load().reduce(r, arg=Ops.ADD)
    ast = UOp.sink(UOp.param(0, dtypes.float32, 64).index(i).store(val).end(i))
    p = get_program(ast, amd[0], opts=[Opt(OptOps.SPLIT, 1, (16, AxisType.GROUP_REDUCE, True))])
    assert "addrspace(3) global" in p.src and "@llvm.amdgcn.s.barrier" in p.src
    assert 'fence syncscope("workgroup") release' in p.src
    co = CodeObject(amd[1].compile(p.src), p.name)
    assert co.descriptor.group_segment_fixed_size > 0


# *** CPU kernels through the ELF loader ***


def _run(cpu, ast: UOp, out: np.ndarray, *ins: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    from tg.runtime.backends._cpu_llvm import CPULLVMProgram

    p = get_program(ast, cpu[0])
    prg = CPULLVMProgram(p.name, cpu[1].compile(p.src))
    arrays = [out, *ins]
    prg(*[a.ctypes.data for a in (arrays[g] for g in p.globals)], threads=p.threads)
    return out


needs_x86 = pytest.mark.skipif(not X86_64, reason="CPU:LLVM loads x86-64 objects only")


@needs_x86
def test_cpu_matmul_and_transcendentals_match_numpy(cpu) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 16), dtype=np.float32), rng.standard_normal((16, 16), dtype=np.float32)
    got = _run(cpu, _matmul(16, 16, 16), np.zeros(256, np.float32), a.ravel(), b.ravel())
    np.testing.assert_allclose(got.reshape(16, 16), a @ b, rtol=1e-5, atol=1e-5)
    x = rng.uniform(0.5, 20, 37).astype(np.float32)
    f = _run(cpu, _kernels()[1], np.zeros(37, np.float32), x)
    np.testing.assert_allclose(f, (np.exp2(x) + np.sin(x)) / np.log2(x), rtol=2e-6)


@needs_x86
@pytest.mark.parametrize("fp8", [dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz])
def test_cpu_fp8_conversions_bit_for_bit(cpu, fp8: DType) -> None:  # type: ignore[no-untyped-def]
    codes = np.arange(256, dtype=np.uint8)
    dec = _run(cpu, _elementwise(256, fp8, dtypes.float32, lambda x: x.cast(dtypes.float32)), np.zeros(256, np.float32),
               codes)  # fmt: skip
    want = np.array([fp8_to_float(int(c), fp8) for c in codes], np.float32)
    np.testing.assert_array_equal(np.isnan(dec), np.isnan(want))
    np.testing.assert_array_equal(dec[~np.isnan(want)], want[~np.isnan(want)])
    rng = np.random.default_rng(1)
    xs = np.concatenate(
        [
            rng.standard_normal(2000) * 10.0 ** rng.integers(-8, 6, 2000),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 448.0, 464.0, 57344.0, 1e9],
        ]
    ).astype(np.float32)
    enc = _run(cpu, _elementwise(len(xs), dtypes.float32, fp8, lambda x: x.cast(fp8)), np.zeros(len(xs), np.uint8), xs)
    np.testing.assert_array_equal(enc, [float_to_fp8(float(x), fp8) for x in xs])


@needs_x86
def test_cpu_half_and_bfloat16_conversions_bit_for_bit(cpu) -> None:  # type: ignore[no-untyped-def]
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    half = _run(cpu, _elementwise(65536, dtypes.float16, dtypes.float32, lambda x: x.cast(dtypes.float32)),
                np.zeros(65536, np.float32), bits)  # fmt: skip
    want = bits.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(half.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
    rng = np.random.default_rng(2)
    xs = np.concatenate(
        [
            rng.standard_normal(5000) * 10.0 ** rng.integers(-9, 6, 5000),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 6e-8, 3e-8],
        ]
    ).astype(np.float32)
    to_half = _run(cpu, _elementwise(len(xs), dtypes.float32, dtypes.float16, lambda x: x.cast(dtypes.float16)),
                   np.zeros(len(xs), np.uint16), xs)  # fmt: skip
    with np.errstate(over="ignore"):
        want_half = xs.astype(np.float16).view(np.uint16) | np.where(np.isnan(xs), 0x200, 0)
    np.testing.assert_array_equal(to_half, want_half)
    to_bf16 = _run(cpu, _elementwise(len(xs), dtypes.float32, dtypes.bfloat16, lambda x: x.cast(dtypes.bfloat16)),
                   np.zeros(len(xs), np.uint16), xs)  # fmt: skip
    u = xs.view(np.uint32)
    want_bf = np.where(np.isnan(xs), ((u >> 16) & 0x8000) | 0x7FC0, (u + 0x7FFF + ((u >> 16) & 1)) >> 16)
    np.testing.assert_array_equal(to_bf16, want_bf.astype(np.uint16))


@needs_x86
def test_cpu_half_conversions_without_f16c_use_bit_operations() -> None:
    triple, cpu_name, features = host_target()
    plain = features.replace("+f16c", "-f16c")
    ren, comp = CPULLVMRenderer(triple, cpu_name, plain), LLVMCompiler(triple, cpu_name, plain)
    assert not ren.half_casts
    ast = _elementwise(64, dtypes.float32, dtypes.float16, lambda x: x.cast(dtypes.float16))
    assert "fptrunc" not in get_program(ast, ren).src
    xs = np.linspace(-70000, 70000, 64, dtype=np.float32)
    got = _run((ren, comp), ast, np.zeros(64, np.uint16), xs)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, xs.astype(np.float16).view(np.uint16))


# *** device strings: CPU:LLVM, NULL:LLVM, NULL:AMD:gfx1100 ***


@needs_x86
def test_cpu_llvm_device_runs_kernels_and_beam(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.ir.helpers import Context
    from tg.runtime.backends._cpu_llvm import CPULLVMProgram
    from tg.runtime.device import Device
    from tg.tensor import Tensor

    monkeypatch.setenv("IGNORE_BEAM_CACHE", "1")
    monkeypatch.setenv("BEAM_TIME", "1")
    x = np.random.default_rng(5).standard_normal((64, 48)).astype(np.float32)
    with Context(DEV="CPU:LLVM"):
        dev = Device["CPU"]
        assert isinstance(dev.renderer, CPULLVMRenderer) and isinstance(dev.compiler, LLVMCompiler)
        assert dev.runtime_t is CPULLVMProgram
        np.testing.assert_allclose((Tensor(x) * 2).exp().sum(1).numpy(), np.exp(x * 2).sum(1), rtol=1e-5)
        with Context(BEAM=1):
            np.testing.assert_allclose((Tensor(x) + 1).max(0).numpy(), (x + 1).max(0))


def test_llvm_device_strings_refuse_wrong_archs() -> None:
    from tg.ir.helpers import Context
    from tg.ir.target import TargetError
    from tg.runtime.device import Device

    with Context(DEV="CPU:LLVM:armv8-a"), pytest.raises(TargetError, match="CPU:LLVM compiles for x86-64"):
        Device["CPU"]
    with (
        Context(DEV="NULL:AMD:gfx900"),
        pytest.raises(TargetError, match="unknown AMD arch 'gfx900'; available: gfx1100"),
    ):
        Device["NULL"]


def test_null_amd_compiles_and_checks_code_objects() -> None:
    from tg.ir.helpers import Context
    from tg.runtime.backends.null import NullAMDProgram
    from tg.runtime.device import Device
    from tg.runtime.engine import method_cache
    from tg.tensor import Tensor

    with Context(DEV="NULL:AMD:gfx1100"):
        before = set(method_cache)
        (Tensor.ones(300, 7).sum(1) * 3).realize()
        runners = [method_cache[k] for k in set(method_cache) - before]
        assert runners and isinstance(Device["NULL"].renderer, AMDLLVMRenderer)
        for r in runners:
            prg = r._prg
            assert isinstance(prg, NullAMDProgram) and prg.code_object.descriptor.wave32
            prg.code_object.check_kernargs(len(r.p.globals), len(r.p.vars))


def test_null_llvm_compiles_for_a_wider_x86_level() -> None:
    from tg.ir.helpers import Context
    from tg.runtime.device import Device
    from tg.tensor import Tensor

    with Context(DEV="NULL:LLVM:x86-64-v4"):
        ren = Device["NULL"].renderer
        assert isinstance(ren, CPULLVMRenderer) and ren.vector_bytes == 64 and ren.has_fma
        (Tensor.ones(64, 64) @ Tensor.ones(64, 64)).realize()
