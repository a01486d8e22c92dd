"""Register models: what sits behind a simulated BAR.

A :class:`RegisterModel` serves ``size`` bytes of address space and sees every access with its exact
``(offset, size)``: a ``read32`` arrives as ``read(off, 4)``, a slice copy as one call covering the whole range.
:class:`DwordRegisterFile` is a ready-made model: plain memory, plus per-dword read/write hooks that let a simulator
react to register accesses (start an engine on a write, return a status on a read).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from tg.drivers.errors import MockAccessError

__all__ = ["AccessRecord", "DwordRegisterFile", "RegisterModel"]


@runtime_checkable
class RegisterModel(Protocol):
    """The interface a simulated BAR forwards accesses to. ``reset()`` is optional (called on device reset)."""

    size: int

    def read(self, offset: int, size: int) -> bytes:
        """Return ``size`` bytes at ``offset``."""
        ...

    def write(self, offset: int, data: bytes) -> None:
        """Store ``data`` at ``offset``."""
        ...


#: one logged access: ``(op, offset, size, value)`` with op ``"r"`` or ``"w"`` and value the little-endian int
AccessRecord = tuple[str, int, int, int]


class DwordRegisterFile:
    """A register model made of dwords: memory by default, hooks where registers have behaviour.

    * ``on_read(offset, fn)``: reading the dword at ``offset`` returns ``fn()``.
    * ``on_write(offset, fn)``: writing it calls ``fn(value)`` (the backing store is not updated unless ``fn`` does
      so with :meth:`poke`).
    * A full aligned 4-byte access to a hooked dword calls its hook. A partial access is a :class:`MockAccessError` in
      strict mode, otherwise a read-modify-write through the hooks.
    * ``strict=True``: accessing a dword never declared (``declare``) or hooked raises MockAccessError.
    * ``log_size > 0`` keeps the last accesses in ``log`` as :data:`AccessRecord` tuples; ``reads``/``writes`` count
      every call.
    * Accesses outside ``[0, size)`` always raise MockAccessError.
    """

    def __init__(self, size: int, *, strict: bool = False, log_size: int = 0) -> None:
        if not isinstance(size, int) or size <= 0 or size % 4:
            raise ValueError(f"register file size must be a positive multiple of 4, got {size!r}")
        self.size, self.strict = size, strict
        self.mem = bytearray(size)
        self.read_hooks: dict[int, Callable[[], int]] = {}
        self.write_hooks: dict[int, Callable[[int], None]] = {}
        self.reset_hooks: list[Callable[[], None]] = []
        self.declared: set[int] = set()
        self.log: deque[AccessRecord] = deque(maxlen=log_size if log_size > 0 else 0)
        self.reads = 0
        self.writes = 0

    # ---- model construction ----------------------------------------------------------------------------------------
    def _dword(self, offset: int) -> int:
        if not isinstance(offset, int) or offset % 4 or not 0 <= offset < self.size:
            raise ValueError(f"register offset must be a 4-aligned offset inside the model, got {offset!r}")
        return offset

    def declare(self, offset: int, size: int = 4) -> None:
        """Mark the dwords covering ``[offset, offset+size)`` as modelled (plain memory) for strict mode."""
        if offset < 0 or size <= 0 or offset + size > self.size:
            raise ValueError(f"declared range [{offset:#x}, {offset + size:#x}) is outside the model")
        self.declared.update(range(offset & ~3, offset + size, 4))

    def on_read(self, offset: int, fn: Callable[[], int]) -> None:
        """Make reads of the dword at ``offset`` return ``fn()``."""
        self.read_hooks[self._dword(offset)] = fn

    def on_write(self, offset: int, fn: Callable[[int], None]) -> None:
        """Make writes of the dword at ``offset`` call ``fn(value)``."""
        self.write_hooks[self._dword(offset)] = fn

    def on_reset(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` when the device is reset (after the memory has been zeroed)."""
        self.reset_hooks.append(fn)

    def peek(self, offset: int) -> int:
        """Read the backing-store dword at ``offset`` without hooks or logging."""
        return int.from_bytes(self.mem[self._dword(offset) : offset + 4], "little")

    def poke(self, offset: int, value: int) -> None:
        """Write the backing-store dword at ``offset`` without hooks or logging."""
        self.mem[self._dword(offset) : offset + 4] = (value & 0xFFFFFFFF).to_bytes(4, "little")

    def reset(self) -> None:
        """Zero the backing store and run the reset hooks (device reset)."""
        self.mem[:] = bytes(self.size)
        for fn in self.reset_hooks:
            fn()

    # ---- access ----------------------------------------------------------------------------------------------------
    def _check(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise MockAccessError(f"access of {size} bytes at {offset:#x} is outside the {self.size:#x}-byte model")
        if self.strict:
            for dw in range(offset & ~3, offset + size, 4):
                if dw not in self.declared and dw not in self.read_hooks and dw not in self.write_hooks:
                    raise MockAccessError(f"access to unmodelled register {dw:#x} (strict register file)")

    def _partial(self, dw: int, what: str) -> None:
        if self.strict:
            raise MockAccessError(f"partial {what} of hooked register {dw:#x} (strict register file)")

    def _dword_value(self, dw: int) -> int:
        hook = self.read_hooks.get(dw)
        if hook is not None:
            return int(hook()) & 0xFFFFFFFF
        return int.from_bytes(self.mem[dw : dw + 4], "little")

    def _fast_dword(self, offset: int, size: int) -> bool:
        """Whether an access is one aligned, in-range, permitted dword (the common register access)."""
        if size != 4 or offset & 3 or not 0 <= offset <= self.size - 4:
            return False
        if self.strict and offset not in self.declared and offset not in self.read_hooks:
            return offset in self.write_hooks
        return True

    def read(self, offset: int, size: int) -> bytes:
        """Read ``size`` bytes at ``offset``, calling read hooks for hooked dwords."""
        if self._fast_dword(offset, size):
            self.reads += 1
            hook = self.read_hooks.get(offset)
            data = (
                (int(hook()) & 0xFFFFFFFF).to_bytes(4, "little")
                if hook is not None
                else bytes(self.mem[offset : offset + 4])
            )
            if self.log.maxlen:
                self.log.append(("r", offset, 4, int.from_bytes(data, "little")))
            return data
        self._check(offset, size)
        self.reads += 1
        out = bytearray()
        pos, end = offset, offset + size
        while pos < end:
            dw = pos & ~3
            lo, hi = pos - dw, min(end - dw, 4)
            if dw in self.read_hooks:
                if (lo, hi) != (0, 4):
                    self._partial(dw, "read")
                out += self._dword_value(dw).to_bytes(4, "little")[lo:hi]
            else:
                out += self.mem[pos : dw + hi]
            pos = dw + hi
        data = bytes(out)
        if self.log.maxlen:
            self.log.append(("r", offset, size, int.from_bytes(data, "little")))
        return data

    def write(self, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset``, calling write hooks for hooked dwords."""
        data = bytes(data)
        if self._fast_dword(offset, len(data)):
            self.writes += 1
            if self.log.maxlen:
                self.log.append(("w", offset, 4, int.from_bytes(data, "little")))
            hook = self.write_hooks.get(offset)
            if hook is not None:
                hook(int.from_bytes(data, "little"))
            else:
                self.mem[offset : offset + 4] = data
            return
        self._check(offset, len(data))
        self.writes += 1
        if self.log.maxlen:
            self.log.append(("w", offset, len(data), int.from_bytes(data, "little")))
        pos, end = offset, offset + len(data)
        while pos < end:
            dw = pos & ~3
            lo, hi = pos - dw, min(end - dw, 4)
            piece = data[pos - offset : pos - offset + hi - lo]
            hook = self.write_hooks.get(dw)
            if hook is not None:
                if (lo, hi) != (0, 4):
                    self._partial(dw, "write")
                    merged = bytearray(self._dword_value(dw).to_bytes(4, "little"))
                    merged[lo:hi] = piece
                    piece = bytes(merged)
                hook(int.from_bytes(piece, "little"))
            else:
                self.mem[pos : dw + hi] = piece
            pos = dw + hi
