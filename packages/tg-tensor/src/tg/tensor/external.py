"""Tensors over data from outside tg: `from_blob` (host memory at a raw address, no copy) and `from_url` (a
download). Both are static methods of Tensor (attached in methods.py)."""

from __future__ import annotations

import ctypes
import gzip
import hashlib
import math
import os
import pathlib
import tempfile
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

from tg.ir import DType, UOp, dtypes
from tg.tensor.args import canonical_device, dtype_arg
from tg.tensor.shapes import int_shape_arg

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def from_blob(
    cls: type[Tensor],
    ptr: int,
    shape: Any,
    dtype: DType | str | None = None,
    device: str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """A tensor over `prod(shape)` elements of `dtype` (default float) at host address `ptr`, without a copy and
    without taking ownership (tinygrad's `from_blob`; torch's `frombuffer` over a pointer).

    Reads see the memory as it is when a kernel runs; in-place writes to the tensor (`assign`, `t[...] = v`, the
    `_` methods) write into it. The caller keeps the memory alive and unmoved for as long as the tensor, or
    anything lazily computed from it, exists: freeing it first is a use-after-free. Only host-memory devices (CPU)
    can use a raw pointer (the default device is CPU, whatever `Device.DEFAULT` is); for another device, `.to()` the
    result. `ptr` must be aligned to the dtype's size.
    Example: `Tensor.from_blob(arr.ctypes.data, arr.shape, dtype=dtypes.float32)`.
    """
    from tg.runtime.device import Buffer, BufferSpec, Device
    from tg.runtime.engine import bind_buffer

    if not isinstance(ptr, int) or isinstance(ptr, bool):
        raise TypeError(f"from_blob: ptr must be an int address, got {type(ptr).__name__}")
    shp = int_shape_arg((shape,))
    if any(s < 0 for s in shp):
        raise ValueError(f"from_blob: negative dimension in shape {shp}")
    dt = dtype_arg(dtype) or dtypes.default_float
    dev = canonical_device(device or "CPU")  # host memory: CPU unless another host-memory device is named
    allocator = Device[dev].allocator
    if not hasattr(allocator, "from_host_memory"):  # host-memory devices: CPU (also behind HCQ+CPU)
        raise ValueError(
            f"from_blob: device {dev} cannot use host memory at a raw pointer (only CPU can); "
            f"make the tensor on CPU and call .to({dev!r})"
        )
    n = math.prod(shp)
    if n and ptr <= 0:
        raise ValueError(f"from_blob: ptr {ptr:#x} is not a valid address")
    if ptr % dt.itemsize:
        raise ValueError(f"from_blob: ptr {ptr:#x} is not aligned to the {dt.itemsize} bytes of {dt}")
    nbytes = n * dt.itemsize
    memory = (ctypes.c_char * max(nbytes, 1)).from_address(ptr) if n else (ctypes.c_char * 1)()
    # nolru: when the tensor goes, the allocator must not keep this memory to hand out again
    opaque = allocator.from_host_memory(memoryview(memory).cast("B"), ptr if n else 0)
    buf = Buffer(dev, n, dt, opaque=opaque, options=BufferSpec(nolru=True))
    uop = UOp.new_buffer(dev, n, dt)
    bind_buffer(uop, buf)
    return cls(uop.reshape(shp), requires_grad=requires_grad)


def _download(url: str, path: pathlib.Path, gunzip: bool, progress: bool) -> None:
    """Stream `url` into `path` (through a temporary file next to it, renamed when complete)."""
    from tqdm import tqdm

    try:
        response = urllib.request.urlopen(url, timeout=60)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"from_url: GET {url} failed: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise RuntimeError(f"from_url: cannot fetch {url}: {getattr(e, 'reason', e)}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    length = response.headers.get("Content-Length")
    bar = tqdm(total=int(length) if length else None, unit="B", unit_scale=True, desc=url, disable=not progress)
    with response, tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as out:
        try:
            source: Any = response
            if gunzip:
                counted: Any = _Counting(response, bar)
                source = gzip.GzipFile(fileobj=counted, mode="rb")
            while chunk := source.read(1 << 20):
                out.write(chunk)
                if not gunzip:
                    bar.update(len(chunk))
        except (OSError, EOFError) as e:
            os.unlink(out.name)
            raise RuntimeError(f"from_url: reading {url} failed: {e}") from None
        finally:
            bar.close()
    os.replace(out.name, path)


class _Counting:
    """A response wrapper that advances the progress bar by the compressed bytes read (gunzip)."""

    def __init__(self, raw: Any, bar: Any) -> None:
        self.raw, self.bar = raw, bar

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.bar.update(len(data))
        return bytes(data)


def from_url(
    cls: type[Tensor], url: str, gunzip: bool = False, device: str | None = None, progress: bool = True
) -> Tensor:
    """The bytes at `url` as a 1-d uint8 tensor (tinygrad's `from_url`): downloaded once into tg's cache
    (`$TG_CACHE_DIR/downloads`, keyed by the URL and `gunzip`) with a tqdm progress bar, then returned as a DISK
    tensor over that file (memory-mapped: nothing is read until used), or moved to `device` when given.
    `gunzip=True` stores the gzip-decompressed content. HTTP errors and unreachable hosts raise RuntimeError naming
    the URL and the status; nothing is cached then. Reinterpret with `.bitcast(...)`/`.reshape(...)` as needed."""
    from tg.ir.helpers import cache_dir

    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"from_url: needs a URL such as 'https://host/file', got {url!r}")
    key = hashlib.sha256(f"{url}|gunzip={bool(gunzip)}".encode()).hexdigest()
    path = cache_dir() / "downloads" / key
    if not path.is_file():
        _download(url, path, gunzip, progress)
    size = path.stat().st_size
    t = (
        cls.empty(size, dtype=dtypes.uint8, device=f"disk:{path}")
        if size
        else cls.empty(0, dtype=dtypes.uint8, device=device)
    )
    return t.to(device) if device is not None and size else t
