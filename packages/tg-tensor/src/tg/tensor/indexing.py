"""Basic indexing (`t[1:3, ::2, None, ..., -1]`) as movement ops: shrink, flip, pad+reshape for strides."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg.tensor.data import is_int

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _normalize(index: Any, ndim: int) -> list[Any]:
    """The index as a list with Ellipsis expanded to full slices."""
    items = list(index) if isinstance(index, tuple) else [index]
    for it in items:
        if not (it is None or it is Ellipsis or isinstance(it, slice) or is_int(it)) or isinstance(it, bool):
            raise TypeError(f"unsupported index {it!r}: only ints, slices, None and ... are supported")
    if sum(it is Ellipsis for it in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(it is not None and it is not Ellipsis for it in items)
    if used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}: got {used}")
    if Ellipsis in items:
        pos = items.index(Ellipsis)
        items[pos : pos + 1] = [slice(None)] * (ndim - used)
    else:
        items += [slice(None)] * (ndim - used)
    return items


def __getitem__(self: Tensor, index: Any) -> Tensor:
    """Basic indexing with ints (negative ok), slices (any step, negative too), None and Ellipsis.

    >>> Tensor([[1, 2, 3], [4, 5, 6]])[1, ::-1].tolist()
    [6, 5, 4]
    """
    items = _normalize(index, self.ndim)
    bounds: list[tuple[int, int]] = []
    flips: list[int] = []
    steps: list[int] = []
    out_shape: list[int] = []  # final shape with None dims inserted and int dims dropped
    dim = 0
    for it in items:
        if it is None:
            out_shape.append(-2)  # placeholder for a new axis
            continue
        n = self.shape[dim]
        if is_int(it):
            i = int(it)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {n}")
            i %= n
            bounds.append((i, i + 1))
            flips.append(0)
            steps.append(1)
        else:
            start, stop, step = it.indices(n)
            count = len(range(start, stop, step))
            if step > 0:
                bounds.append((start, start + (count - 1) * step + 1) if count else (0, 0))
                flips.append(0)
            else:
                # take the mirrored range, then flip it
                lo = start + (count - 1) * step if count else 0
                bounds.append((lo, start + 1) if count else (0, 0))
                flips.append(1)
            steps.append(abs(step))
            out_shape.append(count)
        dim += 1
    x = self.shrink(bounds)
    if any(flips):
        x = x.flip([i for i, f in enumerate(flips) if f])
    for d, step in enumerate(steps):
        if step > 1 and x.shape[d] > 1:
            x = _stride(x, d, step)
    it_out = iter(s for s in out_shape if s != -2)
    final = [1 if s == -2 else next(it_out) for s in out_shape]
    return x.reshape(final)


def _stride(x: Tensor, d: int, step: int) -> Tensor:
    """Every `step`-th element along dim `d` (starting with the first): pad, split the dim, keep column 0."""
    n = x.shape[d]
    count = (n - 1) // step + 1
    pad = [(0, 0)] * x.ndim
    pad[d] = (0, count * step - n)
    x = x.pad(pad)
    x = x.reshape(*x.shape[:d], count, step, *x.shape[d + 1 :])
    keep: list[tuple[int, int] | None] = [None] * x.ndim
    keep[d + 1] = (0, 1)
    x = x.shrink(keep)
    return x.reshape(*x.shape[: d + 1], *x.shape[d + 2 :])


def __setitem__(self: Tensor, index: Any, value: Any) -> None:
    """`t[index] = value`: write into the indexed elements of t's buffer (realized at once).

    `value` (a Tensor or Python data) is cast to t's dtype and broadcast to the indexed shape. A lazy `t` is
    realized first; a `t` that is itself a view of another tensor's buffer writes into that buffer.

    >>> t = Tensor.zeros(2, 3)
    >>> t[1, ::2] = 5.0
    >>> t.tolist()
    [[0.0, 0.0, 0.0], [5.0, 0.0, 5.0]]
    """
    from tg.ir import Ops
    from tg.tensor.movement import assign_into_view, view_base
    from tg.tensor.realize import realize_tensors
    from tg.tensor.tensor import Tensor

    if view_base(self.uop).op not in (Ops.BUFFER, Ops.ASSIGN):
        self.realize()  # the write needs a buffer to go to
    view = self[index]
    v = value if isinstance(value, Tensor) else Tensor(value, device=self.device, dtype=self.dtype)
    if v.device != self.device:
        raise ValueError(f"setitem device mismatch: target {self.device} vs value {v.device}")
    v = v.cast(self.dtype)
    if v.ndim > view.ndim:
        raise ValueError(f"setitem: cannot broadcast value of shape {v.shape} to the indexed shape {view.shape}")
    v = v.reshape((1,) * (view.ndim - v.ndim) + v.shape)._broadcast_to(view.shape)
    written = view_base(assign_into_view(view.uop, v.uop))
    # self reads through the write (it is the tensor being written, not an earlier read of the buffer)
    self.uop = self.uop.substitute({view_base(self.uop): written})
    realize_tensors([Tensor(written)])
