"""PyTorch habits on top of the tinygrad API: `size()`, `dim()`, `clone()`, `cpu()`, comparison and logical methods,
bitwise methods, `*_as` helpers, `fmod`/`div(rounding_mode=)`, and the in-place `_` methods (attached in methods.py);
the dtype shortcuts `t.float()`, `t.long()`, ... (`DTypeShortcuts`, a base class of Tensor).

In-place methods and augmented assignment (`a += b`, ... `a @= b`) are `self.assign(result)` and return self.
On a leaf that requires grad they raise while grad mode is on, as torch does (an optimizer step runs under
`no_grad()`); a result that cannot be cast to self's dtype kind (float into int) or broadcast to self's shape raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tg.ir import DType, GroupOp, Ops, dtypes, weak_promote
from tg.tensor.errors import ArgumentError, DTypeError
from tg.tensor.shapes import broadcast_shape, canonical_axis

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


class DTypeShortcuts:
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

    def double(self) -> Tensor:
        """Cast to float64."""
        return self.cast(dtypes.float64)

    def bfloat16(self) -> Tensor:
        """Cast to bfloat16."""
        return self.cast(dtypes.bfloat16)

    def long(self) -> Tensor:
        """Cast to int64."""
        return self.cast(dtypes.int64)

    def short(self) -> Tensor:
        """Cast to int16."""
        return self.cast(dtypes.int16)

    def char(self) -> Tensor:
        """Cast to int8."""
        return self.cast(dtypes.int8)

    def byte(self) -> Tensor:
        """Cast to uint8."""
        return self.cast(dtypes.uint8)


def size(self: Tensor, dim: int | None = None) -> Any:
    """The shape (torch.Size-like tuple), or the size of `dim`."""
    return self.shape if dim is None else self.shape[canonical_axis(dim, self.ndim)]


def dim(self: Tensor) -> int:
    """Number of dimensions (torch's name for ndim)."""
    return self.ndim


def itemsize(self: Tensor) -> int:
    """Bytes per element."""
    return self.dtype.itemsize


def is_floating_point(self: Tensor) -> bool:
    """True for float dtypes."""
    return dtypes.is_float(self.dtype)


def clone(self: Tensor, device: str | None = None) -> Tensor:
    """A copy with storage of its own (lazy; realized when used), optionally on another device; not a view."""
    cls = self._tensor_class()
    x = self if device is None else self.to(device)
    # an ASSIGN into a fresh buffer: a CONTIGUOUS of a stored value would just be that storage again
    return cls(cls.empty(*x.shape, dtype=x.dtype, device=x.device).assign(x).uop)  # tracked like any result


def cpu(self: Tensor) -> Tensor:
    """This tensor on the CPU device."""
    return self.to("CPU")


def expand_as(self: Tensor, other: Tensor) -> Tensor:
    """expand(other.shape)."""
    return self.expand(other.shape)


def view_as(self: Tensor, other: Tensor) -> Tensor:
    """reshape(other.shape)."""
    return self.reshape(other.shape)


def type_as(self: Tensor, other: Tensor) -> Tensor:
    """cast(other.dtype)."""
    return self.cast(other.dtype)


def reshape_as(self: Tensor, other: Tensor) -> Tensor:
    """reshape(other.shape)."""
    return self.reshape(other.shape)


# ---- comparisons, logic and bits as methods ---------------------------------------------------------------------


def lt(self: Tensor, x: Any) -> Tensor:
    """self < x."""
    return self < x


def le(self: Tensor, x: Any) -> Tensor:
    """self <= x."""
    return self <= x


def gt(self: Tensor, x: Any) -> Tensor:
    """self > x."""
    return self > x


def ge(self: Tensor, x: Any) -> Tensor:
    """self >= x."""
    return self >= x


def eq(self: Tensor, x: Any) -> Tensor:
    """self == x (elementwise)."""
    return self == x


def ne(self: Tensor, x: Any) -> Tensor:
    """self != x (elementwise)."""
    return self != x


def logical_and(self: Tensor, x: Any) -> Tensor:
    """Elementwise and of the truth values."""
    return self.cast(dtypes.bool) & _as_bool(self, x)


def logical_or(self: Tensor, x: Any) -> Tensor:
    """Elementwise or of the truth values."""
    return self.cast(dtypes.bool) | _as_bool(self, x)


def logical_xor(self: Tensor, x: Any) -> Tensor:
    """Elementwise xor of the truth values."""
    return self.cast(dtypes.bool) ^ _as_bool(self, x)


def _as_bool(self: Tensor, x: Any) -> Any:
    cls = self._tensor_class()
    return x.cast(dtypes.bool) if isinstance(x, cls) else bool(x)


def _int_or_bool(op: str, t: Tensor) -> None:
    if dtypes.is_float(t.dtype):
        raise DTypeError(f"{op} needs integer or bool tensors, got {t.dtype.name}")


def bitwise_and(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise bitwise and (ints and bools)."""
    _int_or_bool("bitwise_and", self)
    return self.__rand__(x) if reverse else self & x


def bitwise_or(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise bitwise or (ints and bools)."""
    _int_or_bool("bitwise_or", self)
    return self.__ror__(x) if reverse else self | x


def bitwise_xor(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise bitwise xor (ints and bools)."""
    _int_or_bool("bitwise_xor", self)
    return self.__rxor__(x) if reverse else self ^ x


def bitwise_not(self: Tensor) -> Tensor:
    """Elementwise bitwise not (logical not for bools)."""
    _int_or_bool("bitwise_not", self)
    return ~self


def lshift(self: Tensor, x: int, reverse: bool = False) -> Tensor:
    """self << x."""
    _int_or_bool("lshift", self)
    return self.__rlshift__(x) if reverse else self << x


def rshift(self: Tensor, x: int, reverse: bool = False) -> Tensor:
    """self >> x."""
    _int_or_bool("rshift", self)
    return self.__rrshift__(x) if reverse else self >> x


def fmod(self: Tensor, x: Any) -> Tensor:
    """Remainder with the sign of the dividend (C's fmod; torch.fmod): fmod(-7, 3) == -1."""
    a, b = self._operands(x)
    if dtypes.is_float(a.dtype):
        return a - (a / b).trunc() * b
    return a - a.idiv(b) * b


# ---- in-place methods ---------------------------------------------------------------------------------------------


def _inplace(self: Tensor, op: str, value: Tensor, *, same_kind: bool = False) -> Tensor:
    """Write `value` into self (torch's in-place rules): not on a leaf that requires grad while grad mode is on,
    `value` must broadcast to self's shape, and with `same_kind` (arithmetic) its dtype must cast to self's
    without leaving its kind (no float into int, no number into bool)."""
    from tg.tensor.autograd import is_grad_enabled

    if self.requires_grad and self.is_leaf and is_grad_enabled():
        raise RuntimeError(
            f"{op}: a leaf tensor that requires grad is being used in an in-place operation; wrap it in no_grad()"
        )
    if same_kind and not _casts_within_kind(value.dtype, self.dtype):
        raise RuntimeError(
            f"{op}: result type {value.dtype.name} can't be cast to the desired output type {self.dtype.name}"
        )
    if value.shape != self.shape:
        if broadcast_shape(value.shape, self.shape) != self.shape:
            raise RuntimeError(f"{op}: output with shape {self.shape} doesn't match the broadcast shape {value.shape}")
        value = value._broadcast_to(self.shape)
    return self.assign(value.cast(self.dtype))


def _casts_within_kind(src: DType, dst: DType) -> bool:
    """torch's `canCast`: a float result cannot go into an int tensor, nor a non-bool result into a bool one."""
    if dtypes.is_float(src) and not dtypes.is_float(dst):
        return False
    return not (dst is dtypes.bool and src is not dtypes.bool)


def _binary_inplace(name: str, fn: Callable[[Tensor, Any], Tensor], shown: str = "") -> Callable[..., Tensor]:
    """An in-place method `name` computing `fn(self, x)`; errors name it as the user wrote it (`shown`)."""

    def method(self: Tensor, x: Any) -> Tensor:
        return _inplace(self, shown or name, fn(self, x), same_kind=True)

    method.__name__ = name
    method.__doc__ = f"In-place `{shown or name}`: self = self {shown.rstrip('=') or name.strip('_')} x; returns self."
    return method


add_ = _binary_inplace("add_", lambda a, b: a + b)
sub_ = _binary_inplace("sub_", lambda a, b: a - b)
mul_ = _binary_inplace("mul_", lambda a, b: a * b)
div_ = _binary_inplace("div_", lambda a, b: a / b)
pow_ = _binary_inplace("pow_", lambda a, b: a**b)
# augmented assignment writes in place like torch (`a += b` changes a's storage: views and other references
# see it); the leaf / dtype / broadcast rules are those of the `_` methods
__iadd__ = _binary_inplace("__iadd__", lambda a, b: a + b, "+=")
__isub__ = _binary_inplace("__isub__", lambda a, b: a - b, "-=")
__imul__ = _binary_inplace("__imul__", lambda a, b: a * b, "*=")
__itruediv__ = _binary_inplace("__itruediv__", lambda a, b: a / b, "/=")
__ifloordiv__ = _binary_inplace("__ifloordiv__", lambda a, b: a // b, "//=")
__imod__ = _binary_inplace("__imod__", lambda a, b: a % b, "%=")
__ipow__ = _binary_inplace("__ipow__", lambda a, b: a**b, "**=")
__imatmul__ = _binary_inplace("__imatmul__", lambda a, b: a @ b, "@=")
__iand__ = _binary_inplace("__iand__", lambda a, b: a & b, "&=")
__ior__ = _binary_inplace("__ior__", lambda a, b: a | b, "|=")
__ixor__ = _binary_inplace("__ixor__", lambda a, b: a ^ b, "^=")
__ilshift__ = _binary_inplace("__ilshift__", lambda a, b: a << b, "<<=")
__irshift__ = _binary_inplace("__irshift__", lambda a, b: a >> b, ">>=")


def zero_(self: Tensor) -> Tensor:
    """Fill with zeros in place; returns self."""
    return _inplace(self, "zero_", self.zeros_like())


def fill_(self: Tensor, value: Any) -> Tensor:
    """Fill with `value` in place; returns self."""
    return _inplace(self, "fill_", self.full_like(value))


def clamp_(self: Tensor, min_: Any = None, max_: Any = None, *, min: Any = None, max: Any = None) -> Tensor:
    """clamp in place; returns self."""
    return _inplace(self, "clamp_", self.clip(min_, max_, min=min, max=max))


def copy_(self: Tensor, src: Tensor) -> Tensor:
    """Copy `src` (broadcast, cast, moved to self's device) into self; returns self."""
    cls = self._tensor_class()
    s = src if isinstance(src, cls) else cls(src, device=self.device)
    return _inplace(self, "copy_", s.to(self.device))


def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill with U(a, b) in place; returns self."""
    return _inplace(
        self, "uniform_", self._tensor_class().uniform(*self.shape, low=a, high=b, device=self.device, dtype=self.dtype)
    )


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with N(mean, std) in place; returns self."""
    return _inplace(
        self,
        "normal_",
        self._tensor_class().normal(*self.shape, mean=mean, std=std, device=self.device, dtype=self.dtype),
    )


def sequential(self: Tensor, ll: list[Callable[[Tensor], Tensor]]) -> Tensor:
    """Apply the callables of `ll` in order: `x.sequential([layer1, Tensor.relu, layer2])`."""
    x = self
    for f in ll:
        x = f(x)
    return x


def pad_to(self: Tensor, shape: Any, *args: int, value: float = 0.0) -> Tensor:
    """Pad at the end of each dim up to `shape` (None keeps a dim)."""
    target = tuple(shape) if isinstance(shape, (tuple, list)) else (shape, *args)
    if len(target) != self.ndim:
        raise ArgumentError(f"pad_to: {target} has {len(target)} dims, the tensor {self.ndim}")
    pads = [(0, 0 if t is None else t - s) for s, t in zip(self.shape, target, strict=True)]
    if any(p < 0 for _, p in pads):
        raise ArgumentError(f"pad_to: cannot pad {self.shape} to the smaller {target}")
    return self.pad(pads, value=value)


def shrink_to(self: Tensor, shape: Any, *args: int) -> Tensor:
    """Keep the first `shape[i]` elements of each dim (None keeps a dim)."""
    target = tuple(shape) if isinstance(shape, (tuple, list)) else (shape, *args)
    if len(target) != self.ndim:
        raise ArgumentError(f"shrink_to: {target} has {len(target)} dims, the tensor {self.ndim}")
    return self.shrink([None if t is None else (0, t) for t in target])


_UINT_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def bitcast_resize(self: Tensor, dt: Any) -> Tensor:
    """Bitcast to a dtype of another size: the last dim grows (to narrower) or shrinks (to wider) by the size
    ratio, bytes in little-endian order as numpy's `view`."""
    old, new = self.dtype.itemsize, dt.itemsize
    if self.ndim == 0 or (new > old and (self.shape[-1] * old) % new):
        raise ArgumentError(
            f"bitcast {self.dtype.name} -> {dt.name} needs a last dim whose byte size ({self.shape[-1:]} x {old}) is a "
            f"multiple of {new}"
        )
    if old not in _UINT_OF_SIZE or new not in _UINT_OF_SIZE:
        raise ArgumentError(f"bitcast between {self.dtype.name} and {dt.name} is not supported")
    bits = self.bitcast(_UINT_OF_SIZE[old])
    if new < old:
        k = old // new
        parts = [((bits >> (8 * new * i)) & ((1 << (8 * new)) - 1)).cast(_UINT_OF_SIZE[new]) for i in range(k)]
        cls = self._tensor_class()
        out = cls.stack(parts, dim=-1).reshape(*self.shape[:-1], self.shape[-1] * k)
    else:
        k = new // old
        wide = bits.reshape(*self.shape[:-1], self.shape[-1] // k, k).cast(_UINT_OF_SIZE[new])
        out = wide[..., 0]
        for i in range(1, k):
            out = out | (wide[..., i] << (8 * old * i))
    return out.bitcast(dt)


def round(self: Tensor) -> Tensor:
    """Round to the nearest integer, halves to even (torch, numpy): [0.5, 1.5, 2.5] -> [0, 2, 2]."""
    if not dtypes.is_float(self.dtype):
        return self
    low = self.floor()
    frac = self - low
    odd = (low - (low * 0.5).floor() * 2) == 1
    up = (frac > 0.5) | ((frac == 0.5) & odd)
    return up.where(low + 1, low)


def const_like(self: Tensor, b: Any, dtype: Any = None) -> Tensor:
    """A constant shaped like self (an unstored broadcast value): `t.const_like(0)`."""
    return self.full_like(b, dtype)


def const(cls: type[Tensor], b: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """A constant: `Tensor.const(3)` is 0-d, `Tensor.const((1, 2, 3))` 1-d (tinygrad's `const`). tg has no weak
    tensor dtypes: the dtype is `dtype`, else the value's default (bool, int32, the default float)."""
    if isinstance(b, (tuple, list)):
        return cls(list(b), dtype=dtype, device=device)
    if not isinstance(b, (bool, int, float)):
        raise TypeError(f"const: needs a bool, int, float or a tuple of them, got {type(b).__name__}")
    return cls.full((), b, dtype=dtype, device=device)


def ufix(self: Tensor, x: Any) -> Tensor:
    """`x` as a tensor next to self: a tensor as it is, a Python scalar as a 0-d tensor on self's device of the
    dtype it takes in an op with self (weak scalar: self's dtype when the kind fits, `t.ufix(2)` on float16 is
    float16; `int_t.ufix(0.5)` the default float). tinygrad's `ufix`."""
    cls = self._tensor_class()
    if isinstance(x, cls):
        return x
    if not isinstance(x, (bool, int, float)):
        raise TypeError(f"ufix: needs a Tensor or a bool/int/float, got {type(x).__name__}")
    return cls.full((), x, dtype=weak_promote(self.dtype, x), device=self.device)


def _terms(xs: tuple[Any, ...]) -> tuple[Any, ...]:
    """The terms of usum/uprod: given separately or as one list/tuple."""
    return tuple(xs[0]) if len(xs) == 1 and isinstance(xs[0], (list, tuple)) else xs


def usum(self: Tensor, *xs: Any) -> Tensor:
    """self + x0 + x1 + ... (`|` for bool self), the terms given separately or as one list (tinygrad's `usum`)."""
    out = self
    for x in _terms(xs):
        out = out | x if self.dtype == dtypes.bool else out + x
    return out


def uprod(self: Tensor, *xs: Any) -> Tensor:
    """self * x0 * x1 * ... (`&` for bool self), the terms given separately or as one list (tinygrad's `uprod`)."""
    out = self
    for x in _terms(xs):
        out = out & x if self.dtype == dtypes.bool else out * x
    return out


def alu(self: Tensor, op: Ops, *src: Tensor) -> Tensor:
    """The elementwise IR op `op` on self and `src`, as is (tinygrad's `alu`): no broadcasting, no promotion. The
    operands need self's shape, device and dtype (WHERE: self is the bool condition, the two values share a dtype;
    float-only unary ops need a float). Gradients follow the op's rule, as for the named methods."""
    cls = self._tensor_class()
    arity = 1 if op in GroupOp.Unary else 2 if op in GroupOp.Binary else 3 if op in GroupOp.Ternary else 0
    if not arity:
        raise ArgumentError(f"alu: {op} is not an elementwise ALU op (one of GroupOp.ALU)")
    if len(src) + 1 != arity:
        raise ArgumentError(f"alu: {op} takes {arity} operands, got {len(src) + 1}")
    for t in src:
        if not isinstance(t, cls):
            raise TypeError(f"alu: operands must be Tensors, got {type(t).__name__} (use ufix for scalars)")
        if t.shape != self.shape or t.device != self.device:
            raise ArgumentError(f"alu: {op} operands differ: {self.shape} on {self.device} vs {t.shape} on {t.device}")
    values = (self, *src)[1:] if op is Ops.WHERE else (self, *src)
    if op is Ops.WHERE and self.dtype != dtypes.bool:
        raise TypeError(f"alu: WHERE needs a bool condition, got {self.dtype}")
    if len({t.dtype for t in values}) > 1:
        raise TypeError(f"alu: {op} operands need one dtype, got {', '.join(str(t.dtype) for t in values)}")
    if op in _FLOAT_UNARY and not dtypes.is_float(self.dtype):
        raise TypeError(f"alu: {op} needs a float operand, got {self.dtype}")
    return cls(self.uop.alu(op, *[t.uop for t in src]))


_FLOAT_UNARY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL})


def replace(self: Tensor, x: Tensor) -> Tensor:
    """Make self stand for `x`'s graph (same shape; dtype and device may change); returns self."""
    if x.shape != self.shape:
        raise ArgumentError(f"replace: shape {x.shape} differs from {self.shape}")
    self.uop = x.uop
    return self


def to_(self: Tensor, device: str | None) -> Tensor:
    """Move self to `device` in place; returns self."""
    self.uop = self.to(device).uop
    return self


def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:
    """einops-style rearrange: `t.rearrange("b (h w) c -> b c h w", h=4)` (named axes, parenthesised groups)."""
    import re

    def parse(side: str) -> list[list[str]]:
        groups, tokens = [], re.findall(r"\(|\)|[A-Za-z_][A-Za-z0-9_]*|\.\.\.|\S", side)
        current: list[str] | None = None
        for tok in tokens:
            if tok == "(":
                current = []
            elif tok == ")":
                groups.append(current or [])
                current = None
            elif current is not None:
                current.append(tok)
            else:
                groups.append([tok])
        return groups

    lhs, arrow, rhs = formula.partition("->")
    if not arrow:
        raise ArgumentError(f"rearrange: formula {formula!r} needs '->'")
    left, right = parse(lhs), parse(rhs)
    if len(left) != self.ndim:
        raise ArgumentError(
            f"rearrange: {lhs.strip()!r} names {len(left)} dims, the tensor has {self.ndim} {self.shape}"
        )
    known = dict(sizes)
    for group, size in zip(left, self.shape, strict=True):
        unknown = [n for n in group if n not in known]
        rest = 1
        for n in group:
            rest *= known.get(n, 1)
        if len(unknown) > 1 or (not unknown and rest != size) or (unknown and size % rest):
            raise ArgumentError(f"rearrange: cannot split dim of size {size} into {group} with sizes {sizes}")
        if unknown:
            known[unknown[0]] = size // rest
    flat_left = [n for g in left for n in g]
    flat_right = [n for g in right for n in g]
    if sorted(flat_left) != sorted(flat_right):
        raise ArgumentError(f"rearrange: the two sides name different axes: {flat_left} vs {flat_right}")
    x = self.reshape(*[known[n] for n in flat_left]).permute(*[flat_left.index(n) for n in flat_right])
    return x.reshape(*[_prod([known[n] for n in g]) for g in right])


def _prod(xs: list[int]) -> int:
    out = 1
    for v in xs:
        out *= v
    return out
