"""`Tensor`: a lazy n-dimensional array. Every operation builds a tensor-level UOp graph; `realize()`,
`numpy()`, `tolist()` and `item()` schedule the graph into fused kernels and run them.

Creation, movement and elementwise ops live here; reductions and matmul are in `reduce.py`, basic
indexing in `indexing.py`, random numbers in `random.py` (they are attached to the class at the bottom).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tg.ir import ConstType, DType, Ops, UOp, dtypes, least_upper_dtype, to_dtype, weak_promote
from tg.tensor import indexing as _indexing
from tg.tensor import random as _random
from tg.tensor import realize as _realize
from tg.tensor import reduce as _reduce_ops
from tg.tensor.data import from_numpy_dtype, list_to_numpy, to_numpy_dtype

Scalar = bool | int | float
_VIEW_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.BUFFER})
ShapeArg = int | Sequence[int]


def canonical_device(device: str | None) -> str:
    """The canonical name of `device` (None -> Device.DEFAULT); unknown backends list the available ones."""
    from tg.runtime.device import Device

    name = Device.canonicalize(device)
    backend = name.split(":", 1)[0]
    if backend not in Device.backends:
        raise ValueError(f"unknown device {device!r}; available devices: {', '.join(Device.backends)}")
    return name


def _shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """Accept both f(2, 3) and f((2, 3))."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise TypeError(f"shape entries must be ints, got {s!r} in {shape}")
    return tuple(int(s) for s in shape)


