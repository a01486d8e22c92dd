"""Sharding tensors over several devices: `shard`, `shard_`, `shard_like`.

A sharded tensor's graph is `MULTI(shard_0, ..., shard_n-1, arg=axis)` (see `tg.codegen.schedule.multi`): shard i
lives on device i and holds the i-th equal slice on `axis` (`axis=None`: every device holds the whole tensor).
Uneven shards are ceil-size slices of the tensor padded to n slices, shown through a SHRINK of the MULTI.
Every Tensor op works on the logical tensor; at realize, the ops run per device with the copies (all-gather,
allreduce) the op needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.ir import Ops, UOp

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _check_devices(devices: tuple[str, ...]) -> tuple[str, ...]:
    from tg.tensor.args import canonical_device

    if not isinstance(devices, (tuple, list)) or not devices:
        raise ValueError(f"shard needs a tuple of devices, got {devices!r}")
    canon = tuple(canonical_device(d) for d in devices)
    if len(set(canon)) != len(canon):
        raise ValueError(f"shard: devices must be distinct, got {canon}")
    return canon


def shard(self: Tensor, devices: tuple[str, ...], axis: int | None = None) -> Tensor:
    """Split this tensor over `devices` on `axis`, or replicate it (`axis=None`). When the axis length is not a
    multiple of the device count, device i gets the i-th slice of ceil(length / n) elements (the last ones are
    shorter or empty): 5 over 2 devices is 3 + 2, 4 over 3 is 2 + 2 + 0.

    >>> Tensor([1.0, 2.0, 3.0, 4.0]).shard(("CPU", "CPU:1"), axis=0).sum().item()
    10.0
    """
    from tg.tensor.shapes import canonical_axis

    cls = self._tensor_class()
    devs = _check_devices(tuple(devices))
    if len(devs) == 1:
        return self.to(devs[0])
    if isinstance(self.uop.device, tuple):
        src = self.to(self.uop.device[0])  # reshard through one device
    else:
        src = self
    if axis is None:
        return cls(UOp(Ops.MULTI, self.dtype, tuple(src.to(d).uop for d in devs), None))
    ax = canonical_axis(axis, self.ndim)
    size, n = int(self.shape[ax]), len(devs)
    chunk = -(-size // n)  # uneven: ceil-size chunks, the last ones padded (the padding is never shown)
    if chunk * n != size:
        src = src.pad(tuple((0, chunk * n - size) if j == ax else (0, 0) for j in range(self.ndim)))
    pieces = []
    for i, d in enumerate(devs):
        arg = tuple((i * chunk, (i + 1) * chunk) if j == ax else (0, int(s)) for j, s in enumerate(src.shape))
        pieces.append(src.shrink(arg).to(d).uop)  # only device i's part is copied
    out = cls(UOp(Ops.MULTI, self.dtype, tuple(pieces), ax))
    return out if chunk * n == size else out.shrink(tuple((0, size) if j == ax else None for j in range(self.ndim)))


def shard_(self: Tensor, devices: tuple[str, ...], axis: int | None = None) -> Tensor:
    """`shard` in place: this Tensor object becomes the sharded tensor."""
    self.uop = shard(self, devices, axis).uop
    return self


def shard_axis(t: Tensor) -> int | None:
    """The sharded axis of a tensor on several devices (None: replicated or on one device)."""
    if not isinstance(t.uop.device, tuple):
        return None
    if t.uop.op is Ops.MULTI:
        return t.uop.arg if isinstance(t.uop.arg, int) else None
    from tg.codegen.schedule.multi import Sharded, push_multi

    value = push_multi([t.uop])[t.uop]
    return value.axis if isinstance(value, Sharded) else None


def shard_like(self: Tensor, other: Tensor) -> Tensor:
    """Shard like `other` (same devices and axis); an unsharded `other` means `to(other.device)`."""
    if isinstance(other.uop.device, tuple):
        return shard(self, other.devices, shard_axis(other))
    return self.to(other.device)
