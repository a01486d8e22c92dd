"""Creation functions: full, zeros, ones, empty, arange, linspace, eye and the `*_like` family (attached to
`Tensor` in methods.py; the static ones as class methods, whose `cls` is the Tensor class). Every one takes `dtype=`
(any spelling `args.dtype_arg` accepts), `device=` and `requires_grad=`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tg.ir import DType, UOp, dtypes
from tg.tensor.args import Scalar, ShapeArg, canonical_device, dtype_arg
from tg.tensor.data import checked_scalar_value, pack
from tg.tensor.errors import ArgumentError
from tg.tensor.realize import from_bytes
from tg.tensor.shapes import is_symbolic, shape_arg, simplify_dim

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _shape(op: str, shape: tuple[Any, ...]) -> tuple[int, ...]:
    shp = shape_arg(shape)
    if any(isinstance(s, int) and s < 0 for s in shp):
        raise ArgumentError(f"{op}: negative dimension in shape {shp}")
    return shp


def full(
    cls: type[Tensor],
    shape: ShapeArg,
    fill_value: Scalar,
    dtype: DType | str | None = None,
    device: str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """A tensor of `shape` filled with `fill_value`: `Tensor.full((2, 3), 7)` (dtype follows the value)."""
    shp = _shape("full", (shape,))
    dt = dtype_arg(dtype) or dtypes.from_py(fill_value)
    uop = UOp.full(shp, checked_scalar_value(fill_value, dt), dt, canonical_device(device))
    return cls(uop, requires_grad=requires_grad)


def zeros(
    cls: type[Tensor],
    *shape: Any,
    dtype: DType | str | None = None,
    device: str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """A tensor of zeros: `Tensor.zeros(2, 3)`."""
    return cls.full(_shape("zeros", shape), 0.0, dtype_arg(dtype) or dtypes.default_float, device, requires_grad)


def ones(
    cls: type[Tensor],
    *shape: Any,
    dtype: DType | str | None = None,
    device: str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """A tensor of ones: `Tensor.ones(2, 3)`."""
    return cls.full(_shape("ones", shape), 1.0, dtype_arg(dtype) or dtypes.default_float, device, requires_grad)


def empty(
    cls: type[Tensor],
    *shape: Any,
    dtype: DType | str | None = None,
    device: str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """An uninitialised tensor (a fresh buffer, no kernel): `Tensor.empty(4, 4)`."""
    shp = _shape("empty", shape)
    dt = dtype_arg(dtype) or dtypes.default_float
    n = math.prod(shp)
    if isinstance(n, UOp):  # symbolic: a buffer of the maximum size, its first n elements viewed as the shape
        buf = UOp.new_buffer(canonical_device(device), int(n.vmax), dt).shrink(((0, simplify_dim(n)),)).reshape(shp)
    else:
        buf = UOp.new_buffer(canonical_device(device), n, dt).reshape(shp)
    return cls(buf, requires_grad=requires_grad)


def arange(
    cls: type[Tensor],
    start: Scalar,
    stop: Scalar | None = None,
    step: Scalar = 1,
    dtype: DType | str | None = None,
    device: str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """Evenly spaced values in [start, stop): `Tensor.arange(5)`, `Tensor.arange(0, 1, 0.25)`."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ArgumentError("arange: step must not be zero")
    if any(isinstance(v, UOp) for v in (start, stop, step)):
        return _symbolic_arange(cls, start, stop, step, dtype, device, requires_grad)
    all_int = all(isinstance(v, int) for v in (start, stop, step))
    dt = dtype_arg(dtype) or (dtypes.default_int if all_int else dtypes.default_float)
    n = max(0, math.ceil((stop - start) / step))
    if dtype is None and all_int and n and not (dt.min <= min(start, start + (n - 1) * step) and
                                                 max(start, start + (n - 1) * step) <= dt.max):  # fmt: skip
        dt = dtypes.int64  # an int range beyond int32 (spec: int64 when out of range)
    if n and dtypes.is_int(dt) and all_int:  # checked before anything is allocated: 2**33 int32s would be 32 GiB
        for v in (start, start + (n - 1) * step):
            if not dt.min <= v <= dt.max:
                raise OverflowError(f"arange: {v} is out of range for {dt.name} ({dt.min} to {dt.max}); pass a wider "
                                    "dtype, e.g. int64")  # fmt: skip
    if n >= DEVICE_INDEX_MIN and (t := _device_arange(cls, start, step, n, dt, canonical_device(device))) is not None:
        return t if requires_grad is None else t.requires_grad_(requires_grad)
    values = range(int(start), int(start) + n * int(step), int(step)) if dtypes.is_int(dt) and all(
        isinstance(v, int) for v in (start, step)
    ) else [start + i * step for i in range(n)]  # fmt: skip
    return cls(from_bytes(pack(values, dt), (n,), dt, canonical_device(device)), requires_grad=requires_grad)


