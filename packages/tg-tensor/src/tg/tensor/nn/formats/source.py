"""Bounded reads from a weights file and lazy tensor views of its bytes on the DISK device.

Loaders parse headers with `FileSource.read` (every read is checked against the file size first, so a forged
length can never make us allocate or read past the end) and turn each tensor's byte range into a lazy view with
`FileSource.tensor`: a slice of a memory-mapped DISK buffer, copied to a compute device only when used.
"""

from __future__ import annotations

import os
import struct
from typing import Any

from tg.ir import DType, dtypes
from tg.runtime.device import Device
from tg.tensor.nn.formats.errors import fail
from tg.tensor.tensor import Tensor

MAX_RANK = 64
MAX_ELEMENTS = 2**63 - 1
_UINT_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def checked_numel(shape: tuple[int, ...], path: str, name: str, max_rank: int = MAX_RANK) -> int:
    """The element count of `shape` after checking rank, signs and overflow (FormatError naming `name`)."""
    if len(shape) > max_rank:
        raise fail(path, f"tensor {name!r} has rank {len(shape)}, more than {max_rank}")
    numel = 1
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise fail(path, f"tensor {name!r} has an invalid dimension {dim!r} in shape {list(shape)}")
        numel *= dim
        if numel > MAX_ELEMENTS:
            raise fail(path, f"tensor {name!r} shape {list(shape)} has more than 2**63 elements")
    return numel


def path_of(fn: Any) -> str:
    """The file path of `fn`: a str/PathLike, or a DISK tensor (`Tensor.empty(..., device='disk:/x')`)."""
    if isinstance(fn, Tensor):
        if not fn.device.startswith("DISK:"):
            raise TypeError(f"expected a path or a DISK tensor, got a tensor on {fn.device}")
        return fn.device.partition(":")[2]
    if not isinstance(fn, (str, os.PathLike)):
        raise TypeError(f"expected a file path, got {type(fn).__name__}")
    return os.path.abspath(os.fspath(fn))


class FileSource:
    """A weights file opened for checked reads; tensor data are handed out as lazy DISK views."""

    def __init__(self, fn: Any) -> None:
        self.path = path_of(fn)
        try:
            self.file = open(self.path, "rb")  # closed by close() or the context manager
        except OSError as e:
            raise FileNotFoundError(f"cannot open weights file {self.path!r}: {e.strerror}") from e
        self.size = os.fstat(self.file.fileno()).st_size
        self._buffers: dict[DType, Tensor] = {}

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the header reader (tensor views stay valid: they map the file separately)."""
        self.file.close()

    def read(self, offset: int, n: int, what: str) -> bytes:
        """`n` bytes at `offset`, or a FormatError naming `what` when the file is shorter."""
        if offset < 0 or n < 0 or offset + n > self.size:
            raise fail(self.path, f"truncated: {what} needs {n} bytes but the file has {self.size} bytes", offset)
        self.file.seek(offset)
        data = self.file.read(n)
        if len(data) != n:
            raise fail(self.path, f"short read of {what} ({len(data)} of {n} bytes)", offset)
        return data

    def unpack(self, fmt: str, offset: int, what: str) -> tuple[Any, ...]:
        """`struct.unpack(fmt, ...)` of the bytes at `offset` (little-endian formats carry their `<`)."""
        return struct.unpack(fmt, self.read(offset, struct.calcsize(fmt), what))

    def raw(self) -> Tensor:
        """The whole file as a lazy uint8 tensor on DISK."""
        return self._buffer(dtypes.uint8)

    def _buffer(self, dtype: DType) -> Tensor:
        if dtype not in self._buffers:
            self._buffers[dtype] = Tensor.empty(self.size // dtype.itemsize, dtype=dtype, device=f"disk:{self.path}")
        return self._buffers[dtype]

    def tensor(self, offset: int, shape: tuple[int, ...], dtype: DType, byteorder: str = "little") -> Tensor:
        """The tensor of `shape` and `dtype` stored row-major at byte `offset` (range already checked).

        Aligned little-endian data are a slice of a DISK buffer of that dtype (no copy until used); misaligned or
        big-endian data are assembled from their bytes on the default device (still lazy)."""
        numel = 1
        for dim in shape:
            numel *= dim
        if offset + numel * dtype.itemsize > self.size:
            raise fail(
                self.path, f"tensor data of {numel * dtype.itemsize} bytes runs past the end of the file", offset
            )
        if numel == 0:
            return Tensor.zeros(*shape, dtype=dtype)
        if offset % dtype.itemsize == 0 and (byteorder == "little" or dtype.itemsize == 1):
            start = offset // dtype.itemsize
            return self._buffer(dtype)[start : start + numel].reshape(shape)
        raw = self.raw()[offset : offset + numel * dtype.itemsize].to(Device.DEFAULT)
        return bytes_to_dtype(raw, dtype, byteorder).reshape(shape)


def bytes_to_dtype(raw: Tensor, dtype: DType, byteorder: str = "little") -> Tensor:
    """Reinterpret a flat uint8 tensor on a compute device as `dtype` values (any alignment, either byte order)."""
    size = dtype.itemsize
    if dtype is dtypes.bool:
        return raw != 0
    cols = raw.reshape(-1, size)
    uint = _UINT_OF_SIZE[size]
    word: Tensor | None = None
    for j in range(size):
        byte = cols[:, j if byteorder == "little" else size - 1 - j].cast(uint)
        part = byte << (8 * j) if j else byte
        word = part if word is None else word | part
    assert word is not None
    return word if dtype is uint else word.bitcast(dtype)
