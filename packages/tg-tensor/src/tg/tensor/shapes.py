"""Shape arguments: accepting f(2, 3) and f((2, 3)), canonical axes, numpy broadcasting, symbolic dims.

A dim is an int or a *symbolic int*: an integer UOp built from bound Variables (`Variable("n", 1, 64).bind(5)`),
as tinygrad. Symbolic dims pass through movement, elementwise and reduce ops unchanged; they are evaluated (with
the bound values) only where data leaves the device (`concrete_shape`).
"""

from __future__ import annotations

from typing import Any

from tg.ir import DType, Ops, UOp, dtypes
from tg.ir.uop import sint
from tg.tensor.data import is_int
from tg.tensor.errors import ArgumentError, ShapeTypeError


def is_symbolic(x: Any) -> bool:
    """True for a symbolic int (an integer UOp of bound Variables, such as `v` or `v * 4`), not a tensor graph."""
    return isinstance(x, UOp) and x._shape is None and dtypes.is_int(x.dtype)


def symbolic_scalar(x: UOp, dtype: DType | None, device: str) -> UOp:
    """A 0-d tensor graph holding the value of symbolic int `x` (its Variables are kernel arguments), cast to
    `dtype` if given."""
    ret = UOp.full((), 0, x.dtype, device).alu(Ops.ADD, x)
    return ret if dtype is None or dtype is x.dtype else ret.cast(dtype)


def simplify_dim(x: Any) -> sint:
    """An int dim as a Python int; a symbolic one simplified (an int if it folds to one)."""
    if is_int(x):
        return int(x)
    ret = x.simplify()
    return int(ret.arg) if ret.op is Ops.CONST else ret


def shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """Accept both f(2, 3) and f((2, 3)); entries are ints or symbolic ints (returned as given, simplified)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if not (is_int(s) or is_symbolic(s)):
            raise ShapeTypeError(f"shape entries must be ints (or bound Variables), got {s!r} in {shape}")
    return tuple(simplify_dim(s) for s in shape)  # type: ignore[misc]


def int_shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """`shape_arg` for functions whose result depends on the element count itself (random streams): a symbolic
    dim is a TypeError naming it."""
    shp = shape_arg(shape)
    if any(isinstance(s, int) and s < 0 for s in shp):
        raise ArgumentError(f"negative dimension in shape {shp}")
    if has_symbolic(shp):
        raise TypeError(f"symbolic shape {fmt_shape(shp)} is not supported here: make a tensor of the maximum size "
                        "and slice it (t[:v])")  # fmt: skip
    return shp


def same_dim(a: sint, b: sint) -> bool:
    """Whether two dims are equal: ints by value, symbolic dims by structure after simplification."""
    if isinstance(a, UOp) or isinstance(b, UOp):
        return isinstance(a, UOp) and isinstance(b, UOp) and (a is b or a.simplify() is b.simplify())
    return a == b


def same_shape(a: tuple[sint, ...], b: tuple[sint, ...]) -> bool:
    """Whether two shapes are equal (symbolic dims compared by structure)."""
    return len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b, strict=True))


def has_symbolic(shape: tuple[Any, ...]) -> bool:
    """Whether any dim of `shape` is symbolic."""
    return any(isinstance(s, UOp) for s in shape)


def render_dim(s: sint) -> str:
    """A dim for messages: `3`, or a symbolic one as `i` (bound to 3) or `i*4`."""
    return s.render() if isinstance(s, UOp) else str(s)


def concrete_dim(s: sint, what: str = "dim") -> int:
    """A dim's value: an int as is, a symbolic one evaluated with its Variables' bound values."""
    if not isinstance(s, UOp):
        return int(s)
    try:
        return int(s.sym_infer(bound_values(s)))
    except (KeyError, TypeError) as e:
        msg = f"{what} {render_dim(s)} has an unbound Variable ({e}); bind it: Variable(...).bind(value)"
        raise ArgumentError(msg) from None


def bound_values(x: UOp) -> dict[str, int]:
    """The values of the bound Variables in `x`, by name."""
    return {b.src[0].arg[0]: b.src[1].arg for b in x.toposort() if b.op is Ops.BIND}


def concrete_shape(shape: tuple[sint, ...]) -> tuple[int, ...]:
    """`shape` with every symbolic dim evaluated at its bound values (data leaving the device has a real shape)."""
    return tuple(concrete_dim(s, "shape entry") for s in shape)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The numpy broadcast of `shapes`; ValueError naming the shapes when they do not broadcast. A symbolic dim
    broadcasts with 1 and with an equal symbolic dim."""
    first = tuple(shapes[0])
    if all(tuple(s) == first for s in shapes[1:]):  # the common case (an op of same-shaped operands): no dim walk
        return first
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out: list[sint] = []
    for dims in zip(*padded, strict=True):
        sizes: list[sint] = []
        for d in dims:
            if not (isinstance(d, int) and d == 1) and not any(same_dim(d, x) for x in sizes):
                sizes.append(d)
        if len(sizes) > 1:
            raise ArgumentError(
                f"shapes {' and '.join(fmt_shape(s) for s in shapes)} cannot be broadcast together"
            )  # fmt: skip
        out.append(sizes[0] if sizes else 1)
    return tuple(out)  # type: ignore[arg-type]


def fmt_shape(shape: tuple[Any, ...]) -> str:
    """A shape for messages (symbolic dims rendered as expressions)."""
    if not has_symbolic(shape):
        return str(tuple(shape))
    inner = ", ".join(render_dim(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def canonical_axis(axis: int, ndim: int) -> int:
    """`axis` made non-negative; IndexError when out of range for `ndim` dims."""
    if not is_int(axis):
        raise TypeError(f"axis must be an int, got {axis!r}")
    n = ndim if ndim > 0 else 1
    if not -n <= axis < n:
        raise IndexError(f"dimension {axis} out of range for a {ndim}-d tensor")
    return int(axis) % n
