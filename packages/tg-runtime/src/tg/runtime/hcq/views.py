"""Host-memory views for HCQ devices: typed, bounded windows onto host memory, MMIO-style.

:class:`HostView` has the interface of tg.drivers' MMIO views (``nbytes``, ``fmt``, element indexing with
``v[i]``/``v[i] = x``, byte-offset ``read``/``write``, ``view(offset, size, fmt)``) so HCQ code treats host memory
and device registers alike, without tg-drivers: ``HCQ+CPU`` lives on host memory only, and tg-drivers' views
(``HostMMIO``, ``ModelMMIO``, USB and remote views) come in through hardware backends. ``addr`` is the host address
(what a compiled submitter is given); ``mv`` a memoryview of the elements (fast host access).

``memory_for(view, dtype)`` adapts any such view to the ``load(i)``/``store(i, v)`` interface the PYTHON program
interpreter uses, so an interpreted submitter's every access goes through the view, in program order.
"""

from __future__ import annotations

import ctypes
from typing import Any

from tg.ir.dtype import DType, dtypes

__all__ = ["FORMATS", "HostView", "ViewMemory", "is_host_view", "memory_for"]

#: element formats and their sizes (the struct/memoryview letters MMIO views use)
FORMATS = {"B": 1, "H": 2, "I": 4, "Q": 8, "b": 1, "h": 2, "i": 4, "q": 8}


class HostView:
    """A view of ``nbytes`` bytes of host memory at ``addr``, in elements of ``fmt``; ``owner`` keeps the memory
    alive. Indices and slices never clamp: out of range raises IndexError."""

    __slots__ = ("addr", "fmt", "itemsize", "mv", "nbytes", "owner")

    def __init__(self, addr: int, nbytes: int, fmt: str = "B", owner: Any = None) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unsupported view format {fmt!r}; expected one of {sorted(FORMATS)}")
        if not isinstance(addr, int) or addr <= 0 or nbytes < 0:
            raise ValueError(f"a host view needs a non-NULL address and a size, got {addr!r}, {nbytes!r}")
        if nbytes % FORMATS[fmt]:
            raise ValueError(f"{nbytes} bytes is not a whole number of {fmt!r} elements")
        self.addr, self.nbytes, self.fmt, self.itemsize, self.owner = addr, nbytes, fmt, FORMATS[fmt], owner
        raw = (ctypes.c_char * max(nbytes, 1)).from_address(addr)
        self.mv: memoryview = memoryview(raw).cast("B")[:nbytes].cast(fmt)  # type: ignore[call-overload]

    def __len__(self) -> int:
        return self.nbytes // self.itemsize

    def __getitem__(self, i: Any) -> Any:
        return self.mv[i] if not isinstance(i, slice) else self.mv[i].tolist()

    def __setitem__(self, i: Any, value: Any) -> None:
        self.mv[i] = value

    def view(self, offset: int = 0, size: int | None = None, fmt: str | None = None) -> HostView:
        """A sub-view ``size`` bytes (default: to the end) at byte ``offset``, in ``fmt`` (default: this one's)."""
        size = self.nbytes - offset if size is None else size
        if offset < 0 or size < 0 or offset + size > self.nbytes:
            raise IndexError(f"view [{offset}, {offset + size}) outside the {self.nbytes}-byte view at {self.addr:#x}")
        return HostView(self.addr + offset, size, fmt or self.fmt, self.owner)

    def read(self, off: int, n: int) -> bytes:
        """``n`` bytes at byte offset ``off``."""
        if off < 0 or n < 0 or off + n > self.nbytes:
            raise IndexError(f"read [{off}, {off + n}) outside the {self.nbytes}-byte view at {self.addr:#x}")
        return ctypes.string_at(self.addr + off, n)

    def write(self, off: int, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` to byte offset ``off``."""
        raw = memoryview(data).cast("B")
        if off < 0 or off + raw.nbytes > self.nbytes:
            raise IndexError(f"write [{off}, {off + raw.nbytes}) outside the {self.nbytes}-byte view at {self.addr:#x}")
        ctypes.memmove(self.addr + off, bytes(raw) if raw.readonly else (ctypes.c_char * raw.nbytes).from_buffer(raw),
                       raw.nbytes)  # fmt: skip

    def __repr__(self) -> str:
        return f"HostView(addr={self.addr:#x}, nbytes={self.nbytes:#x}, fmt={self.fmt!r})"


def is_host_view(view: Any) -> bool:
    """Whether a view is plain host memory a compiled submitter can write through its address: a HostView, or
    tg.drivers' HostMMIO (recognised by name: tg.runtime does not import tg.drivers)."""
    return isinstance(view, HostView) or type(view).__name__ == "HostMMIO"


_FMT_OF = {dtypes.uint8: "B", dtypes.uint16: "H", dtypes.uint32: "I", dtypes.uint64: "Q", dtypes.int8: "b",
           dtypes.int16: "h", dtypes.int32: "i", dtypes.int64: "q"}  # fmt: skip


class ViewMemory:
    """``load(i)`` / ``store(i, v)`` of ``dtype`` elements through an MMIO-style view (what the PYTHON interpreter
    calls for each access of a buffer parameter)."""

    __slots__ = ("size", "view")

    def __init__(self, view: Any) -> None:
        self.view = view
        self.size = view.nbytes // FORMATS[view.fmt]

    def load(self, i: int) -> int:
        if 0 <= i < self.size:
            return int(self.view[i])
        raise IndexError(f"submitter load at element {i} outside {self.view!r}")

    def store(self, i: int, v: int) -> None:
        if 0 <= i < self.size:
            self.view[i] = v
            return
        raise IndexError(f"submitter store at element {i} outside {self.view!r}")


def memory_for(view: Any, dtype: DType) -> ViewMemory:
    """``view`` seen as ``dtype`` elements, for the PYTHON interpreter (integer dtypes: submitters move words)."""
    fmt = _FMT_OF.get(dtype)
    if fmt is None:
        raise TypeError(f"a submitter buffer must have an integer dtype, got {dtype}")
    return ViewMemory(view if view.fmt == fmt else view.view(0, view.nbytes, fmt))
