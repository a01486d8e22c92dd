"""The CL device: OpenCL C kernels built by the platform's compiler, run through the ICD loader (``_opencl.py``).

``CL`` is the first OpenCL device of the first platform, ``CL:1`` the next one, and so on (devices of all
platforms in enumeration order). Kernels are built from source once per (source, device, driver) and the binary
is kept in tg's compile cache, so another process loads it without compiling. An OpenCL device of type CPU (PoCL)
is never chosen as ``Device.DEFAULT``; ``DEV=CL`` selects it explicitly.
"""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING, Any

from tg.runtime.backends import _opencl as cl
from tg.runtime.device import (
    BufferSpec,
    Compiled,
    CompileError,
    Compiler,
    DeviceUnavailable,
    Dims,
    LRUAllocator,
    Program,
    check_device_index,
)

if TYPE_CHECKING:
    from tg.codegen.render.renderer import Renderer
    from tg.ir.target import Target


class CLBuffer:
    """A cl_mem handle (a buffer, or a sub-buffer for a view) and its size in bytes."""

    __slots__ = ("mem", "size", "view")

    def __init__(self, mem: int, size: int, view: bool = False) -> None:
        self.mem, self.size, self.view = mem, size, view

    def __repr__(self) -> str:
        return f"<CLBuffer {self.size} bytes mem=0x{self.mem:x}{' view' if self.view else ''}>"


class CLAllocator(LRUAllocator["CLDevice"]):
    """Device memory through clCreateBuffer; copies are blocking reads/writes on the device's in-order queue."""

    def _alloc(self, size: int, options: BufferSpec) -> CLBuffer:
        buf = CLBuffer(cl.call_handle("clCreateBuffer", self.dev.context, cl.CL_MEM_READ_WRITE, size, None), size)
        if options.zero:
            self._copyin(buf, memoryview(bytes(size)))
        return buf

    def _free(self, opaque: CLBuffer, options: BufferSpec) -> None:
        cl.call("clReleaseMemObject", opaque.mem)

    def _offset(self, buf: CLBuffer, size: int, offset: int) -> CLBuffer:
        if offset % self.dev.mem_align:
            raise ValueError(
                f"{self.dev.device}: a buffer view must start at a multiple of {self.dev.mem_align} bytes "
                f"(CL_DEVICE_MEM_BASE_ADDR_ALIGN), got offset {offset}; copy the data with .contiguous() instead"
            )
        region = (ctypes.c_size_t * 2)(offset, size)
        mem = cl.call_handle(
            "clCreateSubBuffer", buf.mem, cl.CL_MEM_READ_WRITE, cl.CL_BUFFER_CREATE_TYPE_REGION, region
        )
        return CLBuffer(mem, size, view=True)

    def _copyin(self, dest: CLBuffer, src: memoryview) -> None:
        host = (ctypes.c_char * src.nbytes).from_buffer_copy(src) if src.readonly else _host_ptr(src)
        cl.call("clEnqueueWriteBuffer", self.dev.queue, dest.mem, True, 0, src.nbytes, host, 0, None, None)

    def _copyout(self, dest: memoryview, src: CLBuffer) -> None:
        cl.call("clEnqueueReadBuffer", self.dev.queue, src.mem, True, 0, dest.nbytes, _host_ptr(dest), 0, None, None)


def _host_ptr(mv: memoryview) -> Any:
    return (ctypes.c_char * mv.nbytes).from_buffer(mv)


class CLCompiler(Compiler):
    """Builds OpenCL C for one device; the cached binary is the program binary the driver hands back."""

    def __init__(self, dev: CLDevice) -> None:
        super().__init__(f"cl|{dev.platform_name}|{dev.name}|{dev.driver_version}")
        self.dev = dev

    def compile(self, src: str) -> bytes:
        """Build ``src``; raises CompileError with the build log and the numbered source on failure."""
        program = build_program(self.dev, src)
        try:
            return cl.program_binary(program)
        finally:
            cl.call("clReleaseProgram", program)


def _numbered(src: str) -> str:
    return "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(src.splitlines()))


