"""Both GPU backends (CUDA, CL): a missing runtime library makes that device unavailable with a message saying what to
install, and never breaks other devices or the choice of `Device.DEFAULT`."""

from __future__ import annotations

import pytest

from tg.runtime.backends import _cuda, _opencl
from tg.runtime.device import DeviceUnavailable


@pytest.mark.parametrize(
    "backend, module, loader, message, hint",
    [
        ("CUDA", _cuda, "libcuda", f"the CUDA driver library libcuda.so.1 was not found; {_cuda.DRIVER_HINT}",
         "NVIDIA driver"),
        ("CL", _opencl, "libopencl", f"the OpenCL ICD loader (libOpenCL.so.1) was not found; {_opencl.INSTALL_HINT}",
         "apt-get install ocl-icd-libopencl1 pocl-opencl-icd"),
    ],
)  # fmt: skip
def test_missing_gpu_runtime_makes_the_device_unavailable_without_breaking_others(
    registry_without, backend: str, module: object, loader: str, message: str, hint: str
) -> None:  # type: ignore[no-untyped-def]
    registry = registry_without(module, loader, message)
    with pytest.raises(DeviceUnavailable, match=hint):
        registry[backend]
    assert backend not in list(registry.get_available_devices())
    assert registry["NULL"].device == "NULL"
    assert registry.DEFAULT in ("CPU", "CUDA", "CL")  # choosing the default never raises
