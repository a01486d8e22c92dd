"""Data types: scalar, vector and pointer DTypes, the `dtypes` namespace and the type promotion lattice."""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum, auto
from typing import Any, ClassVar, Final

from tg.ir.helpers import DEFAULT_FLOAT, DEFAULT_INT, ContextVar
from tg.ir.ops import NamedEnum

ConstType = float | int | bool


class DTypeMetaClass(type):
    """Interns DTypes: constructing a DType with the same fields twice returns the same object."""

    dcache: ClassVar[dict[tuple[Any, ...], DType]] = {}

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        key = (cls, *args, *sorted(kwargs.items()))
        if (ret := DTypeMetaClass.dcache.get(key)) is not None:
            return ret
        ret = super().__call__(*args, **kwargs)
        DTypeMetaClass.dcache[key] = ret
        return ret


class AddrSpace(NamedEnum, IntEnum):
    """Where a pointer points: device global memory, workgroup-local (shared) memory, or registers."""

    GLOBAL = auto()
    LOCAL = auto()
    REG = auto()


@dataclass(frozen=True, eq=False)
class DType(metaclass=DTypeMetaClass):
    """A scalar or vector data type. DTypes are interned, so compare them with `is` or `==` (identity)."""

    priority: int  # position in the promotion order (higher wins among unrelated types)
    itemsize: int  # bytes of one element (a vector counts all lanes)
    name: str  # C-ish name used by renderers
    fmt: str | None  # struct/numpy format character, None where struct has none
    count: int  # vector lanes, 1 for scalars
    _scalar: DType | None = None  # the lane type of a vector dtype

    @staticmethod
    def new(priority: int, itemsize: int, name: str, fmt: str | None) -> DType:
        """Make a scalar dtype."""
        return DType(priority, itemsize, name, fmt, 1, None)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.priority, self.itemsize, self.name, self.fmt, self.count, self._scalar)

    def __repr__(self) -> str:
        if self.count > 1:
            return f"{self.scalar()!r}.vec({self.count})"
        return f"dtypes.{INVERSE_DTYPES_DICT.get(self.name, self.name)}"

    def __lt__(self, o: DType) -> bool:
        return (self.priority, self.itemsize, self.name, self.count) < (o.priority, o.itemsize, o.name, o.count)

    @property
    def base(self) -> DType:
        """The pointee for pointers, else the dtype itself."""
        return self

    @property
    def vcount(self) -> int:
        """Number of lanes."""
        return self.count

    @property
    def bitsize(self) -> int:
        """Size of one lane-set in bits."""
        return self.itemsize * 8

    def vec(self, sz: int) -> DType:
        """The vector dtype with `sz` lanes of this scalar dtype (`sz == 1` returns the scalar)."""
        if not isinstance(sz, int) or sz < 1:
            raise ValueError(f"vector size must be a positive int, got {sz!r}")
        if self.count != 1:
            raise ValueError(f"can't vectorize {self} (already a vector)")
        if sz == 1 or self == dtypes.void:
            return self
        return DType(self.priority, self.itemsize * sz, f"{INVERSE_DTYPES_DICT[self.name]}{sz}", None, sz, self)

    def scalar(self) -> DType:
        """The lane dtype of a vector (itself for a scalar)."""
        return self._scalar if self._scalar is not None else self

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """A pointer to this dtype in `addrspace`; `size` is the element count (-1 = unknown)."""
        if not isinstance(size, int) or size < -1:
            raise ValueError(f"ptr: size must be an element count or -1 (unknown), got {size!r}")
        if not isinstance(addrspace, AddrSpace):
            raise TypeError(f"ptr: addrspace must be an AddrSpace, got {addrspace!r}")
        return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self, addrspace, 1, size)

    @functools.cached_property
    def min(self) -> ConstType:
        """Smallest value of the scalar type (-inf for floats, False for bool)."""
        s = self.scalar()
        if dtypes.is_int(s):
            return 0 if dtypes.is_unsigned(s) else -(2 ** (8 * s.itemsize - 1))
        return -math.inf if dtypes.is_float(s) else False

    @functools.cached_property
    def max(self) -> ConstType:
        """Largest value of the scalar type (inf for floats, True for bool)."""
        s = self.scalar()
        if dtypes.is_int(s):
            return 2 ** (8 * s.itemsize) - 1 + int(s.min)
        return math.inf if dtypes.is_float(s) else True


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
    """A pointer to `_base` in address space `addrspace`; `v` lanes of pointers; `size` elements (-1 unknown)."""

    _base: DType | None = None
    addrspace: AddrSpace = AddrSpace.GLOBAL
    v: int = 1
    size: int = -1

    def __reduce__(self) -> tuple[Any, ...]:
        return PtrDType, (self.priority, self.itemsize, self.name, self.fmt, self.count, None, self._base,
                          self.addrspace, self.v, self.size)  # fmt: skip

    @property
    def base(self) -> DType:
        """The pointee dtype."""
        assert self._base is not None
        return self._base

    @property
    def vcount(self) -> int:
        """Number of pointer lanes."""
        return self.v

    def _with_v(self, v: int) -> PtrDType:
        return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self._base, self.addrspace,
                        v, self.size)  # fmt: skip

    def vec(self, sz: int) -> DType:
        """A vector of `sz` pointers."""
        if self.v != 1 or sz < 1:
            raise ValueError(f"can't vectorize pointer {self} to {sz}")
        return self if sz == 1 else self._with_v(sz)

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """Pointers to pointers don't exist: raises TypeError."""
        raise TypeError(f"can't make a pointer to a pointer ({self})")

    def scalar(self) -> DType:
        """The single-lane pointer."""
        return self if self.v == 1 else self._with_v(1)

    def __repr__(self) -> str:
        space = f", {self.addrspace!r}" if self.addrspace != AddrSpace.GLOBAL else ""
        return f"{self.base!r}.ptr({self.size}{space})" + (f".vec({self.v})" if self.v != 1 else "")


