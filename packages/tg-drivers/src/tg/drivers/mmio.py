"""MMIO views: typed, bounded, little-endian windows onto device or host memory.

An :class:`MMIOView` has a size in bytes (``nbytes``) and an element format (``fmt``: ``'B' 'H' 'I' 'Q'`` unsigned,
``'b' 'h' 'i' 'q'`` signed). Indexing uses *element* indices, ``view``/``read``/``write`` use *byte* offsets::

    v = BufferMMIO(bytearray(16), fmt="I")
    v[0] = 0x11223344          # one 32-bit store
    v.read(0, 4)               # b'\\x44\\x33\\x22\\x11'
    regs = v.view(8, 8)        # shares the backing store
    regs.write32(0, 1)

Rules that hold for every backend: indices and slices are never clamped (out of range raises ``IndexError``), slice
reads return copies (``bytes`` for ``'B'``, ``list[int]`` otherwise), slice steps other than 1 raise ``ValueError``.
Backends only implement byte-range reads and writes (and optionally width-exact element accesses); all checking lives
here, so a backend is never called with an out-of-range request.
"""

from __future__ import annotations

import array
import copy
import ctypes
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from tg.drivers.errors import MockAccessError, ShortReadError

__all__ = ["FORMATS", "BufferMMIO", "HostMMIO", "MMIOView", "ModelMMIO"]

#: element formats and their sizes in bytes
FORMATS: dict[str, int] = {"B": 1, "H": 2, "I": 4, "Q": 8, "b": 1, "h": 2, "i": 4, "q": 8}


def _check_fmt(fmt: str) -> int:
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ValueError(f"unsupported MMIO format {fmt!r}; expected one of {sorted(FORMATS)}")
    return FORMATS[fmt]


