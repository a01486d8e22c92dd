"""ctypes bindings for the CUDA driver API (``libcuda.so.1``) and NVRTC (``libnvrtc``), and the CUDA compiler.

Only the calls tg uses are declared. NVRTC is found without a CUDA toolkit install: ``NVRTC=/path/libnvrtc.so``
if set, else the system's ``libnvrtc.so.13``/``.so.12``/``.so``, else the PyPI wheels ``nvidia-cuda-nvrtc``
(CUDA 13, ``nvidia/cu13/lib``) or ``nvidia-cuda-nvrtc-cu12`` (``nvidia/cuda_nvrtc/lib``) on ``sys.path``, else
``$CUDA_PATH/lib64`` and ``/usr/local/cuda/lib64``. :class:`CUDACompiler` needs NVRTC only (no GPU, no driver),
so CUDA code generation can be checked on any machine that has it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from pathlib import Path
from typing import Any

from tg.ir.helpers import NVRTC
from tg.ir.target import Target, TargetError
from tg.runtime.device import CompileError, Compiler, DeviceUnavailable

DRIVER_HINT = "install the NVIDIA driver (it provides libcuda.so.1); CUDA needs an NVIDIA GPU"
NVRTC_HINT = (
    "install NVRTC: `pip install 'tg-runtime[cuda]'` (the nvidia-cuda-nvrtc wheel, CUDA 13), "
    "`pip install nvidia-cuda-nvrtc-cu12` for CUDA 12 drivers, or a CUDA toolkit; "
    "or point NVRTC=/path/libnvrtc.so at one"
)

_vp, _i32, _u32, _sz, _cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_char_p
_p = ctypes.POINTER

# ---------------------------------------------------------------------------------------------------------- NVRTC

_NVRTC_SIGNATURES: dict[str, list[Any]] = {
    "nvrtcVersion": [_p(_i32), _p(_i32)],
    "nvrtcCreateProgram": [_p(_vp), _cp, _cp, _i32, _vp, _vp],
    "nvrtcCompileProgram": [_vp, _i32, _p(_cp)],
    "nvrtcGetProgramLogSize": [_vp, _p(_sz)],
    "nvrtcGetProgramLog": [_vp, _cp],
    "nvrtcGetPTXSize": [_vp, _p(_sz)],
    "nvrtcGetPTX": [_vp, _cp],
    "nvrtcGetCUBINSize": [_vp, _p(_sz)],
    "nvrtcGetCUBIN": [_vp, _cp],
    "nvrtcDestroyProgram": [_p(_vp)],
    "nvrtcGetErrorString": [_i32],
}


def _nvrtc_candidates() -> list[str]:
    if env := NVRTC.value:
        return [env]
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    wheels = [("nvidia", "cu13", "lib", "libnvrtc.so.13"), ("nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12")]
    for entry in sys.path:
        names += [str(Path(entry, *w)) for w in wheels if Path(entry, *w).exists()]
    for root in filter(None, (os.environ.get("CUDA_PATH"), "/usr/local/cuda")):
        names += sorted(str(p) for p in Path(root, "lib64").glob("libnvrtc.so*") if "builtins" not in p.name)
    return names


@functools.cache
def libnvrtc() -> ctypes.CDLL:
    """NVRTC with its functions declared; DeviceUnavailable (saying how to install it) when none is found."""
    tried = []
    for name in _nvrtc_candidates():
        try:
            # NVRTC dlopens libnvrtc-builtins by name: load the one beside it first (wheels set no search path)
            for builtins in sorted(Path(name).parent.glob("libnvrtc-builtins.so*")) if os.sep in name else ():
                ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(name)
        except OSError:
            tried.append(name)
            continue
        for fn, argtypes in _NVRTC_SIGNATURES.items():
            f = getattr(lib, fn)
            f.argtypes, f.restype = argtypes, (_cp if fn == "nvrtcGetErrorString" else _i32)
        return lib
    raise DeviceUnavailable(f"NVRTC (the CUDA runtime compiler) was not found (tried {', '.join(tried)}); {NVRTC_HINT}")


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the loaded NVRTC."""
    major, minor = _i32(), _i32()
    libnvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def _nvrtc_check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed: {libnvrtc().nvrtcGetErrorString(status).decode()} ({status})")


def _numbered(src: str) -> str:
    return "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(src.splitlines()))


