"""Range checks for tensor indices (advanced indexing, gather, scatter, scatter_reduce): an out-of-range index
raises `IndexOutOfRange` (an IndexError that is also a RuntimeError, the class torch raises for gather/scatter)
instead of silently selecting nothing.

Indexing selects through a one-hot comparison with `arange`, so an index that matches no position would give 0
(get) or write nothing (set). Two paths keep that from ever reaching the user, without a host round trip in the
common case of a computed index:

- **now**: when the index's values are already on hand (created from Python lists/numpy, a realized buffer, a
  constant), they are read on the host and checked before the op is built.
- **at realize**: a computed (lazy) index is not realized early. The op registers a *deferred check* on its one-hot
  selection: a 2-element tensor [min, max] of the index values. Any realize whose graph contains that selection
  (the op's result, anything computed from it, or a gradient through it) computes the check in the same schedule
  (the min/max reduce fuses with the index computation) and raises before the results are handed to the tensors,
  which stay lazy. The check runs once per selection: after it passed it is dropped.

Limits (documented): a TinyJit replay runs captured kernels without the Python realize path, so deferred checks are
verified on the traced calls only; inside a `@function` body (traced once, values unknown) indices are not checked;
writes made by pending `assign`s in the failing schedule have already happened.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from tg.ir import Ops, UOp

if TYPE_CHECKING:
    import numpy as np

    from tg.tensor.tensor import Tensor


class IndexOutOfRange(IndexError, RuntimeError):
    """An index value outside the indexed dimension (catchable as IndexError, or RuntimeError like torch's)."""


class _Check:
    __slots__ = ("bounds", "dim", "negative_ok", "op", "size")

    def __init__(self, bounds: Tensor, op: str, dim: int, size: int, negative_ok: bool) -> None:
        self.bounds, self.op, self.dim, self.size, self.negative_ok = bounds, op, dim, size, negative_ok


# selection node -> checks of the index values it compares (weak: a graph nobody holds needs no check)
_deferred: weakref.WeakKeyDictionary[UOp, list[_Check]] = weakref.WeakKeyDictionary()


def _message(op: str, dim: int, size: int, lo: int, hi: int, negative_ok: bool) -> str:
    first = lo if lo < (-size if negative_ok else 0) else hi
    valid = f"{-size}..{size - 1}" if negative_ok else f"0..{size - 1}"
    return (
        f"{op}: index {first} is out of bounds for dimension {dim} with size {size} "
        f"(index values span [{lo}, {hi}]; valid: {valid})"
    )


def _raise_if_out(op: str, dim: int, size: int, lo: int, hi: int, negative_ok: bool) -> None:
    if lo < (-size if negative_ok else 0) or hi >= size:
        raise IndexOutOfRange(_message(op, dim, size, lo, hi, negative_ok))


def _const_value(uop: UOp) -> Any:
    base = uop.base
    return base.arg if base.op is Ops.CONST else None


def _host_values(index: Tensor) -> np.ndarray | None:
    """The index values when they can be read without computing anything, else None."""
    from tg.runtime.engine import capturing
    from tg.tensor.live import buffer_of, tracing_functions

    if (c := _const_value(index.uop)) is not None:
        import numpy as np  # numpy is imported only when data crosses to the host

        return np.array([int(c)])
    if capturing or tracing_functions or isinstance(index.uop.device, tuple) or buffer_of(index.uop) is None:
        return None
    return index.numpy()


def check_now(index: Tensor, size: int, *, op: str, dim: int, negative_ok: bool, skip: int | None = None) -> bool:
    """Check the values of integer tensor `index` against [0, size) (or [-size, size) when `negative_ok`) if they
    can be read without computing anything; False when they cannot (then `defer` the check). Values equal to `skip`
    (an `ignore_index`) are not checked."""
    if index.numel() == 0:
        return True
    if (values := _host_values(index)) is None:
        return False
    if skip is not None:
        values = values[values != skip]
    if values.size:
        _raise_if_out(op, dim, size, int(values.min()), int(values.max()), negative_ok)
    return True


def defer(index: Tensor, size: int, *, op: str, dim: int, negative_ok: bool, selection: Tensor) -> None:
    """Check `index` when a graph containing `selection` (the one-hot built from it) is realized."""
    flat = index.flatten()
    bounds = flat.min().stack(flat.max())
    _deferred.setdefault(selection.uop, []).append(_Check(bounds, op, dim, size, negative_ok))


def check_index(index: Tensor, size: int, *, op: str, dim: int, negative_ok: bool, selection: Tensor) -> None:
    """`check_now`, else `defer`."""
    if not check_now(index, size, op=op, dim=dim, negative_ok=negative_ok):
        defer(index, size, op=op, dim=dim, negative_ok=negative_ok, selection=selection)


def add_checks(sink: UOp, nodes: list[UOp]) -> tuple[UOp, list[tuple[UOp, list[_Check]]]]:
    """`sink` (whose graph is `nodes`) with the bounds of every deferred check its graph needs added as roots, and
    those checks."""
    from tg.runtime.engine import capturing

    if not _deferred or capturing:  # a JIT capture cannot read results back: checked on the traced call instead
        return sink, []
    found = [(n, cs) for n in nodes if (cs := _deferred.get(n)) is not None]
    if not found:
        return sink, []
    extra = [c.bounds.uop for _, cs in found for c in cs]
    return UOp(Ops.SINK, src=tuple(dict.fromkeys([*sink.src, *extra]))), found


def verify(found: list[tuple[UOp, list[_Check]]], becomes: dict[UOp, UOp]) -> None:
    """After the schedule ran: read each check's bounds and raise for the first index out of range; passed checks
    are dropped."""
    for node, checks in found:
        for c in checks:
            lo, hi = (int(v) for v in c.bounds._tensor_class()(becomes.get(c.bounds.uop, c.bounds.uop)).numpy())
            _raise_if_out(c.op, c.dim, c.size, lo, hi, c.negative_ok)
        _deferred.pop(node, None)