class DTypes:
    """The namespace of all dtypes: `dtypes.float32`, `dtypes.int8`, ... plus classification helpers."""

    void: Final[DType] = DType.new(-1, 0, "void", None)
    bool: Final[DType] = DType.new(0, 1, "bool", "?")
    int8: Final[DType] = DType.new(1, 1, "signed char", "b")
    uint8: Final[DType] = DType.new(2, 1, "unsigned char", "B")
    int16: Final[DType] = DType.new(3, 2, "short", "h")
    uint16: Final[DType] = DType.new(4, 2, "unsigned short", "H")
    int32: Final[DType] = DType.new(5, 4, "int", "i")
    uint32: Final[DType] = DType.new(6, 4, "unsigned int", "I")
    int64: Final[DType] = DType.new(7, 8, "long", "q")
    uint64: Final[DType] = DType.new(8, 8, "unsigned long", "Q")
    fp8e4m3: Final[DType] = DType.new(9, 1, "float8_e4m3", None)
    fp8e5m2: Final[DType] = DType.new(10, 1, "float8_e5m2", None)
    fp8e4m3fnuz: Final[DType] = DType.new(9, 1, "float8_e4m3fnuz", None)
    fp8e5m2fnuz: Final[DType] = DType.new(10, 1, "float8_e5m2fnuz", None)
    float16: Final[DType] = DType.new(11, 2, "half", "e")
    bfloat16: Final[DType] = DType.new(12, 2, "__bf16", None)
    float32: Final[DType] = DType.new(13, 4, "float", "f")
    float64: Final[DType] = DType.new(14, 8, "double", "d")

    # aliases
    half = float16
    float = float32
    double = float64
    uchar = uint8
    ushort = uint16
    uint = uint32
    ulong = uint64
    char = int8
    short = int16
    int = int32
    long = int64

    fp8_ocp = (fp8e4m3, fp8e5m2)
    fp8_fnuz = (fp8e4m3fnuz, fp8e5m2fnuz)
    fp8s = fp8_ocp + fp8_fnuz
    floats = (*fp8s, float16, bfloat16, float32, float64)
    uints = (uint8, uint16, uint32, uint64)
    sints = (int8, int16, int32, int64)
    ints = uints + sints
    all = (*floats, *ints, bool)

    @property
    def default_float(self) -> DType:
        """The float dtype used for Python floats and float results of int inputs (env DEFAULT_FLOAT)."""
        return _setting_dtype(DEFAULT_FLOAT, dtypes.is_float, "a float")

    @property
    def default_int(self) -> DType:
        """The int dtype used for Python ints (env DEFAULT_INT)."""
        return _setting_dtype(DEFAULT_INT, dtypes.is_int, "an int")

    @staticmethod
    def is_float(x: DType) -> builtins.bool:
        """True for floating point dtypes (any lane count)."""
        return x.scalar() in _FLOATS

    @staticmethod
    def is_int(x: DType) -> builtins.bool:
        """True for signed and unsigned integer dtypes (not bool)."""
        return x.scalar() in _INTS

    @staticmethod
    def is_unsigned(x: DType) -> builtins.bool:
        """True for unsigned integer dtypes."""
        return x.scalar() in _UINTS

    @staticmethod
    def is_bool(x: DType) -> builtins.bool:
        """True for bool (any lane count)."""
        return x.scalar() is dtypes.bool

    @staticmethod
    def from_py(x: Any) -> DType:
        """The dtype a Python value gets: bool, default_int, default_float; lists take their widest element."""
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, int):
            return dtypes.default_int
        if isinstance(x, float):
            return dtypes.default_float
        if isinstance(x, (list, tuple)):
            return max((dtypes.from_py(xi) for xi in x), default=dtypes.default_float)
        raise TypeError(f"could not infer dtype of {x!r} (type {type(x).__name__})")

    @staticmethod
    def as_const(val: Any, dtype: DType) -> ConstType | tuple[ConstType, ...]:
        """Coerce a Python value to the Python type that represents `dtype` (tuples for vector consts)."""
        if isinstance(val, tuple):
            if len(val) != dtype.count:
                raise ValueError(f"vector const {val} doesn't match {dtype}")
            return tuple(dtypes.as_const(x, dtype.scalar()) for x in val)  # type: ignore[misc]
        if dtypes.is_int(dtype):
            return int(val)
        if dtypes.is_float(dtype):
            return float(val)
        return bool(val)

    @staticmethod
    def finfo(dtype: DType) -> tuple[builtins.int, builtins.int]:
        """(exponent bits, mantissa bits) of a float dtype."""
        if not dtypes.is_float(dtype):
            raise ValueError(f"{dtype} is not a floating point type")
        return _FINFO[dtype.scalar()]

    @staticmethod
    def fields() -> dict[str, DType]:
        """Name -> dtype for every named scalar dtype (aliases included)."""
        return dict(DTYPES_DICT)


