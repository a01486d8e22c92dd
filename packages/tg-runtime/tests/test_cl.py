"""The CL device through the OpenCL ICD loader (PoCL on machines without a GPU); skipped without OpenCL."""

from __future__ import annotations

import array

import pytest

from tg.ir.dtype import dtypes
from tg.runtime import device as device_mod
from tg.runtime.device import Buffer, Compiled, CompileError, Device, DeviceUnavailable


def test_buffers_round_trip_and_views(cl_device: Compiled) -> None:
    dev = cl_device
    data = array.array("f", range(1024))
    buf = Buffer("CL", 1024, dtypes.float32).copyin(memoryview(data))
    out = array.array("f", bytes(4096))
    buf.copyout(memoryview(out))
    assert out == data
    align = dev.mem_align
    view = buf.view(16, dtypes.float32, align)
    got = array.array("f", bytes(64))
    view.copyout(memoryview(got))
    assert list(got) == [float(i) for i in range(align // 4, align // 4 + 16)]
    with pytest.raises(ValueError, match="multiple of"):
        buf.view(4, dtypes.float32, 4).ensure_allocated()


def test_kernel_runs_with_launch_dims_and_timing(cl_device: Compiled) -> None:
    dev = cl_device
    src = (
        "__kernel void add1(__global float* a, const int n) {"
        " int i = get_group_id(0)*get_local_size(0)+get_local_id(0); if (i < n) a[i] += 1.0f; }"
    )
    prg = dev.runtime("add1", dev.compiler.compile_cached(src))
    buf = Buffer("CL", 1000, dtypes.float32).copyin(memoryview(array.array("f", [2.0] * 1000)))
    t = prg(buf._buf, global_size=(4,), local_size=(256,), vals=(1000,), wait=True)
    assert isinstance(t, float) and t > 0
    out = array.array("f", bytes(4000))
    buf.copyout(memoryview(out))
    assert set(out) == {3.0}


def test_build_errors_show_the_log_and_the_source(cl_device: Compiled) -> None:
    dev = cl_device
    with pytest.raises(CompileError, match=r"(?s)OpenCL build for CL.*undeclared_thing.*--- source ---\n   1 __kernel"):
        dev.compiler.compile("__kernel void bad(__global float* a) { a[0] = undeclared_thing; }")


def test_pocl_is_never_the_default_and_bad_indices_say_what_exists(cl_device: Compiled) -> None:
    dev = cl_device
    assert dev.default_capable == dev.is_gpu
    if not dev.is_gpu:
        assert Device.DEFAULT != "CL" or device_mod.DEV.value
    with pytest.raises(DeviceUnavailable, match="does not exist: this machine has"):
        Device["CL:99"]


def test_default_order_cuda_then_opencl_gpu_then_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.runtime.backends.null import NULLDevice

    class Fake(NULLDevice):
        gpu = True

        @property
        def default_capable(self) -> bool:
            return self.gpu

    class Missing(Fake):
        def __init__(self, *args: object) -> None:
            raise DeviceUnavailable("no libcuda")

    def registry(cuda: bool, cl_gpu: bool, amd: bool = False) -> device_mod._DeviceRegistry:
        reg = device_mod._DeviceRegistry()

        def device_class(backend: str):  # type: ignore[no-untyped-def]
            if (backend == "CUDA" and not cuda) or (backend == "AMD" and not amd):  # AMD: a KFD GPU, first when found
                return Missing
            return type(f"{backend}Fake", (Fake,), {"gpu": cl_gpu if backend == "CL" else True})

        monkeypatch.setattr(reg, "_device_class", device_class)
        return reg

    monkeypatch.delenv("DEV", raising=False)
    monkeypatch.setattr(device_mod.DEV, "value", "")
    assert registry(cuda=True, cl_gpu=True, amd=True).DEFAULT == "AMD"
    assert registry(cuda=True, cl_gpu=True).DEFAULT == "CUDA"
    assert registry(cuda=False, cl_gpu=True).DEFAULT == "CL"
    assert registry(cuda=False, cl_gpu=False).DEFAULT == "CPU"  # PoCL (an OpenCL CPU device) is never the default
    monkeypatch.setattr(device_mod.DEV, "value", "CL")
    assert registry(cuda=True, cl_gpu=False).DEFAULT == "CL"  # DEV overrides
