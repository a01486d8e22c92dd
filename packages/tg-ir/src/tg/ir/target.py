"""Device strings: ``DEV=[IFACE[:indices]+]DEVICE[:RENDERER[:ARCH]]``, several targets separated by ``;``.

One parser for every layer. Examples::

    CPU                      the C renderer on the host CPU (``CPU:CLANG:native``)
    CPU:1                    the second CPU device instance (an index, not a renderer)
    CPU:CLANG:x86-64-v3      C for an AVX2 target: the arch sets -march= and the vector widths
    CPU:LLVM                 LLVM IR compiled in-process
    NULL:CUDA:sm_90          render and compile CUDA code, run nothing
    CUDA::sm_90              the default renderer of CUDA, arch sm_90
    HCQ+CPU                  the CPU device behind the HCQ interface
    MOCKKFD+AMD:LLVM:gfx1100 the AMD device on a mock KFD, LLVM renderer, gfx1100
    PCI:1,3+AMD              the AM driver on the second and fourth AMD GPUs of the bus
    DISK:/tmp/weights.bin    a file-backed device: everything after ``DISK:`` is a path

The parser checks syntax and the renderer names; which interfaces and archs a device accepts is the device's
business (tg.runtime), which raises naming the choices it has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Renderer names a device string may carry (the slot after the device name). tinygrad's names.
RENDERERS = ("CLANG", "LLVM", "CL", "CUDA", "PTX", "AMD", "PYTHON")

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_ARCH = re.compile(r"[A-Za-z0-9_.+-]+\Z")


class TargetError(ValueError):
    """A device string that does not follow the grammar; the message names the part that is wrong."""


@dataclass(frozen=True)
class Target:
    """One parsed device string: ``[iface[:indices]+]device[:index][:renderer[:arch]]`` (or ``DISK:path``)."""

    device: str
    iface: str | None = None
    indices: tuple[int, ...] | None = None
    index: int | None = None
    renderer: str | None = None
    arch: str | None = None
    path: str | None = None

    @property
    def name(self) -> str:
        """The canonical instance name of the device this target opens: ``CPU``, ``CPU:1``, ``DISK:/x``."""
        if self.path is not None:
            return f"{self.device}:{self.path}"
        return self.device if not self.index else f"{self.device}:{self.index}"

    def __str__(self) -> str:
        out = ""
        if self.iface is not None:
            out += self.iface
            if self.indices is not None:
                out += ":" + ",".join(str(i) for i in self.indices)
            out += "+"
        out += self.name
        if self.renderer is not None or self.arch is not None:
            out += ":" + (self.renderer or "")
            if self.arch is not None:
                out += ":" + self.arch
        return out

    @staticmethod
    def parse(spec: str) -> tuple[Target, ...]:
        """Parse a ``DEV`` value into its targets (the first is the default); '' gives ()."""
        if not isinstance(spec, str):
            raise TypeError(f"a device string must be a str, got {type(spec).__name__}: {spec!r}")
        if not spec.strip():
            return ()
        return tuple(Target.parse_one(part, whole=spec) for part in spec.split(";"))

    @staticmethod
    def parse_one(text: str, whole: str | None = None) -> Target:
        """Parse one target (no ``;``)."""
        where = f"device string {whole or text!r}" + (f" (target {text!r})" if whole and whole != text else "")
        text = text.strip()
        if not text:
            raise TargetError(f"{where}: empty target")
        iface, indices = None, None
        head, plus, rest = text.partition("+")
        # DISK:/some/path+x: a '+' after the first ':' of a DISK path is part of the path
        if plus and not (head.upper().startswith("DISK:")):
            if "+" in rest:
                raise TargetError(f"{where}: more than one '+' (one interface prefix at most)")
            iface_name, _, index_text = head.partition(":")
            if not _NAME.match(iface_name):
                raise TargetError(f"{where}: interface {iface_name!r} is not a name (letters, digits, '_')")
            iface = iface_name.upper()
            if index_text:
                indices = _parse_indices(index_text, where)
            text = rest
        device_name, _, tail = text.partition(":")
        if not _NAME.match(device_name):
            raise TargetError(f"{where}: device {device_name!r} is not a name (letters, digits, '_')")
        device = device_name.upper()
        if device == "DISK":
            if not tail:
                raise TargetError(f"{where}: DISK needs a path: DISK:/path/to/file")
            if iface is not None:
                raise TargetError(f"{where}: DISK takes no interface prefix")
            return Target(device, path=tail)
        parts = tail.split(":") if tail else []
        index = None
        if parts and parts[0].isdigit():
            index = int(parts.pop(0)) or None  # instance 0 is the plain name
        if len(parts) > 2:
            raise TargetError(f"{where}: too many ':' parts; expected DEVICE[:index][:RENDERER[:ARCH]]")
        renderer = parts[0].upper() if parts and parts[0] else None
        if renderer is not None and renderer not in RENDERERS:
            raise TargetError(f"{where}: unknown renderer {parts[0]!r}; known renderers: {', '.join(RENDERERS)}")
        arch = parts[1] if len(parts) == 2 else None
        if arch == "":
            raise TargetError(f"{where}: empty arch after the renderer")
        if arch is not None and not _ARCH.match(arch):
            raise TargetError(f"{where}: arch {arch!r} is not valid (letters, digits, '_', '.', '+', '-')")
        return Target(device, iface=iface, indices=indices, index=index, renderer=renderer, arch=arch)


def _parse_indices(text: str, where: str) -> tuple[int, ...]:
    """``0,2`` -> (0, 2); ``1-3`` -> (1, 2, 3); duplicates refused."""
    out: list[int] = []
    for piece in text.split(","):
        lo, dash, hi = piece.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise TargetError(f"{where}: interface indices {text!r} must look like '0,2' or '1-3'")
        if dash:
            if int(hi) < int(lo):
                raise TargetError(f"{where}: index range {piece!r} runs backwards")
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(lo))
    if len(set(out)) != len(out):
        raise TargetError(f"{where}: interface indices {text!r} name a device twice")
    return tuple(out)
