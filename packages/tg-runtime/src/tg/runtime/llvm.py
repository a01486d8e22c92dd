"""`LLVMCompiler`: LLVM IR -> a relocatable object file, in-process with llvmlite (no system toolchain).

llvmlite is optional (`pip install 'tg-runtime[llvm]'`) and imported on first use; without it the compiler raises
DeviceUnavailable saying how to install it. One target machine per (triple, cpu, features), `opt=2`, PIC; a module
is parsed, verified, optimised with the new pass manager at speed level 2 and emitted as an ELF object. The disk-cache
key names the LLVM version, the triple, the cpu and the features, so an llvmlite upgrade never reuses old objects.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from tg.runtime.device import CompileError, Compiler, DeviceUnavailable

INSTALL_HINT = "the LLVM renderer needs llvmlite: pip install 'tg-runtime[llvm]'"
AMDGPU_TRIPLE = "amdgcn-amd-amdhsa"

_lock = threading.Lock()  # llvmlite's target machines and pass builders are not documented as thread-safe


def llvmlite_binding() -> Any:
    """`llvmlite.binding` with every target initialised; DeviceUnavailable when llvmlite is missing or too old."""
    return _binding()


@functools.lru_cache(maxsize=1)
def _binding() -> Any:
    try:
        import llvmlite
        import llvmlite.binding as llvm
    except ImportError as e:
        raise DeviceUnavailable(f"{INSTALL_HINT} ({e})") from e
    version = tuple(int(p) for p in llvmlite.__version__.split(".")[:2] if p.isdigit())
    if version < (0, 50):
        raise DeviceUnavailable(f"{INSTALL_HINT} (found llvmlite {llvmlite.__version__}, need >= 0.50)")
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm


def host_target() -> tuple[str, str, str]:
    """(triple, cpu name, feature string) of the machine this process runs on."""
    llvm = llvmlite_binding()
    return llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


@functools.lru_cache(maxsize=16)
def _target_machine(triple: str, cpu: str, features: str) -> Any:
    llvm = llvmlite_binding()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise DeviceUnavailable(f"this llvmlite has no target for {triple!r}: {e}") from e
    return target.create_target_machine(cpu=cpu, features=features, opt=2, reloc="pic", codemodel="default")


def llvm_version() -> str:
    """The version of the LLVM inside llvmlite, e.g. `22.1.0`."""
    return ".".join(str(v) for v in llvmlite_binding().llvm_version_info)


def _numbered(src: str) -> str:
    return "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(src.splitlines()))


class LLVMCompiler(Compiler):
    """Compiles LLVM IR text to the bytes of a relocatable ELF object for (triple, cpu, features).

    Errors raise CompileError with LLVM's message and the numbered IR. `assembly(src)` gives LLVM's listing of the
    same optimised module (for tests that compare a disassembler against it).
    """

    def __init__(self, triple: str, cpu: str = "", features: str = "") -> None:
        super().__init__(None)
        self.triple, self.cpu, self.features = triple, cpu, features
        self.tm = _target_machine(triple, cpu, features)  # fails early (DeviceUnavailable) without llvmlite

    @property
    def cachekey(self) -> str:
        """`llvm-<version>-<triple>-<cpu>-<features>-O2`."""
        return f"llvm-{llvm_version()}-{self.triple}-{self.cpu}-{self.features}-O2"

    def _optimised_module(self, src: str) -> Any:
        llvm = llvmlite_binding()
        try:
            mod = llvm.parse_assembly(src)
            mod.triple = self.triple
            mod.data_layout = str(self.tm.target_data)
            mod.verify()
        except RuntimeError as e:
            where = f"{self.triple} ({self.cpu})"
            raise CompileError(f"LLVM rejected the IR for {where}:\n{e}\n--- source ---\n{_numbered(src)}") from e
        pb = llvm.create_pass_builder(self.tm, llvm.create_pipeline_tuning_options(speed_level=2))
        pb.getModulePassManager().run(mod, pb)
        return mod

    def compile(self, src: str) -> bytes:
        """Parse, verify, optimise (-O2) and emit an object file."""
        with _lock:
            mod = self._optimised_module(src)
            try:
                return bytes(self.tm.emit_object(mod))
            except RuntimeError as e:
                raise CompileError(f"LLVM could not emit code for {self.triple} ({self.cpu}):\n{e}\n--- source ---\n"
                                   f"{_numbered(src)}") from e  # fmt: skip

    def assembly(self, src: str) -> str:
        """LLVM's assembly listing of `src` optimised as `compile` does."""
        with _lock:
            return str(self.tm.emit_assembly(self._optimised_module(src)))

    def __repr__(self) -> str:
        return f"<LLVMCompiler {self.triple} {self.cpu}>"
