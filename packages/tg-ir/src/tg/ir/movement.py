"""Tensor-level UOps: shape and device inference, movement ops and the other tensor-graph constructors.

Shapes are tuples of `sint` (int or symbolic UOp). Broadcasting is never implicit: elementwise sources must have
equal shapes; the tensor layer broadcasts with reshape + expand. Kernel-level nodes have no shape (`_shape is None`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tg.ir.dtype import dtypes
from tg.ir.helpers import cached_property, prod
from tg.ir.ops import GroupOp, Ops

if TYPE_CHECKING:
    from tg.ir.uop import UOp, sint

_ALU = GroupOp.ALU
_NO_SHAPE = frozenset({Ops.DEFINE_VAR, Ops.BIND, Ops.RANGE, Ops.SPECIAL, Ops.PARAM, Ops.INDEX, Ops.LOAD, Ops.STORE,
                       Ops.END, Ops.SINK, Ops.GROUP, Ops.DEVICE, Ops.UNIQUE, Ops.REDUCE, Ops.VECTORIZE,
                       Ops.GEP})  # fmt: skip
_PASS_SHAPE = frozenset({Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY, Ops.ASSIGN, Ops.AFTER,
                         Ops.MSELECT, Ops.MSTACK})  # fmt: skip


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _all_ints(shape: tuple[Any, ...]) -> bool:
    """Every entry a plain int (not a bool, not symbolic)."""
    return all(x.__class__ is int for x in shape)


def _check_sint(name: str, x: Any) -> None:
    if not (_is_int(x) or isinstance(x, MovementMixin)):  # MovementMixin: UOp, without importing it per call
        raise TypeError(f"{name}: expected an int or symbolic int, got {x!r}")


def _resolve_ge(a: sint, b: sint) -> bool:
    """a >= b where it can be decided by the bounds (True if undecidable)."""
    if _is_int(a) and _is_int(b):
        return bool(a >= b)
    ge = a >= b if isinstance(a, MovementMixin) else b <= a  # a bool UOp: one side is symbolic
    return bool(ge.vmin) if ge.vmin == ge.vmax else True  # type: ignore[union-attr]


def _fs(shape: Any) -> str:
    """A shape (or pad/shrink arg) for error messages, symbolic entries rendered as expressions."""
    if isinstance(shape, MovementMixin):  # a UOp
        return shape.render()  # type: ignore[attr-defined]
    if isinstance(shape, tuple):
        inner = ", ".join(_fs(x) for x in shape)
        return f"({inner},)" if len(shape) == 1 else f"({inner})"
    return repr(shape)


def _simp(x: sint) -> sint:
    """simplify() a symbolic int, an int when it folds."""
    if isinstance(x, int):
        return x
    ret = x.ssimplify()
    return ret if isinstance(ret, MovementMixin) else int(ret)


def _eq(a: sint, b: sint) -> bool:
    """Structural equality of sints: ints by value, UOps by identity (after simplify)."""
    if a.__class__ is int and b.__class__ is int:
        return a == b
    if isinstance(a, MovementMixin) or isinstance(b, MovementMixin):  # UOps
        return a is b or (isinstance(a, MovementMixin) and isinstance(b, MovementMixin)
                          and a.simplify() is b.simplify())  # fmt: skip
    return bool(a == b)


# ops whose device is not simply that of their first source with one (the walk below handles them)
_OWN_DEVICE = frozenset({Ops.DEVICE, Ops.MULTI, Ops.MSELECT, Ops.BUFFER, Ops.COPY})


def _fill_sources_first(node: Any, name: str) -> None:
    """Compute the cached property `name` of every node under `node` that lacks it, sources before users (an
    iterative walk: a property computed from its sources' values then never recurses more than one level)."""
    for u in node.toposort(gate=lambda n: n is node or name not in n.__dict__):
        if u is not node:
            getattr(u, name)


class MovementMixin:
    """Shape/device inference and tensor-graph constructors for UOp."""

    op: Ops
    src: tuple[UOp, ...]
    arg: Any

    @cached_property
    def _shape(self) -> tuple[sint, ...] | None:
        op, src = self.op, self.src
        if op is Ops.BUFFER:  # needs no source's shape (a JIT replay makes new ones per call)
            return (self.arg,)
        for x in src:
            if "_shape" not in x.__dict__:  # a graph built without shapes (a rewrite): fill them sources first,
                _fill_sources_first(self, "_shape")  # so the recursion below is one level deep at any depth
                break
        if op in _ALU:  # the common case first: kernel-level math has no shape
            for x in src:
                if (sh := x._shape) is not None:
                    return sh
            return None
        if op in _NO_SHAPE:
            return None
        if op is Ops.BUFFER_VIEW:
            return (self.arg[0],)
        if op in (Ops.CONST, Ops.VCONST):
            return () if src else None
        if op in (Ops.RESHAPE, Ops.EXPAND):
            return tuple(self.arg)
        if op in GroupOp.Movement or op is Ops.REDUCE_AXIS:
            ps = src[0]._shape
            if ps is None:
                raise ValueError(f"{op} on a node without a shape ({src[0].op})")
            if op is Ops.PERMUTE:
                return tuple(ps[i] for i in self.arg)
            if op is Ops.PAD:
                return tuple(_simp(s + b + a) for s, (b, a) in zip(ps, self.arg, strict=True))
            if op is Ops.SHRINK:
                return tuple(_simp(e - b) for b, e in self.arg)
            if op is Ops.FLIP:
                return ps
            return tuple(1 if i in self.arg[1] else s for i, s in enumerate(ps))  # REDUCE_AXIS keeps dims
        if op is Ops.MSELECT and isinstance(self.arg, tuple):  # (i, axis): device i's shard of a logical tensor
            ps, axis, n = src[0]._shape, self.arg[1], len(src[0].device or ())
            if ps is None or axis is None or n == 0:
                return ps
            return tuple(s // n if i == axis else s for i, s in enumerate(ps))
        if op in _PASS_SHAPE:
            return src[0]._shape
        if op is Ops.GETTUPLE:  # output i of a function call: the shape of that body output
            return src[0].src[0].src[self.arg]._shape
        if op is Ops.MULTI:  # the logical shape: shards side by side on the sharded axis
            ps = src[0]._shape
            if ps is None or self.arg is None:
                return ps
            return tuple(s * len(src) if i == self.arg else s for i, s in enumerate(ps))
        if op in GroupOp.Elementwise:
            shapes = [s._shape for s in src if s._shape is not None]
            if not shapes:
                return None
            if op is Ops.BITCAST and (isz := self.dtype.itemsize) != (osz := src[0].dtype.itemsize):  # type: ignore[attr-defined]
                s = shapes[0]
                if not s:
                    raise ValueError(f"BITCAST between sizes {osz} and {isz} needs at least one dim")
                return (*s[:-1], s[-1] * osz // isz)
            return shapes[0]
        return None

    @property
    def shape(self) -> tuple[sint, ...]:
        """The shape of a tensor-level node (RuntimeError for kernel-level nodes, which have none)."""
        if (s := self._shape) is None:
            raise RuntimeError(f"{self.op} has no shape (not a tensor-level node)")
        return s

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> sint:
        """Element count: BUFFER -> its arg; tensor nodes -> prod(shape)."""
        if self.op is Ops.BUFFER:
            return self.arg
        return prod(self.shape)

    @cached_property
    def device(self) -> str | tuple[str, ...] | None:
        """The device a tensor-level node lives on (None if it has none): that of its first source that has one."""
        # Walked with an explicit stack, not recursion: tensor graphs can be thousands of nodes deep.
        stack: list[Any] = [self]
        if self.op not in _OWN_DEVICE:  # the common case: every source's device is known (sources built first)
            for s in self.src:
                if (known := s.__dict__.get("device", s)) is s:
                    break  # not computed yet: the walk below
                if known is not None:
                    return known
            else:
                return None
        seen: set[Any] = set()
        while stack:
            node = stack.pop()
            if node.op is Ops.DEVICE:
                return node.arg
            if node.op is Ops.MULTI:
                return tuple(str(s.device) for s in node.src)
            if node.op is Ops.MSELECT and isinstance(node.arg, tuple) and isinstance(d := node.src[0].device, tuple):
                return d[node.arg[0]]
            if node.op in (Ops.BUFFER, Ops.COPY):
                return node.src[1].device
            if node is not self and "device" in node.__dict__:  # already known below this node
                if (known := node.__dict__["device"]) is not None:
                    return known
                continue
            if node not in seen:
                seen.add(node)
                stack.extend(reversed(node.src))
        return None

    # ---- movement ops -----------------------------------------------------------------------------------------

    def _node(self, op: Ops, dtype: Any, src: tuple[Any, ...] = (), **kwargs: Any) -> UOp:
        """A new node of this node's class (UOp): the mixin builds nodes without importing tg.ir.uop."""
        return self.__class__(op, dtype, src, **kwargs)  # type: ignore[call-arg,return-value]

    def _mop(self, op: Ops, arg: Any) -> UOp:
        # the node's own class (UOp) rather than an import per call: this is on every movement op's path
        return self.__class__(op, self.dtype, (self,), arg)  # type: ignore[attr-defined,call-arg,return-value]

    def reshape(self, shape: tuple[sint, ...]) -> UOp:
        """Same elements, new shape (element count must match)."""
        shape = tuple(shape)
        old = self.shape
        if _all_ints(shape) and _all_ints(old):  # the common case, checked without per-dim calls
            if shape == old:
                return self  # type: ignore[return-value]
            if min(shape, default=0) >= 0 and math.prod(shape) == math.prod(old):
                return self._mop(Ops.RESHAPE, shape)
        for s in shape:
            _check_sint("reshape", s)
            if _is_int(s) and s < 0:
                raise ValueError(f"reshape: negative dimension in {_fs(shape)}")
        if not _eq(prod(shape), prod(self.shape)):
            raise ValueError(f"reshape: can't reshape {_fs(self.shape)} to {_fs(shape)} (sizes differ)")
        if shape == self.shape:
            return self  # type: ignore[return-value]
        return self._mop(Ops.RESHAPE, shape)

    def permute(self, order: tuple[int, ...]) -> UOp:
        """Reorder axes; `order` must be a permutation of range(ndim)."""
        order = tuple(order)
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"permute: {order} is not a permutation of {self.ndim} axes (shape {_fs(self.shape)})")
        if order == tuple(range(self.ndim)):
            return self  # type: ignore[return-value]
        return self._mop(Ops.PERMUTE, order)

    def expand(self, shape: tuple[sint, ...]) -> UOp:
        """Broadcast size-1 axes to `shape` (same ndim)."""
        shape = tuple(shape)
        old = self.shape
        if len(shape) != len(old):
            raise ValueError(f"expand: {_fs(old)} to {_fs(shape)} changes the number of dims")
        if _all_ints(shape) and _all_ints(old) and all(s == n or s == 1 for s, n in zip(old, shape, strict=True)):
            if min(shape, default=0) >= 0:  # the common case, checked without per-dim calls
                return self if shape == old else self._mop(Ops.EXPAND, shape)  # type: ignore[return-value]
        for s, n in zip(old, shape, strict=True):
            _check_sint("expand", n)
            if _is_int(n) and n < 0:
                raise ValueError(f"expand: negative dimension in {_fs(shape)}")
            if not (_eq(s, n) or _eq(s, 1)):
                raise ValueError(f"expand: can't expand {_fs(self.shape)} to {_fs(shape)} (only size-1 axes can grow)")
        if shape == self.shape:
            return self  # type: ignore[return-value]
        return self._mop(Ops.EXPAND, shape)

    def pad(self, padding: tuple[tuple[sint, sint], ...]) -> UOp:
        """Pad each axis with (before, after) zeros; amounts must be non-negative."""
        padding = tuple((b, a) for b, a in padding)
        if len(padding) != self.ndim:
            raise ValueError(f"pad: {len(padding)} pairs for shape {_fs(self.shape)}")
        for b, a in padding:
            _check_sint("pad", b)
            _check_sint("pad", a)
            if not (_resolve_ge(b, 0) and _resolve_ge(a, 0)):
                raise ValueError(f"pad: negative padding in {_fs(padding)}")
        if all(_eq(b, 0) and _eq(a, 0) for b, a in padding):
            return self  # type: ignore[return-value]
        return self._mop(Ops.PAD, padding)

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> UOp:
        """Keep [start, end) of each axis; needs 0 <= start <= end <= size."""
        arg = tuple((s, e) for s, e in arg)
        if len(arg) != self.ndim:
            raise ValueError(f"shrink: {len(arg)} pairs for shape {_fs(self.shape)}")
        for (s, e), n in zip(arg, self.shape, strict=True):
            _check_sint("shrink", s)
            _check_sint("shrink", e)
            if not (_resolve_ge(s, 0) and _resolve_ge(e, s) and _resolve_ge(n, e)):
                raise ValueError(f"shrink: {_fs(arg)} out of bounds for shape {_fs(self.shape)}")
        if all(_eq(s, 0) and _eq(e, n) for (s, e), n in zip(arg, self.shape, strict=True)):
            return self  # type: ignore[return-value]
        return self._mop(Ops.SHRINK, arg)

    def flip(self, axes: tuple[bool, ...]) -> UOp:
        """Reverse the axes marked True (one bool per axis)."""
        axes = tuple(axes)
        if len(axes) != self.ndim or not all(isinstance(a, bool) for a in axes):
            raise ValueError(f"flip: need {self.ndim} bools (one per axis of {_fs(self.shape)}), got {axes}")
        if not any(axes):
            return self  # type: ignore[return-value]
        return self._mop(Ops.FLIP, axes)

    def r(self, op: Ops, axes: tuple[int, ...]) -> UOp:
        """REDUCE_AXIS over `axes` with `op` (ADD, MUL, MAX); reduced axes become 1."""
        if op not in GroupOp.Reduce:
            raise ValueError(f"r: reduce op must be ADD, MUL or MAX, got {op}")
        axes = tuple(sorted(set(axes)))
        if axes and not (axes[0] >= 0 and axes[-1] < len(self.shape)):
            raise ValueError(f"r: axes {axes} out of range for shape {_fs(self.shape)}")
        if not axes:
            return self  # type: ignore[return-value]
        return self._mop(Ops.REDUCE_AXIS, (op, axes))

    # ---- other tensor-graph nodes -----------------------------------------------------------------------------

    def contiguous(self, *args: UOp, **kwargs: Any) -> UOp:
        """CONTIGUOUS: the scheduler must materialise this value."""
        return self._node(Ops.CONTIGUOUS, self.dtype, (self, *args), **kwargs)  # type: ignore[attr-defined]

    def contiguous_backward(self) -> UOp:
        """CONTIGUOUS_BACKWARD: contiguous in the backward pass only."""
        return self._mop(Ops.CONTIGUOUS_BACKWARD, None)

    def detach(self) -> UOp:
        """DETACH: stops gradients."""
        return self._mop(Ops.DETACH, None)

    def copy_to_device(self, device: str | tuple[str, ...], arg: Any = None) -> UOp:
        """COPY(self, DEVICE(device)): the value on another device."""
        if not (isinstance(device, str) or (isinstance(device, tuple) and all(isinstance(d, str) for d in device))):
            raise TypeError(f"copy_to_device: device must be a str or a tuple of str, got {device!r}")
        device_node = self._node(Ops.DEVICE, dtypes.void, arg=device)
        return self._node(Ops.COPY, self.dtype, (self, device_node), arg=arg)  # type: ignore[attr-defined]

    def multi(self, *others: UOp, axis: int | None) -> UOp:
        """MULTI(self, *others): one logical tensor made of one graph per device, split on `axis` (None: replicated)."""
        srcs: tuple[UOp, ...] = (self, *others)  # type: ignore[arg-type]
        dtype = srcs[0].dtype
        if any(s.dtype is not dtype or s.shape != self.shape for s in srcs):
            raise ValueError(f"multi: every shard needs one dtype and shape, got {[(s.dtype, s.shape) for s in srcs]}")
        if axis is not None and not 0 <= axis < len(self.shape):
            raise ValueError(f"multi: axis {axis} out of range for shard shape {_fs(self.shape)}")
        return self._node(Ops.MULTI, dtype, srcs, arg=axis)

    def mselect(self, i: int, axis: int | None) -> UOp:
        """MSELECT: device i's part of a tensor on several devices, with the shards split on `axis` (None: all)."""
        return self._node(Ops.MSELECT, self.dtype, (self,), arg=(i, axis))  # type: ignore[attr-defined]

    def assign(self, value: UOp) -> UOp:
        """ASSIGN(self, value): write `value` into the buffer behind self (shapes and dtypes must match)."""
        if value.dtype is not self.dtype:  # type: ignore[attr-defined]
            raise TypeError(f"assign: dtype mismatch, target {self.dtype} vs value {value.dtype}")  # type: ignore[attr-defined]
        if self._shape != value._shape:
            raise ValueError(f"assign: shape mismatch, target {_fs(self._shape)} vs value {_fs(value._shape)}")
        return self._node(Ops.ASSIGN, self.dtype, (self, value))  # type: ignore[attr-defined]
