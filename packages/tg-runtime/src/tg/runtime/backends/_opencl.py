"""A small, complete ctypes layer over the OpenCL ICD loader (``libOpenCL.so.1``): only what tg's CL device uses.

Why not pyopencl: it is a compiled extension with its own build and release cadence, and tg needs about twenty
C functions with fixed signatures (OpenCL 1.2 core). Declaring them here keeps ``tg-runtime`` free of binary
dependencies; every call's status is checked and turned into :class:`CLError` with the function's name.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

from tg.runtime.device import DeviceUnavailable

INSTALL_HINT = (
    "install an OpenCL driver and the ICD loader, e.g. `sudo apt-get install ocl-icd-libopencl1 pocl-opencl-icd` "
    "(PoCL runs OpenCL on the CPU) or your GPU vendor's OpenCL runtime"
)

# constants from CL/cl.h (OpenCL 1.2)
CL_SUCCESS = 0
CL_BUILD_PROGRAM_FAILURE = -11
CL_PLATFORM_NAME = 0x0902
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_TYPE_CPU = 1 << 1
CL_DEVICE_TYPE_GPU = 1 << 2
CL_DEVICE_TYPE = 0x1000
CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004
CL_DEVICE_MAX_WORK_ITEM_SIZES = 0x1005
CL_DEVICE_MEM_BASE_ADDR_ALIGN = 0x1019
CL_DEVICE_LOCAL_MEM_SIZE = 0x1023
CL_DEVICE_NAME = 0x102B
CL_DEVICE_VERSION = 0x102F
CL_DRIVER_VERSION = 0x102D
CL_DEVICE_EXTENSIONS = 0x1030
CL_QUEUE_PROFILING_ENABLE = 1 << 1
CL_MEM_READ_WRITE = 1 << 0
CL_BUFFER_CREATE_TYPE_REGION = 0x1220
CL_PROGRAM_BUILD_LOG = 0x1183
CL_PROGRAM_BINARY_SIZES = 0x1165
CL_PROGRAM_BINARIES = 0x1166
CL_PROFILING_COMMAND_START = 0x1282
CL_PROFILING_COMMAND_END = 0x1283
CL_MEM_OBJECT_ALLOCATION_FAILURE = -4
CL_OUT_OF_RESOURCES = -5
CL_OUT_OF_HOST_MEMORY = -6

_ERRORS = {
    -1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE", -3: "CL_COMPILER_NOT_AVAILABLE",
    -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY",
    -11: "CL_BUILD_PROGRAM_FAILURE", -13: "CL_MISALIGNED_SUB_BUFFER_OFFSET", -30: "CL_INVALID_VALUE",
    -33: "CL_INVALID_DEVICE", -34: "CL_INVALID_CONTEXT", -38: "CL_INVALID_MEM_OBJECT", -42: "CL_INVALID_BINARY",
    -44: "CL_INVALID_PROGRAM", -46: "CL_INVALID_KERNEL_NAME", -48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX",
    -50: "CL_INVALID_ARG_VALUE", -51: "CL_INVALID_ARG_SIZE", -52: "CL_INVALID_KERNEL_ARGS",
    -53: "CL_INVALID_WORK_DIMENSION", -54: "CL_INVALID_WORK_GROUP_SIZE", -55: "CL_INVALID_WORK_ITEM_SIZE",
    -56: "CL_INVALID_GLOBAL_OFFSET", -61: "CL_INVALID_BUFFER_SIZE", -63: "CL_INVALID_GLOBAL_WORK_SIZE",
    -1001: "CL_PLATFORM_NOT_FOUND_KHR",
}  # fmt: skip


class CLError(RuntimeError):
    """An OpenCL call returned an error status; the message names the call and the status."""

    def __init__(self, call: str, status: int, detail: str = "") -> None:
        self.status = status
        super().__init__(f"{call} failed: {_ERRORS.get(status, 'CL error')} ({status}){detail}")


_vp, _sz, _u32, _u64, _i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
_pvp, _psz, _pi32 = ctypes.POINTER(_vp), ctypes.POINTER(_sz), ctypes.POINTER(_i32)

# name -> (restype, argtypes); functions returning a handle take a trailing cl_int* status
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "clGetPlatformIDs": (_i32, [_u32, _pvp, ctypes.POINTER(_u32)]),
    "clGetPlatformInfo": (_i32, [_vp, _u32, _sz, _vp, _psz]),
    "clGetDeviceIDs": (_i32, [_vp, _u64, _u32, _pvp, ctypes.POINTER(_u32)]),
    "clGetDeviceInfo": (_i32, [_vp, _u32, _sz, _vp, _psz]),
    "clCreateContext": (_vp, [_vp, _u32, _pvp, _vp, _vp, _pi32]),
    "clReleaseContext": (_i32, [_vp]),
    "clCreateCommandQueue": (_vp, [_vp, _vp, _u64, _pi32]),
    "clReleaseCommandQueue": (_i32, [_vp]),
    "clFinish": (_i32, [_vp]),
    "clCreateBuffer": (_vp, [_vp, _u64, _sz, _vp, _pi32]),
    "clCreateSubBuffer": (_vp, [_vp, _u64, _u32, _vp, _pi32]),
    "clReleaseMemObject": (_i32, [_vp]),
    "clEnqueueWriteBuffer": (_i32, [_vp, _vp, _u32, _sz, _sz, _vp, _u32, _pvp, _pvp]),
    "clEnqueueReadBuffer": (_i32, [_vp, _vp, _u32, _sz, _sz, _vp, _u32, _pvp, _pvp]),
    "clEnqueueCopyBuffer": (_i32, [_vp, _vp, _vp, _sz, _sz, _sz, _u32, _pvp, _pvp]),
    "clCreateProgramWithSource": (_vp, [_vp, _u32, ctypes.POINTER(ctypes.c_char_p), _psz, _pi32]),
    "clCreateProgramWithBinary": (_vp, [_vp, _u32, _pvp, _psz, _pvp, _pi32, _pi32]),
    "clBuildProgram": (_i32, [_vp, _u32, _pvp, ctypes.c_char_p, _vp, _vp]),
    "clGetProgramBuildInfo": (_i32, [_vp, _vp, _u32, _sz, _vp, _psz]),
    "clGetProgramInfo": (_i32, [_vp, _u32, _sz, _vp, _psz]),
    "clReleaseProgram": (_i32, [_vp]),
    "clCreateKernel": (_vp, [_vp, ctypes.c_char_p, _pi32]),
    "clReleaseKernel": (_i32, [_vp]),
    "clSetKernelArg": (_i32, [_vp, _u32, _sz, _vp]),
    "clEnqueueNDRangeKernel": (_i32, [_vp, _vp, _u32, _psz, _psz, _psz, _u32, _pvp, _pvp]),
    "clWaitForEvents": (_i32, [_u32, _pvp]),
    "clGetEventProfilingInfo": (_i32, [_vp, _u32, _sz, _vp, _psz]),
    "clReleaseEvent": (_i32, [_vp]),
}


@functools.cache
def libopencl() -> ctypes.CDLL:
    """The OpenCL ICD loader with every function tg uses declared; DeviceUnavailable if it is not installed."""
    names = ["libOpenCL.so.1", "libOpenCL.so", ctypes.util.find_library("OpenCL")]
    errors = []
    for name in filter(None, names):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as e:
            errors.append(str(e))
    else:
        raise DeviceUnavailable(f"the OpenCL ICD loader (libOpenCL.so.1) was not found; {INSTALL_HINT}")
    for fn, (restype, argtypes) in _SIGNATURES.items():
        f = getattr(lib, fn)
        f.restype, f.argtypes = restype, argtypes
    return lib


def check(call: str, status: int, detail: str = "") -> None:
    """Raise CLError unless ``status`` is CL_SUCCESS (MemoryError for allocation failures)."""
    if status != CL_SUCCESS:
        if status in (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_HOST_MEMORY):
            raise MemoryError(str(CLError(call, status, detail)))
        raise CLError(call, status, detail)


def call_handle(fn: str, *args: Any) -> int:
    """Call a handle-returning function (its last argument is the status pointer) and check the status."""
    status = _i32()
    handle = getattr(libopencl(), fn)(*args, ctypes.byref(status))
    check(fn, status.value)
    return int(handle)


def call(fn: str, *args: Any) -> None:
    """Call a status-returning function and check the status."""
    check(fn, getattr(libopencl(), fn)(*args))


def _info(getter: str, handle: int, param: int, extra: tuple[Any, ...] = ()) -> bytes:
    size = _sz()
    call(getter, handle, *extra, param, 0, None, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    call(getter, handle, *extra, param, size.value, buf, None)
    return buf.raw


def platform_name(platform: int) -> str:
    """CL_PLATFORM_NAME of a platform."""
    return _info("clGetPlatformInfo", platform, CL_PLATFORM_NAME).rstrip(b"\0").decode(errors="replace")


def device_info_str(device: int, param: int) -> str:
    """A string-valued device property."""
    return _info("clGetDeviceInfo", device, param).rstrip(b"\0").decode(errors="replace")


def device_info_int(device: int, param: int, ctype: Any = _u64) -> int:
    """An integer-valued device property (``ctype`` is its C type: cl_ulong, cl_uint, size_t, ...)."""
    raw = _info("clGetDeviceInfo", device, param)
    return int(ctype.from_buffer_copy(raw[: ctypes.sizeof(ctype)].ljust(ctypes.sizeof(ctype), b"\0")).value)


def device_info_sizes(device: int, param: int) -> tuple[int, ...]:
    """A size_t[] device property (e.g. CL_DEVICE_MAX_WORK_ITEM_SIZES)."""
    raw = _info("clGetDeviceInfo", device, param)
    n = len(raw) // ctypes.sizeof(_sz)
    return tuple((_sz * n).from_buffer_copy(raw[: n * ctypes.sizeof(_sz)]))


def all_devices() -> list[tuple[int, int]]:
    """(platform, device) handles of every OpenCL device on every platform, in enumeration order."""
    lib = libopencl()
    n = _u32()
    status = lib.clGetPlatformIDs(0, None, ctypes.byref(n))
    if status == -1001 or n.value == 0:  # CL_PLATFORM_NOT_FOUND_KHR: loader present, no driver (ICD) installed
        return []
    check("clGetPlatformIDs", status)
    platforms = (_vp * n.value)()
    call("clGetPlatformIDs", n.value, platforms, None)
    found: list[tuple[int, int]] = []
    for p in platforms:
        nd = _u32()
        status = lib.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(nd))
        if status == -1 or nd.value == 0:  # CL_DEVICE_NOT_FOUND
            continue
        check("clGetDeviceIDs", status)
        devs = (_vp * nd.value)()
        call("clGetDeviceIDs", p, CL_DEVICE_TYPE_ALL, nd.value, devs, None)
        found.extend((int(p or 0), int(d or 0)) for d in devs)
    return found


def program_build_log(program: int, device: int) -> str:
    """The compiler output of the last build of ``program`` for ``device``."""
    return (
        _info("clGetProgramBuildInfo", program, CL_PROGRAM_BUILD_LOG, (device,)).rstrip(b"\0").decode(errors="replace")
    )


def program_binary(program: int) -> bytes:
    """The device binary of a program built for exactly one device."""
    size = _sz()
    call("clGetProgramInfo", program, CL_PROGRAM_BINARY_SIZES, ctypes.sizeof(size), ctypes.byref(size), None)
    buf = ctypes.create_string_buffer(size.value)
    ptrs = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
    call("clGetProgramInfo", program, CL_PROGRAM_BINARIES, ctypes.sizeof(ptrs), ptrs, None)
    return buf.raw[: size.value]