def _symbolic_arange(cls: type[Tensor], start: Any, stop: Any, step: Any, dtype: DType | str | None, device: str | None,
                     requires_grad: bool | None) -> Tensor:  # fmt: skip
    """arange with a symbolic start and/or stop (int step): `start + i*step` for i below the count's maximum,
    sliced to the bound count, so one kernel serves every value of the Variables."""
    for name, x in (("start", start), ("stop", stop)):
        if not (isinstance(x, int) or is_symbolic(x)):
            raise TypeError(f"arange with a symbolic bound needs int or symbolic {name}, got {x!r}")
    if not isinstance(step, int):
        raise TypeError(f"arange with a symbolic bound needs an int step, got {step!r}")
    count = simplify_dim((stop - start + step - 1) // step if step > 0 else (start - stop - step - 1) // -step)
    if isinstance(count, UOp) and count.vmin < 0:
        raise ArgumentError(f"arange: the count {count.render()} can be negative for some values of its Variables")
    dt = dtype_arg(dtype) or dtypes.default_int
    most = count if isinstance(count, int) else int(count.vmax)
    index = cls.arange(0, most, 1, dtypes.default_int, device)
    ret = (index[:count] * step + start).cast(dt)
    return ret if requires_grad is None else ret.requires_grad_(requires_grad)


# from this many elements on, arange and the random counters are computed on the device (no host list)
DEVICE_INDEX_MIN = 1 << 14


def device_index(cls: type[Tensor], n: int, dt: DType, device: str) -> Tensor:
    """0, 1, ..., n-1 as a `dt` tensor computed on the device: a (rows, cols) grid of `row*cols + col` from two
    uploaded ranges of about sqrt(n) elements each, flattened and cut to n (one elementwise kernel, no n-sized
    host data)."""
    cols = 1 << (max(n - 1, 1).bit_length() + 1) // 2
    rows = -(-n // cols)
    row_starts = cls(from_bytes(pack(range(0, rows * cols, cols), dt), (rows, 1), dt, device))
    col_offsets = cls(from_bytes(pack(range(cols), dt), (1, cols), dt, device))
    return (row_starts + col_offsets).reshape(rows * cols)[:n]


def _device_arange(cls: type[Tensor], start: Scalar, step: Scalar, n: int, dt: DType, device: str) -> Tensor | None:
    """arange's values computed on the device as `start + i*step` (ints in int64, floats in float64, then cast:
    the same numbers as the host path); None where the host path must decide (ranges past int64, other dtypes, a
    device that runs no kernels or has no native float64)."""
    from tg.runtime.device import Device

    try:
        native = Device[device].renderer.native_float_dtypes
    except Exception:  # no renderer (DISK, ...): the data is uploaded as before
        return None
    if dtypes.is_int(dt) and isinstance(start, int) and isinstance(step, int):
        last = start + (n - 1) * step
        if not (dt.min <= min(start, last) and max(start, last) <= dt.max and -(2**63) <= min(start, last)
                and max(start, last, n * abs(step)) < 2**63):  # fmt: skip
            return None  # the host path raises its out-of-range error (or handles uint64 beyond int64)
        return (device_index(cls, n, dtypes.int64, device) * step + start).cast(dt)
    if dt in (dtypes.float32, dtypes.float64) and dtypes.float64 in native and n < 2**53:
        return (device_index(cls, n, dtypes.int64, device).cast(dtypes.float64) * float(step) + float(start)).cast(dt)
    return None


def linspace(
    cls: type[Tensor],
    start: float,
    stop: float,
    steps: int,
    dtype: DType | str | None = None,
    device: str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """`steps` evenly spaced values from start to stop inclusive: `Tensor.linspace(0, 1, 5)`."""
    if not isinstance(steps, int) or steps < 0:
        raise ArgumentError(f"linspace: steps must be a non-negative int, got {steps!r}")
    dt = dtype_arg(dtype) or dtypes.default_float
    if dt is dtypes.bool:
        raise ArgumentError("linspace: a bool dtype has no evenly spaced values (torch refuses it too)")
    if steps == 1:
        return cls.full((1,), start, dt, device, requires_grad)
    delta = (stop - start) / (steps - 1) if steps > 1 else 0.0
    # both halves count from their end, so the first and last values are exact (as torch)
    values = [start + i * delta if i < steps // 2 else stop - (steps - 1 - i) * delta for i in range(steps)]
    vals = cls(values, dtype=dtypes.float64 if dt is dtypes.float64 else dtypes.float32, device=device)
    out = vals.cast(dt)  # integer dtypes truncate toward zero, as torch
    return out if requires_grad is None else out.requires_grad_(requires_grad)


def eye(
    cls: type[Tensor],
    n: int,
    m: int | None = None,
    dtype: DType | str | None = None,
    device: str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """The identity matrix (n x m): `Tensor.eye(3)`."""
    m = n if m is None else m
    if n < 0 or m < 0:
        raise ArgumentError(f"eye: sizes must be non-negative, got {n} x {m}")
    k = min(n, m)
    dt = dtype_arg(dtype) or dtypes.default_float
    if k == 0:
        return cls.zeros(n, m, dtype=dt, device=device, requires_grad=requires_grad)
    # a column of ones padded by k zeros, flattened: every (k+1)-th element is one
    diag = cls.ones(k, 1, dtype=dt, device=device).pad(((0, 0), (0, k))).flatten().shrink(((0, k * k),)).reshape(k, k)
    out = diag.pad(((0, n - k), (0, m - k)))
    return out if requires_grad is None else out.requires_grad_(requires_grad)


def full_like(
    self: Tensor,
    fill_value: Scalar,
    dtype: DType | str | None = None,
    device: str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """A tensor shaped like self filled with `fill_value`."""
    return self._tensor_class().full(
        self.shape, fill_value, dtype_arg(dtype) or self.dtype, device or self.device, requires_grad
    )


def zeros_like(
    self: Tensor, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None
) -> Tensor:
    """Zeros shaped like self."""
    return full_like(self, 0, dtype, device, requires_grad)


def ones_like(
    self: Tensor, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None
) -> Tensor:
    """Ones shaped like self."""
    return full_like(self, 1, dtype, device, requires_grad)


def empty_like(
    self: Tensor, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None
) -> Tensor:
    """An uninitialised tensor shaped like self."""
    return self._tensor_class().empty(
        *self.shape, dtype=dtype_arg(dtype) or self.dtype, device=device or self.device, requires_grad=requires_grad
    )


def rand_like(
    self: Tensor, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None
) -> Tensor:
    """Uniform [0, 1) random numbers shaped like self."""
    dt = dtype_arg(dtype) or (self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float)
    return self._tensor_class().rand(*self.shape, dtype=dt, device=device or self.device, requires_grad=requires_grad)


def randn_like(
    self: Tensor, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None
) -> Tensor:
    """Standard normal random numbers shaped like self."""
    dt = dtype_arg(dtype) or (self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float)
    return self._tensor_class().randn(*self.shape, dtype=dt, device=device or self.device, requires_grad=requires_grad)
