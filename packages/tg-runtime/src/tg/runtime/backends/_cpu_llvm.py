"""`CPU:LLVM`: the CPU device with kernels rendered as LLVM IR, compiled by llvmlite in-process and loaded from the
relocatable object by tg.runtime.elf (no C compiler, no shared object, no dlopen).

Kernels run like the C ones: `CPUProgram`'s call path (ctypes, GIL released) and the CPU thread pool for THREAD
axes through the `<name>_entry(args, core_id)` wrapper the renderer emits.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from tg.ir.target import Target, TargetError
from tg.runtime.backends.cpu_program import CPUProgram, cpu_count
from tg.runtime.cpu_arch import X86_64, CPUArch, cpu_arch, host_machine
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


X86_64_TRIPLE = "x86_64-unknown-linux-gnu"


def _features(arch: CPUArch) -> str:
    """LLVM feature flags of a named x86-64 level: its C macros, FMA where it has it, F16C with AVX2 levels."""
    names = [m.strip("_").lower().replace("_", ".") for m in arch.features]
    names += [f for f, has in (("fma", arch.fma), ("f16c", arch.vector_bytes >= 32)) if has and f not in names]
    return ",".join(f"+{n}" for n in names)


def llvm_cpu_target(target: Target) -> tuple[str, str, str, str]:
    """(triple, cpu, compiler features, renderer features) of a ``CPU:LLVM[:ARCH]`` target: the host for ``native``
    (the default), else the x86-64 level named (LLVM knows ``x86-64-v3`` as a cpu)."""
    arch = cpu_arch(target)
    if arch.machine != X86_64:
        raise TargetError(f"device string {str(target)!r}: CPU:LLVM compiles for x86-64 (the ELF loader's "
                          f"relocations); {arch.name} is an {arch.machine} arch")  # fmt: skip
    if arch.is_native:
        if host_machine() != X86_64:
            raise DeviceUnavailable(f"CPU:LLVM loads x86-64 objects only; this machine is {host_machine()}")
        triple, cpu, features = host_target()
        return triple, cpu, features, features
    return X86_64_TRIPLE, arch.name, "", _features(arch)


def check_llvm_runs_here(target: Target, renderer_features: str) -> None:
    """Refuse (DeviceUnavailable) a named arch whose instructions this CPU lacks."""
    if cpu_arch(target).is_native:
        return
    if host_machine() != X86_64:
        raise DeviceUnavailable(f"CPU:LLVM loads x86-64 objects only; this machine is {host_machine()}")
    have = set(host_target()[2].split(","))
    if missing := [f[1:] for f in renderer_features.split(",") if f and f not in have]:
        raise DeviceUnavailable(
            f"device string {str(target)!r}: this CPU lacks {', '.join(missing)} that {target.arch} code uses; "
            f"NULL:LLVM:{target.arch} compiles for it without running it"
        )


def cpu_llvm_toolchain(target: Target, run: bool = True) -> tuple[LLVMCompiler, Any]:
    """(compiler, renderer factory) of a ``CPU:LLVM[:ARCH]`` target; `run`: refuse archs this CPU cannot execute."""
    triple, cpu, features, renderer_features = llvm_cpu_target(target)
    if run:
        check_llvm_runs_here(target, renderer_features)
    compiler = LLVMCompiler(triple, cpu, features)
    return compiler, lambda: cpu_llvm_renderer(triple, cpu, renderer_features)


def cpu_llvm_renderer(triple: str, cpu: str, features: str) -> CPULLVMRenderer:
    """The CPU LLVM renderer for (triple, cpu, features), threads from `cpu_count()`."""
    from tg.codegen.render.llvmir import CPULLVMRenderer

    return CPULLVMRenderer(triple, cpu, features, cpu_count())
