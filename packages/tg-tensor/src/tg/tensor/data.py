"""Host data <-> tg: Python scalars, nested lists, numpy arrays and bytes.

numpy is imported only when numpy data is passed in or asked for (`Tensor.numpy()`), so `import tg.tensor`
and list-based work stay free of its import cost.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

from tg.ir import ConstType, DType, dtypes, to_dtype
from tg.ir.floats import from_storage_scalar, storage_fmt, to_storage_scalar
from tg.tensor.errors import ArgumentError

_NAME_BY_FMT = {"?": "bool", "b": "int8", "B": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32",
                "q": "int64", "Q": "uint64", "e": "float16", "f": "float32", "d": "float64"}  # fmt: skip


def is_numpy(x: Any) -> bool:
    """True for numpy arrays and numpy scalars (checked without importing numpy)."""
    return type(x).__module__ == "numpy"


def is_int(x: Any) -> bool:
    """True for Python and numpy integers (not bools)."""
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or (is_numpy(x) and type(x).__name__.startswith(("int", "uint")))


def struct_format(dt: DType) -> str:
    """The struct/numpy format character of `dt` (ValueError for dtypes without one, e.g. bfloat16)."""
    if dt.fmt is None or dt.fmt not in _NAME_BY_FMT:
        raise ArgumentError(f"{dt.name} has no numpy dtype; use .float().numpy() (or .tolist(), which converts)")
    return dt.fmt


def to_numpy_dtype(dt: DType) -> Any:
    """The numpy dtype with the same memory layout as `dt`."""
    import numpy as np

    return np.dtype(struct_format(dt))


def from_numpy_dtype(npdt: Any) -> DType:
    """The tg dtype of a numpy dtype (TypeError for object/complex/string arrays)."""
    if npdt.char in _NAME_BY_FMT and npdt.itemsize == to_dtype(_NAME_BY_FMT[npdt.char]).itemsize:
        return to_dtype(_NAME_BY_FMT[npdt.char])
    for fmt, name in _NAME_BY_FMT.items():  # platform aliases such as 'l' for int64
        if npdt.kind in "biuf" and npdt.itemsize == to_dtype(name).itemsize and npdt.kind == _kind(fmt):
            return to_dtype(name)
    raise TypeError(f"unsupported numpy dtype {npdt}")


def _kind(fmt: str) -> str:
    return "b" if fmt == "?" else "f" if fmt in "efd" else "u" if fmt.isupper() else "i"


def _shape_and_leaves(data: Sequence[Any]) -> tuple[tuple[int, ...], list[Any]]:
    """The shape of a rectangular nested list and its leaves in row-major order."""
    shape: list[int] = []
    probe: Any = data
    while isinstance(probe, (list, tuple)):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    leaves: list[Any] = []
    level: list[Any] = [data]
    for depth, size in enumerate(shape):
        nxt: list[Any] = []
        for item in level:
            if not isinstance(item, (list, tuple)) or len(item) != size:
                raise ArgumentError(f"Tensor data is not rectangular (ragged nested lists) at depth {depth}")
            nxt.extend(item)
        level = nxt
    for v in level:
        if isinstance(v, (list, tuple)):
            raise ArgumentError("Tensor data is not rectangular (ragged nested lists)")
        leaves.append(v)
    return tuple(shape), leaves


def _stored_as_code(dt: DType) -> bool:
    """bfloat16 and fp8 have no struct/numpy format: their host form is the integer code of their bits."""
    return dt is dtypes.bfloat16 or dt in dtypes.fp8s


def pack(values: Sequence[Any], dt: DType) -> bytes:
    """`values` (Python numbers) as the bytes of a `dt` array (bfloat16/fp8 rounded to nearest even)."""
    if _stored_as_code(dt):
        codes = [to_storage_scalar(float(v), dt) for v in values]
        return struct.pack(f"<{len(codes)}{storage_fmt(dt)}", *codes)
    fmt = struct_format(dt)
    if dt is dtypes.bool:
        values = [bool(v) for v in values]
    elif dtypes.is_int(dt):
        values = [int(v) for v in values]
        check_int_range(values, dt)
    else:
        values = [float(v) for v in values]
        if fmt == "e":  # like numpy, out-of-range halves become infinities instead of failing
            values = [v if abs(v) < 65520.0 or v != v else float("inf") if v > 0 else float("-inf") for v in values]
    return struct.pack(f"<{len(values)}{fmt}", *values)


def check_int_range(values: Sequence[int], dt: DType) -> None:
    """OverflowError naming the first value that an integer `dt` cannot hold (instead of a silent wrap)."""
    lo, hi = int(dt.min), int(dt.max)
    for v in values:
        if not lo <= v <= hi:
            raise OverflowError(f"{v} is out of range for {dt.name} ({lo} to {hi}); pass a wider dtype, e.g. int64")


def unpack(data: bytes | bytearray | memoryview, dt: DType, shape: tuple[int, ...]) -> Any:
    """The bytes of a `dt` array as nested Python lists of `shape` (a scalar for shape ())."""
    if _stored_as_code(dt):
        codes = struct.unpack(f"<{len(data) // dt.itemsize}{storage_fmt(dt)}", data)
        flat: list[Any] = [from_storage_scalar(c, dt) for c in codes]
    else:
        flat = list(struct.unpack(f"<{len(data) // dt.itemsize}{struct_format(dt)}", data))
    if not shape:
        return flat[0]
    for d in range(len(shape) - 1, 0, -1):
        size = shape[d]
        flat = [flat[i * size : (i + 1) * size] for i in range(math.prod(shape[:d]))]
    return flat


def list_to_bytes(data: list | tuple, dtype: DType | None) -> tuple[bytes, tuple[int, ...], DType]:
    """(bytes, shape, dtype) of (nested) Python list `data`.

    Without `dtype` the Python rules apply: all bools -> bool, all ints -> default_int, any float -> default_float.
    """
    shape, leaves = _shape_and_leaves(data)
    for v in leaves:
        if not isinstance(v, (bool, int, float)) and not is_numpy(v):
            raise TypeError(f"Tensor data must be numbers, got {type(v).__name__}: {v!r}")
    if dtype is None:
        if leaves and all(isinstance(v, bool) or (is_numpy(v) and type(v).__name__.startswith("bool")) for v in leaves):
            dtype = dtypes.bool
        elif leaves and all(is_int(v) or isinstance(v, bool) for v in leaves):
            dtype = dtypes.default_int
        else:
            dtype = dtypes.default_float
    return pack(leaves, dtype), shape, dtype


def scalar_value(value: bool | int | float, dt: DType) -> ConstType:
    """A Python value of the right kind for a constant of `dt`."""
    if dt is dtypes.bool:
        return bool(value)
    if dtypes.is_int(dt):
        if isinstance(value, float) and not math.isfinite(value):
            raise ArgumentError(f"cannot make an {dt.name} constant from {value}")
        return int(value)
    return float(value)


def checked_scalar_value(value: bool | int | float, dt: DType) -> ConstType:
    """`scalar_value` for values the user stores directly: an int that `dt` cannot hold is an OverflowError."""
    v = scalar_value(value, dt)
    if dtypes.is_int(dt) and isinstance(v, int):
        check_int_range((v,), dt)
    return v
