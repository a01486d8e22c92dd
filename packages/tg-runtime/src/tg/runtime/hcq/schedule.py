"""Stages S1 and S2 of the HCQ pipeline: dependencies and queue assignment, then merging into fewer submits.

S1 (``schedule_batch``) turns one batch of lowered calls into QUEUEs, one per call plus a finalizer per device:

1. the first command of each (device, queue) used is ``BARRIER; WAIT(T_x, epoch_x - 1)`` for every device x the
   queue's calls touch (orders it after all earlier work on those devices, from this program or others);
2. before a call, one ``WAIT(Q_other, k + 1)`` per other queue it depends on (k = the newest dependency there);
   dependencies come from :class:`DepsTracker` (read-after-write, write-after-read, write-after-write on byte
   ranges of base buffers, so sub-allocated views overlap exactly); a dependency on the call's own queue is dropped
   (queues run in order);
3. ``TIMESTAMP(start)`` / ``TIMESTAMP(end)`` around the call when profiling;
4. ``SIGNAL(Q_own, index + 1)`` after a call something waits for;
5. per device d, a finalizer on ``d``'s ``COMPUTE:0``: WAITs on the last signal of every other queue that touched
   d's memory or ran on d, then ``SIGNAL(T_d, epoch_d)``. The submitter then sets ``V_d = epoch_d + 1``.

S2 (``merge_queues``) merges consecutive QUEUEs of one (devices, queue) while no QUEUE of the same queue name on a
shared device lies between them (submit order per hardware queue is kept). ``HCQ_BATCH_SIZE`` caps the calls of a
queue's first submit and doubles for each following one, so a long program starts the device early.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tg.ir import Ops, UOp
from tg.ir.helpers import HCQ_BATCH_SIZE
from tg.runtime.hcq import ir
from tg.runtime.hcq.prepare import call_access, copy_device, resource_of

Who = tuple[str, str, int]  # (device, queue name, call index)
QueueId = tuple[str, str]  # (device, queue name)
Range = tuple[UOp, int, int]  # (base buffer, first byte, end byte)


@dataclass
class _Access:
    start: int
    end: int
    writer: Who | None
    readers: list[Who] = field(default_factory=list)


class DepsTracker:
    """Per base buffer, the byte ranges accessed so far with their last writer and the readers since it.

    ``access(reads, writes, who)`` returns the earlier accesses ``who`` must wait for: overlapping writers for a
    read, overlapping writers and readers for a write; then records the access. A write that covers a recorded
    range replaces it (later accesses only need to wait for the write, which waited for what it covered).
    """

    def __init__(self) -> None:
        self.ranges: dict[UOp, list[_Access]] = collections.defaultdict(list)

    def access(self, reads: Sequence[Range], writes: Sequence[Range], who: Who) -> set[Who]:
        deps: set[Who] = set()
        for base, start, end in reads:
            for a in self.ranges[base]:
                if a.start < end and start < a.end and a.writer is not None:
                    deps.add(a.writer)
        for base, start, end in writes:
            for a in self.ranges[base]:
                if a.start < end and start < a.end:
                    if a.writer is not None:
                        deps.add(a.writer)
                    deps.update(a.readers)
        for base, start, end in reads:
            self.ranges[base].append(_Access(start, end, None, [who]))
        for base, start, end in writes:
            kept = [a for a in self.ranges[base] if not (start <= a.start and a.end <= end)]
            kept.append(_Access(start, end, who))
            self.ranges[base] = kept
        deps.discard(who)
        return deps


def call_queue(call: UOp, has_copy_queue: Callable[[str], bool]) -> QueueId:
    """The queue of a lowered call: a kernel on its device's ``COMPUTE:0``; a copy on ``COPY:0`` of the device
    that runs it (``COMPUTE:0`` there when that device has no copy queue)."""
    if call.src[0].op is Ops.PROGRAM:
        return call.src[0].arg.device, "COMPUTE:0"
    dev = copy_device(call)
    return dev, "COPY:0" if has_copy_queue(dev) else "COMPUTE:0"


def _buffer_args(call: UOp) -> list[tuple[int, UOp]]:
    return [(i, a) for i, a in enumerate(call.src[1:]) if a.op in (Ops.PARAM, Ops.BUFFER_VIEW, Ops.HCQBUF)]


def _memory_device(arg: UOp) -> str:
    return ir.device_of(arg)


@dataclass
class ScheduledBatch:
    """S1's output for one batch: the QUEUEs in submit order, the devices taking part (each gets an epoch and a
    finalizer), and per profiled call (device, queue, name, start signal, end signal)."""

    queues: list[UOp]
    devices: tuple[str, ...]
    profile: list[tuple[str, str, str, UOp, UOp]]


def call_name(call: UOp) -> str:
    """A kernel's name, or ``copy N bytes``."""
    body = call.src[0]
    if body.op is Ops.PROGRAM:
        return str(body.arg.name)
    return f"copy {ir.nbytes_of(call.src[1])}"


