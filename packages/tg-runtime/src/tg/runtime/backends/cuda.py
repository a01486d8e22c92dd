"""The CUDA device: CUDA C++ compiled to a cubin by NVRTC, loaded and launched through the driver API (ctypes).

``CUDA`` is GPU 0, ``CUDA:1`` GPU 1. Kernels are compiled for the GPU's own architecture (``sm_XY`` from its
compute capability; the device string's arch overrides it: ``DEV=CUDA::sm_90``) and cached on disk. Each device
has one stream; kernel timing uses events on it. Copies between two CUDA devices go GPU to GPU (``cuMemcpyPeer``).

Not yet verified on hardware: the development machine has no GPU. CUDA code generation is checked there by
compiling every kernel of the test suite with NVRTC (and ``ptxas``); ``scripts/gpu_check.sh`` runs the tests and
benchmarks on a machine with a GPU.
"""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING

from tg.runtime.backends._cuda import (
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
    CUDACompiler,
    check_cuda_arch,
    cu,
)
from tg.runtime.device import (
    BufferSpec,
    Compiled,
    DeviceUnavailable,
    Dims,
    LRUAllocator,
    Program,
    check_device_index,
    instance_target,
)

if TYPE_CHECKING:
    from tg.codegen.render.renderer import Renderer
    from tg.ir.target import Target


class CUDABuffer:
    """A device pointer and its size; views are pointers into their base's allocation."""

    __slots__ = ("ptr", "size")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr, self.size = ptr, size

    def __repr__(self) -> str:
        return f"<CUDABuffer {self.size} bytes at 0x{self.ptr:x}>"


class CUDAAllocator(LRUAllocator["CUDADevice"]):
    """cuMemAlloc'd device memory; host copies are synchronous, copies between CUDA devices go peer to peer."""

    def _alloc(self, size: int, options: BufferSpec) -> CUDABuffer:
        self.dev.make_current()
        ptr = ctypes.c_uint64()
        cu("cuMemAlloc_v2", ctypes.byref(ptr), size)
        if options.zero:
            cu("cuMemsetD8_v2", ptr.value, 0, size)
        return CUDABuffer(ptr.value, size)

    def _free(self, opaque: CUDABuffer, options: BufferSpec) -> None:
        self.dev.make_current()
        cu("cuMemFree_v2", opaque.ptr)

    def _offset(self, buf: CUDABuffer, size: int, offset: int) -> CUDABuffer:
        return CUDABuffer(buf.ptr + offset, size)

    def _copyin(self, dest: CUDABuffer, src: memoryview) -> None:
        self.dev.make_current()
        host = (ctypes.c_char * src.nbytes).from_buffer_copy(src)
        cu("cuMemcpyHtoD_v2", dest.ptr, host, src.nbytes)

    def _copyout(self, dest: memoryview, src: CUDABuffer) -> None:
        self.dev.synchronize()
        cu("cuMemcpyDtoH_v2", (ctypes.c_char * dest.nbytes).from_buffer(dest), src.ptr, dest.nbytes)

    def transfer(self, dest: CUDABuffer, src: CUDABuffer, nbytes: int, src_dev: CUDADevice) -> None:
        """Copy ``nbytes`` from ``src`` (on ``src_dev``) into ``dest`` on this device without the host."""
        src_dev.synchronize()
        self.dev.make_current()
        if src_dev is self.dev:
            cu("cuMemcpyDtoD_v2", dest.ptr, src.ptr, nbytes)
        else:
            cu("cuMemcpyPeer", dest.ptr, self.dev.context, src.ptr, src_dev.context, nbytes)


