"""`ModelBar5`: a direct 32-bit accessor over a register model, for unit tests that skip the PCI device layer."""

from __future__ import annotations

from typing import Protocol


class _Model(Protocol):
    size: int

    def read(self, offset: int, size: int) -> bytes: ...

    def write(self, offset: int, data: bytes) -> None: ...


class ModelBar5:
    """BAR5 accessor (`read32`, `write32`, `read`, `write`) that calls a `RegisterModel` directly."""

    def __init__(self, model: _Model):
        self.model = model
        # a model with int-valued `read32`/`write32` (SimulatedNavi31) skips the bytes round trip of `read`/`write`
        self._read32 = getattr(model, "read32", None)
        self._write32 = getattr(model, "write32", None)

    def _check(self, off: int, n: int) -> None:
        if off < 0 or n < 0 or off + n > self.model.size:
            raise ValueError(f"access [{off:#x}, {off + n:#x}) outside BAR5")

    def read32(self, off: int) -> int:
        """One aligned 32-bit read."""
        if off & 3:
            raise ValueError(f"unaligned 32-bit access at {off:#x}")
        self._check(off, 4)
        if self._read32 is not None:
            return int(self._read32(off))
        return int.from_bytes(self.model.read(off, 4), "little")

    def write32(self, off: int, value: int) -> None:
        """One aligned 32-bit write (`value` masked to 32 bits)."""
        if off & 3:
            raise ValueError(f"unaligned 32-bit access at {off:#x}")
        self._check(off, 4)
        if self._write32 is not None:
            self._write32(off, value & 0xFFFFFFFF)
            return
        self.model.write(off, (value & 0xFFFFFFFF).to_bytes(4, "little"))

    def read(self, off: int, n: int) -> bytes:
        """One block read of `n` bytes."""
        self._check(off, n)
        return bytes(self.model.read(off, n))

    def write(self, off: int, data: bytes) -> None:
        """One block write."""
        self._check(off, len(data))
        self.model.write(off, bytes(data))
