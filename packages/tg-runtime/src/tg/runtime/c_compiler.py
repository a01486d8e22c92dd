"""The host C compiler: find gcc or clang, compile C source to a shared object, identify it for the cache.

Selection: ``CC`` from the environment if set (a name looked up in PATH, or a path), else ``clang``, else
``gcc``, else ``cc``. Flags target the host CPU (``-march=native``/``-mcpu=native``) and stay IEEE-correct
(no ``-ffast-math``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from tg.ir.helpers import CC
from tg.runtime.device import CompileError, Compiler, DeviceUnavailable

# preference order when CC is not set
C_COMPILER_NAMES = ("clang", "gcc", "cc")

INSTALL_HINT = (
    "install one with `sudo apt-get install clang` (or `sudo apt-get install gcc`) on Debian/Ubuntu, "
    "`sudo dnf install clang` on Fedora, `xcode-select --install` on macOS, or point CC=/path/to/compiler at one"
)


class CompilerNotFoundError(DeviceUnavailable):
    """No usable C compiler: the message says what was searched and how to install one."""


def find_c_compiler(cc: str | None = None, path: str | None = None) -> str:
    """The absolute path of the C compiler to use.

    ``cc`` (default: the ``CC`` environment variable) overrides the search; ``path`` (default: ``PATH``) is
    where names are looked up. Raises CompilerNotFoundError with installation advice when nothing is found.
    """
    if cc is None:
        cc = CC.value or None
    search = path if path is not None else os.environ.get("PATH", "")
    if cc is not None:
        words = shlex.split(cc)
        if len(words) != 1:
            raise CompilerNotFoundError(f"CC={cc!r} must name a single compiler executable (no extra arguments)")
        if found := shutil.which(words[0], path=search):
            return os.path.abspath(found)
        raise CompilerNotFoundError(f"CC={cc!r} is not an executable file or a program in PATH; {INSTALL_HINT}")
    for name in C_COMPILER_NAMES:
        if found := shutil.which(name, path=search):
            return os.path.abspath(found)
    raise CompilerNotFoundError(
        f"no C compiler found: looked for {', '.join(C_COMPILER_NAMES)} in PATH={search!r}; the CPU device compiles "
        f"kernels with one, {INSTALL_HINT}"
    )


def host_cpu_flags(machine: str | None = None) -> tuple[str, ...]:
    """Flags that let the compiler use every instruction of the CPU it runs on."""
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64", "i686", "i386"):
        return ("-march=native",)
    if machine in ("aarch64", "arm64") or machine.startswith(("arm", "ppc")):
        return ("-mcpu=native",)
    return ()


# -O2 with host-CPU instructions; -fno-math-errno lets sqrt become an instruction (errno is not IEEE semantics);
# -ffp-contract=off: every a*b+c rounds twice as written, so CPU results match the PYTHON reference bit for bit
# (renderers emit an explicit fma where they want one); -fno-strict-aliasing keeps pointer bit casts correct.
BASE_FLAGS = ("-O2", "-fPIC", "-shared", "-fno-math-errno", "-ffp-contract=off", "-fno-strict-aliasing", "-fno-ident")


@functools.lru_cache(maxsize=16)
def compiler_version(cc: str) -> str:
    """The compiler's ``--version`` output (part of its identity in the compile cache)."""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError as e:
        raise CompilerNotFoundError(f"C compiler {cc!r} cannot be run: {e}; {INSTALL_HINT}") from e
    return out.stdout + out.stderr


@functools.lru_cache(maxsize=16)
def target_macros(cc: str, flags: tuple[str, ...]) -> frozenset[str]:
    """The macros the compiler predefines for its target with `flags` (e.g. __AVX512F__, __FMA__)."""
    cmd = [cc, *(f for f in flags if f.startswith(("-m", "-f"))), "-dM", "-E", "-x", "c", os.devnull]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False).stdout
    except OSError:
        return frozenset()
    return frozenset(line.split()[1] for line in out.splitlines() if line.startswith("#define "))


def probe_vector_bytes(cc: str, flags: tuple[str, ...]) -> int:
    """Bytes in the widest SIMD register the compiler targets with `flags` (64 AVX-512, 32 AVX2, 16 SSE/NEON, 0)."""
    macros = target_macros(cc, flags)
    if "__AVX512F__" in macros:
        return 64
    if "__AVX2__" in macros or "__AVX__" in macros:
        return 32
    if macros & {"__SSE2__", "__ARM_NEON", "__ARM_NEON__", "__ALTIVEC__"}:
        return 16
    return 0


def c_source(path: Path) -> str:
    """The text of one of tg.runtime's C files with each ``#include "tg_*.h"`` line replaced by that header of
    tg.runtime's directory (the compilers here take source text, not paths, so the preprocessor cannot find it)."""
    lines = []
    for line in path.read_text().splitlines(keepends=True):
        name = line.split('"')[1] if line.startswith('#include "tg_') else None
        lines.append((Path(__file__).parent / name).read_text() if name else line)
    return "".join(lines)


