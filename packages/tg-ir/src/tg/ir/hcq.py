"""The arguments of the hardware-command-queue ops (`Ops.QUEUE`, `QCMD`, `PACKET`, `GETADDR`, `HCQBUF`).

tg.runtime.hcq lowers a schedule (a ``LINEAR`` of ``CALL``s) into per-device, per-queue programs built from these
ops (design: ``shared/specs/hcq.md``):

- ``QUEUE(*commands, arg=QueueKey(devices, name))``: one submit to one hardware queue (``COMPUTE:0``, ``COPY:0``);
  its commands run in order. Before encoding the commands are ``QCMD``s and ``CALL``s, after it ``PACKET``s.
- ``QCMD(..., arg=QOp)``: an abstract command: ``WAIT(signal, value)``, ``SIGNAL(signal, value)``,
  ``TIMESTAMP(signal)``, ``BARRIER()``. Kernels and copies stay ``CALL``s until the device's encoder turns them into
  packets.
- ``PACKET(*words, arg=name)``: an encoded command; each word is a uint32 or uint64 UOp (a CONST, or an expression
  the submitter computes: addresses of slot buffers, variables, the epoch).
- ``GETADDR(buffer, arg=device)``: uint64, the address ``device`` uses for ``buffer`` (a slot ``PARAM`` or an
  ``HCQBUF``).
- ``HCQBUF(DEVICE, arg=HCQRole(role, key))``: memory that exists only once the program is linked (signals, the
  timeline, command buffers, rings, doorbells ...); its dtype is a pointer dtype of the right element type and size.

The checks are `tg.ir.spec.hcq_spec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from tg.ir.ops import NamedEnum

__all__ = ["HCQ_ROLES", "HCQRole", "QOp", "QueueKey"]


class QOp(NamedEnum, Enum):
    """The abstract queue commands (kernels and copies are CALLs)."""

    WAIT = auto()  # src (signal, value): wait until (signal value & 0xFFFFFFFF) >= value
    SIGNAL = auto()  # src (signal, value): write value into the signal, after every earlier command completed
    TIMESTAMP = auto()  # src (signal,): the device's tick count into the signal's timestamp word (+8)
    BARRIER = auto()  # src (): make earlier memory writes of other queues/the host visible (cache flush)


@dataclass(frozen=True)
class QueueKey:
    """Which queue a QUEUE submits to: the devices it runs on (one per lane; tg uses one) and the queue name."""

    devices: tuple[str, ...]
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.devices, tuple) or not self.devices or not all(isinstance(d, str) for d in self.devices):
            raise TypeError(f"QueueKey.devices must be a non-empty tuple of device names, got {self.devices!r}")
        kind, _, index = self.name.partition(":")
        if not kind.isupper() or not index.isdigit():
            raise ValueError(f"queue name must look like 'COMPUTE:0' or 'COPY:0', got {self.name!r}")

    @property
    def device(self) -> str:
        """The (first) device of the queue."""
        return self.devices[0]

    def __str__(self) -> str:
        return f"{','.join(self.devices)} {self.name}"


# what an HCQBUF can stand for (hcq.md section 2); resolved by the device at link time
HCQ_ROLES = frozenset({
    "signal", "timeline", "timeline_value", "epoch", "sentinel", "cmdbuf", "kernargs", "program", "scratch",
    "input_table", "patch_pairs", "ring", "wptr", "rptr", "doorbell", "put", "staging",
})  # fmt: skip


@dataclass(frozen=True)
class HCQRole:
    """The arg of an HCQBUF: its role and a key that tells placeholders of one role apart (a queue name, a call
    index, a program); equal (role, key, device) is the same memory."""

    role: str
    key: Any = None

    def __post_init__(self) -> None:
        if self.role not in HCQ_ROLES:
            raise ValueError(f"unknown HCQBUF role {self.role!r}; roles: {', '.join(sorted(HCQ_ROLES))}")
        hash(self.key)  # a key must be hashable (UOps are hash-consed on their args)

    def __str__(self) -> str:
        return self.role if self.key is None else f"{self.role}[{_key_str(self.key)}]"


def _key_str(key: Any) -> str:
    if isinstance(key, tuple):
        return ",".join(_key_str(k) for k in key)
    return str(key)
