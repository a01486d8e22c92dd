"""The UOp: an immutable, hash-consed IR node, plus Variables, symbolic ints (sint) and printing."""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import weakref
from collections.abc import Callable, Collection, Iterable
from typing import Any, ClassVar

from tg.ir.alu import cdiv, cmod, exec_alu
from tg.ir.dtype import AddrSpace, ConstType, DType, PtrDType, dtypes
from tg.ir.floats import truncate
from tg.ir.helpers import argfix, cached_property, prod
from tg.ir.mathtrait import MathMixin
from tg.ir.movement import MovementMixin, _eq, _fill_sources_first, _fs
from tg.ir.ops import AxisType, GroupOp, Ops

_CMP = GroupOp.Comparison
_ALU_OPS = GroupOp.ALU
_BINARY_SAME = GroupOp.Binary - GroupOp.Comparison - {Ops.SHL, Ops.SHR, Ops.THREEFRY}
_FLOAT_ONLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL})
_INT_OR_BOOL_ONLY = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})
_BINARY_ANY_DTYPE = _BINARY_SAME - _INT_OR_BOOL_ONLY - _FLOAT_ONLY


def _check_alu(op: Ops, dtype: DType, src: tuple[UOp, ...]) -> None:
    """Cheap construction-time type checks for ALU ops; raise naming op and dtypes."""
    if op in _BINARY_ANY_DTYPE and len(src) == 2 and src[0].dtype is dtype and src[1].dtype is dtype:
        return  # the common case (ADD, MUL, MAX, ... of one dtype) passes every check below
    n = 1 if op in GroupOp.Unary else 2 if op in GroupOp.Binary else 3
    if len(src) != n:
        raise TypeError(f"{op} takes {n} sources, got {len(src)}")
    if op in _BINARY_SAME or op in GroupOp.Unary or op is Ops.MULACC:
        if not all(s.dtype is dtype for s in src):
            raise TypeError(f"{op} needs sources of its dtype {dtype}, got {tuple(s.dtype for s in src)}")
    elif op in _CMP:
        if src[0].dtype is not src[1].dtype:
            raise TypeError(f"{op} needs equal source dtypes, got {src[0].dtype} and {src[1].dtype}")
        if dtype is not dtypes.bool.vec(src[0].dtype.count):
            raise TypeError(f"{op} returns bool, got dtype {dtype}")
    elif op is Ops.WHERE:
        if src[0].dtype.scalar() is not dtypes.bool or src[1].dtype is not dtype or src[2].dtype is not dtype:
            raise TypeError(f"WHERE needs (bool, {dtype}, {dtype}), got {tuple(s.dtype for s in src)}")
    elif op in (Ops.SHL, Ops.SHR) and src[0].dtype is not dtype:
        raise TypeError(f"{op} needs its first source of dtype {dtype}, got {src[0].dtype}")
    if op in _FLOAT_ONLY and not dtypes.is_float(dtype):
        raise TypeError(f"{op} needs a float dtype, got {dtype} (cast ints to a float first)")
    if op in _INT_OR_BOOL_ONLY and not (dtypes.is_int(dtype) or dtype.scalar() is dtypes.bool):
        raise TypeError(f"{op} needs an int or bool dtype, got {dtype}")


def _check_value_dtype(what: str, src: DType, dtype: DType) -> None:
    """cast/bitcast targets must be value dtypes."""
    if not isinstance(dtype, DType):
        raise TypeError(f"{what}: target must be a DType, got {dtype!r}")
    if dtypes.void in (dtype, src):
        raise TypeError(f"{what}: can't convert {src} to {dtype} (void has no value)")


def _check_const_arg(dtype: DType, arg: Any) -> None:
    """A CONST's arg has its dtype's Python type. Hash-consing keys on ==, and True == 1 == 1.0, so a CONST built
    with the wrong type would be handed back (wrong type and all) to every later UOp.const of the same value."""
    if isinstance(dtype, PtrDType):
        return
    want = bool if dtype.scalar() is dtypes.bool else int if dtypes.is_int(dtype) else float if dtypes.is_float(
        dtype) else None  # fmt: skip
    if want is not None and arg.__class__ is not want:
        raise TypeError(f"CONST of {dtype} needs a {want.__name__} arg, got {arg!r}; use UOp.const to convert")