@functools.lru_cache(maxsize=16)
def direct_linker(cc: str) -> tuple[str, str, str] | None:
    """``(ld, libm, libgcc.a)`` for linking a kernel's object file into a shared object without running the compiler
    driver a second time, asked of the driver once (``-print-prog-name=ld``, ``-print-file-name=libm.so``,
    ``-print-libgcc-file-name``).

    Why: a driver that compiles and links starts itself twice, and clang 14's start alone (a large, dynamically
    linked binary) is ~50 ms of the ~120 ms a small kernel took; the linker called directly takes ~5 ms. A kernel
    needs libm (its math calls) and libgcc's helpers (e.g. 128-bit division); the C library's symbols (the thread
    pool's pthread calls) resolve in the process that loads it. None off Linux, or where the driver cannot say where
    these are: the driver links then, as before.
    """
    if platform.system() != "Linux":
        return None

    def ask(option: str) -> str:
        try:
            out = subprocess.run([cc, option], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return out.stdout.strip() if out.returncode == 0 else ""

    ld = shutil.which(ask("-print-prog-name=ld") or "ld")
    libm, libgcc = ask("-print-file-name=libm.so"), ask("-print-libgcc-file-name")
    if ld is None or not all(os.path.isabs(p) and os.path.isfile(p) for p in (libm, libgcc)):
        return None
    return ld, libm, libgcc


class CCompiler(Compiler):
    """Compiles C source into a shared object with the host C compiler (gcc or clang).

    The compiler is looked up when the object is created (``cc``/``CC`` override the search); its disk-cache key
    is its path, its ``--version`` output and the flags, so a compiler upgrade never reuses stale binaries.
    """

    def __init__(self, cc: str | None = None, flags: tuple[str, ...] | None = None) -> None:
        super().__init__(None)
        self.cc = find_c_compiler(cc)
        self.flags = BASE_FLAGS + (host_cpu_flags() if flags is None else tuple(flags))

    @property
    def cachekey(self) -> str:
        """``c|<path>|<sha of --version>|<flags>``."""
        identity = hashlib.sha256(compiler_version(self.cc).encode()).hexdigest()[:16]
        return f"c|{self.cc}|{identity}|{' '.join(self.flags)}"

    def compile(self, src: str) -> bytes:
        """Compile ``src`` to the bytes of a shared object; raises CompileError with the compiler's messages."""
        with tempfile.TemporaryDirectory(prefix="tg-cc-") as tmp:
            source, obj, output = Path(tmp) / "kernel.c", Path(tmp) / "kernel.o", Path(tmp) / "kernel.so"
            source.write_text(src)
            cross = any(f.startswith(("--target", "-target")) for f in self.flags)  # the host's ld cannot link it
            linker = None if cross else direct_linker(self.cc)
            if linker is None:  # the driver compiles and links
                self._run([self.cc, *self.flags, "-o", str(output), str(source), "-lm"], src)
            else:  # the driver compiles to an object, the linker links it (one start of the driver, not two)
                ld, libm, libgcc = linker
                self._run([self.cc, *(f for f in self.flags if f != "-shared"), "-c", "-o", str(obj), str(source)], src)
                self._run([ld, "-shared", "--hash-style=gnu", "-o", str(output), str(obj), libm, libgcc], src)
            return output.read_bytes()

    def _run(self, cmd: list[str], src: str) -> None:
        """Run one step of the compile; CompileError with its messages and the numbered source when it fails."""
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as e:
            raise CompilerNotFoundError(f"{cmd[0]!r} cannot be run: {e}; {INSTALL_HINT}") from e
        if res.returncode != 0:
            numbered = "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(src.splitlines()))
            raise CompileError(
                f"{shlex.join(cmd)} failed with exit code {res.returncode}:\n{res.stderr.strip()}\n"
                f"--- source ---\n{numbered}"
            )

    @property
    def vector_bytes(self) -> int:
        """The SIMD register width the compiled code may use (probed once per compiler and flags)."""
        return probe_vector_bytes(self.cc, self.flags)

    @property
    def has_fma(self) -> bool:
        """Whether the target has fused multiply-add instructions (so a contracted a*b+c is one rounding)."""
        return bool(target_macros(self.cc, self.flags) & {"__FMA__", "__ARM_FEATURE_FMA"})

    @property
    def has_half_conversions(self) -> bool:
        """Whether the target converts float16 vectors to float32 in one instruction (x86's F16C `vcvtph2ps`), so
        float16 data read as vectors (ClangRenderer's `half_vector_loads`) costs about what float32 does."""
        return "__F16C__" in target_macros(self.cc, self.flags)

    def __repr__(self) -> str:
        return f"<CCompiler {self.cc} {' '.join(self.flags)}>"
