"""Running the work behind tensors: schedule a SINK, execute it, and swap realized graphs for their buffers.

The runtime is imported inside the functions so that `import tg.tensor` stays free of work.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tg.ir import Ops, UOp
from tg.tensor.data import to_numpy_dtype

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

# every live Tensor, so that a realize can hand the new buffers to all tensors that share a graph node
all_tensors: weakref.WeakSet[Tensor] = weakref.WeakSet()


def buffer_of(uop: UOp) -> UOp | None:
    """The BUFFER behind `uop` if `uop` is just that buffer reshaped (a realized tensor), else None."""
    base = uop
    while base.op is Ops.RESHAPE:
        base = base.src[0]
    if base.op is Ops.BUFFER and int(base.arg) == math.prod(int(s) for s in uop.shape):
        return base
    return None


def is_realized(uop: UOp) -> bool:
    """Whether `uop` needs no computation: a buffer reshaped, or a MULTI of such buffers (a realized sharded tensor)."""
    if uop.op is Ops.MULTI:
        return all(buffer_of(s) is not None for s in uop.src)
    return buffer_of(uop) is not None


def _lower_multi(sink: UOp) -> tuple[UOp, dict[UOp, Any]]:
    """Sharded roots become one root per shard (tg.codegen.schedule.multi); returns the new sink and root values."""
    from tg.codegen.schedule.multi import Sharded, push_multi

    done = push_multi(sink.src)
    values = {r: done[r] for r in sink.src}
    roots: list[UOp] = []
    for v in values.values():
        roots.extend(v.shards if isinstance(v, Sharded) else (v,))
    return UOp(Ops.SINK, src=tuple(dict.fromkeys(roots))), values


def _reads_buffer_raw(uop: UOp, buffers: set[UOp]) -> bool:
    """True if `uop`'s graph reads one of `buffers` directly (not through an ASSIGN of it)."""
    return any(u.op is Ops.BUFFER and u in buffers for u in uop.toposort(lambda u: u.op is not Ops.ASSIGN))


def realize_tensors(tensors: Iterable[Tensor]) -> None:
    """Compute every tensor in `tensors` that is not yet a buffer, in one schedule."""
    from tg.codegen.schedule import create_schedule
    from tg.runtime.engine import run_linear
    from tg.tensor.autograd import note_realized

    todo = [t for t in tensors if not is_realized(t.uop)]
    if not todo:
        return
    roots = [t.uop for t in todo]
    sink = UOp(Ops.SINK, src=tuple(dict.fromkeys(roots)))
    # a pending read of a buffer that an assign in this schedule overwrites must be computed now, before the write
    assigned = {n.src[0] for n in sink.toposort() if n.op is Ops.ASSIGN}
    if assigned:
        targets: set[UOp] = set()
        for t_uop in assigned:
            base = t_uop
            while base.op in (Ops.RESHAPE, Ops.ASSIGN):
                base = base.src[0]
            if base.op is Ops.BUFFER:
                targets.add(base)
        extra = [
            t.uop for t in list(all_tensors)
            if buffer_of(t.uop) is None and t.uop not in roots and _reads_buffer_raw(t.uop, targets)
        ]  # fmt: skip
        if extra:
            sink = UOp(Ops.SINK, src=tuple(dict.fromkeys([*roots, *extra])))
    multi_values: dict[UOp, Any] = {}
    if any(u.op is Ops.MULTI or (u.op is Ops.DEVICE and isinstance(u.arg, tuple)) for u in sink.toposort()):
        sink, multi_values = _lower_multi(sink)
    linear, var_vals, becomes = create_schedule(sink)
    run_linear(linear, var_vals)
    if multi_values:
        from tg.codegen.schedule.multi import Sharded

        for root, v in multi_values.items():
            if isinstance(v, Sharded):
                becomes[root] = UOp(Ops.MULTI, root.dtype, tuple(becomes.get(s, s) for s in v.shards), v.axis)
            else:
                becomes[root] = becomes.get(v, v)
    note_realized(becomes)  # autograd: realized values that required grad keep their forward graph
    for t in list(all_tensors):
        if (new := becomes.get(t.uop)) is not None:
            t.uop = new
        elif not is_realized(t.uop):
            # a lazy graph that reads values stored just now: read the buffers instead of recomputing later
            t.uop = t.uop.substitute(becomes)


def host_bytes(t: Tensor) -> bytearray:
    """The raw bytes of tensor `t` (realizes it)."""
    from tg.runtime.engine import buffer_for, capturing

    if capturing:
        from tg.runtime.jit import JitError

        name = getattr(capturing[0], "name", "?")
        raise JitError(
            f"cannot read tensor data while TinyJit({name}) captures (its 2nd call): the value would be fixed into "
            "every replay; read it outside the function"
        )

    data = bytearray(t.numel() * t.dtype.itemsize)
    if not data:
        return data
    if isinstance(t.uop.device, tuple):  # sharded: gather to the first device
        from tg.tensor.tensor import Tensor

        t = Tensor(t.uop.copy_to_device(t.uop.device[0]))
    elif buffer_of(t.uop) is None and t.device.startswith("DISK"):
        # DISK runs no kernels: a view of a file (e.g. a contiguous slice) is read through a copy to the host
        from tg.tensor.tensor import Tensor

        t = Tensor(t.uop.copy_to_device("CPU"))
    t.realize()
    buf = buffer_of(t.uop)
    if buf is None:
        raise RuntimeError(f"tensor was not realized into a buffer: {t.uop.op}")
    buffer_for(buf).copyout(memoryview(data))
    return data


def to_numpy(t: Tensor) -> Any:
    """The values of `t` as a fresh numpy array (realizes it; imports numpy)."""
    import numpy as np

    return np.frombuffer(host_bytes(t), dtype=to_numpy_dtype(t.dtype)).reshape(t.shape)


def upload(data: bytes, buffer: UOp) -> None:
    """Copy host bytes into the device buffer behind BUFFER uop `buffer`."""
    from tg.runtime.engine import buffer_for

    if data:
        buffer_for(buffer).copyin(data)
