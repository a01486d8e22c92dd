"""`CPU:LLVM`: the CPU device with kernels rendered as LLVM IR, compiled by llvmlite in-process and loaded from the
relocatable object by tg.runtime.elf (no C compiler, no shared object, no dlopen).

Kernels run like the C ones: `CPUProgram`'s call path (ctypes, GIL released) and the CPU thread pool for THREAD
axes through the `<name>_entry(args, core_id)` wrapper the renderer emits.
"""

from __future__ import annotations

import ctypes
import platform
from typing import TYPE_CHECKING, Any

from tg.runtime.backends.cpu import CPUProgram, cpu_count
from tg.runtime.device import DeviceUnavailable, Program
from tg.runtime.elf import ElfObject, load_executable
from tg.runtime.llvm import LLVMCompiler, host_target

if TYPE_CHECKING:
    from tg.codegen.render.llvmir import CPULLVMRenderer


class NativeFunction:
    """A C function at a raw address, used like a ctypes library function: set `argtypes`, then call it."""

    def __init__(self, addr: int) -> None:
        self.addr, self.restype = addr, None
        self._fn: Any = None
        self._argtypes: list[Any] = []

    @property
    def argtypes(self) -> list[Any]:
        return self._argtypes

    @argtypes.setter
    def argtypes(self, types: list[Any]) -> None:
        self._argtypes = list(types)
        self._fn = ctypes.CFUNCTYPE(None, *self._argtypes)(self.addr)

    def __call__(self, *args: Any) -> None:
        self._fn(*args)


class CPULLVMProgram(CPUProgram):
    """An LLVM-compiled CPU kernel: the object file linked into executable memory, called through ctypes."""

    def __init__(self, name: str, lib: bytes) -> None:
        Program.__init__(self, name, lib)
        self._mem, symbols = load_executable(ElfObject(lib, f"kernel {name}"), name)
        if name not in symbols:
            raise RuntimeError(f"compiled object has no function named {name!r}")
        self.fxn: Any = NativeFunction(symbols[name])
        self._nargs: tuple[int, int] | None = None
        self._entry: int | None = symbols.get(f"{name}_entry")


def host_llvm_target() -> tuple[str, str, str]:
    """(triple, cpu, features) CPU:LLVM compiles for: this machine (x86-64 only: the loader's relocations)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise DeviceUnavailable(f"CPU:LLVM loads x86-64 objects only; this machine is {platform.machine()}")
    return host_target()


def cpu_llvm_compiler() -> LLVMCompiler:
    """The host's LLVMCompiler (raises DeviceUnavailable without llvmlite or on a non-x86-64 host)."""
    return LLVMCompiler(*host_llvm_target())


def cpu_llvm_renderer(compiler: LLVMCompiler) -> CPULLVMRenderer:
    """The CPU LLVM renderer for `compiler`'s target, threads from `cpu_count()`."""
    from tg.codegen.render.llvmir import CPULLVMRenderer

    return CPULLVMRenderer(compiler.triple, compiler.cpu, compiler.features, cpu_count())
