"""The CUDA backend without a GPU: NVRTC compilation and its error messages (a missing driver: test_gpu_backends.py)."""

from __future__ import annotations

import pytest

from tg.runtime.backends import _cuda
from tg.runtime.device import CompileError, DeviceUnavailable

KERNEL = 'extern "C" __global__ void add1(float* a, const int n) { int i = blockIdx.x*blockDim.x+threadIdx.x; '
KERNEL += "if (i < n) a[i] += 1.0f; }"


def test_nvrtc_compiles_to_ptx_and_cubin(nvrtc: None) -> None:
    compiler = _cuda.CUDACompiler("sm_90")
    cubin = compiler.compile(KERNEL)
    assert cubin[:4] == b"\x7fELF"
    ptx = compiler.compile_ptx(KERNEL)
    assert b".target sm_90" in ptx and b".entry add1" in ptx
    assert compiler.cachekey is not None and compiler.cachekey.startswith("cuda|sm_90|nvrtc")


def test_compile_errors_show_the_log_and_the_source(nvrtc: None) -> None:
    with pytest.raises(
        CompileError, match=r"(?s)NVRTC .* failed for sm_90:.*not_declared.*--- source ---\n   1 extern"
    ):
        _cuda.CUDACompiler("sm_90").compile('extern "C" __global__ void bad(float* a) { a[0] = not_declared; }')


def test_bad_arch_is_rejected() -> None:
    with pytest.raises(ValueError, match="sm_90"):
        _cuda.CUDACompiler("gfx1100")


def test_missing_nvrtc_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVRTC", "/nonexistent/libnvrtc.so")
    _cuda.libnvrtc.cache_clear()
    try:
        with pytest.raises(DeviceUnavailable, match=r"NVRTC .* was not found.*pip install"):
            _cuda.libnvrtc()
    finally:
        _cuda.libnvrtc.cache_clear()