class UOpMetaClass(type):
    """Hash-consing: UOp(...) with the same (op, dtype, src, arg, tag) returns the existing live node."""

    ucache: ClassVar[dict[tuple[Any, ...], weakref.ReferenceType[UOp]]] = {}

    def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
                 tag: Any = None) -> UOp:  # fmt: skip
        akey = ("-0.0",) if arg.__class__ is float and arg == 0.0 and math.copysign(1.0, arg) < 0 else arg
        key = (op, dtype, src, akey, tag)
        try:
            if (wr := UOpMetaClass.ucache.get(key)) is not None and (ret := wr()) is not None:
                return ret
        except TypeError:
            if src.__class__ is not tuple:
                raise TypeError(f"UOp {op}: src must be a tuple of UOps, got {src!r}") from None
            raise TypeError(f"UOp {op}: arg and tag must be hashable, got arg={arg!r} tag={tag!r}") from None
        ret = type.__call__(cls, op, dtype, src, arg, tag)
        ret.__dict__["_ukey"] = key
        UOpMetaClass.ucache[key] = weakref.ref(ret)
        return ret


class UOp(MathMixin, MovementMixin, metaclass=UOpMetaClass):
    """An immutable IR node. Equal structure means the same object, so `a is b` is graph equality.

    Note: `==`/`!=` are identity comparisons (needed for hashing); build comparison nodes with `.eq()` / `.ne()`.
    """

    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    tag: Any
    _ukey: tuple[Any, ...]  # the hash-consing key (op, dtype, src, arg key, tag), set when the node is made

    def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
                 tag: Any = None) -> None:  # fmt: skip
        # every node is built here: plain loops and stores, no generators or keyword dicts (it is the hottest
        # constructor of the framework)
        if op.__class__ is not Ops:
            raise TypeError(f"UOp op must be an Ops member, got {op!r}")
        if dtype.__class__ is not DType and not isinstance(dtype, DType):
            raise TypeError(f"UOp {op}: dtype must be a DType, got {dtype!r}")
        if src.__class__ is not tuple:
            raise TypeError(f"UOp {op}: src must be a tuple of UOps, got {src!r}")
        for s in src:
            if s.__class__ is not UOp:
                raise TypeError(f"UOp {op}: src must be a tuple of UOps, got {src!r}")
        if op in _ALU_OPS:
            _check_alu(op, dtype, src)
        elif op is Ops.CONST:
            _check_const_arg(dtype, arg)
        d = self.__dict__
        d["op"], d["dtype"], d["src"], d["arg"], d["tag"] = op, dtype, src, arg, tag

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable (tried to set {name}); use .replace()")

    def __del__(self, _ucache: dict[tuple[Any, ...], Any] = UOpMetaClass.ucache) -> None:
        # drop the cache entry unless it already belongs to a newer node with the same key (the default argument
        # keeps the cache reachable during interpreter shutdown)
        key = self.__dict__.get("_ukey")
        if key is not None and (wr := _ucache.get(key)) is not None and ((o := wr()) is None or o is self):
            del _ucache[key]

    def __reduce__(self) -> tuple[Any, ...]:
        # a UNIQUE gets a fresh number when loaded, so unpickled buffers never alias buffers of the loading process
        # (or of other loads); references inside one pickle still share it through the pickle memo
        if self.op is Ops.UNIQUE:
            return UOp.unique, ()
        if self._depth < _PICKLE_FLAT_DEPTH:
            return UOp, (self.op, self.dtype, self.src, self.arg, self.tag)
        # deep graphs: a flat table in toposort order, so pickle doesn't recurse once per level
        topo = list(self.toposort())
        index = {u: i for i, u in enumerate(topo)}
        table = [u if u.op is Ops.UNIQUE else (u.op, u.dtype, tuple(index[s] for s in u.src), u.arg, u.tag)
                 for u in topo]  # fmt: skip
        return _uop_from_table, (table,)

    @cached_property
    def _depth(self) -> int:
        """Longest path to a leaf (computed iteratively, so deep graphs are fine)."""
        for u in self.toposort():
            if "_depth" not in u.__dict__:
                u.__dict__["_depth"] = 1 + max((s.__dict__["_depth"] for s in u.src), default=0)
        return self.__dict__["_depth"]

    def __bool__(self) -> bool:
        v = self.simplify()
        if v.op is Ops.CONST:
            return bool(v.arg)
        raise TypeError(f"symbolic {self.op} has no truth value: {v.render()}{_symbolic_hint(v)}")

    def __int__(self) -> int:
        v = self.simplify()
        if v.op is Ops.CONST:
            return int(v.arg)
        raise TypeError(f"symbolic {self.op} is not a concrete int: {v.render()}{_symbolic_hint(v)}")

    def __index__(self) -> int:
        return self.__int__()

    def __float__(self) -> float:
        v = self.simplify()
        if v.op is Ops.CONST:
            return float(v.arg)
        raise TypeError(f"symbolic {self.op} is not a concrete float: {v.render()}{_symbolic_hint(v)}")

    def replace(self, **kwargs: Any) -> UOp:
        """A copy with some of op/dtype/src/arg/tag changed (returns self if nothing changes)."""
        bad = set(kwargs) - {"op", "dtype", "src", "arg", "tag"}
        if bad:
            raise TypeError(f"replace got unknown fields {sorted(bad)}")
        new = (kwargs.get("op", self.op), kwargs.get("dtype", self.dtype), kwargs.get("src", self.src),
               kwargs.get("arg", self.arg), kwargs.get("tag", self.tag))  # fmt: skip
        if all(a is b for a, b in zip(new, (self.op, self.dtype, self.src, self.arg, self.tag), strict=True)):
            return self
        return UOp(*new)

    def rtag(self, tag: Any = True) -> UOp:
        """Same node with a different tag."""
        return self.replace(tag=tag)

    @cached_property
    def key(self) -> bytes:
        """A stable content hash (sha256) of the whole graph, equal across processes."""
        # sources first over the toposort (no recursion: graphs can be 10,000 nodes deep), each node's key cached
        for u in self.toposort(gate=lambda n: "key" not in n.__dict__):
            h = hashlib.sha256(str((u.op, u.dtype, u.arg, u.tag)).encode())
            for s in u.src:
                h.update(s.__dict__["key"])
            u.__dict__["key"] = h.digest()
        return self.__dict__["key"]

    # ---- graph traversal --------------------------------------------------------------------------------------

    def toposort(self, gate: Callable[[UOp], bool] | None = None) -> dict[UOp, None]:
        """Every node reachable from self, sources before users (self last). Nodes where `gate(u)` is False are
        left out together with everything reachable only through them (tinygrad's semantics)."""
        ret: dict[UOp, None] = {}
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            node, visited = stack.pop()
            if node in ret:
                continue
            if visited:
                ret[node] = None
            elif gate is None or gate(node):
                stack.append((node, True))
                for s in reversed(node.src):
                    if s not in ret:
                        stack.append((s, False))
        return ret

    @cached_property
    def backward_slice(self) -> dict[UOp, None]:
        """All nodes self depends on (excluding self)."""
        ret = self.toposort()
        del ret[self]
        return ret

    def substitute(self, dvars: dict[UOp, UOp]) -> UOp:
        """Replace nodes (keys) by other nodes (values) everywhere in the graph, rebuilding users."""
        if not dvars:
            return self
        cache: dict[UOp, UOp] = dict(dvars)
        for u in self.toposort(gate=lambda u: u not in dvars):
            new_src = tuple([cache[s] for s in u.src])
            cache[u] = u if new_src == u.src else u.replace(src=new_src)
        return cache[self]

    def variables(self) -> list[UOp]:
        """The DEFINE_VAR nodes of the graph (BINDs unwrapped), sorted by name."""
        found = {u.src[0] if u.op is Ops.BIND else u: None for u in self.toposort() if u.op in (Ops.DEFINE_VAR,
                 Ops.BIND)}  # fmt: skip
        return sorted(found, key=lambda v: v.arg)

    # ---- constructors -----------------------------------------------------------------------------------------

    @staticmethod
    def const(dtype: DType, b: ConstType | tuple[ConstType, ...], device: str | tuple[str, ...] | None = None,
              shape: tuple[sint, ...] | None = None) -> UOp:  # fmt: skip
        """A constant. Vector dtypes take a tuple (VCONST) or broadcast a scalar. With `device` it is a tensor-level
        constant (shape ()), reshaped and expanded to `shape` if given."""
        if device is None and ((b.__class__ is int and dtype in _INT_SCALARS) or (b.__class__ is float and dtype in
                               _FLOAT_SCALARS and b == b)):  # fmt: skip
            if dtype.min <= b <= dtype.max:  # fast path: an in-range Python scalar of the right kind
                # a float constant holds a value of its dtype (1.0001 as float32 is 1.00010001659...): folding then
                # computes exactly what the kernel would, step by step
                return UOp(Ops.CONST, dtype, (), _ROUND_FLOAT[dtype](b) if dtype in _ROUND_FLOAT else b)
        if isinstance(b, UOp):
            return b.cast(dtype) if b.dtype is not dtype else b
        if isinstance(b, tuple) and len(set(b)) == 1:
            b = b[0]
        if isinstance(b, float) and math.isnan(b):
            b = math.nan
        arg = dtypes.as_const(b, dtype if isinstance(b, tuple) else dtype.scalar())
        if arg.__class__ is int and dtypes.is_int(dtype) and not dtype.min <= arg <= dtype.max:
            arg = truncate[dtype.scalar()](arg)  # ints wrap like C (e.g. -1 as uint32 is 0xFFFFFFFF)
        elif (rnd := _ROUND_FLOAT.get(dtype.scalar())) is not None:  # floats hold values of their dtype
            arg = tuple(_round_float(rnd, x) for x in arg) if isinstance(arg, tuple) else _round_float(rnd, arg)
        src = (UOp(Ops.DEVICE, arg=device),) if device is not None else ()
        ret = UOp(Ops.VCONST if isinstance(b, tuple) else Ops.CONST, dtype, src, arg)
        if shape is not None:
            if device is None:
                raise ValueError("UOp.const with a shape needs a device")
            ret = ret.reshape((1,) * len(shape)).expand(shape)
        return ret

    def const_like(self, b: ConstType) -> UOp:
        """A constant of self's dtype; tensor-level nodes get a constant of the same device and shape."""
        if self._shape is None or self.op in (Ops.DEFINE_VAR, Ops.BIND):
            return UOp.const(self.dtype, b)
        return UOp.const(self.dtype, b, self.device, self.shape)

    @staticmethod
    def full(shape: tuple[sint, ...], value: ConstType, dtype: DType, device: str | tuple[str, ...]) -> UOp:
        """A tensor-level constant of `shape` on `device`."""
        return UOp.const(dtype, value, device, tuple(shape))

    @staticmethod
    def variable(name: str, min_val: ConstType, max_val: ConstType, dtype: DType = dtypes.int32) -> UOp:
        """A named symbolic integer with inclusive bounds [min_val, max_val] (a DEFINE_VAR)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"Variable name must be a non-empty str, got {name!r}")
        if dtypes.is_int(dtype) and not (isinstance(min_val, int) and isinstance(max_val, int)):
            raise TypeError(f"Variable {name}: bounds of a {dtype} variable must be ints, "
                            f"got [{min_val!r}, {max_val!r}]")  # fmt: skip
        if isinstance(min_val, UOp) or isinstance(max_val, UOp) or min_val > max_val:
            raise ValueError(f"Variable {name}: need concrete min <= max, got [{min_val}, {max_val}]")
        return UOp(Ops.DEFINE_VAR, dtype, arg=(name, min_val, max_val))

    def bind(self, val: int) -> UOp:
        """Attach a concrete value to a Variable (a BIND node); the value must be within its bounds."""
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"bind needs a Variable (DEFINE_VAR), got {self.op}")
        if not isinstance(val, int) or not self.arg[1] <= val <= self.arg[2]:
            raise ValueError(f"bind: value {val!r} out of range [{self.arg[1]}, {self.arg[2]}] of {self.arg[0]}")
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(val)))

    def unbind(self) -> tuple[UOp, int]:
        """(Variable, value) of a BIND node."""
        if self.op is not Ops.BIND or self.src[1].op is not Ops.CONST:
            raise TypeError(f"unbind needs a BIND of a const, got {self.op}")
        return self.src[0], self.src[1].arg

    @property
    def expr(self) -> str:
        """The name of a Variable (or of the variable a BIND binds)."""
        v = self.src[0] if self.op is Ops.BIND else self
        if v.op is not Ops.DEFINE_VAR:
            raise TypeError(f"expr: {self.op} is not a variable")
        return str(v.arg[0])

    # ---- RANGE accessors: a RANGE is `RANGE(end)` with arg (axis_id, AxisType[, extra]) ---------------------------

    def _range_arg(self) -> tuple[Any, ...]:
        if self.op is not Ops.RANGE:
            raise TypeError(f"{self.op} is not a RANGE (axis_id, axis_type and range_size belong to ranges)")
        return self.arg if isinstance(self.arg, tuple) else (self.arg,)

    @property
    def axis_id(self) -> int:
        """The axis number of a RANGE (the first element of its arg; kernels number their ranges from 0)."""
        return int(self._range_arg()[0])

    @property
    def axis_type(self) -> AxisType:
        """The AxisType of a RANGE (LOOP when its arg names none)."""
        arg = self._range_arg()
        return arg[1] if len(arg) > 1 else AxisType.LOOP

    @property
    def range_size(self) -> sint:
        """The trip count of a RANGE: an int when its end is a constant, else the end's UOp."""
        self._range_arg()
        end = self.src[0]
        return int(end.arg) if end.op is Ops.CONST else end

    @staticmethod
    def range(end: sint, axis_id: Any, axis_type: AxisType = AxisType.LOOP, dtype: DType = dtypes.int32) -> UOp:
        """A loop variable running over [0, end); arg = (axis_id, axis_type)."""
        if (isinstance(end, UOp) and not dtypes.is_int(end.dtype)) or not isinstance(end, (int, UOp)) \
                or (isinstance(end, int) and end < 0):  # fmt: skip
            raise ValueError(f"range: end must be a non-negative int or an int UOp, got {end!r}")
        if not isinstance(axis_type, AxisType):
            raise TypeError(f"range: axis_type must be an AxisType, got {axis_type!r}")
        return UOp(Ops.RANGE, dtype, (sint_to_uop(end, dtype),), (axis_id, axis_type))

    @staticmethod
    def special(end: sint, name: str, dtype: DType = dtypes.int32) -> UOp:
        """A GPU launch index (e.g. gidx0) running over [0, end)."""
        return UOp(Ops.SPECIAL, dtype, (sint_to_uop(end, dtype),), name)

    @staticmethod
    def param(slot: int, dtype: DType, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> UOp:
        """A kernel buffer argument in PARAM slot `slot`; `dtype` is the element dtype or a pointer dtype."""
        pdt = dtype if isinstance(dtype, PtrDType) else dtype.ptr(size, addrspace)
        return UOp(Ops.PARAM, pdt, arg=slot)

    @staticmethod
    def unique(num: int | None = None) -> UOp:
        """A fresh UNIQUE node (makes buffers with equal size/device distinct)."""
        return UOp(Ops.UNIQUE, arg=next(_unique_counter) if num is None else num)

    @staticmethod
    def new_buffer(device: str | tuple[str, ...], size: int, dtype: DType, num: int | None = None) -> UOp:
        """A new tensor-level BUFFER of `size` elements of `dtype` on `device` (shape (size,))."""
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"new_buffer: size must be a non-negative int, got {size!r}")
        if not isinstance(device, (str, tuple)):
            raise TypeError(f"new_buffer: device must be a str, got {device!r}")
        if not isinstance(dtype, DType) or isinstance(dtype, PtrDType) or dtype is dtypes.void:
            raise TypeError(f"new_buffer: dtype must be a value dtype, got {dtype!r}")
        return UOp(Ops.BUFFER, dtype, (UOp.unique(num), UOp(Ops.DEVICE, arg=device)), size)

    def sink(self, *srcs: UOp, **kwargs: Any) -> UOp:
        """SINK(self, *srcs): the root of a graph with several outputs. Use as `UOp.sink(a, b, arg=...)`."""
        return UOp(Ops.SINK, dtypes.void, (self, *srcs), **kwargs)

    def group(self, *srcs: UOp | None) -> UOp:
        """GROUP(self, *srcs) (None entries dropped); a single node is returned as is."""
        nodes = tuple(s for s in (self, *srcs) if s is not None)
        return nodes[0] if len(nodes) == 1 else UOp(Ops.GROUP, dtypes.void, nodes)

    # ---- kernel-level helpers ---------------------------------------------------------------------------------

    def alu(self, op: Ops, *src: UOp) -> UOp:
        """Build `op(self, *src)`; comparisons return bool; tensor-level sources must have equal shapes."""
        srcs = (self, *src)
        out_dtype = dtypes.bool.vec(self.dtype.count) if op in _CMP else srcs[-1].dtype if op is Ops.WHERE \
            else self.dtype  # fmt: skip
        if len(src) == 1 and (sh := self._shape) is not None and sh == src[0]._shape:
            return UOp(op, out_dtype, srcs)  # two tensor-level sources of one shape (== is identity on UOps)
        if self._shape is not None or any(s._shape is not None for s in src):
            shapes = [s._shape for s in srcs if s._shape is not None]
            if len(set(shapes)) > 1 and not all(_same_shape(shapes[0], sh) for sh in shapes[1:]):
                raise ValueError(f"{op}: shape mismatch {' vs '.join(_fs(s) for s in shapes)} (no implicit broadcast)")
        return UOp(op, out_dtype, srcs)

    def cast(self, dtype: DType) -> UOp:
        """Convert values to `dtype` (no-op if already that dtype)."""
        if self.dtype is dtype:
            return self
        _check_value_dtype("cast", self.dtype, dtype)
        return UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        """Reinterpret the bits as `dtype` (same total size: `float32 -> int32`, `float32.vec(2) -> float16.vec(4)`)."""
        if self.dtype is dtype:
            return self
        _check_value_dtype("bitcast", self.dtype, dtype)
        pointers = isinstance(dtype, PtrDType) or isinstance(self.dtype, PtrDType)
        if not pointers and dtype.itemsize != self.dtype.itemsize:
            raise TypeError(f"bitcast needs equal sizes, got {self.dtype} ({self.dtype.itemsize} bytes) -> {dtype} "
                            f"({dtype.itemsize} bytes)")  # fmt: skip
        return UOp(Ops.BITCAST, dtype, (self,))

    def index(self, *idx: UOp | int, valid: UOp | None = None, **kwargs: Any) -> UOp:
        """INDEX(self, *idx[, valid]): a pointer to element `idx` of buffer `self`, gated by bool `valid`."""
        srcs = tuple(sint_to_uop(i) for i in idx) + ((valid,) if valid is not None else ())
        return UOp(Ops.INDEX, kwargs.pop("dtype", self.dtype), (self, *srcs), **kwargs)

    def load(self, *src: UOp, **kwargs: Any) -> UOp:
        """LOAD(self, *src): read through an INDEX; dtype defaults to the pointee dtype."""
        dt = kwargs.pop("dtype", self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype)
        return UOp(Ops.LOAD, dt, (self, *src), **kwargs)

    def store(self, val: UOp | ConstType, *src: UOp, **kwargs: Any) -> UOp:
        """STORE(self, val, *src): write `val` through an INDEX (void)."""
        if not isinstance(val, UOp):
            base = self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype
            val = UOp.const(base, val)
        return UOp(Ops.STORE, dtypes.void, (self, val, *src), **kwargs)

    def end(self, *ranges: UOp) -> UOp:
        """END(self, *ranges): closes loops after self (returns self if no ranges)."""
        return UOp(Ops.END, dtypes.void, (self, *ranges)) if ranges else self

    def after(self, *src: UOp, **kwargs: Any) -> UOp:
        """AFTER(self, *src): self, ordered after `src`."""
        return UOp(Ops.AFTER, self.dtype, (self, *src), **kwargs) if src else self

    def barrier(self, *src: UOp) -> UOp:
        """A BARRIER after self."""
        return UOp(Ops.BARRIER, dtypes.void, (self, *src))

    def reduce(self, *ranges: UOp, arg: Ops = Ops.ADD) -> UOp:
        """Kernel-level REDUCE(self, *ranges) with ALU op `arg` (ADD, MUL, MAX)."""
        if arg not in GroupOp.Reduce:
            raise ValueError(f"reduce op must be one of {sorted(o.name for o in GroupOp.Reduce)}, got {arg}")
        return UOp(Ops.REDUCE, self.dtype, (self, *ranges), arg) if ranges else self

    def gep(self, i: int | tuple[int, ...]) -> UOp:
        """Select lane(s) `i` of a vector."""
        idx = (i,) if isinstance(i, int) else tuple(i)
        if self.dtype.count == 1 and idx == (0,):
            return self
        for j in idx:
            if not 0 <= j < self.dtype.count:
                raise IndexError(f"gep lane {j} out of range for {self.dtype}")
        return UOp(Ops.GEP, self.dtype.scalar().vec(len(idx)), (self,), idx)

    def vectorize(self, *srcs: UOp) -> UOp:
        """VECTORIZE(self, *srcs): lanes into a vector."""
        allsrc = (self, *srcs)
        if len(allsrc) == 1:
            return self
        if not all(s.dtype is self.dtype for s in allsrc):
            raise TypeError(f"vectorize needs equal dtypes, got {[s.dtype for s in allsrc]}")
        return UOp(Ops.VECTORIZE, self.dtype.vec(len(allsrc)), allsrc)

    def broadcast(self, count: int) -> UOp:
        """A vector with `count` copies of scalar self."""
        return self if count == 1 else UOp(Ops.VECTORIZE, self.dtype.vec(count), (self,) * count)

    @property
    def buf_uop(self) -> UOp:
        """The BUFFER under movement ops / AFTER / ASSIGN."""
        u = self
        while u.op is not Ops.BUFFER:
            if not u.src:
                raise RuntimeError(f"{self.op} is not backed by a BUFFER")
            u = u.src[0]
        return u

    def under(self, ops: Collection[Ops]) -> UOp:
        """The first node down the first-source chain whose op is not in `ops` (self when its op is not):
        `u.under((Ops.BUFFER_VIEW,))` is the buffer a chain of views starts from."""
        u = self
        while u.op in ops:
            u = u.src[0]
        return u

    @property
    def base(self) -> UOp:
        """The node under any movement ops."""
        return self.under(GroupOp.Movement)

    @property
    def unreshaped(self) -> UOp:
        """The node under any RESHAPEs (what a realized tensor's reshaped view stands for: its BUFFER, ASSIGN, ...)."""
        return self.under((Ops.RESHAPE,))

    # ---- symbolic helpers -------------------------------------------------------------------------------------

    @property
    def vmin(self) -> ConstType:
        """Lower bound of the value (from dtype, constants, ranges and variables)."""
        return self._min_max[0]

    @property
    def vmax(self) -> ConstType:
        """Upper bound of the value."""
        return self._min_max[1]

    @cached_property
    def _min_max(self) -> tuple[ConstType, ConstType]:
        from tg.ir.bounds import min_max

        for s in self.src:
            if "_min_max" not in s.__dict__:  # deep expressions: bounds of the sources first, iteratively
                _fill_sources_first(self, "_min_max")
                break
        return min_max(self)

    def const_factor(self) -> int:
        """The largest known int factor of this expression (1 if none)."""
        if self.op is not Ops.ADD:
            return _term_factor(self)
        factor = 0  # a sum: the gcd over its terms (a loop over the ADD tree: sums can be thousands deep)
        stack: list[UOp] = [self]
        while stack:
            u = stack.pop()
            if u.op is Ops.ADD:
                stack.extend(u.src)
            elif (factor := math.gcd(factor, _term_factor(u))) == 1:
                return 1
        return factor

    def divides(self, v: int) -> UOp | None:
        """self / v if every term is exactly divisible by v, else None."""
        if v == 1:
            return self
        # sources first over the ADD/MUL structure (iterative: sums can be thousands deep), memoised per node
        done: dict[UOp, UOp | None] = {}
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            u, expanded = stack.pop()
            if u in done:
                continue
            if u.op in (Ops.ADD, Ops.MUL) and not expanded:
                stack.append((u, True))
                stack.extend((x, False) for x in u.src if x not in done)
                continue
            if u.op is Ops.CONST:
                done[u] = u.const_like(u.arg // v) if u.arg % v == 0 else None
            elif u.op is Ops.ADD:
                d0, d1 = done[u.src[0]], done[u.src[1]]
                done[u] = d0 + d1 if d0 is not None and d1 is not None else None
            elif u.op is Ops.MUL:
                d0, d1 = done[u.src[0]], done[u.src[1]]
                done[u] = d0 * u.src[1] if d0 is not None else u.src[0] * d1 if d1 is not None else None
            else:
                done[u] = None
        return done[self]

    def pop_const(self) -> tuple[UOp, int]:
        """Split `x + c` into (x, c) ((self, 0) when there's no trailing constant)."""
        if self.op is Ops.ADD and self.src[1].op is Ops.CONST:
            return self.src[0], self.src[1].arg
        return self, 0

    # The symbolic rules are UPats over UOps, so tg.ir.symbolic builds on this module and installs its fixed-point
    # simplifier here when it is imported (tg.ir imports it, and importing tg.ir.uop imports tg.ir first).
    _simplifier: ClassVar[Callable[[UOp], UOp] | None] = None

    def simplify(self) -> UOp:
        """Apply the symbolic rules to a fixed point."""
        if (simplifier := UOp._simplifier) is None:
            raise RuntimeError("UOp.simplify needs tg.ir.symbolic, which installs the symbolic rules: import tg.ir")
        return simplifier(self)

    def ssimplify(self) -> UOp | ConstType:
        """simplify(), returning a Python value when the result is a constant."""
        ret = self.simplify()
        return ret.arg if ret.op is Ops.CONST else ret

    def sym_infer(self, var_vals: dict[Any, int]) -> ConstType:
        """Evaluate with concrete values for the variables (keys: names or Variable UOps)."""
        vals = {(k.expr if isinstance(k, UOp) else k): v for k, v in var_vals.items()}
        cache: dict[UOp, Any] = {}
        for u in self.toposort():
            if u.op is Ops.CONST:
                cache[u] = u.arg
            elif u.op is Ops.DEFINE_VAR:
                if u.arg[0] not in vals:
                    raise KeyError(f"sym_infer: no value for variable {u.arg[0]!r}")
                v = vals[u.arg[0]]
                # simplified expressions are only right inside the variable's bounds
                if not u.arg[1] <= v <= u.arg[2]:
                    raise ValueError(f"sym_infer: value {v!r} out of range [{u.arg[1]}, {u.arg[2]}] of {u.arg[0]}")
                cache[u] = v
            elif u.op is Ops.BIND:
                cache[u] = vals.get(u.src[0].arg[0], cache[u.src[1]])
            elif u.op is Ops.CAST:
                cache[u] = exec_alu(Ops.ADD, u.dtype, (cache[u.src[0]], 0 if not dtypes.is_bool(u.dtype) else False))
            elif u.op in GroupOp.ALU:
                cache[u] = exec_alu(u.op, u.dtype, tuple(cache[s] for s in u.src))
            else:
                raise TypeError(f"sym_infer can't evaluate {u.op}")
        return cache[self]

    def render(self, simplify: bool = True) -> str:
        """Render integer/boolean math as a readable C-like expression string."""
        from tg.ir.printer import render_expr

        return render_expr(self.simplify() if simplify else self)

    def __repr__(self) -> str:
        from tg.ir.printer import pretty_print

        return pretty_print(self)


def _term_factor(u: UOp) -> int:
    """The known int factor of a term that is not a sum (const_factor's leaves)."""
    if u.op is Ops.CONST:
        return int(u.arg)
    if u.op is Ops.VCONST:
        return math.gcd(*u.arg)
    if u.op is Ops.MUL:
        return u.src[0].arg if u.src[0].op is Ops.CONST else u.src[1].arg if u.src[1].op is Ops.CONST else 1
    return 1


def _symbolic_hint(v: UOp) -> str:
    """What a failed concrete conversion of a symbolic int means to a user of symbolic shapes."""
    names = sorted({f"{u.arg[0]} in [{u.arg[1]}, {u.arg[2]}]" for u in v.toposort() if u.op is Ops.DEFINE_VAR})
    if not names:
        return ""
    return (f" (it depends on the Variable {', '.join(names)}: this operation needs a concrete size; symbolic dims "
            "work in slices, shrink/pad/reshape/permute/expand, elementwise ops, reductions and matmul)")  # fmt: skip


def _same_shape(a: tuple[sint, ...], b: tuple[sint, ...]) -> bool:
    return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b, strict=True))


