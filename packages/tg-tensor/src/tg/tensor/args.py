"""Argument canonicalisation at the API boundary: tinygrad and PyTorch spellings of axes, keepdim and dtypes.

Every reduction, scan and softmax-like op takes `axis=` (tinygrad) or `dim=` (PyTorch), and `keepdim=` or
`keepdims=`; giving both spellings is a TypeError. dtypes may be a DType, a name, a numpy dtype or scalar type,
a torch dtype, or a Python type with numpy's meaning (`bool`, `int` -> int64, `float` -> float64).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

from tg.ir import DType, dtypes, to_dtype
from tg.tensor.errors import ArgumentError

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

AxisArg = int | Sequence[int] | None


class TensorBase:
    """The base class of Tensor, with no behaviour: modules below tensor.py recognise tensors among arguments with
    `isinstance(x, TensorBase)` and build them with `x._tensor_class()`, so that they never import tensor.py."""

    __slots__ = ()


def is_tensor(x: Any) -> TypeGuard[Tensor]:
    """Whether `x` is a Tensor (see `TensorBase`)."""
    return isinstance(x, TensorBase)


_PY_TYPES: dict[type, DType] = {bool: dtypes.bool, int: dtypes.int64, float: dtypes.float64}


def pick(op: str, name: str, value: Any, alias: str, alias_value: Any, default: Any = None) -> Any:
    """One of two spellings of an argument (`axis`/`dim`, `keepdim`/`keepdims`); TypeError when both are given."""
    if value is not None and alias_value is not None:
        raise TypeError(f"{op}() got both {name}= and {alias}= (they are the same argument)")
    if value is not None:
        return value
    return default if alias_value is None else alias_value


def dtype_arg(dtype: Any) -> DType | None:
    """`dtype` as a DType (None stays None): DType, name, numpy dtype/type, torch dtype or Python type."""
    if dtype is None or isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return to_dtype(dtype.removeprefix("torch."))
    if isinstance(dtype, type) and dtype in _PY_TYPES:
        return _PY_TYPES[dtype]
    module = type(dtype).__module__.split(".")[0]
    if module == "torch":
        return to_dtype(str(dtype).removeprefix("torch."))
    if module == "numpy" or (isinstance(dtype, type) and dtype.__module__ == "numpy"):
        import numpy as np

        from tg.tensor.data import from_numpy_dtype

        return from_numpy_dtype(np.dtype(dtype))
    raise TypeError(f"unsupported dtype {dtype!r}: pass a tg dtype, a name like 'float32', or a numpy dtype")


Scalar = bool | int | float
ShapeArg = int | Sequence[int]


def canonical_device(device: str | None) -> str:
    """The canonical name of `device` (None -> Device.DEFAULT); unknown backends list the available ones."""
    from tg.runtime.device import Device

    if isinstance(device, tuple):  # a sharded tensor's devices (constants made "like" it are replicated)
        return tuple(canonical_device(d) for d in device)

    name = Device.canonicalize(device)
    backend = name.split(":", 1)[0]
    if backend not in Device.backends:
        raise ArgumentError(f"unknown device {device!r}; available devices: {', '.join(Device.backends)}")
    return name