dtypes = DTypes()
_FLOATS = frozenset(DTypes.floats)
_INTS = frozenset(DTypes.ints)
_UINTS = frozenset(DTypes.uints)
_FINFO = {
    dtypes.float16: (5, 10),
    dtypes.bfloat16: (8, 7),
    dtypes.float32: (8, 23),
    dtypes.float64: (11, 52),
    dtypes.fp8e4m3: (4, 3),
    dtypes.fp8e5m2: (5, 2),
    dtypes.fp8e4m3fnuz: (4, 3),
    dtypes.fp8e5m2fnuz: (5, 2),
}

DTYPES_DICT: dict[str, DType] = {
    k: v for k, v in DTypes.__dict__.items() if isinstance(v, DType) and not k.startswith(("default", "void", "_"))
}
INVERSE_DTYPES_DICT: dict[str, str] = {
    **{v.name: k for k, v in reversed(list(DTypes.__dict__.items())) if isinstance(v, DType) and k != "void"},
    "void": "void",
}
# canonical (non-alias) names win in reprs
for _canon in ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
               "float32", "float64", "fp8e4m3", "fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz"):  # fmt: skip
    INVERSE_DTYPES_DICT[getattr(DTypes, _canon).name] = _canon

DTypeLike = str | DType


class UnknownDTypeError(TypeError, AttributeError):
    """A dtype name that does not exist (a TypeError; also the AttributeError of `getattr(dtypes, name)`)."""