def schedule_batch(calls: Sequence[UOp], has_copy_queue: Callable[[str], bool], profile: bool = False
                   ) -> ScheduledBatch:  # fmt: skip
    """S1: the QUEUEs of one batch of lowered calls (see the module docstring)."""
    queues_of = [call_queue(c, has_copy_queue) for c in calls]
    tracker = DepsTracker()
    waits: list[dict[QueueId, int]] = []
    signalled: set[tuple[QueueId, int]] = set()  # (queue, call index) whose completion someone waits for
    touched: dict[QueueId, set[str]] = collections.defaultdict(set)  # devices whose memory a queue touches
    last_touch: dict[str, dict[QueueId, int]] = collections.defaultdict(dict)  # device -> queue -> last call index
    devices: dict[str, None] = {}
    for i, (call, (dev, qname)) in enumerate(zip(calls, queues_of, strict=True)):
        written, read = call_access(call)
        args = dict(_buffer_args(call))
        reads = [resource_of(args[p]) for p in read if p in args]
        writes = [resource_of(args[p]) for p in written if p in args]
        deps = tracker.access(reads, writes, (dev, qname, i))
        newest: dict[QueueId, int] = {}
        for ddev, dq, j in deps:
            if (ddev, dq) != (dev, qname):
                newest[(ddev, dq)] = max(newest.get((ddev, dq), -1), j)
        waits.append(newest)
        signalled.update((q, j) for q, j in newest.items())
        devices[dev] = None
        touched[(dev, qname)].add(dev)
        last_touch[dev][(dev, qname)] = i
        for a in args.values():
            mdev = _memory_device(a)  # the staging buffer counts as its owner's: its finalizer orders slot reuse
            devices[mdev] = None
            touched[(dev, qname)].add(mdev)
            last_touch[mdev][(dev, qname)] = i
    # finalizer waits: per device, the last call of every other queue that touched its memory or ran on it
    finalizer_waits: dict[str, dict[QueueId, int]] = {}
    for d in devices:
        fw = {q: j for q, j in last_touch[d].items() if q != (d, "COMPUTE:0")}
        finalizer_waits[d] = fw
        signalled.update(fw.items())

    out: list[UOp] = []
    started: set[QueueId] = set()
    waited: dict[QueueId, dict[QueueId, int]] = collections.defaultdict(dict)  # queue -> other queue -> index

    def wait_cmds(q: QueueId, deps: dict[QueueId, int]) -> list[UOp]:
        """WAITs of queue q on other queues, leaving out those an earlier WAIT of q already covers."""
        cmds = []
        for (wdev, wq), j in sorted(deps.items()):
            if waited[q].get((wdev, wq), -1) < j:
                waited[q][(wdev, wq)] = j
                cmds.append(ir.wait(ir.queue_signal(wdev, wq), j + 1))
        return cmds

    profile_entries: list[tuple[str, str, str, UOp, UOp]] = []

    def prologue(q: QueueId, mem_devices: set[str]) -> list[UOp]:
        if q in started:
            return []
        started.add(q)
        cmds = [ir.barrier()]
        for x in sorted(mem_devices | {q[0]}, key=lambda d: (d != q[0], d)):
            cmds.append(ir.wait(ir.timeline(x), ir.minus(ir.epoch(x), 1)))
        return cmds

    for i, (call, q) in enumerate(zip(calls, queues_of, strict=True)):
        dev, qname = q
        cmds = prologue(q, touched[q]) + wait_cmds(q, waits[i])
        if profile:
            start, end = ir.profile_signal(dev, i, False), ir.profile_signal(dev, i, True)
            cmds += [ir.timestamp(start), call, ir.timestamp(end)]
            profile_entries.append((dev, qname, call_name(call), start, end))
        else:
            cmds.append(call)
        if (q, i) in signalled:
            cmds.append(ir.signal(ir.queue_signal(dev, qname), i + 1))
        out.append(ir.queue(dev, qname, cmds))
    for d in devices:
        q = (d, "COMPUTE:0")
        cmds = prologue(q, {d}) + wait_cmds(q, finalizer_waits[d])
        cmds.append(ir.signal(ir.timeline(d), ir.epoch(d)))
        out.append(ir.queue(d, "COMPUTE:0", cmds))
    return ScheduledBatch(out, tuple(devices), profile_entries)


def _calls_in(q: UOp) -> int:
    return sum(1 for c in q.src if c.op is Ops.CALL)


def merge_queues(queues: Sequence[UOp], batch_size: int | None = None) -> list[UOp]:
    """S2: merge consecutive QUEUEs of one (devices, queue) while no QUEUE of that queue name on a shared device
    lies between; the first submit of a queue takes at most ``batch_size`` calls (HCQ_BATCH_SIZE; 0: no cap), each
    following one twice as many as the one before."""
    cap0 = HCQ_BATCH_SIZE.value if batch_size is None else batch_size
    out: list[UOp] = []
    open_: dict[tuple[tuple[str, ...], str], list[UOp]] = {}
    caps: dict[tuple[tuple[str, ...], str], int] = collections.defaultdict(lambda: cap0)

    def close(key: tuple[tuple[str, ...], str]) -> None:
        parts = open_.pop(key)
        out.append(ir.queue(key[0], key[1], [c for p in parts for c in p.src]))

    for q in queues:
        key = (q.arg.devices, q.arg.name)
        if key in open_:
            cap = caps[key]
            if cap and sum(_calls_in(p) for p in open_[key]) + _calls_in(q) > cap and any(
                    _calls_in(p) for p in open_[key]):  # fmt: skip
                close(key)
                caps[key] = cap * 2
                open_[key] = [q]
            else:
                open_[key].append(q)
            continue
        for other in [k for k in open_ if k[1] == key[1] and set(k[0]) & set(key[0])]:
            close(other)
        open_[key] = [q]
    for key in list(open_):
        close(key)
    return out