_INT_SCALARS = frozenset(dtypes.ints)
_FLOAT_SCALARS = frozenset(dtypes.floats)
# float dtypes narrower than a Python float: their constants are rounded to the dtype when made
_ROUND_FLOAT = {dt: truncate[dt] for dt in dtypes.floats if dt is not dtypes.float64}


def _round_float(rnd: Callable[[Any], Any], x: Any) -> Any:
    return rnd(x) if x == x else x  # NaN stays the canonical math.nan (constants compare by argument)


_unique_counter = itertools.count()
_PICKLE_FLAT_DEPTH = 200


def _uop_from_table(table: list[Any]) -> UOp:
    built: list[UOp] = []
    for entry in table:
        if isinstance(entry, UOp):
            built.append(entry)
        else:
            op, dtype, src_idx, arg, tag = entry
            built.append(UOp(op, dtype, tuple(built[i] for i in src_idx), arg, tag))
    return built[-1]


sint = int | UOp


def Variable(name: str, min_val: ConstType, max_val: ConstType, dtype: DType = dtypes.int32) -> UOp:
    """A named symbolic integer in [min_val, max_val]: `n = Variable("n", 1, 64); n.bind(10)`."""
    return UOp.variable(name, min_val, max_val, dtype)


def sint_to_uop(x: sint, dtype: DType = dtypes.int32) -> UOp:
    """An int as a CONST of `dtype` (UOps pass through)."""
    return x if isinstance(x, UOp) else UOp.const(dtype, x)