class MMIOView:
    """Base class of every MMIO view; subclasses implement ``_read_bytes``/``_write_bytes`` on the backing store.

    Offsets given to the ``_read_*``/``_write_*`` hooks are byte offsets relative to the start of this view and are
    already validated. ``on_violation`` (optional) is called with a message before any bounds or alignment error is
    raised; mocks use it to record illegal accesses.
    """

    #: True when the backend can only do 4-byte aligned accesses whose length is a multiple of 4 (USB bridge)
    dword_only: bool = False

    nbytes: int
    fmt: str
    itemsize: int

    def __init__(self, nbytes: int, fmt: str = "B", on_violation: Callable[[str], None] | None = None) -> None:
        if not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"MMIO view size must be a non-negative int, got {nbytes!r}")
        self.itemsize = _check_fmt(fmt)
        self.nbytes = nbytes
        self.fmt = fmt
        self.on_violation = on_violation

    # ---- backend hooks -------------------------------------------------------------------------------------------
    def _read_bytes(self, off: int, n: int) -> bytes:
        raise NotImplementedError

    def _write_bytes(self, off: int, data: bytes) -> None:
        raise NotImplementedError

    def _read_item(self, off: int, size: int) -> int:
        """One element access of ``size`` bytes (backends with width guarantees override this)."""
        return int.from_bytes(self._read_exact(off, size), "little")

    def _read_exact(self, off: int, n: int) -> bytes:
        """``_read_bytes`` that raises ``ShortReadError`` unless exactly ``n`` bytes came back (never pads or cuts)."""
        data = bytes(self._read_bytes(off, n)) if n else b""
        if len(data) != n:
            raise ShortReadError(
                f"{type(self).__name__}: read of {n:#x} bytes at offset {off:#x} returned {len(data):#x} bytes"
            )
        return data

    def _write_item(self, off: int, size: int, value: int) -> None:
        self._write_bytes(off, value.to_bytes(size, "little"))

    def _check_alignment(self, off: int, n: int) -> None:
        """Backend-specific alignment rule for an access of ``n`` bytes at byte offset ``off``."""
        if self.dword_only and (off % 4 or n % 4):
            self._fail(ValueError(f"{type(self).__name__} needs 4-byte aligned offset and length, got off={off} n={n}"))

    def _rebase(self, off: int) -> None:
        """Shift the backing-store origin of a freshly copied view by ``off`` bytes (used by ``view``)."""
        raise NotImplementedError

    # ---- validation ------------------------------------------------------------------------------------------------
    def _fail(self, exc: Exception) -> None:
        if self.on_violation is not None:
            self.on_violation(f"{type(self).__name__}: {exc}")
        raise exc

    def _check_range(self, off: int, n: int) -> None:
        if not isinstance(off, int) or not isinstance(n, int):
            raise TypeError(f"offset and length must be ints, got {off!r} and {n!r}")
        if off < 0 or n < 0 or off + n > self.nbytes:
            self._fail(IndexError(f"access of {n} bytes at offset {off:#x} is outside the {self.nbytes:#x}-byte view"))
        self._check_alignment(off, n)

    def _check_value(self, value: Any, size: int, signed: bool) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"MMIO element value must be an int, got {type(value).__name__}")
        lo, hi = (-(1 << (8 * size - 1)), 1 << (8 * size - 1)) if signed else (0, 1 << (8 * size))
        if not lo <= value < hi:
            kind = "signed" if signed else "unsigned"
            raise ValueError(f"value {value:#x} does not fit in {size} {kind} byte(s) (range [{lo:#x}, {hi:#x}))")
        return value & ((1 << (8 * size)) - 1)

    def __len__(self) -> int:
        return self.nbytes // self.itemsize

    def _slice_bounds(self, s: slice) -> tuple[int, int]:
        if s.step not in (None, 1):
            raise ValueError(f"MMIO slices must have step 1, got {s.step}")
        n = len(self)
        start = 0 if s.start is None else s.start
        stop = n if s.stop is None else s.stop
        if not isinstance(start, int) or not isinstance(stop, int):
            raise TypeError(f"slice bounds must be ints, got {start!r}:{stop!r}")
        if start < 0 or stop < 0:
            self._fail(IndexError(f"negative slice bounds are not supported ({start}:{stop})"))
        if stop > n or start > stop:
            self._fail(IndexError(f"slice {start}:{stop} is out of range for {n} elements"))
        return start, stop

    def _element_offset(self, index: int) -> int:
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"MMIO indices must be ints or slices, got {type(index).__name__}")
        if index < 0 or index >= len(self):
            self._fail(IndexError(f"index {index} is out of range for {len(self)} elements"))
        return index * self.itemsize

    # ---- element and slice access ----------------------------------------------------------------------------------
    def __getitem__(self, index: int | slice) -> Any:
        signed = self.fmt.islower()
        if isinstance(index, slice):
            start, stop = self._slice_bounds(index)
            off, n = start * self.itemsize, (stop - start) * self.itemsize
            self._check_range(off, n)
            data = self._read_exact(off, n)
            if self.fmt == "B":
                return data
            size = self.itemsize
            return [int.from_bytes(data[i : i + size], "little", signed=signed) for i in range(0, n, size)]
        off = self._element_offset(index)
        self._check_range(off, self.itemsize)
        value = self._read_item(off, self.itemsize)
        if signed and value >= 1 << (8 * self.itemsize - 1):
            value -= 1 << (8 * self.itemsize)
        return value

    def __setitem__(self, index: int | slice, data: Any) -> None:
        if isinstance(index, slice):
            start, stop = self._slice_bounds(index)
            raw = self._pack_slice(data, stop - start)
            self._check_range(start * self.itemsize, len(raw))
            if raw:
                self._write_bytes(start * self.itemsize, raw)
            return
        off = self._element_offset(index)
        value = self._check_value(data, self.itemsize, self.fmt.islower())
        self._check_range(off, self.itemsize)
        self._write_item(off, self.itemsize, value)

    def _pack_slice(self, data: Any, count: int) -> bytes:
        size, signed = self.itemsize, self.fmt.islower()
        if isinstance(data, array.array):
            if data.itemsize != size:
                raise ValueError(f"array.array itemsize {data.itemsize} does not match view itemsize {size}")
            if len(data) != count:
                raise ValueError(f"slice assignment of {len(data)} elements to a slice of {count}")
            return data.tobytes()
        if isinstance(data, (bytes, bytearray, memoryview)):
            if self.fmt != "B":
                raise TypeError(
                    f"raw bytes can only be assigned to a 'B' view (this view is {self.fmt!r}); "
                    "use view(fmt='B') or write()"
                )
            raw = bytes(memoryview(data).cast("B"))
            if len(raw) != count:
                raise ValueError(f"slice assignment of {len(raw)} bytes to a slice of {count}")
            return raw
        if isinstance(data, (str, int)) or not isinstance(data, Iterable):
            raise TypeError(f"slice assignment needs a sequence of ints, got {type(data).__name__}")
        values = list(data)
        if len(values) != count:
            raise ValueError(f"slice assignment of {len(values)} elements to a slice of {count}")
        return b"".join(self._check_value(v, size, signed).to_bytes(size, "little") for v in values)

    # ---- sub-views -------------------------------------------------------------------------------------------------
    def view(self, offset: int = 0, size: int | None = None, fmt: str | None = None) -> MMIOView:
        """View bytes ``[offset, offset+size)`` of this one, sharing its storage (``size=None``: to the end)."""
        if not isinstance(offset, int) or (size is not None and not isinstance(size, int)):
            raise TypeError(f"view offset and size must be ints, got {offset!r} and {size!r}")
        if size is None:
            size = self.nbytes - offset
        if offset < 0 or size < 0 or offset + size > self.nbytes:
            self._fail(ValueError(f"view [{offset:#x}, {offset + size:#x}) is outside the {self.nbytes:#x}-byte view"))
        new_fmt = self.fmt if fmt is None else fmt
        itemsize = _check_fmt(new_fmt)
        sub = copy.copy(self)
        sub.nbytes, sub.fmt, sub.itemsize = size, new_fmt, itemsize
        sub._rebase(offset)
        return sub

    # ---- convenience accessors (byte offsets) ----------------------------------------------------------------------
    def read(self, off: int, n: int) -> bytes:
        """Copy ``n`` bytes starting at byte offset ``off``."""
        self._check_range(off, n)
        return self._read_exact(off, n)

    def write(self, off: int, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` to byte offset ``off``."""
        raw = bytes(memoryview(data).cast("B"))
        self._check_range(off, len(raw))
        if raw:
            self._write_bytes(off, raw)

    def _check_aligned(self, off: int, align: int) -> None:
        if not isinstance(off, int):
            raise TypeError(f"offset must be an int, got {off!r}")
        if off % align:
            self._fail(ValueError(f"offset {off:#x} is not {align}-byte aligned"))

    def read32(self, off: int) -> int:
        """One 32-bit little-endian read at 4-aligned byte offset ``off``."""
        self._check_aligned(off, 4)
        self._check_range(off, 4)
        return self._read_item(off, 4)

    def write32(self, off: int, value: int) -> None:
        """One 32-bit little-endian write at 4-aligned byte offset ``off``."""
        self._check_aligned(off, 4)
        value = self._check_value(value, 4, False)
        self._check_range(off, 4)
        self._write_item(off, 4, value)

    def read64(self, off: int) -> int:
        """A 64-bit read at 4-aligned ``off``: one access where the backend can, else two dwords, low first."""
        self._check_aligned(off, 4)
        self._check_range(off, 8)
        return self._read64(off)

    def write64(self, off: int, value: int) -> None:
        """A 64-bit write at 4-aligned ``off``: one access where the backend can, else two dwords, low first."""
        self._check_aligned(off, 4)
        value = self._check_value(value, 8, False)
        self._check_range(off, 8)
        self._write64(off, value)

    def _read64(self, off: int) -> int:
        lo = self._read_item(off, 4)
        return lo | (self._read_item(off + 4, 4) << 32)

    def _write64(self, off: int, value: int) -> None:
        self._write_item(off, 4, value & 0xFFFFFFFF)
        self._write_item(off + 4, 4, value >> 32)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(nbytes={self.nbytes:#x}, fmt={self.fmt!r})"


_CTYPES_BY_SIZE: dict[int, type[ctypes._SimpleCData[int]]] = {
    1: ctypes.c_uint8,
    2: ctypes.c_uint16,
    4: ctypes.c_uint32,
    8: ctypes.c_uint64,
}


class HostMMIO(MMIOView):
    """A view of host virtual memory at ``addr`` (an mmapped BAR or anonymous memory).

    Width guarantee: an element access, ``read32``/``write32`` and ``read64``/``write64`` at an 8-aligned offset are
    single loads/stores of that width (through a ctypes scalar at the address). ``read``/``write`` with offset and
    length both multiples of 4 copy one aligned dword at a time; other ``read``/``write`` and slice copies use memmove.
    The caller keeps the memory alive for the life of the view. If ``owner`` has a true ``closed`` attribute (a
    device that was closed, a freed allocation) every access raises ``RuntimeError`` instead of touching unmapped
    memory.
    """

    #: scalar types used for width-exact accesses (tests may substitute recording types)
    scalar_types: ClassVar[dict[int, type[ctypes._SimpleCData[int]]]] = _CTYPES_BY_SIZE

    def __init__(
        self,
        addr: int,
        nbytes: int,
        fmt: str = "B",
        on_violation: Callable[[str], None] | None = None,
        owner: object = None,
    ) -> None:
        super().__init__(nbytes, fmt, on_violation)
        if not isinstance(addr, int) or addr < 0:
            raise ValueError(f"HostMMIO address must be a non-negative int, got {addr!r}")
        if addr == 0 and nbytes > 0:  # any access would crash the process instead of raising
            raise ValueError(f"HostMMIO address 0 (NULL) cannot back a {nbytes}-byte view")
        if addr + nbytes > 1 << 64:
            raise ValueError(f"HostMMIO window [{addr:#x}, {addr + nbytes:#x}) exceeds the 64-bit address space")
        self.addr = addr
        #: an object kept alive as long as the view (e.g. the mmap or ctypes buffer that owns the memory)
        self.owner = owner

    def _rebase(self, off: int) -> None:
        self.addr += off

    def _check_range(self, off: int, n: int) -> None:
        if getattr(self.owner, "closed", False):
            raise RuntimeError(f"this HostMMIO view at {self.addr:#x} is no longer mapped (its owner was closed/freed)")
        super()._check_range(off, n)

    def _read_item(self, off: int, size: int) -> int:
        return int(self.scalar_types[size].from_address(self.addr + off).value)

    def _write_item(self, off: int, size: int, value: int) -> None:
        self.scalar_types[size].from_address(self.addr + off).value = value

    def _read64(self, off: int) -> int:
        return self._read_item(off, 8) if (self.addr + off) % 8 == 0 else super()._read64(off)

    def _write64(self, off: int, value: int) -> None:
        if (self.addr + off) % 8 == 0:
            self._write_item(off, 8, value)
        else:
            super()._write64(off, value)

    def _read_bytes(self, off: int, n: int) -> bytes:
        return ctypes.string_at(self.addr + off, n)

    def _write_bytes(self, off: int, data: bytes) -> None:
        ctypes.memmove(self.addr + off, data, len(data))

    def read(self, off: int, n: int) -> bytes:
        """Copy ``n`` bytes at ``off``; dword-by-dword (one aligned 32-bit load each) when both are multiples of 4."""
        if not (isinstance(off, int) and isinstance(n, int) and off % 4 == 0 and n % 4 == 0 and (self.addr % 4) == 0):
            return super().read(off, n)
        self._check_range(off, n)
        return b"".join(self._read_item(o, 4).to_bytes(4, "little") for o in range(off, off + n, 4))

    def write(self, off: int, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` to ``off``; dword-by-dword (one aligned 32-bit store each) when offset and length allow."""
        raw = bytes(memoryview(data).cast("B"))
        if not (isinstance(off, int) and off % 4 == 0 and len(raw) % 4 == 0 and (self.addr % 4) == 0):
            super().write(off, raw)
            return
        self._check_range(off, len(raw))
        for i in range(0, len(raw), 4):
            self._write_item(off + i, 4, int.from_bytes(raw[i : i + 4], "little"))

    def __repr__(self) -> str:
        return f"HostMMIO(addr={self.addr:#x}, nbytes={self.nbytes:#x}, fmt={self.fmt!r})"


class BufferMMIO(MMIOView):
    """A view over a Python buffer (``bytearray``, writable ``memoryview``, ``mmap``); used by mocks and tests."""

    def __init__(self, buf: Any, fmt: str = "B", on_violation: Callable[[str], None] | None = None) -> None:
        try:
            mv = memoryview(buf).cast("B")
        except TypeError as e:
            kind = type(buf).__name__
            raise TypeError(f"BufferMMIO needs an object supporting the buffer protocol, got {kind}") from e
        super().__init__(mv.nbytes, fmt, on_violation)
        self._mv = mv

    def _rebase(self, off: int) -> None:
        self._mv = self._mv[off : off + self.nbytes]

    def _read_bytes(self, off: int, n: int) -> bytes:
        return bytes(self._mv[off : off + n])

    def _write_bytes(self, off: int, data: bytes) -> None:
        if self._mv.readonly:
            raise TypeError("this BufferMMIO is backed by a read-only buffer")
        self._mv[off : off + len(data)] = data

    def release(self) -> None:
        """Release the underlying memoryview (needed before resizing or closing the backing buffer)."""
        self._mv.release()


class ModelMMIO(MMIOView):
    """A view that forwards every access, with its exact ``(offset, size)``, to a register model.

    ``model`` follows :class:`tg.drivers.mock.regmodel.RegisterModel`: ``read(offset, size) -> bytes`` and
    ``write(offset, data)``; ``base`` is the model offset of byte 0 of this view. A model raising
    :class:`~tg.drivers.errors.MockAccessError` is reported to ``on_violation`` and re-raised. A model that also has
    int-valued ``read32(offset)``/``write32(offset, value)`` (the same accesses without the bytes round trip) gets
    the view's dword accesses through them.
    """

    def __init__(
        self,
        model: Any,
        base: int = 0,
        nbytes: int | None = None,
        fmt: str = "B",
        on_violation: Callable[[str], None] | None = None,
    ) -> None:
        size = int(model.size) - base if nbytes is None else nbytes
        super().__init__(size, fmt, on_violation)
        if base < 0 or base + size > int(model.size):
            raise ValueError(f"ModelMMIO window [{base:#x}, {base + size:#x}) exceeds the model size {model.size:#x}")
        self.model, self.base = model, base
        self._model_read32: Callable[[int], int] | None = getattr(model, "read32", None)
        self._model_write32: Callable[[int, int], None] | None = getattr(model, "write32", None)

    def _read_item(self, off: int, size: int) -> int:
        if size != 4 or self._model_read32 is None:
            return super()._read_item(off, size)
        try:
            return int(self._model_read32(self.base + off)) & 0xFFFFFFFF
        except MockAccessError as e:
            self._report(e)
            raise

    def _write_item(self, off: int, size: int, value: int) -> None:
        if size != 4 or self._model_write32 is None:
            super()._write_item(off, size, value)
            return
        try:
            self._model_write32(self.base + off, value)
        except MockAccessError as e:
            self._report(e)
            raise

    def _rebase(self, off: int) -> None:
        self.base += off

    def _report(self, e: Exception) -> None:
        if self.on_violation is not None:
            self.on_violation(f"register model: {e}")

    def _read_bytes(self, off: int, n: int) -> bytes:
        try:
            data = bytes(self.model.read(self.base + off, n))
        except MockAccessError as e:
            self._report(e)
            raise
        if len(data) != n:
            raise RuntimeError(f"register model returned {len(data)} bytes for a {n}-byte read at {self.base + off:#x}")
        return data

    def _write_bytes(self, off: int, data: bytes) -> None:
        try:
            self.model.write(self.base + off, data)
        except MockAccessError as e:
            self._report(e)
            raise