def _to_dtype(dtype: DType | str | None) -> DType | None:
    return None if dtype is None else to_dtype(dtype)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The numpy broadcast of `shapes`; ValueError naming the shapes when they do not broadcast."""
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded, strict=True):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


class _DTypeShortcuts:
    """`t.float()`, `t.half()`, `t.int()`, `t.bool()` (kept out of Tensor's namespace, where they would shadow
    the builtins in annotations)."""

    __slots__ = ()

    def cast(self, dtype: DType | str) -> Tensor:  # pragma: no cover - Tensor overrides
        raise NotImplementedError

    def float(self) -> Tensor:
        """Cast to float32."""
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        """Cast to float16."""
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        """Cast to int32."""
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        """Cast to bool."""
        return self.cast(dtypes.bool)


class Tensor(_DTypeShortcuts):
    """A lazy tensor on a device.

    >>> (Tensor([1.0, 2.0]) * 3).tolist()
    [3.0, 6.0]
    """

    __slots__ = ("__weakref__", "requires_grad", "uop")
    _seed: int = 0x5EED
    _rng_counter: int = 0

    def __init__(
        self,
        data: Any,
        device: str | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ) -> None:
        dt = _to_dtype(dtype)
        self.requires_grad = requires_grad
        if isinstance(data, UOp):
            if dt is not None and data.dtype is not dt:
                data = data.cast(dt)
            self.uop = data
        elif isinstance(data, Tensor):
            self.uop = data.uop if dt is None else data.uop.cast(dt)
        elif isinstance(data, (bool, int, float, np.generic)) and not isinstance(data, np.ndarray):
            value = data.item() if isinstance(data, np.generic) else data
            dt = dt or (from_numpy_dtype(data.dtype) if isinstance(data, np.generic) else dtypes.from_py(value))
            self.uop = UOp.full((), _coerce(value, dt), dt, canonical_device(device))
        elif isinstance(data, (list, tuple)):
            arr, dt = list_to_numpy(data, dt)
            self.uop = _from_numpy(arr, dt, canonical_device(device))
        elif isinstance(data, np.ndarray):
            if data.dtype == np.float64 and dt is None:
                dt = dtypes.float64
            dt = dt or from_numpy_dtype(data.dtype)
            self.uop = _from_numpy(
                np.ascontiguousarray(data.astype(to_numpy_dtype(dt), copy=False)), dt, canonical_device(device)
            )
        elif isinstance(data, (bytes, bytearray, memoryview)):
            arr = np.frombuffer(bytes(data), dtype=np.uint8)
            self.uop = _from_numpy(arr, dt or dtypes.uint8, canonical_device(device)) if dt in (None, dtypes.uint8) \
                else _from_numpy(arr.view(to_numpy_dtype(dt)), dt, canonical_device(device))  # fmt: skip
        else:
            raise TypeError(f"cannot create a Tensor from {type(data).__name__}: {data!r}")
        _realize.all_tensors.add(self)

    # ---- properties -------------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape, as a tuple of ints."""
        return self.uop.shape  # symbolic shapes are not supported yet

    @property
    def dtype(self) -> DType:
        """The element dtype."""
        return self.uop.dtype

    @property
    def device(self) -> str:
        """The canonical device name."""
        d = self.uop.device
        if not isinstance(d, str):
            raise RuntimeError(f"tensor has no single device: {d!r}")
        return d

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.uop.shape)

    def numel(self) -> int:
        """Number of elements."""
        return int(math.prod(self.shape))

    def element_size(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tensor."""
        return self.numel() * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "realized" if _realize.buffer_of(self.uop) is not None else "lazy"
        return f"<Tensor shape={self.shape} dtype={self.dtype.name} device={self.uop.device} {state}>"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(f"the truth value of a tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    # ---- creation ---------------------------------------------------------------------------------------

    @staticmethod
    def full(
        shape: ShapeArg, fill_value: Scalar, dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        """A tensor of `shape` filled with `fill_value`: `Tensor.full((2, 3), 7)`."""
        shp = _shape_arg((shape,)) if not isinstance(shape, int) else (shape,)
        dt = _to_dtype(dtype) or dtypes.from_py(fill_value)
        return Tensor(UOp.full(shp, _coerce(fill_value, dt), dt, canonical_device(device)))

    @staticmethod
    def zeros(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """A tensor of zeros: `Tensor.zeros(2, 3)`."""
        return Tensor.full(_shape_arg(shape), 0.0, dtype or dtypes.default_float, device)

    @staticmethod
    def ones(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """A tensor of ones: `Tensor.ones(2, 3)`."""
        return Tensor.full(_shape_arg(shape), 1.0, dtype or dtypes.default_float, device)

    @staticmethod
    def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """An uninitialised tensor (a fresh buffer, no kernel): `Tensor.empty(4, 4)`."""
        shp = _shape_arg(shape)
        dt = _to_dtype(dtype) or dtypes.default_float
        return Tensor(UOp.new_buffer(canonical_device(device), int(math.prod(shp)), dt).reshape(shp))

    @staticmethod
    def arange(
        start: Scalar,
        stop: Scalar | None = None,
        step: Scalar = 1,
        dtype: DType | str | None = None,
        device: str | None = None,
    ) -> Tensor:
        """Evenly spaced values in [start, stop): `Tensor.arange(5)`, `Tensor.arange(0, 1, 0.25)`."""
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be zero")
        dt = _to_dtype(dtype) or (
            dtypes.default_int if all(isinstance(v, int) for v in (start, stop, step)) else dtypes.default_float
        )
        n = max(0, math.ceil((stop - start) / step))
        values = np.asarray(start, dtype=np.float64) + np.arange(n, dtype=np.float64) * step
        return Tensor(values.astype(to_numpy_dtype(dt)), device=device, dtype=dt)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """The identity matrix (n x m): `Tensor.eye(3)`."""
        m = n if m is None else m
        if n < 0 or m < 0:
            raise ValueError(f"eye: sizes must be non-negative, got {n} x {m}")
        k = min(n, m)
        dt = _to_dtype(dtype) or dtypes.default_float
        if k == 0:
            return Tensor.zeros(n, m, dtype=dt, device=device)
        # a column of ones padded by k zeros, flattened: every (k+1)-th element is one
        diag = (
            Tensor.ones(k, 1, dtype=dt, device=device)
            .pad(((0, 0), (0, k)))
            .flatten()
            .shrink(((0, k * k),))
            .reshape(k, k)
        )
        return diag.pad(((0, n - k), (0, m - k)))

    def full_like(self, fill_value: Scalar, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """A tensor shaped like self filled with `fill_value`."""
        return Tensor.full(self.shape, fill_value, dtype or self.dtype, device or self.device)

    def zeros_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Zeros shaped like self."""
        return self.full_like(0, dtype, device)

    def ones_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Ones shaped like self."""
        return self.full_like(1, dtype, device)

    # ---- realization and data out -----------------------------------------------------------------------

    def realize(self, *lst: Tensor) -> Tensor:
        """Compute this tensor (and `lst`) now, in one schedule: `Tensor.realize(a, b)` or `a.realize(b)`."""
        _realize.realize_tensors([self, *lst])
        return self

    def numpy(self) -> np.ndarray:
        """The values as a numpy array (realizes): `Tensor([1, 2]).numpy()`."""
        return _realize.to_numpy(self)

    def tolist(self) -> Any:
        """The values as (nested) Python lists."""
        return self.numpy().tolist()

    def item(self) -> ConstType:
        """The single value of a one-element tensor."""
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def data(self) -> memoryview:
        """The values as a memoryview."""
        return memoryview(self.numpy().tobytes())

    def to(self, device: str | None) -> Tensor:
        """This tensor on `device` (a COPY when the device differs): `t.to("PYTHON")`."""
        dev = canonical_device(device)
        if dev == self.device:
            return self
        return Tensor(self.uop.copy_to_device(dev))

    def contiguous(self) -> Tensor:
        """Force the value into its own buffer when realized (a fusion boundary)."""
        return Tensor(self.uop.contiguous())

    def detach(self) -> Tensor:
        """The same value, cut off from gradients."""
        return Tensor(self.uop.detach())

    def assign(self, x: Tensor | Scalar | list) -> Tensor:
        """Write `x` into this tensor's buffer (same shape, dtype, device); earlier reads keep the old value."""
        if not isinstance(x, Tensor):
            x = Tensor(x, device=self.device, dtype=self.dtype)
        if x.shape != self.shape:
            raise ValueError(f"assign shape mismatch: target {self.shape} vs value {x.shape}")
        if x.dtype is not self.dtype:
            raise TypeError(f"assign dtype mismatch: target {self.dtype.name} vs value {x.dtype.name}")
        if x.device != self.device:
            raise ValueError(f"assign device mismatch: target {self.device} vs value {x.device}")
        if self.uop is x.uop:
            return self
        base = self.uop
        while base.op in (Ops.RESHAPE, Ops.ASSIGN):
            base = base.src[0]
        if base.op is not Ops.BUFFER:
            if any(u.op is Ops.BUFFER for u in base.toposort(lambda u: u.op in _VIEW_OPS)):
                raise NotImplementedError("assign into a view (slice, permute, ...) of a buffer is not supported yet")
            self.uop = x.uop  # nothing stored yet: the new value simply replaces the graph
        else:
            self.uop = self.uop.assign(x.uop)
        return self

    # ---- dtype ------------------------------------------------------------------------------------------

    def cast(self, dtype: DType | str) -> Tensor:
        """Convert to `dtype`: `t.cast(dtypes.int32)` (floats truncate toward zero)."""
        dt = to_dtype(dtype)
        return self if dt is self.dtype else Tensor(self.uop.cast(dt))

    def bitcast(self, dtype: DType | str) -> Tensor:
        """Reinterpret the bits as `dtype` (same itemsize)."""
        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise ValueError(
                f"bitcast needs equal itemsizes: {self.dtype.name} ({self.dtype.itemsize}) -> {dt.name} ({dt.itemsize})"
            )
        return self if dt is self.dtype else Tensor(self.uop.bitcast(dt))

    # ---- movement ---------------------------------------------------------------------------------------

    def reshape(self, *shape: Any) -> Tensor:
        """Same data, new shape; one entry may be -1: `t.reshape(2, -1)`."""
        new = list(_shape_arg(shape)) if shape else []
        if new.count(-1) > 1:
            raise ValueError(f"reshape: only one dimension can be -1, got {tuple(new)}")
        if any(s < -1 for s in new):
            raise ValueError(f"reshape: negative dimension in {tuple(new)}")
        if -1 in new:
            rest = int(math.prod([s for s in new if s != -1]))
            if rest == 0 or self.numel() % rest:
                raise ValueError(f"cannot reshape tensor of shape {self.shape} into shape {tuple(new)}")
            new[new.index(-1)] = self.numel() // rest
        if int(math.prod(new)) != self.numel():
            raise ValueError(f"cannot reshape tensor of shape {self.shape} into shape {tuple(new)}")
        return self if tuple(new) == self.shape else Tensor(self.uop.reshape(tuple(new)))

    def view(self, *shape: Any) -> Tensor:
        """Alias of reshape."""
        return self.reshape(*shape)

    def permute(self, *order: Any) -> Tensor:
        """Reorder the dimensions: `t.permute(2, 0, 1)`."""
        perm = [_canon_axis(a, self.ndim) for a in _shape_arg(order)] if order else []
        if sorted(perm) != list(range(self.ndim)):
            raise ValueError(f"permute: {tuple(order)} is not a permutation of the {self.ndim} dims of {self.shape}")
        return self if perm == list(range(self.ndim)) else Tensor(self.uop.permute(tuple(perm)))

    def expand(self, *shape: Any) -> Tensor:
        """Broadcast size-1 dims to `shape` (-1 keeps a dim): `t.expand(4, -1)`."""
        new = _shape_arg(shape)
        if len(new) < self.ndim:
            raise ValueError(f"expand: cannot expand shape {self.shape} to {new} (fewer dims)")
        old = (1,) * (len(new) - self.ndim) + self.shape
        target = tuple(o if n == -1 else n for o, n in zip(old, new, strict=True))
        for o, n in zip(old, target, strict=True):
            if o != n and o != 1:
                raise ValueError(f"expand: cannot expand shape {self.shape} to {new}")
        x = self.reshape(old) if old != self.shape else self
        return x if target == x.shape else Tensor(x.uop.expand(target))

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        if len(shape) < self.ndim:
            raise ValueError(f"cannot broadcast shape {self.shape} to {shape}")
        return self.expand(shape)

    def pad(self, padding: Sequence[tuple[int, int] | None], value: Scalar = 0) -> Tensor:
        """Pad each dim with (before, after) elements of `value` (negative amounts crop): `t.pad(((1, 1), None))`."""
        if len(padding) != self.ndim:
            raise ValueError(f"pad: need one (before, after) per dim of {self.shape}, got {tuple(padding)}")
        pads = [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]
        x = self
        if any(b < 0 or a < 0 for b, a in pads):
            x = x.shrink([(-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pads, self.shape, strict=True)])
            pads = [(max(b, 0), max(a, 0)) for b, a in pads]
        if all(b == 0 and a == 0 for b, a in pads):
            return x
        padded = Tensor(x.uop.pad(tuple(pads)))
        if value == 0:
            return padded
        mask = Tensor(UOp.full(x.shape, True, dtypes.bool, x.device).pad(tuple(pads)))
        return mask.where(padded, value)

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        """Keep [start, end) of each dim: `t.shrink(((1, 3), None))`."""
        if len(arg) != self.ndim:
            raise ValueError(f"shrink: need one (start, end) per dim of {self.shape}, got {tuple(arg)}")
        bounds = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape, strict=True))
        for (b, e), s in zip(bounds, self.shape, strict=True):
            if not 0 <= b <= e <= s:
                raise ValueError(f"shrink: bounds {bounds} out of range for shape {self.shape}")
        if all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape, strict=True)):
            return self
        return Tensor(self.uop.shrink(bounds))

    def flip(self, axis: int | Sequence[int]) -> Tensor:
        """Reverse the order along `axis`: `t.flip(0)`."""
        axes = {_canon_axis(a, self.ndim) for a in ([axis] if isinstance(axis, int) else axis)}
        if not axes:
            return self
        return Tensor(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two dims (default: the first two)."""
        order = list(range(self.ndim))
        a, b = _canon_axis(dim0, self.ndim), _canon_axis(dim1, self.ndim)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        """`transpose()`: swaps the first two dims (tinygrad semantics; equals numpy's .T for 2-D)."""
        return self.transpose()

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dims start_dim..end_dim into one."""
        if self.ndim == 0:
            return self.reshape(1)
        s, e = _canon_axis(start_dim, self.ndim), _canon_axis(end_dim, self.ndim)
        return self.reshape(*self.shape[:s], int(math.prod(self.shape[s : e + 1])), *self.shape[e + 1 :])

    def squeeze(self, dim: int | None = None) -> Tensor:
        """Remove size-1 dims (all, or just `dim` if it has size 1)."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        if self.ndim == 0:
            return self
        d = _canon_axis(dim, self.ndim)
        return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1 :])

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 dim at `dim`: `t.unsqueeze(0)`."""
        d = _canon_axis(dim, self.ndim + 1)
        return self.reshape((*self.shape[:d], 1, *self.shape[d:]))

    def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
        """Concatenate along `dim`: `a.cat(b, dim=1)`; other dims must match."""
        ts = [self, *others]
        d = _canon_axis(dim, self.ndim)
        for t in ts:
            if t.ndim != self.ndim or any(
                i != d and a != b for i, (a, b) in enumerate(zip(t.shape, self.shape, strict=True))
            ):
                raise ValueError(f"cat: shapes {' and '.join(str(x.shape) for x in ts)} differ outside dim {d}")
        dt = least_upper_dtype(*[t.dtype for t in ts])
        ts = [t.cast(dt) for t in ts]
        total, offset, out = sum(t.shape[d] for t in ts), 0, None
        for t in ts:
            pad = [(0, 0)] * self.ndim
            pad[d] = (offset, total - offset - t.shape[d])
            offset += t.shape[d]
            piece = t.pad(pad)
            out = piece if out is None else (out | piece if dt is dtypes.bool else out + piece)
        assert out is not None
        return out

    @staticmethod
    def stack(*tensors: Tensor, dim: int = 0) -> Tensor:
        """Stack same-shaped tensors along a new `dim`: `Tensor.stack(a, b)`."""
        if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
            tensors = tuple(tensors[0])
        if not tensors:
            raise ValueError("stack needs at least one tensor")
        d = _canon_axis(dim, tensors[0].ndim + 1)
        for t in tensors:
            if t.shape != tensors[0].shape:
                raise ValueError(f"stack: shapes {' and '.join(str(x.shape) for x in tensors)} differ")
        return tensors[0].unsqueeze(d).cat(*[t.unsqueeze(d) for t in tensors[1:]], dim=d)

    # ---- elementwise ------------------------------------------------------------------------------------

    def _operands(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
        """Promote and broadcast (self, other) for a binary op; Python scalars are weak."""
        if isinstance(other, Tensor):
            if other.device != self.device:
                raise RuntimeError(f"tensors are on different devices: {self.device} and {other.device}")
            dt = least_upper_dtype(self.dtype, other.dtype)
            y = other
        elif isinstance(other, (bool, int, float)):
            # fast path: a weak scalar becomes a constant of x's final shape directly
            dt = weak_promote(self.dtype, other)
            x = self.cast(dt)
            c = Tensor(UOp.const(dt, _coerce(other, dt), self.device, x.uop.shape))
            return (c, x) if reverse else (x, c)
        else:
            y = Tensor(other, device=self.device)
            dt = least_upper_dtype(self.dtype, y.dtype)
        x, y = self.cast(dt), y.cast(dt)
        shape = broadcast_shape(x.shape, y.shape)
        x, y = x._broadcast_to(shape), y._broadcast_to(shape)
        return (y, x) if reverse else (x, y)

    def _binary(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
        x, y = self._operands(other, reverse)
        return Tensor(x.uop.alu(op, y.uop))

    def add(self, x: Any, reverse: bool = False) -> Tensor:
        """self + x (broadcasting)."""
        return self._binary(Ops.ADD, x, reverse)

    def sub(self, x: Any, reverse: bool = False) -> Tensor:
        """self - x (broadcasting)."""
        a, b = self._operands(x, reverse)
        return Tensor(a.uop.alu(Ops.ADD, (-b).uop))

    def mul(self, x: Any, reverse: bool = False) -> Tensor:
        """self * x (broadcasting)."""
        return self._binary(Ops.MUL, x, reverse)

    def div(self, x: Any, reverse: bool = False) -> Tensor:
        """True division; integer inputs give the default float."""
        a, b = self._operands(x, reverse)
        if not dtypes.is_float(a.dtype):
            a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
        return Tensor(a.uop.alu(Ops.FDIV, b.uop))

    def idiv(self, x: Any, reverse: bool = False) -> Tensor:
        """Integer division truncating toward zero (C semantics)."""
        return self._binary(Ops.IDIV, x, reverse)

    def __neg__(self) -> Tensor:
        if self.dtype is dtypes.bool:
            return self.logical_not()
        return Tensor(self.uop.alu(Ops.MUL, UOp.full(self.shape, _coerce(-1, self.dtype), self.dtype, self.device)))

    def neg(self) -> Tensor:
        """-self."""
        return -self

    def __add__(self, x: Any) -> Tensor:
        return self.add(x)

    def __radd__(self, x: Any) -> Tensor:
        return self.add(x, True)

    def __sub__(self, x: Any) -> Tensor:
        return self.sub(x)

    def __rsub__(self, x: Any) -> Tensor:
        return self.sub(x, True)

    def __mul__(self, x: Any) -> Tensor:
        return self.mul(x)

    def __rmul__(self, x: Any) -> Tensor:
        return self.mul(x, True)

    def __truediv__(self, x: Any) -> Tensor:
        return self.div(x)

    def __rtruediv__(self, x: Any) -> Tensor:
        return self.div(x, True)

    def __pow__(self, x: Any) -> Tensor:
        return self.pow(x)

    def __rpow__(self, x: Any) -> Tensor:
        return self.pow(x, True)

    def __matmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x)

    def __rmatmul__(self, x: Tensor) -> Tensor:
        return x.matmul(self)

    def __and__(self, x: Any) -> Tensor:
        return self._binary(Ops.AND, x)

    def __or__(self, x: Any) -> Tensor:
        return self._binary(Ops.OR, x)

    def __xor__(self, x: Any) -> Tensor:
        return self._binary(Ops.XOR, x)

    def __lshift__(self, x: int) -> Tensor:
        return self._binary(Ops.SHL, x)

    def __rshift__(self, x: int) -> Tensor:
        return self._binary(Ops.SHR, x)

    def __invert__(self) -> Tensor:
        return self.logical_not() if self.dtype is dtypes.bool else self ^ -1

    def __lt__(self, x: Any) -> Tensor:
        return self._binary(Ops.CMPLT, x)

    def __gt__(self, x: Any) -> Tensor:
        return self._binary(Ops.CMPLT, x, True)

    def __le__(self, x: Any) -> Tensor:
        return self._binary(Ops.CMPLT, x, True).logical_not()

    def __ge__(self, x: Any) -> Tensor:
        return self._binary(Ops.CMPLT, x).logical_not()

    def __eq__(self, x: Any) -> Tensor:  # type: ignore[override]
        return self._binary(Ops.CMPEQ, x)

    def __ne__(self, x: Any) -> Tensor:  # type: ignore[override]
        return self._binary(Ops.CMPNE, x)

    def logical_not(self) -> Tensor:
        """Elementwise not (for any dtype: x == 0)."""
        x = self if self.dtype is dtypes.bool else self.cast(dtypes.bool)
        return Tensor(x.uop.alu(Ops.CMPNE, UOp.full(x.shape, True, dtypes.bool, x.device)))

    def where(self, x: Any, y: Any) -> Tensor:
        """`self ? x : y` elementwise (self is the condition): `(a > 0).where(a, 0)`."""
        cond = self if self.dtype is dtypes.bool else self.cast(dtypes.bool)
        if isinstance(x, Tensor):
            xt, yt = x._operands(y)
        elif isinstance(y, Tensor):
            yt, xt = y._operands(x)
        else:
            dt = dtypes.from_py(x) if dtypes.from_py(x) > dtypes.from_py(y) else dtypes.from_py(y)
            xt, yt = Tensor.full((), x, dt, cond.device), Tensor.full((), y, dt, cond.device)
        shape = broadcast_shape(cond.shape, xt.shape, yt.shape)
        c, xt, yt = cond._broadcast_to(shape), xt._broadcast_to(shape), yt._broadcast_to(shape)
        return Tensor(c.uop.alu(Ops.WHERE, xt.uop, yt.uop))

    def maximum(self, x: Any) -> Tensor:
        """Elementwise max (broadcasting)."""
        return self._binary(Ops.MAX, x)

    def minimum(self, x: Any) -> Tensor:
        """Elementwise min (broadcasting)."""
        a, b = self._operands(x)
        return (a < b).where(a, b)

    def clip(self, min_: Scalar | None = None, max_: Scalar | None = None) -> Tensor:
        """Clamp into [min_, max_]."""
        x = self
        if min_ is not None:
            x = x.maximum(min_)
        if max_ is not None:
            x = x.minimum(max_)
        return x

    def _float(self) -> Tensor:
        return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

    def _unary(self, op: Ops) -> Tensor:
        x = self._float()
        return Tensor(x.uop.alu(op))

    def exp2(self) -> Tensor:
        """2 ** x."""
        return self._unary(Ops.EXP2)

    def log2(self) -> Tensor:
        """log2(x)."""
        return self._unary(Ops.LOG2)

    def exp(self) -> Tensor:
        """e ** x."""
        return (self._float() * (1 / math.log(2))).exp2()

    def log(self) -> Tensor:
        """Natural logarithm."""
        return self.log2() * math.log(2)

    def sqrt(self) -> Tensor:
        """Square root."""
        return self._unary(Ops.SQRT)

    def rsqrt(self) -> Tensor:
        """1 / sqrt(x)."""
        return self.sqrt().reciprocal()

    def reciprocal(self) -> Tensor:
        """1 / x."""
        return self._unary(Ops.RECIPROCAL)

    def sin(self) -> Tensor:
        """Sine."""
        return self._unary(Ops.SIN)

    def cos(self) -> Tensor:
        """Cosine, as sin(pi/2 - x)."""
        return ((math.pi / 2) - self._float()).sin()

    def abs(self) -> Tensor:
        """|x|."""
        if self.dtype is dtypes.bool or dtypes.is_unsigned(self.dtype):
            return self
        return (self < 0).where(-self, self)

    def sign(self) -> Tensor:
        """-1, 0 or 1."""
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def trunc(self) -> Tensor:
        """Round toward zero."""
        return self if not dtypes.is_float(self.dtype) else Tensor(self.uop.alu(Ops.TRUNC))

    def relu(self) -> Tensor:
        """max(x, 0)."""
        return self.maximum(0)

    def sigmoid(self) -> Tensor:
        """1 / (1 + e^-x)."""
        return 1 / (1 + (-self._float()).exp())

    def tanh(self) -> Tensor:
        """Hyperbolic tangent, as 2 * sigmoid(2x) - 1."""
        return 2.0 * (2.0 * self._float()).sigmoid() - 1.0

    def square(self) -> Tensor:
        """x * x."""
        return self * self

    def pow(self, x: Any, reverse: bool = False) -> Tensor:
        """self ** x; integer Python exponents multiply exactly, other exponents go through exp2/log2."""
        if (
            not reverse
            and isinstance(x, (int, float))
            and not isinstance(x, bool)
            and float(x).is_integer()
            and abs(x) <= 64
        ):
            n, acc, base = abs(int(x)), None, self
            while n:
                if n & 1:
                    acc = base if acc is None else acc * base
                base, n = base * base, n >> 1
            ret = self.ones_like() if acc is None else acc
            return ret.reciprocal() if x < 0 else ret
        if not reverse and isinstance(x, float) and x == 0.5:
            return self.sqrt()
        base, exp = self._operands(x, reverse)
        base, exp = base._float(), exp._float()
        mag = (exp * base.abs().log2()).exp2()
        # a negative base only has a real power for integral exponents; odd ones flip the sign
        is_int = exp.trunc() == exp
        odd = (exp.abs() - (exp.abs() * 0.5).trunc() * 2) == 1
        neg = base < 0
        signed = (neg & odd).where(-mag, mag)
        ret = (neg & is_int.logical_not()).where(math.nan, signed)
        return (exp == 0).where(1.0, ret)

    # ---- reductions and matmul: see reduce.py -----------------------------------------------------------

    _reduce = _reduce_ops._reduce
    sum = _reduce_ops.sum
    prod = _reduce_ops.prod
    max = _reduce_ops.max
    min = _reduce_ops.min
    mean = _reduce_ops.mean
    argmax = _reduce_ops.argmax
    softmax = _reduce_ops.softmax
    log_softmax = _reduce_ops.log_softmax
    matmul = _reduce_ops.matmul
    dot = _reduce_ops.dot

    # ---- indexing: see indexing.py ----------------------------------------------------------------------

    __getitem__ = _indexing.__getitem__

    # ---- random numbers: see random.py ------------------------------------------------------------------

    manual_seed = staticmethod(_random.manual_seed)
    rand = staticmethod(_random.rand)
    randn = staticmethod(_random.randn)
    randint = staticmethod(_random.randint)
    uniform = staticmethod(_random.uniform)
    normal = staticmethod(_random.normal)


def _canon_axis(axis: int, ndim: int) -> int:
    """`axis` made non-negative; IndexError when out of range for `ndim` dims."""
    if not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {axis!r}")
    n = ndim if ndim > 0 else 1
    if not -n <= axis < n:
        raise IndexError(f"dimension {axis} out of range for a {ndim}-d tensor")
    return int(axis) % n


def _coerce(value: Scalar, dt: DType) -> ConstType:
    """A Python value of the right kind for a constant of `dt`."""
    if dt is dtypes.bool:
        return bool(value)
    if dtypes.is_int(dt):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"cannot make an {dt.name} constant from {value}")
        return int(value)
    return float(value)


def _from_numpy(arr: np.ndarray, dt: DType, device: str) -> UOp:
    """A realized BUFFER holding `arr`, reshaped to its shape."""
    buf = UOp.new_buffer(device, int(arr.size), dt)
    _realize.upload(device, arr, buf)
    return buf.reshape(tuple(int(s) for s in arr.shape))
