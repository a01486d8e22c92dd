"""CPU targets of the C renderer: the ARCH slot of ``CPU:CLANG:ARCH`` and ``NULL:CLANG:ARCH``.

An arch fixes three things at once, so a narrower (or foreign) CPU can be exercised on a wide one: the compiler
flags (``-march=`` for x86 levels and Arm architecture versions, ``-mcpu=`` for Arm cores), the vector register
width the renderer builds its vector types for (``tg_f32x8`` on AVX2, ``tg_f32x4`` on SSE4 or NEON), and whether
the target has fused multiply-add. ``native`` (the default) asks the host compiler what the host has.

The table holds facts about the instruction sets (x86-64 micro-architecture levels, Armv8 NEON); a test checks it
against what the compiler predefines for each arch where the compiler can target it.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

from tg.ir.target import Target, TargetError
from tg.runtime.c_compiler import host_cpu_flags

X86_64, AARCH64 = "x86_64", "aarch64"


@dataclass(frozen=True)
class CPUArch:
    """One CPU target: its compiler flags, vector width, FMA, and the compiler macros a host must define to run it."""

    name: str
    machine: str  # the instruction-set family: "x86_64" or "aarch64" (native: the host's)
    flags: tuple[str, ...]  # what the C compiler gets to target it
    vector_bytes: int  # bytes in the widest vector register the renderer may use (0: probe, for native)
    fma: bool  # has fused multiply-add instructions
    features: tuple[str, ...] = ()  # predefined macros of the host compiler's native target that code for it needs

    @property
    def is_native(self) -> bool:
        """Whether this is the host CPU as the compiler sees it (widths probed, not tabled)."""
        return self.name == "native"


def _x86(name: str, vector_bytes: int, fma: bool, *features: str) -> CPUArch:
    return CPUArch(name, X86_64, (f"-march={name}",), vector_bytes, fma, features)


def _arm(name: str, flag: str) -> CPUArch:
    # every Armv8-A core has 128-bit NEON with fused multiply-add (SVE's wider registers are not used by C vectors)
    return CPUArch(name, AARCH64, (f"{flag}={name}",), 16, True, ("__ARM_NEON",))


# The named archs, grouped by family. x86-64 levels (psABI): v1 SSE2, v2 SSE4.2/POPCNT, v3 AVX2/FMA/BMI2,
# v4 AVX-512 F/BW/DQ/VL. Arm: architecture versions take -march=, cores take -mcpu=.
CPU_ARCHS: dict[str, CPUArch] = {
    a.name: a
    for a in (
        _x86("x86-64", 16, False, "__SSE2__"),
        _x86("x86-64-v2", 16, False, "__SSE4_2__", "__POPCNT__"),
        _x86("x86-64-v3", 32, True, "__AVX2__", "__FMA__", "__BMI2__"),
        _x86("x86-64-v4", 64, True, "__AVX512F__", "__AVX512BW__", "__AVX512DQ__", "__AVX512VL__"),
        _arm("armv8-a", "-march"),
        _arm("armv8.2-a", "-march"),
        _arm("armv9-a", "-march"),
        _arm("cortex-a72", "-mcpu"),
        _arm("cortex-a76", "-mcpu"),
        _arm("neoverse-n1", "-mcpu"),
        _arm("neoverse-v1", "-mcpu"),
        _arm("apple-m1", "-mcpu"),
    )
}


def host_machine(machine: str | None = None) -> str:
    """The host's instruction-set family: ``x86_64``, ``aarch64``, or ``platform.machine()`` lower-cased."""
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64"):
        return X86_64
    if machine in ("aarch64", "arm64"):
        return AARCH64
    return machine


def cpu_arch(target: Target) -> CPUArch:
    """The CPUArch a ``CLANG`` target names (``native`` when it names none); TargetError listing the choices."""
    name = target.arch or "native"
    if name == "native":
        return CPUArch("native", host_machine(), host_cpu_flags(), 0, False)
    if (arch := CPU_ARCHS.get(name)) is None:
        raise TargetError(
            f"device string {str(target)!r}: unknown CPU arch {name!r}; available: native, {', '.join(CPU_ARCHS)}"
        )
    return arch
