"""The DISK device: buffers that are memory-mapped regions of a file (``DISK:/path/to/file``).

Used to read and write tensors in files (weights) without extra copies: a buffer of ``n`` bytes maps the file's
first ``n`` bytes (the file is created, or grown, as needed); views map regions further in. DISK runs no
kernels: move data to a compute device with a copy.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

from tg.ir.target import Target
from tg.runtime.device import Allocator, BufferSpec, Compiled


class DiskAllocator(Allocator["DISKDevice"]):
    """Maps the device's file; buffers are byte memoryviews into the mapping."""

    def _alloc(self, size: int, options: BufferSpec) -> memoryview:
        path = self.dev.path
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            writable = True
        except PermissionError:
            # a read-only file (e.g. shipped weights) can still be read through a read-only mapping
            try:
                fd, writable = os.open(path, os.O_RDONLY), False
            except OSError as e:
                raise RuntimeError(f"DISK device cannot open {path!r}: {e.strerror}") from e
        except OSError as e:
            raise RuntimeError(f"DISK device cannot open {path!r}: {e.strerror}") from e
        try:
            file_size = os.fstat(fd).st_size
            if file_size < size and not Path(path).is_block_device():
                if not writable:
                    raise RuntimeError(f"DISK file {path!r} is read-only and holds {file_size} bytes, {size} needed")
                os.ftruncate(fd, size)
            mem = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
        except OSError as e:
            raise RuntimeError(f"DISK device cannot map {size} bytes of {path!r}: {e.strerror}") from e
        finally:
            os.close(fd)  # the mapping keeps the file alive
        return memoryview(mem)

    def _offset(self, buf: memoryview, size: int, offset: int) -> memoryview:
        return buf[offset : offset + size]

    def _copyin(self, dest: memoryview, src: memoryview) -> None:
        if dest.readonly:
            raise RuntimeError(f"DISK file {self.dev.path!r} is read-only: cannot write to it")
        dest[:] = src

    def _copyout(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def _as_buffer(self, src: memoryview) -> memoryview:
        return src

    def _free(self, opaque: Any, options: BufferSpec) -> None:
        """The mapping is unmapped when the last memoryview onto it is released."""


class DISKDevice(Compiled):
    """A file as a device. The path is checked when the device is opened; the file is created on first use."""

    def __init__(self, device: str, target: Target | None = None) -> None:
        _, _, path = device.partition(":")
        if not path:
            raise ValueError(f"DISK device needs a file path, e.g. DISK:/tmp/weights.bin; got {device!r}")
        self.path = os.path.expanduser(path)
        file = Path(self.path)
        if file.is_dir():
            raise ValueError(f"DISK device path {self.path!r} is a directory, not a file")
        if not file.parent.is_dir():
            raise ValueError(f"DISK device path {self.path!r}: directory {str(file.parent)!r} does not exist")
        super().__init__(device, DiskAllocator(self), None, None, None, target)
