"""BumpAllocator: the never-freeing allocator used for the USB bridge's 512 KiB SRAM."""

from __future__ import annotations

__all__ = ["BumpAllocator"]


def _round_up(x: int, align: int) -> int:
    return (x + align - 1) // align * align


class BumpAllocator:
    """Hands out increasing offsets in ``[base, base+size)``; there is no free.

    When the space is exhausted, ``alloc`` raises ``RuntimeError("Out of memory")`` if ``wrap`` is false, otherwise it
    starts again from offset 0 (old allocations are then reused: the caller must be done with them). A request larger
    than the whole space is always an error.
    """

    def __init__(self, size: int, base: int = 0, wrap: bool = True) -> None:
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"allocator size must be a positive int, got {size!r}")
        if not isinstance(base, int) or base < 0:
            raise ValueError(f"allocator base must be a non-negative int, got {base!r}")
        self.size, self.base, self.wrap, self.ptr = size, base, wrap, 0

    def alloc(self, n: int, alignment: int = 1) -> int:
        """Reserve ``n`` bytes aligned to ``alignment`` (relative to ``base``) and return their address."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"allocation size must be a non-negative int, got {n!r}")
        if not isinstance(alignment, int) or alignment <= 0:
            raise ValueError(f"alignment must be a positive int, got {alignment!r}")
        if n > self.size:
            raise RuntimeError(f"Out of memory: {n:#x} bytes requested, the allocator holds {self.size:#x}")
        if _round_up(self.ptr, alignment) + n > self.size:
            if not self.wrap:
                free = max(0, self.size - _round_up(self.ptr, alignment))
                raise RuntimeError(f"Out of memory: {n:#x} bytes requested, {free:#x} of {self.size:#x} left")
            self.ptr = 0
        res = _round_up(self.ptr, alignment)
        self.ptr = res + n
        return res + self.base