def build_program(dev: CLDevice, src: str) -> int:
    """A cl_program built from OpenCL C source for ``dev`` (CompileError with the build log if it fails)."""
    data = src.encode()
    strings = (ctypes.c_char_p * 1)(data)
    lengths = (ctypes.c_size_t * 1)(len(data))
    program = cl.call_handle("clCreateProgramWithSource", dev.context, 1, strings, lengths)
    devices = (ctypes.c_void_p * 1)(dev.device_handle)
    status = cl.libopencl().clBuildProgram(program, 1, devices, None, None, None)
    if status != cl.CL_SUCCESS:
        log = cl.program_build_log(program, dev.device_handle)
        cl.call("clReleaseProgram", program)
        raise CompileError(
            f"OpenCL build for {dev.device} ({dev.name}) failed with status {status}:\n{log.strip()}\n"
            f"--- source ---\n{_numbered(src)}"
        )
    return program


class CLProgram(Program):
    """A kernel loaded from a program binary; ``prg(*bufs, global_size=groups, local_size=threads, vals=...)``.

    ``global_size`` counts work-groups per dimension (as CUDA's grid does); the NDRange is groups times the local size.
    With ``wait=True`` the kernel's own run time (profiling events) is returned in seconds.
    """

    def __init__(self, dev: CLDevice, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        self.dev = dev
        binary = (ctypes.c_char * len(lib)).from_buffer_copy(lib)
        binaries = (ctypes.c_void_p * 1)(ctypes.addressof(binary))
        lengths = (ctypes.c_size_t * 1)(len(lib))
        devices = (ctypes.c_void_p * 1)(dev.device_handle)
        status = ctypes.c_int32()
        self.program = cl.call_handle(
            "clCreateProgramWithBinary", dev.context, 1, devices, lengths, binaries, ctypes.byref(status)
        )
        cl.check("clCreateProgramWithBinary (binary status)", status.value)
        cl.check("clBuildProgram", cl.libopencl().clBuildProgram(self.program, 1, devices, None, None, None))
        try:
            self.kernel = cl.call_handle("clCreateKernel", self.program, name.encode())
        except cl.CLError as e:
            raise RuntimeError(f"compiled OpenCL program has no kernel named {name!r}: {e}") from e

    def launch(self, bufs: tuple, gs: Dims, ls: Dims, vals: tuple[int, ...], wait: bool, threads: int) -> float | None:
        for i, b in enumerate(bufs):
            mem = ctypes.c_void_p(b.mem)
            cl.call("clSetKernelArg", self.kernel, i, ctypes.sizeof(mem), ctypes.byref(mem))
        for i, v in enumerate(vals, start=len(bufs)):
            val = ctypes.c_int32(v)
            cl.call("clSetKernelArg", self.kernel, i, 4, ctypes.byref(val))
        groups = tuple(gs or (1,))
        local = tuple(ls or (1,) * len(groups))
        if len(groups) != len(local) or not 1 <= len(groups) <= 3:
            raise ValueError(f"{self.name}: launch needs 1-3 dims of groups and local size, got {groups} / {local}")
        dims = len(groups)
        gws = (ctypes.c_size_t * dims)(*(g * n for g, n in zip(groups, local, strict=True)))
        lws = (ctypes.c_size_t * dims)(*local)
        event = ctypes.c_void_p() if wait else None
        cl.call(
            "clEnqueueNDRangeKernel", self.dev.queue, self.kernel, dims, None, gws, lws, 0, None,
            ctypes.byref(event) if event is not None else None,
        )  # fmt: skip
        if event is None:
            return None
        try:
            cl.call("clWaitForEvents", 1, ctypes.byref(event))
            start, end = ctypes.c_uint64(), ctypes.c_uint64()
            for param, out in ((cl.CL_PROFILING_COMMAND_START, start), (cl.CL_PROFILING_COMMAND_END, end)):
                cl.call("clGetEventProfilingInfo", event, param, 8, ctypes.byref(out), None)
            return (end.value - start.value) * 1e-9
        finally:
            cl.call("clReleaseEvent", event)

    def __del__(self) -> None:
        try:
            cl.call("clReleaseKernel", self.kernel)
            cl.call("clReleaseProgram", self.program)
        except Exception:  # interpreter shutdown or a failed __init__
            pass


def _opencl_renderer(dev: CLDevice) -> Renderer:
    """An OpenCLRenderer with the device's limits (tg.codegen is imported only when a renderer is first needed)."""
    from tg.codegen.render.opencl import OpenCLRenderer

    return OpenCLRenderer(
        local_max=tuple(min(s, dev.max_work_group_size) for s in dev.max_work_item_sizes[:3]),
        max_local_threads=min(dev.max_work_group_size, 256),
        shared_max=dev.local_mem_size,
        has_half="cl_khr_fp16" in dev.extensions,
        has_double="cl_khr_fp64" in dev.extensions,
    )


class CLDevice(Compiled):
    """One OpenCL device: a context and an in-order command queue with profiling, an OpenCLRenderer."""

    renderers = ("CL",)

    def __init__(self, device: str = "CL", target: Target | None = None) -> None:
        index = check_device_index(device)
        devices = cl.all_devices()
        if not devices:
            raise DeviceUnavailable(f"{device}: the OpenCL loader found no platform with a device; {cl.INSTALL_HINT}")
        if index >= len(devices):
            names = ", ".join(f"CL:{i} {cl.device_info_str(d, cl.CL_DEVICE_NAME)}" for i, (_, d) in enumerate(devices))
            raise DeviceUnavailable(
                f"{device} does not exist: this machine has {len(devices)} OpenCL devices ({names})"
            )
        self.platform_handle, self.device_handle = devices[index]
        self.platform_name = cl.platform_name(self.platform_handle)
        self.name = cl.device_info_str(self.device_handle, cl.CL_DEVICE_NAME)
        self.driver_version = cl.device_info_str(self.device_handle, cl.CL_DRIVER_VERSION)
        self.device_type = cl.device_info_int(self.device_handle, cl.CL_DEVICE_TYPE)
        self.extensions = frozenset(cl.device_info_str(self.device_handle, cl.CL_DEVICE_EXTENSIONS).split())
        self.max_work_group_size = cl.device_info_int(
            self.device_handle, cl.CL_DEVICE_MAX_WORK_GROUP_SIZE, ctypes.c_size_t
        )
        self.max_work_item_sizes = cl.device_info_sizes(self.device_handle, cl.CL_DEVICE_MAX_WORK_ITEM_SIZES)
        self.local_mem_size = cl.device_info_int(self.device_handle, cl.CL_DEVICE_LOCAL_MEM_SIZE)
        self.mem_align = max(
            cl.device_info_int(self.device_handle, cl.CL_DEVICE_MEM_BASE_ADDR_ALIGN, ctypes.c_uint32) // 8, 1
        )
        handle = ctypes.c_void_p(self.device_handle)
        self.context = cl.call_handle("clCreateContext", None, 1, ctypes.byref(handle), None, None)
        self.queue = cl.call_handle(
            "clCreateCommandQueue", self.context, self.device_handle, cl.CL_QUEUE_PROFILING_ENABLE
        )
        super().__init__(
            device,
            CLAllocator(self),
            CLCompiler(self),
            functools.partial(CLProgram, self),
            functools.partial(_opencl_renderer, self),
            target,
        )

    @property
    def is_gpu(self) -> bool:
        """Whether the OpenCL device reports type GPU (PoCL on a CPU does not)."""
        return bool(self.device_type & cl.CL_DEVICE_TYPE_GPU)

    @property
    def default_capable(self) -> bool:
        """Only an OpenCL GPU may become Device.DEFAULT; OpenCL on the CPU (PoCL) is slower than the CPU device."""
        return self.is_gpu

    def synchronize(self) -> None:
        """Wait until every command queued on this device has finished."""
        cl.call("clFinish", self.queue)

    def __repr__(self) -> str:
        return f"<CLDevice {self.device} {self.name!r} on {self.platform_name!r}>"