def to_dtype(dtype: DTypeLike) -> DType:
    """Accept a DType or its name (`"float32"`, `"half"`, ...)."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str) and (dt := DTYPES_DICT.get(dtype.lower())) is not None:
        return dt
    raise UnknownDTypeError(f"unknown dtype {dtype!r}, known: {sorted(DTYPES_DICT)}")


def _setting_dtype(setting: ContextVar, has_kind: Callable[[DType], bool], kind: str) -> DType:
    """The dtype a setting (DEFAULT_FLOAT, DEFAULT_INT) names, checked to be of its kind."""
    dt = to_dtype(setting.value)
    if not has_kind(dt):
        raise ValueError(f"{setting.key}={setting.value!r} is not {kind} dtype")
    return dt


# The promotion lattice (a JAX-style lattice without weak types; Python scalars are handled by `weak_promote`).
# Each dtype lists the types it promotes to directly; the least upper bound is the lowest common ancestor.
promo_lattice: dict[DType, list[DType]] = {
    dtypes.bool: [dtypes.int8, dtypes.uint8],
    dtypes.int8: [dtypes.int16],
    dtypes.int16: [dtypes.int32],
    dtypes.int32: [dtypes.int64],
    dtypes.int64: [*dtypes.fp8s],
    dtypes.uint8: [dtypes.int16, dtypes.uint16],
    dtypes.uint16: [dtypes.int32, dtypes.uint32],
    dtypes.uint32: [dtypes.int64, dtypes.uint64],
    dtypes.uint64: [*dtypes.fp8s],
    **{f: [dtypes.float16, dtypes.bfloat16] for f in dtypes.fp8s},
    dtypes.float16: [dtypes.float32],
    dtypes.bfloat16: [dtypes.float32],
    dtypes.float32: [dtypes.float64],
    dtypes.float64: [],
}


@functools.cache
def _get_recursive_parents(dtype: DType) -> frozenset[DType]:
    return frozenset({dtype}).union(*[_get_recursive_parents(d) for d in promo_lattice[dtype]])


@functools.cache
def least_upper_dtype(*ds: DType) -> DType:
    """The smallest dtype every one of `ds` promotes to (e.g. int8, uint8 -> int16; float16, bfloat16 -> float32)."""
    if not ds:
        raise ValueError("least_upper_dtype needs at least one dtype")
    for d in ds:
        if d not in promo_lattice:
            raise TypeError(f"least_upper_dtype: {d} is not a scalar dtype")
    return min(frozenset.intersection(*[_get_recursive_parents(d) for d in ds]))


def least_upper_float(dt: DType) -> DType:
    """`dt` if it's a float, else the promotion of `dt` with the default float."""
    return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)


def weak_promote(dt: DType, x: ConstType) -> DType:
    """The result dtype of combining a tensor of `dt` with a "weak" Python scalar `x` (PyTorch/tinygrad rules).

    A scalar only changes the dtype if it is of a higher category: int scalar on bool -> default_int,
    float scalar on bool/int -> default_float; otherwise the tensor dtype wins.
    """
    if isinstance(x, bool):
        return dt
    if isinstance(x, int):
        return dtypes.default_int if dt == dtypes.bool else dt
    if isinstance(x, float):
        return dt if dtypes.is_float(dt) else dtypes.default_float
    raise TypeError(f"weak_promote: {x!r} is not a Python scalar")


def sum_acc_dtype(dt: DType) -> DType:
    """Default accumulator dtype of a sum: ints widen to at least int32/uint32, floats stay (at least float32)."""
    if dtypes.is_unsigned(dt):
        return least_upper_dtype(dt, dtypes.uint32)
    if dtypes.is_int(dt) or dt == dtypes.bool:
        return least_upper_dtype(dt, dtypes.int32)
    return least_upper_dtype(dt, dtypes.float32)


@functools.cache
def can_lossless_cast(dt0: DType, dt1: DType) -> bool:
    """True if every value of `dt0` is exactly representable in `dt1`."""
    if dt0 == dt1 or dt0 == dtypes.bool:
        return True
    if dtypes.is_float(dt1):
        if dtypes.is_float(dt0):
            e0, m0 = dtypes.finfo(dt0)
            e1, m1 = dtypes.finfo(dt1)
            return e0 <= e1 and m0 <= m1
        if dtypes.is_int(dt0):
            return 8 * dt0.itemsize - (0 if dtypes.is_unsigned(dt0) else 1) <= dtypes.finfo(dt1)[1] + 1
        return False
    if dtypes.is_int(dt1) and dtypes.is_int(dt0):
        return bool(dt1.min <= dt0.min and dt0.max <= dt1.max)
    return False
