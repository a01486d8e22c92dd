"""The NULL device: allocates nothing and runs nothing, so scheduling and launch overhead can be measured alone.

With a renderer in the device string it generates code for that target, and compiles it where the compiler needs
no device: ``NULL:CLANG:x86-64-v4`` (C for AVX-512, compiled by the host C compiler when the arch is of the host's
family, else only rendered), ``NULL:CUDA:sm_90`` (NVRTC), ``NULL:CL`` (OpenCL C, rendered only: its compiler is the
OpenCL driver of a device), ``NULL:PYTHON``. Plain ``NULL`` renders scalar C and compiles nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tg.ir.target import Target
from tg.runtime.backends.cpu import clang_renderer
from tg.runtime.c_compiler import CCompiler
from tg.runtime.cpu_arch import cpu_arch, host_machine
from tg.runtime.device import (
    Allocator,
    BufferSpec,
    Compiled,
    Compiler,
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

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
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


def _check_cuda_arch(target: Target) -> None:
    from tg.runtime.backends._cuda import check_cuda_arch

    check_cuda_arch(target)


# renderer -> how NULL builds (compiler, renderer) for a target of it; a renderer added here is accepted by NULL
NULL_TOOLCHAINS: dict[str, Callable[[Target], Toolchain]] = {
    "CLANG": _clang,
    "PYTHON": _python,
    "CL": _opencl,
    "CUDA": _cuda,
}
# renderer -> the check of its arch slot (TargetError naming the choices); renderers not listed take no arch
NULL_ARCH_CHECKS: dict[str, Callable[[Target], Any]] = {"CLANG": cpu_arch, "CUDA": _check_cuda_arch}


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
        super().__init__(device, NullAllocator(self), compiler, NullProgram, renderer, target)
