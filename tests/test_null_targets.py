"""The NULL device renders a model's kernels for any renderer and runs nothing: under `DEV=NULL:CUDA:sm_90` every
kernel of a small training step compiles to an sm_90 cubin with NVRTC (no GPU), under `DEV=NULL:CL` it renders as
OpenCL C (no OpenCL platform), under `DEV=NULL:CLANG:x86-64-v4` it compiles as AVX-512 C on any x86 host."""

from __future__ import annotations

import pytest

from tg.ir import Context
from tg.runtime.cpu_arch import X86_64, host_machine
from tg.runtime.device import Device, DeviceUnavailable
from tg.runtime.engine import CompiledRunner, method_cache
from tg.tensor import Tensor, nn


def training_step_kernels(dev: str) -> list[CompiledRunner]:
    """The kernels a two-layer classifier's forward and backward compile to on `dev` (inputs never hold data)."""
    with Context(DEV=dev):
        before = set(method_cache)
        l1, l2 = nn.Linear(16, 32), nn.Linear(32, 4)
        x = Tensor.empty(8, 16)
        loss = l2(l1(x).relu()).log_softmax().mean()
        loss.backward()
        assert l1.weight.grad is not None and l2.weight.grad is not None
        Tensor.realize(loss, l1.weight.grad, l2.weight.grad)
        assert Device.DEFAULT == "NULL"
        return [method_cache[k] for k in method_cache if k not in before and k[0] == dev]


def test_a_model_compiles_for_cuda_without_a_gpu() -> None:
    try:
        with Context(DEV="NULL:CUDA:sm_90"):
            Device["NULL"]
    except DeviceUnavailable as e:  # no NVRTC here
        pytest.skip(str(e))
    kernels = training_step_kernels("NULL:CUDA:sm_90")
    assert len(kernels) >= 4
    for k in kernels:
        assert 'extern "C" __global__' in k.p.src
        assert k.lib[:4] == b"\x7fELF", f"{k.p.name}: NVRTC gave no sm_90 cubin"  # a cubin is an ELF file


def test_a_model_renders_as_opencl_without_a_platform() -> None:
    kernels = training_step_kernels("NULL:CL")
    assert len(kernels) >= 4
    for k in kernels:
        assert "__kernel void" in k.p.src and k.lib == k.p.src.encode()  # rendered, handed to no compiler


def test_a_model_compiles_as_avx512_c_on_any_x86_host() -> None:
    if host_machine() != X86_64:
        pytest.skip("x86 archs compile on an x86 host")
    kernels = training_step_kernels("NULL:CLANG:x86-64-v4")
    assert len(kernels) >= 4
    assert any("tg_f32x16" in k.p.src for k in kernels)
    assert all(k.lib[:4] == b"\x7fELF" for k in kernels)


def test_a_kernel_split_into_threads_runs_on_null() -> None:
    # NULL's default renderer is the host's C renderer, which splits a large kernel into threads: the NULL program
    # takes the thread count like the CPU's does (it raised TypeError on the `threads` argument)
    t = Tensor.rand(1024, 1024, device="NULL").realize()
    assert t.shape == (1024, 1024) and t.device == "NULL"