class CUDAProgram(Program):
    """A kernel in a cubin; ``prg(*bufs, global_size=blocks, local_size=threads, vals=..., wait=...)``."""

    def __init__(self, dev: CUDADevice, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        self.dev = dev
        dev.make_current()
        self.module, self.fxn = ctypes.c_void_p(), ctypes.c_void_p()
        cu("cuModuleLoadData", ctypes.byref(self.module), lib)
        cu("cuModuleGetFunction", ctypes.byref(self.fxn), self.module, name.encode())

    def launch(self, bufs: tuple, gs: Dims, ls: Dims, vals: tuple[int, ...], wait: bool, threads: int) -> float | None:
        grid = (*(gs or ()), 1, 1, 1)[:3]
        block = (*(ls or ()), 1, 1, 1)[:3]
        args = [ctypes.c_uint64(b.ptr) for b in bufs] + [ctypes.c_int32(v) for v in vals]
        params = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
        self.dev.make_current()
        if not wait:
            cu("cuLaunchKernel", self.fxn, *grid, *block, 0, self.dev.stream, params, None)
            return None
        start, end = self.dev.event(), self.dev.event()
        try:
            cu("cuEventRecord", start, self.dev.stream)
            cu("cuLaunchKernel", self.fxn, *grid, *block, 0, self.dev.stream, params, None)
            cu("cuEventRecord", end, self.dev.stream)
            cu("cuEventSynchronize", end)
            ms = ctypes.c_float()
            cu("cuEventElapsedTime", ctypes.byref(ms), start, end)
            return ms.value * 1e-3
        finally:
            cu("cuEventDestroy_v2", start)
            cu("cuEventDestroy_v2", end)

    def __del__(self) -> None:
        try:
            cu("cuModuleUnload", self.module)
        except Exception:  # interpreter shutdown or a failed __init__
            pass


def _cuda_renderer(dev: CUDADevice) -> Renderer:
    """A CUDARenderer for the device's architecture and limits (tg.codegen is imported on first use)."""
    from tg.codegen.render.cuda import CUDARenderer

    return CUDARenderer(dev.arch, max_local_threads=min(dev.max_threads, 256), shared_max=dev.shared_max)


class CUDADevice(Compiled):
    """One NVIDIA GPU: its primary context, a stream, an NVRTC compiler for its architecture, a CUDARenderer."""

    renderers = ("CUDA",)

    @classmethod
    def check_arch(cls, target: Target) -> None:
        """An ``sm_XY`` arch (default: the GPU's own)."""
        check_cuda_arch(target)

    def __init__(self, device: str = "CUDA", target: Target | None = None) -> None:
        from tg.runtime.backends._cuda import libcuda

        index = check_device_index(device)
        target = target if target is not None else instance_target(device)
        libcuda()
        count = ctypes.c_int()
        cu("cuDeviceGetCount", ctypes.byref(count))
        if index >= count.value:
            raise DeviceUnavailable(f"{device} does not exist: this machine has {count.value} CUDA devices")
        self.cu_device = ctypes.c_int()
        cu("cuDeviceGet", ctypes.byref(self.cu_device), index)
        name = ctypes.create_string_buffer(256)
        cu("cuDeviceGetName", name, 256, self.cu_device)
        self.name = name.value.decode(errors="replace")
        major, minor = (
            self._attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            self._attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        )
        self.arch = target.arch or f"sm_{major}{minor}"
        self.max_threads = self._attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        self.shared_max = self._attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
        self.context = ctypes.c_void_p()
        cu("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), self.cu_device)
        self.make_current()
        self.stream = ctypes.c_void_p()
        cu("cuStreamCreate", ctypes.byref(self.stream), 0)
        super().__init__(
            device,
            CUDAAllocator(self),
            CUDACompiler(self.arch),
            functools.partial(CUDAProgram, self),
            functools.partial(_cuda_renderer, self),
            target,
        )

    def _attr(self, attr: int) -> int:
        out = ctypes.c_int()
        cu("cuDeviceGetAttribute", ctypes.byref(out), attr, self.cu_device)
        return out.value

    def make_current(self) -> None:
        """Make this device's context the calling thread's current one."""
        cu("cuCtxSetCurrent", self.context)

    def event(self) -> ctypes.c_void_p:
        """A new CUDA event (the caller destroys it)."""
        ev = ctypes.c_void_p()
        cu("cuEventCreate", ctypes.byref(ev), 0)
        return ev

    def synchronize(self) -> None:
        """Wait for every kernel and copy queued on this device's stream."""
        self.make_current()
        cu("cuStreamSynchronize", self.stream)

    def __repr__(self) -> str:
        return f"<CUDADevice {self.device} {self.name!r} {self.arch}>"
