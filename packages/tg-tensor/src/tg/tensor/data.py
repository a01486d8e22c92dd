"""Host data <-> tg: Python scalars, nested lists, numpy arrays and bytes, and the dtype mapping to numpy."""

from __future__ import annotations

from typing import Any

import numpy as np

from tg.ir import DType, dtypes, to_dtype

_NP_BY_FMT = {"?": np.bool_, "b": np.int8, "B": np.uint8, "h": np.int16, "H": np.uint16, "i": np.int32,
              "I": np.uint32, "q": np.int64, "Q": np.uint64, "e": np.float16, "f": np.float32,
              "d": np.float64}  # fmt: skip


def to_numpy_dtype(dt: DType) -> np.dtype:
    """The numpy dtype with the same memory layout as `dt` (ValueError for dtypes numpy lacks)."""
    fmt = dt.fmt
    if fmt is None or fmt not in _NP_BY_FMT:
        raise ValueError(f"{dt} has no numpy equivalent; cast to float32 first")
    return np.dtype(_NP_BY_FMT[fmt])


def from_numpy_dtype(npdt: np.dtype) -> DType:
    """The tg dtype of a numpy dtype (TypeError for object/complex/string arrays)."""
    for fmt, t in _NP_BY_FMT.items():
        if np.dtype(t) == npdt:
            return to_dtype(_FMT_NAMES[fmt])
    raise TypeError(f"unsupported numpy dtype {npdt}")


_FMT_NAMES = {"?": "bool", "b": "int8", "B": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32",
              "q": "int64", "Q": "uint64", "e": "float16", "f": "float32", "d": "float64"}  # fmt: skip


def _leaves(x: Any) -> list[Any]:
    out: list[Any] = []
    stack = [x]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        else:
            out.append(v)
    return out


def list_to_numpy(data: list | tuple, dtype: DType | None) -> tuple[np.ndarray, DType]:
    """A C-contiguous numpy array holding (nested) Python list `data`, and its tg dtype.

    Without `dtype` the Python rules apply: all bools -> bool, ints -> default_int, any float -> default_float.
    """
    leaves = _leaves(data)
    for v in leaves:
        if not isinstance(v, (bool, int, float, np.generic)):
            raise TypeError(f"Tensor data must be numbers, got {type(v).__name__}: {v!r}")
    if dtype is None:
        if leaves and all(isinstance(v, (bool, np.bool_)) for v in leaves):
            dtype = dtypes.bool
        elif all(isinstance(v, (bool, int, np.integer, np.bool_)) for v in leaves) and leaves:
            dtype = dtypes.default_int
        else:
            dtype = dtypes.default_float
    try:
        arr = np.array(data, dtype=to_numpy_dtype(dtype))
    except ValueError as e:
        raise ValueError(f"Tensor data is not rectangular (ragged nested lists): {e}") from e
    return np.ascontiguousarray(arr), dtype
