"""The CPU device: C kernels compiled by the host compiler (gcc or clang) and called through ctypes.

``CPU``, ``CPU:1``, ``CPU:2``, ... are separate logical devices on the same host memory. The device string picks
the renderer and the arch: ``CPU:CLANG:x86-64-v3`` renders 8-lane float32 vectors and compiles with
``-march=x86-64-v3`` (tg.runtime.cpu_arch); an arch this host cannot run is refused with the reason.
"""

from __future__ import annotations

import ctypes
import mmap
from typing import TYPE_CHECKING

from tg.ir.target import Target
from tg.runtime.backends.cpu_program import CPUProgram, cpu_count
from tg.runtime.c_compiler import CCompiler, host_cpu_flags, target_macros
from tg.runtime.cpu_arch import CPUArch, cpu_arch, host_machine
from tg.runtime.device import (
    BufferSpec,
    Compiled,
    DeviceUnavailable,
    LRUAllocator,
    check_device_index,
    instance_target,
)

if TYPE_CHECKING:
    from tg.codegen.render.renderer import Renderer


class HostMemory:
    """A region of host memory: a flat byte memoryview that keeps the mapping alive, and its address."""

    __slots__ = ("addr", "mv")

    def __init__(self, mv: memoryview, addr: int) -> None:
        self.mv, self.addr = mv, addr

    def __repr__(self) -> str:
        return f"<HostMemory {self.mv.nbytes} bytes at 0x{self.addr:x}>"


HUGEPAGE_MIN_BYTES = 8 << 20  # buffers from this size are private mappings asking for transparent huge pages


def alloc_host_memory(size: int) -> HostMemory:
    """Page-aligned, zero-filled host memory of ``size`` bytes (an anonymous mapping).

    Large buffers are private mappings advised MADV_HUGEPAGE where the OS has them (numpy does the same): streaming
    through 4 KiB pages costs a TLB miss per page (a 64 MB sum read at 17 GB/s with 4 KiB pages, 30 GB/s with huge
    pages on one core, measured in C). mmap's default shared anonymous mapping is shmem, which gets no huge pages.
    """
    private = getattr(mmap, "MAP_PRIVATE", None)
    if size < HUGEPAGE_MIN_BYTES or private is None:
        mem = mmap.mmap(-1, size)
    else:
        mem = mmap.mmap(-1, size, flags=private | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                mem.madvise(mmap.MADV_HUGEPAGE)
            except OSError:  # THP switched off or unsupported here: plain pages
                pass
    mv = memoryview(mem)
    return HostMemory(mv, ctypes.addressof(ctypes.c_char.from_buffer(mv)))


class CPUAllocator(LRUAllocator["CPUDevice"]):
    """Host memory for the CPU device (page-aligned, so kernels may use aligned vector loads)."""

    def _alloc(self, size: int, options: BufferSpec) -> HostMemory:
        return alloc_host_memory(size)

    def _offset(self, buf: HostMemory, size: int, offset: int) -> HostMemory:
        return HostMemory(buf.mv[offset : offset + size], buf.addr + offset)

    def _copyin(self, dest: HostMemory, src: memoryview) -> None:
        dest.mv[:] = src

    def _copyout(self, dest: memoryview, src: HostMemory) -> None:
        dest[:] = src.mv

    def _as_buffer(self, src: HostMemory) -> memoryview:
        return src.mv

    def from_host_memory(self, mv: memoryview, addr: int) -> HostMemory:
        """A buffer handle over existing host memory (``Tensor.from_blob``): no copy, not owned."""
        return HostMemory(mv, addr)


def clang_renderer(compiler: CCompiler | None = None, arch: CPUArch | None = None) -> Renderer:
    """A ClangRenderer for `arch` (default: the host as `compiler` targets it, vector widths probed; no compiler:
    scalar C), with threads from `cpu_count()` (tg.codegen is imported only when a renderer is first needed)."""
    from tg.codegen.render.cstyle import ClangRenderer

    if arch is not None and not arch.is_native:
        vector_bytes, fma = arch.vector_bytes, arch.fma
    elif compiler is not None:
        vector_bytes, fma = compiler.vector_bytes, compiler.has_fma
    else:
        return ClangRenderer(0, cpu_count())
    return ClangRenderer(vector_bytes, cpu_count(), fma and vector_bytes >= 32)


def check_runs_here(target: Target, arch: CPUArch, compiler: CCompiler) -> None:
    """Refuse (DeviceUnavailable, saying what is missing) an arch whose code this host cannot execute."""
    if arch.is_native:
        return
    where = f"device string {str(target)!r}"
    if arch.machine != (host := host_machine()):
        raise DeviceUnavailable(
            f"{where}: {arch.name} is an {arch.machine} arch and this machine is {host}; "
            f"NULL:CLANG:{arch.name} renders its code without running it"
        )
    if missing := [f for f in arch.features if f not in target_macros(compiler.cc, host_cpu_flags())]:
        raise DeviceUnavailable(
            f"{where}: this CPU lacks {', '.join(m.strip('_') for m in missing)} that {arch.name} code uses; "
            f"NULL:CLANG:{arch.name} compiles for it without running it"
        )


class CPUDevice(Compiled):
    """The host CPU: ClangRenderer C for the target's arch, compiled by gcc or clang, run through ctypes; with the
    LLVM renderer (``CPU:LLVM``) LLVM IR compiled in-process by llvmlite and loaded by tg.runtime.elf."""

    renderers = ("CLANG", "LLVM")
    # DEV=HCQ+CPU: the same kernels driven through hardware command queues (tg.runtime.hcq, the reference HCQ device)
    interfaces = {"HCQ": "tg.runtime.hcq.cpu:HCQCPUDevice"}

    @classmethod
    def check_arch(cls, target: Target) -> None:
        """CLANG archs: ``native`` (default) or a name of tg.runtime.cpu_arch.CPU_ARCHS."""
        cpu_arch(target)

    def __init__(self, device: str = "CPU", target: Target | None = None) -> None:
        check_device_index(device)
        target = target if target is not None else instance_target(device)
        self.arch = arch = cpu_arch(target)
        if target.renderer == "LLVM":
            from tg.runtime.backends._cpu_llvm import CPULLVMProgram, cpu_llvm_toolchain

            llvm, llvm_renderer = cpu_llvm_toolchain(target)
            super().__init__(device, CPUAllocator(self), llvm, CPULLVMProgram, llvm_renderer, target)
            return
        compiler = CCompiler(flags=arch.flags)
        check_runs_here(target, arch, compiler)
        renderer = lambda: clang_renderer(compiler, arch)
        super().__init__(device, CPUAllocator(self), compiler, CPUProgram, renderer, target)
