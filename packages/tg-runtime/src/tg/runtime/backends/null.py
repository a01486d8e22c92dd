"""The NULL device: allocates nothing and runs nothing, so scheduling and launch overhead can be measured alone.

With a renderer in the device string it generates code for that target, and compiles it where the compiler needs
no device: ``NULL:CLANG:x86-64-v4`` (C for AVX-512, compiled by the host C compiler when the arch is of the host's
family, else only rendered), ``NULL:CUDA:sm_90`` (NVRTC), ``NULL:CL`` (OpenCL C, rendered only: its compiler is the
OpenCL driver of a device), ``NULL:PYTHON``, ``NULL:LLVM[:x86-64-v4]`` (CPU LLVM IR, compiled by llvmlite),
``NULL:AMD:gfx1100`` (AMD code objects compiled by llvmlite and checked by tg.runtime.amd.program, no GPU needed).
Plain ``NULL`` renders scalar C and compiles nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tg.ir.target import Target, TargetError
from tg.runtime.backends.cpu import clang_renderer
from tg.runtime.c_compiler import CCompiler
from tg.runtime.cpu_arch import cpu_arch, host_machine
from tg.runtime.device import (
    Allocator,
    BufferSpec,
    Compiled,
    Compiler,
    Dims,
    Program,
    RendererSource,
    check_device_index,
    instance_target,
)


class NullAllocator(Allocator["NULLDevice"]):
    """Hands out no memory: copies in are dropped, copies out are refused (there is no data)."""

    def _alloc(self, size: int, options: BufferSpec) -> None:
        return None

    def _offset(self, buf: Any, size: int, offset: int) -> None:
        return None

    def _copyin(self, dest: Any, src: memoryview) -> None:
        pass

    def _copyout(self, dest: memoryview, src: Any) -> None:
        raise RuntimeError("the NULL device holds no data: copying out of a NULL buffer is not possible")


class NullProgram(Program):
    """Does nothing; reports zero run time."""

    def launch(self, bufs: tuple, gs: Dims, ls: Dims, vals: tuple[int, ...], wait: bool, threads: int) -> float | None:
        return 0.0 if wait else None


Toolchain = tuple[Compiler, RendererSource]


def _clang(target: Target) -> Toolchain:
    arch = cpu_arch(target)
    if arch.machine != host_machine():  # no cross sysroot: foreign C is rendered, not compiled
        return Compiler(), lambda: clang_renderer(None, arch)
    compiler = CCompiler(flags=arch.flags)
    return compiler, lambda: clang_renderer(compiler, arch)


def _python(target: Target) -> Toolchain:
    from tg.runtime.backends.python import python_renderer

    return Compiler(), python_renderer


def _opencl(target: Target) -> Toolchain:
    from tg.codegen.render.opencl import OpenCLRenderer

    return Compiler(), OpenCLRenderer


def _cuda(target: Target) -> Toolchain:
    from tg.codegen.render.cuda import CUDARenderer
    from tg.runtime.backends._cuda import CUDACompiler

    arch = target.arch or "sm_90"
    return CUDACompiler(arch), lambda: CUDARenderer(arch)


def _llvm(target: Target) -> Toolchain:
    from tg.runtime.backends._cpu_llvm import cpu_llvm_toolchain

    return cpu_llvm_toolchain(target, run=False)


def _amd(target: Target) -> Toolchain:
    from tg.codegen.render.llvmir import AMDLLVMRenderer
    from tg.runtime.llvm import AMDGPU_TRIPLE, LLVMCompiler

    arch = target.arch or "gfx1100"
    return LLVMCompiler(AMDGPU_TRIPLE, arch), lambda: AMDLLVMRenderer(arch)


def _check_amd_arch(target: Target) -> None:
    from tg.codegen.render.llvmir import AMD_ARCHS

    if target.arch is not None and target.arch not in AMD_ARCHS:
        raise TargetError(f"device string {str(target)!r}: unknown AMD arch {target.arch!r}; available: "
                          f"{', '.join(AMD_ARCHS)}")  # fmt: skip


class NullAMDProgram(NullProgram):
    """Runs nothing, but loads the code object first: its header and kernel descriptor are checked (amd.md 2.3)."""

    def __init__(self, name: str, lib: bytes) -> None:
        from tg.runtime.amd.program import CodeObject

        super().__init__(name, lib)
        self.code_object = CodeObject(lib, name)


def _check_cuda_arch(target: Target) -> None:
    from tg.runtime.backends._cuda import check_cuda_arch

    check_cuda_arch(target)


# renderer -> how NULL builds (compiler, renderer) for a target of it; a renderer added here is accepted by NULL
NULL_TOOLCHAINS: dict[str, Callable[[Target], Toolchain]] = {
    "CLANG": _clang,
    "PYTHON": _python,
    "CL": _opencl,
    "CUDA": _cuda,
    "LLVM": _llvm,
    "AMD": _amd,
}
# renderer -> the program class of NULL (default NullProgram): code objects that can be checked without running them
NULL_PROGRAMS: dict[str, Callable[[str, bytes], Program]] = {"AMD": NullAMDProgram}
# renderer -> the check of its arch slot (TargetError naming the choices); renderers not listed take no arch
NULL_ARCH_CHECKS: dict[str, Callable[[Target], Any]] = {"CLANG": cpu_arch, "CUDA": _check_cuda_arch, "LLVM": cpu_arch,
                                                       "AMD": _check_amd_arch}  # fmt: skip


class NULLDevice(Compiled):
    """Renders kernels (scalar C, or for the renderer its target names) but runs nothing; compiles where it can."""

    renderers = tuple(NULL_TOOLCHAINS)

    @classmethod
    def check_arch(cls, target: Target) -> None:
        """The arch of the named renderer (``NULL:CLANG:x86-64-v3``, ``NULL:CUDA:sm_90``), TargetError otherwise."""
        if target.renderer in NULL_ARCH_CHECKS:
            NULL_ARCH_CHECKS[target.renderer](target)
        else:
            super().check_arch(target)

    def __init__(self, device: str = "NULL", target: Target | None = None) -> None:
        check_device_index(device)
        target = target if target is not None else instance_target(device)
        type(self).check_arch(target)
        compiler: Compiler
        renderer: RendererSource
        if target.renderer is None:
            compiler, renderer = Compiler(), clang_renderer
        else:
            compiler, renderer = NULL_TOOLCHAINS[target.renderer](target)
        program = NULL_PROGRAMS.get(target.renderer or "", NullProgram)
        super().__init__(device, NullAllocator(self), compiler, program, renderer, target)