def nvrtc_compile(src: str, arch: str, options: tuple[str, ...] = ()) -> tuple[bytes, bytes | None]:
    """Compile CUDA C++ for ``arch`` (``sm_90``: PTX and a cubin; ``compute_90``: PTX only).

    Raises CompileError with NVRTC's log and the numbered source when the source does not compile.
    """
    lib = libnvrtc()
    prog = _vp()
    _nvrtc_check(lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None), "nvrtc")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options)]
        status = lib.nvrtcCompileProgram(prog, len(opts), (_cp * len(opts))(*opts))
        size = _sz()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        if status != 0:
            raise CompileError(
                f"NVRTC {'.'.join(map(str, nvrtc_version()))} failed for {arch}:\n"
                f"{log.value.decode(errors='replace').strip()}\n--- source ---\n{_numbered(src)}"
            )
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        _nvrtc_check(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        cubin = None
        if arch.startswith("sm_"):
            lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            _nvrtc_check(lib.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
            cubin = buf.raw
        return ptx.value, cubin
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


# tg compiles without FMA contraction so GPU results match the CPU and PYTHON devices bit for bit
NVRTC_OPTIONS = ("--fmad=false", "-default-device")


def is_cuda_arch(arch: str) -> bool:
    """Whether ``arch`` names an NVIDIA GPU architecture the way NVRTC wants it: ``sm_XY`` (``sm_90a``, ``sm_100f``)."""
    return arch.startswith("sm_") and arch[3:].rstrip("af").isdigit()


def check_cuda_arch(target: Target) -> None:
    """Refuse an arch slot that is not ``sm_XY`` (TargetError with examples)."""
    if target.arch is not None and not is_cuda_arch(target.arch):
        raise TargetError(
            f"device string {str(target)!r}: CUDA arch {target.arch!r} is not an sm_XY architecture; "
            "e.g. sm_75, sm_80, sm_86, sm_89, sm_90"
        )


class CUDACompiler(Compiler):
    """CUDA C++ -> cubin for one GPU architecture (``sm_90``) with NVRTC; usable without a GPU or a driver."""

    def __init__(self, arch: str) -> None:
        if not is_cuda_arch(arch):
            raise ValueError(f"CUDA architecture must look like sm_90, got {arch!r}")
        self.arch = arch
        libnvrtc()  # fail now, with the install hint, rather than at the first kernel
        super().__init__(f"cuda|{arch}|nvrtc{'.'.join(map(str, nvrtc_version()))}|{' '.join(NVRTC_OPTIONS)}")

    def compile(self, src: str) -> bytes:
        """The cubin of ``src`` (CompileError with the log and the source on failure)."""
        _, cubin = nvrtc_compile(src, self.arch, NVRTC_OPTIONS)
        assert cubin is not None
        return cubin

    def compile_ptx(self, src: str) -> bytes:
        """The PTX of ``src`` for this architecture (what ``ptxas`` assembles)."""
        return nvrtc_compile(src, self.arch, NVRTC_OPTIONS)[0]


# ---------------------------------------------------------------------------------------------------- driver API

_DRIVER_SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [_u32],
    "cuDeviceGetCount": [_p(_i32)],
    "cuDeviceGet": [_p(_i32), _i32],
    "cuDeviceGetName": [_cp, _i32, _i32],
    "cuDeviceGetAttribute": [_p(_i32), _i32, _i32],
    "cuDevicePrimaryCtxRetain": [_p(_vp), _i32],
    "cuCtxSetCurrent": [_vp],
    "cuCtxSynchronize": [],
    "cuMemAlloc_v2": [_p(ctypes.c_uint64), _sz],
    "cuMemFree_v2": [ctypes.c_uint64],
    "cuMemsetD8_v2": [ctypes.c_uint64, ctypes.c_ubyte, _sz],
    "cuMemcpyHtoD_v2": [ctypes.c_uint64, _vp, _sz],
    "cuMemcpyDtoH_v2": [_vp, ctypes.c_uint64, _sz],
    "cuMemcpyDtoD_v2": [ctypes.c_uint64, ctypes.c_uint64, _sz],
    "cuMemcpyPeer": [ctypes.c_uint64, _vp, ctypes.c_uint64, _vp, _sz],
    "cuModuleLoadData": [_p(_vp), _vp],
    "cuModuleGetFunction": [_p(_vp), _vp, _cp],
    "cuModuleUnload": [_vp],
    "cuLaunchKernel": [_vp, _u32, _u32, _u32, _u32, _u32, _u32, _u32, _vp, _p(_vp), _p(_vp)],
    "cuStreamCreate": [_p(_vp), _u32],
    "cuStreamSynchronize": [_vp],
    "cuEventCreate": [_p(_vp), _u32],
    "cuEventRecord": [_vp, _vp],
    "cuEventSynchronize": [_vp],
    "cuEventElapsedTime": [_p(ctypes.c_float), _vp, _vp],
    "cuEventDestroy_v2": [_vp],
    "cuGetErrorString": [_i32, _p(_cp)],
}
CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CUDA_ERROR_OUT_OF_MEMORY = 2


@functools.cache
def libcuda() -> ctypes.CDLL:
    """The CUDA driver with its functions declared, initialised; DeviceUnavailable when there is none."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise DeviceUnavailable(f"the CUDA driver library libcuda.so.1 was not found ({e}); {DRIVER_HINT}") from None
    for fn, argtypes in _DRIVER_SIGNATURES.items():
        f = getattr(lib, fn)
        f.argtypes, f.restype = argtypes, _i32
    if (status := lib.cuInit(0)) != 0:
        raise DeviceUnavailable(f"cuInit failed: {_error_string(lib, status)}; {DRIVER_HINT}")
    return lib


def _error_string(lib: ctypes.CDLL, status: int) -> str:
    text = _cp()
    lib.cuGetErrorString(status, ctypes.byref(text))
    return f"{(text.value or b'unknown error').decode()} ({status})"


def cu(fn: str, *args: Any) -> None:
    """Call a driver API function and raise (MemoryError for out-of-memory) unless it returns CUDA_SUCCESS."""
    lib = libcuda()
    if (status := getattr(lib, fn)(*args)) != 0:
        msg = f"{fn} failed: {_error_string(lib, status)}"
        raise MemoryError(msg) if status == CUDA_ERROR_OUT_OF_MEMORY else RuntimeError(msg)
