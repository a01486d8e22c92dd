"""Tensors over data from outside tg: `from_blob` (host memory at a raw address, no copy) and `from_url` (a
download). Both are static methods of Tensor (attached in methods.py)."""

from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING, Any

from tg.ir import DType, UOp, dtypes
from tg.tensor.args import dtype_arg
from tg.tensor.shapes import int_shape_arg

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def from_blob(
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
    can use a raw pointer; for another device, make the tensor on CPU and `.to(device)` it. `ptr` must be aligned to
    the dtype's size. Example: `Tensor.from_blob(arr.ctypes.data, arr.shape, dtype=dtypes.float32)`.
    """
    from tg.runtime.backends.cpu import CPUAllocator, HostMemory
    from tg.runtime.device import Buffer, BufferSpec, Device
    from tg.runtime.engine import bind_buffer
    from tg.tensor.tensor import Tensor, canonical_device

    if not isinstance(ptr, int) or isinstance(ptr, bool):
        raise TypeError(f"from_blob: ptr must be an int address, got {type(ptr).__name__}")
    shp = int_shape_arg((shape,))
    if any(s < 0 for s in shp):
        raise ValueError(f"from_blob: negative dimension in shape {shp}")
    dt = dtype_arg(dtype) or dtypes.default_float
    dev = canonical_device(device)
    if not isinstance(Device[dev].allocator, CPUAllocator):
        raise ValueError(
            f"from_blob: device {dev} cannot use host memory at a raw pointer (only CPU can); "
            f"make the tensor on CPU and call .to({dev!r})"
        )
    n = math.prod(shp)
    if n and ptr <= 0:
        raise ValueError(f"from_blob: ptr {ptr:#x} is not a valid address")
    if ptr % dt.itemsize:
        raise ValueError(f"from_blob: ptr {ptr:#x} is not aligned to {dt.name}'s {dt.itemsize} bytes")
    nbytes = n * dt.itemsize
    memory = (ctypes.c_char * max(nbytes, 1)).from_address(ptr) if n else (ctypes.c_char * 1)()
    # nolru: when the tensor goes, the allocator must not keep this memory to hand out again
    buf = Buffer(
        dev, n, dt, opaque=HostMemory(memoryview(memory).cast("B"), ptr if n else 0), options=BufferSpec(nolru=True)
    )
    uop = UOp.new_buffer(dev, n, dt)
    bind_buffer(uop, buf)
    return Tensor(uop.reshape(shp), requires_grad=requires_grad)