def sym_infer(x: sint, var_vals: dict[Any, int]) -> int:
    """Evaluate a symbolic int with concrete variable values (ints pass through)."""
    return int(x.sym_infer(var_vals)) if isinstance(x, UOp) else x


def ssimplify(x: sint) -> sint:
    """simplify() a symbolic int, returning an int when it folds."""
    if isinstance(x, UOp):
        ret = x.ssimplify()
        return int(ret) if not isinstance(ret, UOp) else ret
    return x


def resolve(x: UOp | bool, default: bool = True) -> bool:
    """The truth value of a (possibly symbolic) bool: its bounds decide it, else `default`."""
    if not isinstance(x, UOp):
        return bool(x)
    if x.dtype is not dtypes.bool:
        raise TypeError(f"resolve needs a bool UOp, got {x.dtype}")
    return bool(x.vmin) if x.vmin == x.vmax else default


def smax(*lst: Any) -> sint:
    """Max of ints and symbolic ints."""
    items = argfix(*lst)
    return max(items) if all(isinstance(x, int) for x in items) else functools.reduce(
        lambda a, b: sint_to_uop(a).maximum(b), items)  # fmt: skip


def smin(*lst: Any) -> sint:
    """Min of ints and symbolic ints."""
    items = argfix(*lst)
    return min(items) if all(isinstance(x, int) for x in items) else functools.reduce(
        lambda a, b: sint_to_uop(a).minimum(b), items)  # fmt: skip


def sprod(x: Iterable[sint]) -> sint:
    """Product of ints and symbolic ints."""
    return prod(x)


__all__ = ["UOp", "UOpMetaClass", "Variable", "cdiv", "cmod", "resolve", "sint", "sint_to_uop", "smax", "smin",
           "ssimplify", "sym_infer"]  # fmt: skip
