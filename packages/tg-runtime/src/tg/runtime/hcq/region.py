"""Memory the HCQ layer addresses (`Region`) and the 16-byte signals carved from it (`Signal`, `SignalPool`).

Below the device (tg.runtime.hcq.device) and the stages that bind programs to memory (link) and run them (exec):
they all hold regions and signals, and only the device allocates them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tg.runtime.hcq.device import HCQDevice

SIGNAL_BYTES = 16  # u64 value at +0, u64 timestamp at +8


@dataclass
class Region:
    """Memory the HCQ layer addresses: ``va`` as the owning device sees it, ``size`` in bytes, ``view`` for CPU
    access (a HostView or an MMIO view; None when the CPU cannot reach it), ``owner`` the device."""

    va: int
    size: int
    view: Any
    owner: Any = None
    keep: Any = None  # whatever keeps the memory alive

    def sub(self, offset: int, size: int) -> Region:
        """``size`` bytes at ``offset``."""
        if offset < 0 or offset + size > self.size:
            raise ValueError(f"sub-region [{offset}, {offset + size}) outside {self.size} bytes")
        view = self.view.view(offset, size) if self.view is not None else None
        return Region(self.va + offset, size, view, self.owner, self.keep)

    def u64(self) -> Any:
        """The memory as uint64 elements (a view in format 'Q')."""
        return self.view.view(0, self.size, "Q")


class Signal:
    """A 16-byte signal: u64 value at +0 (hardware compares its low 32 bits), u64 timestamp at +8."""

    __slots__ = ("pool", "region", "words")

    def __init__(self, region: Region, pool: SignalPool | None = None) -> None:
        self.region, self.pool = region, pool
        self.words = region.u64()

    @property
    def value(self) -> int:
        """The signal value."""
        return int(self.words[0])

    @value.setter
    def value(self, v: int) -> None:
        self.words[0] = v

    @property
    def timestamp(self) -> int:
        """The timestamp word (device ticks)."""
        return int(self.words[1])

    @property
    def va(self) -> int:
        """Its device address."""
        return self.region.va

    def __repr__(self) -> str:
        return f"<Signal {self.region.va:#x} = {self.value}>"


class SignalPool:
    """Signals of one device, carved from pages of ``page_size`` bytes of host-visible memory."""

    def __init__(self, dev: HCQDevice, page_size: int) -> None:
        self.dev, self.page_size = dev, page_size
        self.free: list[Region] = []
        self.pages: list[Region] = []

    def alloc(self, value: int = 0) -> Signal:
        """A signal set to ``value`` (timestamp 0)."""
        if not self.free:
            page = self.dev.alloc_region(self.page_size)
            self.pages.append(page)
            self.free.extend(page.sub(off, SIGNAL_BYTES) for off in reversed(range(0, self.page_size, SIGNAL_BYTES)))
        sig = Signal(self.free.pop(), self)
        sig.words[0], sig.words[1] = value, 0
        return sig

    def release(self, sig: Signal) -> None:
        """Return a signal (the caller knows the device no longer touches it)."""
        self.free.append(sig.region)
