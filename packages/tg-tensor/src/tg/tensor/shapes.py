"""Shape arguments: accepting f(2, 3) and f((2, 3)), canonical axes, numpy broadcasting."""

from __future__ import annotations

from typing import Any

from tg.tensor.data import is_int


def shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """Accept both f(2, 3) and f((2, 3))."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if not is_int(s):
            raise TypeError(f"shape entries must be ints, got {s!r} in {shape}")
    return tuple(int(s) for s in shape)


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


def canonical_axis(axis: int, ndim: int) -> int:
    """`axis` made non-negative; IndexError when out of range for `ndim` dims."""
    if not is_int(axis):
        raise TypeError(f"axis must be an int, got {axis!r}")
    n = ndim if ndim > 0 else 1
    if not -n <= axis < n:
        raise IndexError(f"dimension {axis} out of range for a {ndim}-d tensor")
    return int(axis) % n
