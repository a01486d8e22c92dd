"""`Tensor`: a lazy n-dimensional array. Every operation builds a tensor-level UOp graph; `realize()`,
`numpy()`, `tolist()` and `item()` schedule the graph into fused kernels and run them.

The core lives here (construction, elementwise ops, autograd state, realization); the topic modules' methods are
attached by `methods.py` (movement, reductions, indexing, random, nn ops, Python operators, ...), the dtype
shortcuts (`t.float()`, `t.long()`, ...) come from `aliases.py`.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any, cast

from tg.ir import ConstType, DType, Ops, UOp, dtypes, least_upper_dtype, to_dtype, weak_promote
from tg.tensor import aliases as _aliases
from tg.tensor import autograd as _autograd
from tg.tensor import movement as _movement
from tg.tensor import multi as _multi
from tg.tensor import realize as _realize
from tg.tensor import shapes as _shapes
from tg.tensor import transcendental as _transcendental
from tg.tensor.aliases import DTypeShortcuts
from tg.tensor.args import Scalar, TensorBase, canonical_device, dtype_arg, pick
from tg.tensor.data import (
    checked_scalar_value,
    from_numpy_dtype,
    is_numpy,
    list_to_bytes,
    pack,
    scalar_value,
    to_numpy_dtype,
    unpack,
)
from tg.tensor.errors import ArgumentError
from tg.tensor.methods import TensorMethods
from tg.tensor.shapes import broadcast_shape
from tg.tensor.uopmath import scalar_view as _scalar_view


def _to_dtype(dtype: DType | str | None) -> DType | None:
    return dtype_arg(dtype)


class Tensor(DTypeShortcuts, TensorMethods, TensorBase):
    """A lazy tensor on a device.

    >>> (Tensor([1.0, 2.0]) * 3).tolist()
    [3.0, 6.0]
    """

    __slots__ = ("__weakref__", "_backward_done", "_bitcast_of", "_is_leaf", "_requires_grad", "_uop", "grad")
    _bitcast_of: Tensor  # set on a bitcast to another itemsize: the tensor its assigns write through to
    _backward_done: bool  # set by a backward() without retain_graph: a second one raises

    def __init__(
        self,
        data: Any,
        device: str | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ) -> None:
        self._requires_grad: bool | None = None
        self._is_leaf = True
        self.grad: Tensor | None = None
        if data.__class__ is UOp and dtype is None and requires_grad is None and data._shape is not None:
            _realize.index.register(self, data)  # an op's result (the common case): the `uop` setter and the UOp
            self._uop = data  # branch below without their checks
            if _autograd.anything_tracked():
                _autograd.track_result(self)
            return
        dt = None if dtype is None else _to_dtype(dtype)
        if isinstance(data, UOp) and _shapes.is_symbolic(data):  # a bound Variable (or an expression of some)
            self.uop = _shapes.symbolic_scalar(data, dt, canonical_device(device))
        elif isinstance(data, UOp):
            if dt is not None and data.dtype is not dt:
                data = data.cast(dt)
            self.uop = data
            if requires_grad is None and _autograd.anything_tracked():
                _autograd.track_result(self)
        elif isinstance(data, Tensor):
            self.uop = data.uop if dt is None else data.uop.cast(dt)
        elif isinstance(data, (bool, int, float)):
            dt = dt or dtypes.from_py(data)
            self.uop = UOp.full((), checked_scalar_value(data, dt), dt, canonical_device(device))
        elif isinstance(data, (list, tuple)):
            raw, shape, dt = list_to_bytes(data, dt)
            self.uop = _realize.from_bytes(raw, shape, dt, canonical_device(device))
        elif is_numpy(data) and hasattr(data, "dtype"):
            if data.ndim == 0 and type(data).__name__ != "ndarray":  # a numpy scalar
                dt = dt or from_numpy_dtype(data.dtype)
                self.uop = UOp.full((), checked_scalar_value(data.item(), dt), dt, canonical_device(device))
            else:
                dt = dt or from_numpy_dtype(data.dtype)
                if dt is dtypes.bfloat16 or dt in dtypes.fp8s:  # no numpy dtype: round each value in Python
                    raw = pack(data.astype("float64").ravel().tolist(), dt)
                else:
                    raw = data.astype(to_numpy_dtype(dt), copy=False).reshape(data.shape).tobytes(order="C")
                self.uop = _realize.from_bytes(raw, tuple(int(x) for x in data.shape), dt, canonical_device(device))
        elif isinstance(data, (bytes, bytearray, memoryview)):
            raw = bytes(data)
            dt = dt or dtypes.uint8
            if len(raw) % dt.itemsize:
                raise ArgumentError(f"{len(raw)} bytes are not a whole number of {dt.name} elements")
            self.uop = _realize.from_bytes(raw, (len(raw) // dt.itemsize,), dt, canonical_device(device))
        else:
            raise TypeError(f"cannot create a Tensor from {type(data).__name__}: {data!r}")
        if requires_grad is not None:
            self.requires_grad_(requires_grad)

    @property
    def uop(self) -> UOp:
        """The graph of this tensor (a BUFFER view once realized)."""
        return self._uop

    @uop.setter
    def uop(self, value: UOp) -> None:
        _realize.index.register(self, value, getattr(self, "_uop", None))
        self._uop = value

    # ---- properties -------------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape: a tuple of ints, where a symbolic dim is its UOp (a bound Variable such as `i`, or `i*4`)."""
        return cast(tuple[int, ...], self.uop.shape)  # typed as ints: symbolic dims are the exception

    @property
    def dtype(self) -> DType:
        """The element dtype."""
        return self.uop.dtype

    @property
    def device(self) -> str:
        """The canonical device name; for a sharded tensor the tuple of its devices (typed `str` for the common
        single-device case: see `devices`)."""
        d = self.uop.device
        if isinstance(d, tuple):
            return d  # type: ignore[return-value]
        if not isinstance(d, str):
            raise RuntimeError(f"tensor has no device: {d!r}")
        return d

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices holding this tensor: one for an ordinary tensor, several for a sharded one."""
        d = self.uop.device
        return d if isinstance(d, tuple) else (str(d),)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.uop.shape)

    @property
    def max_shape(self) -> tuple[int, ...]:
        """The shape with every symbolic dim at its Variables' maximum (the size of the buffer behind it)."""
        return tuple(int(s.vmax) if isinstance(s, UOp) else s for s in self.shape)

    def max_numel(self) -> int:
        """Number of elements of `max_shape`."""
        return math.prod(self.max_shape)

    def numel(self) -> int:
        """Number of elements (a symbolic int when a dim is symbolic)."""
        n = math.prod(self.shape)
        return n if isinstance(n, int) else _shapes.simplify_dim(n)  # symbolic: a UOp (typed int, as shape)

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
        if isinstance(n := self.shape[0], UOp):
            raise TypeError(f"len() of a tensor whose first dim is symbolic ({n.render()}): use t.shape[0]")
        return n

    def __repr__(self) -> str:
        """The values, like torch: `tensor([1., 2.])` (realizes; see format.py)."""
        from tg.tensor.format import tensor_repr

        return tensor_repr(self)

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ArgumentError(f"the truth value of a tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    # ---- Python and numpy protocols (each realizes) -----------------------------------------------------

    def _scalar(self, what: str) -> ConstType:
        if self.numel() != 1:
            raise TypeError(f"only one-element tensors can be converted to Python {what}, got shape {self.shape}")
        return self.item()

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __index__(self) -> int:
        if not (dtypes.is_int(self.dtype) or self.dtype is dtypes.bool):
            raise TypeError(f"only integer tensors can be used as an index, got {self.dtype.name}")
        return int(self._scalar("index"))

    def __format__(self, spec: str) -> str:
        if not spec:
            return repr(self)
        return format(self._scalar("format"), spec)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        """`np.asarray(t)`: the values as a numpy array (realizes)."""
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle the values (realizing first): a load gets its own buffer on the same device (a sharded tensor:
        its devices and axis)."""
        if isinstance(self.uop.device, tuple):
            return _unpickle_sharded, (bytes(_realize.host_bytes(self)), self.shape, self.dtype, self.devices,
                                       _multi.shard_axis(self), self.requires_grad)  # fmt: skip
        shape = _shapes.concrete_shape(self.shape)  # a symbolic shape pickles as its value
        return _unpickle, (bytes(_realize.host_bytes(self)), shape, self.dtype, self.device, self.requires_grad)

    # ---- realization and data out -----------------------------------------------------------------------

    @classmethod
    def _tensor_class(cls) -> type[Tensor]:
        """The Tensor class itself (never a subclass such as `nn.Parameter`, whose constructor differs): the topic
        modules build their results with it (`cls = self._tensor_class()`, `cls(uop)`), so only this module
        composes them and none of them imports it."""
        return Tensor

    def realize(self, *lst: Tensor) -> Tensor:
        """Compute this tensor (and `lst`) now, in one schedule: `Tensor.realize(a, b)` or `a.realize(b)`."""
        _realize.realize_tensors([self, *lst])
        return self

    def numpy(self) -> Any:
        """The values as a numpy array (realizes): `Tensor([1, 2]).numpy()`."""
        return _realize.to_numpy(self)

    def tolist(self) -> Any:
        """The values as (nested) Python lists (realizes; a scalar for a 0-d tensor)."""
        return unpack(_realize.host_bytes(self), self.dtype, _shapes.concrete_shape(self.shape))

    def item(self) -> ConstType:
        """The single value of a one-element tensor."""
        if self.numel() != 1:
            raise ArgumentError(f"item() needs a tensor with one element, got shape {self.shape}")
        return unpack(_realize.host_bytes(self), self.dtype, ())

    def data(self) -> memoryview:
        """The raw bytes of the values (realizes)."""
        return memoryview(bytes(_realize.host_bytes(self)))

    def to(self, device: Any = None, dtype: Any = None) -> Tensor:
        """This tensor on `device` (a COPY when the device differs; None is the default device) and/or cast to
        `dtype`, as torch's `to`: `t.to("PYTHON")`, `t.to(dtypes.half)`, `t.to("CPU", "float16")`; a sharded
        tensor gathers its shards; a tuple of devices replicates (`shard(devices)`)."""
        if device is not None and not isinstance(device, (str, tuple, list)) and dtype is None:
            return self.cast(device)  # t.to(dtype)
        x = self if dtype is None else self.cast(dtype)
        if device is None and dtype is not None:
            return x  # t.to(dtype=...): only the dtype changes (t.to(None) is the default device)
        if isinstance(device, (tuple, list)):
            return x.shard(tuple(device))
        dev = canonical_device(device)
        if dev == x.device:
            return x
        return Tensor(x.uop.copy_to_device(dev))

    shard = _multi.shard
    shard_ = _multi.shard_
    shard_like = _multi.shard_like

    def contiguous(self) -> Tensor:
        """Force the value into its own buffer when realized (a fusion boundary).

        Each call makes storage of its own: two `Tensor.zeros(4).contiguous()` never share a buffer (the UOps would
        be one hash-consed node otherwise), so writing into one leaves the other as it was. A tensor that already is
        a whole buffer is returned as it is (PyTorch returns `self` too; tinygrad the same buffer): writes into the
        result are writes into this tensor, and a grad leaf stays that leaf.
        """
        if _realize.buffer_of(self.uop) is not None:
            return self
        return Tensor(_realize.own_storage(self.uop))

    # ---- autograd: see autograd.py and gradient.py -------------------------------------------------------

    @property
    def requires_grad(self) -> bool | None:
        """Whether gradients are tracked for this tensor: None (unset, like False), True or False (PyTorch)."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        _autograd.set_requires_grad(self, bool(flag))

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Make this leaf track gradients (float tensors only): `w = Tensor.randn(3, 3).requires_grad_()`."""
        _autograd.set_requires_grad(self, bool(requires_grad))
        return self

    @property
    def is_leaf(self) -> bool:
        """False for results of ops on tensors that require grad (PyTorch's definition)."""
        return self._is_leaf

    def retain_grad(self) -> Tensor:
        """Let `backward()` fill `.grad` of this non-leaf too."""
        if not self._requires_grad:
            raise RuntimeError("retain_grad() needs a tensor that requires grad")
        _autograd.grad_leaves.add(self)
        return self

    def backward(
        self, gradient: Tensor | None = None, retain_graph: bool | None = None, create_graph: bool = False
    ) -> Tensor:
        """Accumulate the gradient of this tensor into `.grad` of the leaves it depends on. A second backward from
        the same tensor raises unless the first passed `retain_graph=True` (torch's rule: it would double the
        gradients); `create_graph=True` leaves the gradients differentiable.

        >>> w = Tensor([1.0, 2.0], requires_grad=True)
        >>> (w * w).sum().backward().tolist()
        5.0
        >>> w.grad.tolist()
        [2.0, 4.0]
        """
        _autograd.backward(self, gradient, retain_graph, create_graph)
        return self

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target, as lazy tensors (functional; needs no requires_grad).

        >>> x = Tensor([3.0])
        >>> (x * x).sum().gradient(x)[0].tolist()
        [6.0]
        """
        return _autograd.gradient(self, targets, gradient)

    def detach(self) -> Tensor:
        """The same value, cut off from gradients (a leaf that does not require grad)."""
        return Tensor(self.uop.detach())

    def contiguous_backward(self) -> Tensor:
        """Identity forward; the gradient flowing back through here is stored in a buffer of its own."""
        return Tensor(self.uop.contiguous_backward())

    training = _autograd.TrainingFlag()

    def assign(self, x: Tensor | Scalar | list) -> Tensor:
        """Write `x` into this tensor's buffer (same shape, dtype, device); earlier reads keep the old value.

        On a view of a buffer (slice, permute, flip, reshape) the write goes into the viewed elements of the
        buffer and is realized at once: `t[1:3].assign(Tensor([7.0, 8.0]))` changes `t`. The same holds for
        bitcasts, also to another itemsize: `a.bitcast(dtypes.uint16).assign(bits)` rewrites `a`'s bytes.
        """
        if not isinstance(x, Tensor):
            x = Tensor(x, device=self.device, dtype=self.dtype)
        if x.shape != self.shape:  # broadcast like torch's copy_ (a scalar fills, a row repeats)
            try:
                broadcast = broadcast_shape(x.shape, self.shape) == self.shape
            except ValueError:
                broadcast = False
            if not broadcast:
                raise ArgumentError(f"assign shape mismatch: target {self.shape} vs value {x.shape}")
            x = x._broadcast_to(self.shape)
        if x.dtype is not self.dtype:
            raise TypeError(f"assign dtype mismatch: target {self.dtype.name} vs value {x.dtype.name}")
        if x.device != self.device:
            raise ArgumentError(f"assign device mismatch: target {self.device} vs value {x.device}")
        if self.uop is x.uop:
            return self
        _realize.separate_twins(self)  # an equal tensor made independently must not see this write
        base = _movement.under_assigns(self.uop, _movement.RESHAPES)
        if (inner := getattr(self, "_bitcast_of", None)) is not None:
            # a bitcast to another itemsize (its last dim scaled): the value's bits, regrouped, go to the source
            inner.assign(x.bitcast(inner.dtype)).realize()
            self.uop = inner.bitcast(self.dtype).uop
        elif base.op in (Ops.BUFFER, Ops.MULTI):  # MULTI: each shard is written on its device
            state = self.uop.unreshaped
            if state.op is Ops.ASSIGN and _realize.has_value_readers(state, exclude=x.uop):
                # the pending write is read by tensors made since: store it first, so that those reads (realized
                # before the next write) see it, not the value written after them
                _realize.realize_tensors([Tensor(state)])
                return self.assign(x)
            if state is base:  # a value computed from this buffer that gradients flow through needs its old value
                x = _autograd.keep_overwritten_reads(base, x)
            self.uop = self.uop.assign(x.uop)
            if base.op is Ops.BUFFER:  # views of the buffer alias it: they see the new value, as in PyTorch
                _realize.repoint_views(state, self.uop, self)
        elif self.uop.op is Ops.SHRINK and _movement.storage_base(self.uop.src[0]).op is Ops.MULTI:
            # uneven shards (a prefix of padded shards): the value, padded the same way, is written into the
            # shards at once (as for other views: the tensor stays a view of its storage)
            padded = Tensor(self.uop.src[0])
            padded.assign(x.pad(tuple((0, int(p) - int(s)) for p, s in zip(padded.shape, self.shape, strict=True))))
            self.uop = padded.realize().uop.shrink(self.uop.arg)
        elif self.uop.op is Ops.BITCAST and self.uop.src[0].dtype.itemsize == self.dtype.itemsize:
            # a bitcast view: write the value's bits through to the viewed tensor, at once
            inner = Tensor(self.uop.src[0])
            inner.assign(Tensor(x.uop.bitcast(inner.dtype))).realize()
            self.uop = inner.uop.bitcast(self.dtype)
        elif (
            self.uop.op in _movement.VIEW_OPS
            and not _realize.is_whole_constant(self.uop)
            and (_movement.view_base(self.uop).op not in (Ops.BUFFER, Ops.ASSIGN))
        ):
            # a view of a value that has no storage yet: store it first (every tensor holding it gets the buffer),
            # then write through the view
            lazy_base = _movement.view_base(self.uop)
            if _realize.is_const_view(lazy_base):
                raise ArgumentError(
                    f"assign into a view of a constant tensor ({lazy_base.dtype.name} {lazy_base.shape}) would be "
                    "lost: it has no storage. Give it storage first (`t = Tensor.zeros(...).contiguous()`), or "
                    "write with `t[index] = value`"
                )
            _realize.realize_tensors([Tensor(lazy_base)])
            return self.assign(x)
        elif _movement.view_base(self.uop).op in (Ops.BUFFER, Ops.ASSIGN):
            # a view of stored data: the write goes to the whole buffer, realized now so that every tensor
            # sharing the buffer sees it (pending reads of the old values are computed first)
            self.uop = _movement.assign_into_view(self.uop, x.uop)
            _realize.realize_tensors([Tensor(_movement.view_base(self.uop))])  # the ASSIGN; self stays a view
        elif _realize.has_live_views(self.uop):
            _realize.realize_tensors([self])  # views of this lazy value alias it: store it, then write into storage
            return self.assign(x)
        else:
            self.uop = x.uop  # nothing stored yet and nothing aliases it: the new value simply replaces the graph
        return self

    # ---- dtype ------------------------------------------------------------------------------------------

    def cast(self, dtype: DType | str) -> Tensor:
        """Convert to `dtype`: `t.cast(dtypes.int32)` (floats truncate toward zero)."""
        dt = to_dtype(dtype_arg(dtype) or dtype)
        return self if dt is self.dtype else Tensor(self.uop.cast(dt))

    def bitcast(self, dtype: DType | str) -> Tensor:
        """Reinterpret the bits as `dtype`; with another itemsize the last dim scales (`float32 (2,) -> uint8 (8,)`)."""
        dt = to_dtype(dtype_arg(dtype) or dtype)
        if dt.itemsize != self.dtype.itemsize:
            out = _aliases.bitcast_resize(self, dt)
            out._bitcast_of = self  # an assign to `out` writes the bits through to this tensor
            return out
        return self if dt is self.dtype else Tensor(self.uop.bitcast(dt))

    # ---- movement: see movement.py ---------------------------------------------------------------------

    @property
    def T(self) -> Tensor:
        """`transpose()`: swaps the first two dims (tinygrad semantics; equals numpy's .T for 2-D)."""
        return self.transpose()

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
            c = Tensor(_scalar_view(dt, checked_scalar_value(other, dt), self.device, x.uop.shape))
            return (c, x) if reverse else (x, c)
        elif _shapes.is_symbolic(other):  # a bound Variable: a weak int like a Python int, its value a kernel argument
            dt = weak_promote(self.dtype, 1)
            x = self.cast(dt)
            c = Tensor(_shapes.symbolic_scalar(other, dt, self.device).reshape((1,) * x.ndim).expand(x.uop.shape))
            return (c, x) if reverse else (x, c)
        else:
            y = Tensor(other, device=self.device)
            dt = least_upper_dtype(self.dtype, y.dtype)
        x, y = self.cast(dt), y.cast(dt)
        shape = broadcast_shape(x.shape, y.shape)
        x, y = x._broadcast_to(shape), y._broadcast_to(shape)
        return (y, x) if reverse else (x, y)

    def _operand_uops(self, other: Any, reverse: bool = False) -> tuple[UOp, UOp]:
        """`_operands`' uops, with no operand tensors for a same-dtype weak scalar or tensor (broadcast over plain-int
        shapes where operand tensors would change no node: in grad mode, or with nothing tracked)."""
        u, v = self._uop, other._uop if isinstance(other, Tensor) else None
        if v is None or v.dtype is not u.dtype or v.device != u.device:
            if not (v is None and other.__class__ in (int, float, bool)) or weak_promote(u.dtype, other) is not u.dtype:
                x, y = self._operands(other, reverse)
                return x._uop, y._uop
            v = _scalar_view(u.dtype, checked_scalar_value(other, u.dtype), self.device, u.shape)
        elif v.shape != u.shape:
            if not _autograd.operand_tensors_add_nothing() or (pair := _movement.broadcast_uops(u, v)) is None:
                x, y = self._operands(other, reverse)
                return x._uop, y._uop
            u, v = pair
        return (v, u) if reverse else (u, v)

    def _binary(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
        x, y = self._operand_uops(other, reverse)
        return Tensor(x.alu(op, y))

    def add(self, x: Any, reverse: bool = False) -> Tensor:
        """self + x (broadcasting)."""
        return self._binary(Ops.ADD, x, reverse)

    def sub(self, x: Any, reverse: bool = False) -> Tensor:
        """self - x (broadcasting)."""
        if _autograd.operand_tensors_add_nothing():
            a, b = self._operand_uops(x, reverse)
            if b.dtype is not dtypes.bool:
                return Tensor(a.alu(Ops.ADD, _negated(b, self.device)))
        a_t, b_t = self._operands(x, reverse)
        return Tensor(a_t.uop.alu(Ops.ADD, (-b_t).uop))

    def mul(self, x: Any, reverse: bool = False) -> Tensor:
        """self * x (broadcasting)."""
        return self._binary(Ops.MUL, x, reverse)

    def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """True division; integer inputs give the default float. `rounding_mode="trunc"` rounds the quotient toward
        zero, `"floor"` toward minus infinity (torch); both keep an integer dtype for integer inputs:
        `Tensor([-7, 7]).div(2, rounding_mode="trunc")` is [-3, 3]."""
        if rounding_mode is not None:
            if rounding_mode == "trunc":
                a, b = self._operands(x, reverse)
                return a.idiv(b) if not dtypes.is_float(a.dtype) else a.div(b).trunc()
            if rounding_mode == "floor":
                return self.floordiv(x, reverse)
            raise RuntimeError(
                f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found {rounding_mode!r}"
            )
        a, b = self._operands(x, reverse)
        if not dtypes.is_float(a.dtype):
            a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
        return Tensor(a.uop.alu(Ops.FDIV, b.uop))

    def _int_division_operands(self, x: Any, reverse: bool) -> tuple[Tensor, Tensor]:
        """Operands of `//`, `%` and `idiv`; an integer divisor that is a known constant zero raises at once."""
        a, b = self._operands(x, reverse)
        if not dtypes.is_float(b.dtype) and _movement.view_base(b.uop).op is Ops.CONST:
            if _movement.view_base(b.uop).arg == 0:
                raise ZeroDivisionError(f"integer division or modulo by zero ({b.dtype.name} constant divisor)")
        return a, b

    def idiv(self, x: Any, reverse: bool = False) -> Tensor:
        """Integer division truncating toward zero (C semantics); by zero gives 0, INT_MIN by -1 wraps."""
        a, b = self._int_division_operands(x, reverse)
        return Tensor(a.uop.alu(Ops.IDIV, b.uop))

    def floordiv(self, x: Any, reverse: bool = False) -> Tensor:
        """Division rounded toward minus infinity (Python's `//`): `Tensor([-7, 7]) // 2` is [-4, 3].

        Integers never trap: a divisor that is zero at run time gives 0 (as numpy), `INT_MIN // -1` wraps to
        INT_MIN; a divisor known to be the constant 0 raises ZeroDivisionError at once."""
        a, b = self._int_division_operands(x, reverse)
        if dtypes.is_float(a.dtype):
            return (a / b).floor()
        q = Tensor(a.uop.alu(Ops.IDIV, b.uop))
        r = Tensor(a.uop.alu(Ops.MOD, b.uop))
        return ((r != 0) & ((r < 0) != (b < 0))).where(q - 1, q)

    def mod(self, x: Any, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor (Python's `%`): `Tensor([-7, 7]) % 3` is [2, 1]; integer `x % 0`
        is 0 at run time (as numpy), a known constant zero divisor raises ZeroDivisionError."""
        a, b = self._int_division_operands(x, reverse)
        if dtypes.is_float(a.dtype):
            return a - (a / b).floor() * b
        r = Tensor(a.uop.alu(Ops.MOD, b.uop))
        return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)

    def __neg__(self) -> Tensor:
        """-self (`logical_not` for bools)."""
        if self.dtype is dtypes.bool:
            return self.logical_not()
        return Tensor(_negated(self.uop, self.device))

    neg = __neg__

    def __invert__(self) -> Tensor:
        if self.dtype is dtypes.bool:
            return self.logical_not()
        return self ^ (int(self.dtype.max) if dtypes.is_unsigned(self.dtype) else -1)

    def __le__(self, x: Any) -> Tensor:
        a, b = self._operands(x)
        if dtypes.is_float(a.dtype):  # NaN compares False both ways, so "not greater" is not "less or equal"
            return (a < b) | (a == b)
        return Tensor(b.uop.alu(Ops.CMPLT, a.uop)).logical_not()

    def __ge__(self, x: Any) -> Tensor:
        a, b = self._operands(x)
        if dtypes.is_float(a.dtype):
            return (b < a) | (a == b)
        return Tensor(a.uop.alu(Ops.CMPLT, b.uop)).logical_not()

    def logical_not(self) -> Tensor:
        """Elementwise not (for any dtype: x == 0)."""
        x = self if self.dtype is dtypes.bool else self.cast(dtypes.bool)
        return Tensor(x.uop.alu(Ops.CMPNE, _scalar_view(dtypes.bool, True, x.device, x.uop.shape)))

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
        """Elementwise max (broadcasting); a NaN on either side gives NaN, as in PyTorch."""
        return self._binary(Ops.MAX, x)

    def minimum(self, x: Any) -> Tensor:
        """Elementwise min (broadcasting); a NaN on either side gives NaN, as in PyTorch."""
        a, b = self._operands(x)
        if dtypes.is_float(a.dtype):  # MAX propagates NaN and splits the gradient of ties, as torch's minimum
            return -((-a).maximum(-b))
        return (a < b).where(a, b)

    def isnan(self) -> Tensor:
        """True where the value is NaN (x != x)."""
        return self != self if dtypes.is_float(self.dtype) else self.full_like(False, dtypes.bool)

    def clip(
        self,
        min_: Any = None,
        max_: Any = None,
        *,
        min: Any = None,
        max: Any = None,
    ) -> Tensor:
        """Clamp into [min_, max_] (torch's `min=`/`max=` keywords too): `t.clip(0, 1)`, `t.clip(max=6)`; NaN stays
        NaN (PyTorch)."""
        min_, max_ = pick("clip", "min_", min_, "min", min), pick("clip", "max_", max_, "max", max)
        if min_ is None and max_ is None:
            raise ArgumentError("clip: give min, max or both (torch raises too)")
        if dtypes.is_int(self.dtype):  # an int bound outside the dtype's range clamps nothing beyond it (torch)
            lo, hi = self.dtype.min, self.dtype.max
            min_, max_ = (v if not isinstance(v, int) or isinstance(v, bool) else builtins.min(builtins.max(v, lo), hi)
                          for v in (min_, max_))  # fmt: skip
        x = self
        if min_ is not None:  # a select, not maximum: at x == min the gradient goes to x (torch's clamp)
            a, b = x._operands(min_)
            x = (a < b).where(b, a)
        if max_ is not None:
            a, b = x._operands(max_)
            x = (a > b).where(b, a)
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

    def _via_float32(self, fn: Callable[[Tensor], Tensor]) -> Tensor | None:
        """fn applied in float32 and rounded once, for float16/bfloat16/fp8 (None for other dtypes): composite
        functions would otherwise round every intermediate (and their constants) to the narrow type."""
        if dtypes.is_float(self.dtype) and self.dtype.itemsize < 4:
            return fn(self.cast(dtypes.float32)).cast(self.dtype)
        return None

    def log(self) -> Tensor:
        """Natural logarithm."""
        if (narrow := self._via_float32(Tensor.log)) is not None:
            return narrow
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

    def abs(self) -> Tensor:
        """|x|."""
        if self.dtype is dtypes.bool or dtypes.is_unsigned(self.dtype):
            return self
        if not dtypes.is_float(self.dtype):
            return (self < 0).where(-self, self)
        # zeros (either sign) give +0 and a zero gradient (torch's sign(0) = 0); NaN stays NaN
        return (self < 0).where(-self, ((self > 0) | (self != self)).where(self, 0.0))

    def sign(self) -> Tensor:
        """-1, 0 or 1."""
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def trunc(self) -> Tensor:
        """Round toward zero."""
        return self if not dtypes.is_float(self.dtype) else Tensor(self.uop.alu(Ops.TRUNC))

    def floor(self) -> Tensor:
        """Round toward minus infinity."""
        t = self.trunc()
        return t if not dtypes.is_float(self.dtype) else (self < t).where(t - 1, t)

    def ceil(self) -> Tensor:
        """Round toward plus infinity."""
        t = self.trunc()
        return t if not dtypes.is_float(self.dtype) else (self > t).where(t + 1, t)

    def square(self) -> Tensor:
        """x * x."""
        return self * self

    def pow(self, x: Any, reverse: bool = False) -> Tensor:
        """self ** x. Integer tensors with small integer Python exponents multiply exactly (wrapping); float
        powers use the POW op (C's pow: libm on the CPU), correctly signed for negative bases with integer
        exponents and accurate for huge results (`10.0 ** Tensor([30.0])`)."""
        small = 64 if not dtypes.is_float(self.dtype) else 2  # repeated squaring compounds float rounding
        int_exponent = isinstance(x, int) or dtypes.is_float(self.dtype)  # int ** 2.0 is a float result (torch)
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer() \
                and abs(x) <= small and int_exponent:  # fmt: skip
            n, acc, base = abs(int(x)), None, self
            while n:
                if n & 1:
                    acc = base if acc is None else acc * base
                base, n = base * base, n >> 1
            ret = self.ones_like() if acc is None else acc
            if x < 0 and not dtypes.is_float(self.dtype):
                raise ArgumentError(f"integers to negative integer powers are not allowed ({self.dtype.name} ** {x})")
            return ret.reciprocal() if x < 0 else ret
        if not reverse and isinstance(x, float) and x == 0.5:
            return self.sqrt()
        base, exp = self._operands(x, reverse)
        return _transcendental.pow_(base, exp)

    # ---- accurate math: see transcendental.py --------------------------------------------------------------

    exp = _transcendental.exp
    expm1 = _transcendental.expm1
    log1p = _transcendental.log1p
    cos = _transcendental.cos
    tan = _transcendental.tan
    sigmoid = _transcendental.sigmoid
    tanh = _transcendental.tanh
    erf = _transcendental.erf


def _negated(u: UOp, device: str) -> UOp:
    """`u * -1`, the node of `-t` (-1 as the cached constant view: UOp.full's node, once per dtype/device/shape)."""
    return u.alu(Ops.MUL, _scalar_view(u.dtype, scalar_value(-1, u.dtype), device, u.shape))


def _unpickle(raw: bytes, shape: tuple[int, ...], dtype: DType, device: str, requires_grad: bool | None) -> Tensor:
    """Inverse of `Tensor.__reduce__`: a tensor with its own buffer holding `raw`."""
    return Tensor(_realize.from_bytes(raw, shape, dtype, canonical_device(device)), requires_grad=requires_grad)


def _unpickle_sharded(
    raw: bytes, shape: tuple[int, ...], dtype: DType, devices: tuple[str, ...], axis: int | None,
    requires_grad: bool | None,
) -> Tensor:  # fmt: skip
    """Inverse of `Tensor.__reduce__` for a sharded tensor: sharded again over the same devices and axis."""
    whole = Tensor(_realize.from_bytes(raw, shape, dtype, canonical_device(devices[0])))
    ret = whole.shard(devices, axis).realize()
    if requires_grad is not None:
        ret.requires_grad = requires_grad
    return ret
