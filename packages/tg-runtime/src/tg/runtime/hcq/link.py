"""Stage S6 of the HCQ pipeline: link a compiled batch to memory (hcq.md 3.7).

Per device and link copy: signals from the device's signal pool (queue signals, profile signals, the epoch slot
``E_Pd``); one link block of host-visible memory holding the command buffers, the encoders' data blocks (128-byte
aligned), the gather tables and the input table; device-wide memory (timeline, ``V_d``, rings, doorbells, programs,
staging) from the device. Then the blobs and the link-time words are written through the block's view, and the
submitter is bound to the regions. ``HCQ_LINK_COPIES`` copies exist per linked batch; execution k uses copy
``k mod copies``, so that many executions can be in flight.

Link-time words are evaluated here: ``GETADDR(HCQBUF, device)`` is the address ``device`` uses for the resolved
region (``owner.map_region``), the rest is integer arithmetic on constants.
"""

from __future__ import annotations

import struct
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tg.ir import Ops, UOp, exec_alu
from tg.ir.dtype import PtrDType
from tg.ir.floats import truncate
from tg.ir.helpers import DEBUG, HCQ_LINK_COPIES, round_up
from tg.runtime.hcq.compile import CompiledBatch
from tg.runtime.hcq.region import Region, Signal
from tg.runtime.hcq.submit import BoundSubmitter, Submitter
from tg.runtime.hcq.views import is_host_view

if TYPE_CHECKING:
    from tg.runtime.hcq.device import HCQDevice  # the device runs programs built here (transfers, clocks)

BLOCK_ALIGN = 128  # kernel arguments and command buffers: 128-byte aligned in a link block


def eval_word(word: UOp, addr_of: Any) -> int:
    """The value of a link-time word: ``addr_of(GETADDR uop)`` for addresses, integer arithmetic for the rest."""
    vals: dict[UOp, int] = {}
    for u in word.toposort():
        if u.op is Ops.CONST:
            vals[u] = int(u.arg)
        elif u.op is Ops.GETADDR:
            vals[u] = int(addr_of(u))
        elif u.op in (Ops.HCQBUF, Ops.DEVICE):
            continue
        elif u.op is Ops.CAST:
            vals[u] = int(truncate[u.dtype](vals[u.src[0]]))
        else:
            vals[u] = int(exec_alu(u.op, u.dtype, [vals[s] for s in u.src]))
    return vals[word]


@dataclass(eq=False)
class LinkedCopy:
    """One link copy of a batch: its regions, signals and bound submitter."""

    regions: dict[UOp, Region]
    submitter: BoundSubmitter
    queue_signals: list[Signal]
    epoch_slots: dict[HCQDevice, Signal]
    profile: dict[HCQDevice, list[tuple[str, str, Signal, Signal]]]
    table: Any  # the input table's view (uint64 elements)
    blocks: list[tuple[HCQDevice, Region]] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)
    pending_profile: list[Any] = field(default_factory=list)

    def reset_epochs(self, dev: HCQDevice) -> None:
        """Timeline rebase of ``dev``: its epoch slot back to 0."""
        if (sig := self.epoch_slots.get(dev)) is not None:
            sig.value = 0

    def idle(self) -> bool:
        """Whether the last execution of this copy finished on every device (a released copy is idle)."""
        return all(d.error_state is not None or (d.timeline.words[0] & 0xFFFFFFFF) >= sig.value
                   for d, sig in self.epoch_slots.items())  # fmt: skip

    def release_when_idle(self) -> bool:
        """Release if idle; returns whether it did (a device's deferred list calls it again until then)."""
        if not self.idle():
            return False
        self.release()
        return True

    def release(self) -> None:
        """Give signals and blocks back (the caller made sure the copy is idle)."""
        for dev in self.epoch_slots:
            dev.epoch_slots.discard(self)
        self.epoch_slots = {}
        for sig in self.signals:
            if sig.pool is not None:
                sig.pool.release(sig)
        for dev, block in self.blocks:
            dev.block_pool.release(block)
        self.signals, self.blocks = [], []


@dataclass(eq=False)
class LinkedBatch:
    """A compiled batch linked ``len(copies)`` times, with what an execution needs (tg.runtime.hcq.exec)."""

    batch: CompiledBatch
    sub: Submitter
    devices: list[HCQDevice]
    copies: list[LinkedCopy]
    inputs: list[tuple[int, HCQDevice]]  # input table entry i: slot, as seen by that device
    runtime: str
    count: int = 0
    name: str = ""
    used_slots: tuple[int, ...] = ()  # the slots whose buffers an execution stamps
    kicks: list[tuple[Any, str]] = field(default_factory=list)  # each (device, queue) submitted to, once
    # per kicked queue (device, queue, words of its largest submit, ring words): the checks of one queue read the
    # same ring pointers, so the largest submit decides
    ring_checks: list[tuple[Any, str, int, int]] = field(default_factory=list)

    def signal(self, buf: UOp, copy: int = 0) -> Signal:
        """The signal an HCQBUF of role signal stands for in link copy ``copy``."""
        return Signal(self.copies[copy].regions[buf])

    def release(self) -> None:
        """Give the memory back: now for idle copies, later (at the device's next submit or synchronize after they
        finished) for copies in flight."""
        _release_later(self.copies)
        self.copies = []


def _region_of(buf: UOp, dev: HCQDevice, copy: dict[UOp, Region], signals: list[Signal]) -> Region:
    role, key = buf.arg.role, buf.arg.key
    if role in ("signal", "epoch"):
        sig = dev.signal_pool.alloc(0)
        signals.append(sig)
        return sig.region
    if role == "timeline":
        return dev.timeline.region
    if role == "timeline_value":
        return dev.timeline_value.region.sub(0, 8)
    if role == "sentinel":
        return dev.sentinel.region
    if role == "program":
        return Region(dev.program_address(key), 0, None, dev)
    if role in ("ring", "put", "wptr", "rptr", "doorbell"):
        queue = key if isinstance(key, str) else key[0]
        return dev.queue_region(queue, role)
    if role == "staging":
        return dev.staging_region()
    if role == "scratch":
        return dev.scratch_region()
    raise RuntimeError(f"{dev.device}: no memory for HCQBUF {buf.arg} at link")


def link_batch(batch: CompiledBatch, sub: Submitter, env: Any, runtime: str, copies: int | None = None) -> LinkedBatch:
    """S6: ``copies`` (HCQ_LINK_COPIES) link copies of a compiled batch with its submitter bound for ``runtime``."""
    devices = [env.hcq_device(d) for d in batch.devices]
    by_name: dict[str, HCQDevice] = {d.device: d for d in devices}
    for eq in batch.encoded:
        by_name.setdefault(eq.key[0], env.hcq_device(eq.key[0]))

    def dev_of(buf: UOp) -> HCQDevice:
        name = str(buf.src[0].arg)
        if name not in by_name:
            by_name[name] = env.hcq_device(name)
        return by_name[name]

    plan = batch.patches
    inputs = [(slot, dev_of_name(by_name, env, d)) for slot, d in plan.inputs]
    linked = [_link_copy(batch, sub, runtime, dev_of, by_name, env) for _ in range(copies or HCQ_LINK_COPIES.value)]
    names = batch.call_names
    name = names[0] if len(names) == 1 else f"{len(names)} calls: {names[0]} .. {names[-1]}"
    used = tuple(sorted({slot for slot, _ in inputs}))
    lb = LinkedBatch(batch, sub, devices, linked, inputs, linked[0].submitter.runtime, name=name, used_slots=used)
    largest: dict[tuple[Any, str], int] = {}  # (device, queue) in first-submit order: words of its largest submit
    for dev_name, queue, nwords in sub.submits:
        key = (dev_of_name(by_name, env, dev_name), queue)
        largest[key] = max(largest.get(key, 0), nwords)
    lb.kicks = list(largest)
    lb.ring_checks = [(dev, queue, n, dev.queues[queue].ring_words) for (dev, queue), n in largest.items()]
    for c in linked:
        for d in c.epoch_slots:
            d.epoch_slots.add(c)
    # a linked batch nobody holds any more gives its memory back once its executions finished
    weakref.finalize(lb, _release_later, list(linked)).atexit = False
    return lb


def _release_later(copies: list[LinkedCopy]) -> None:
    for c in copies:
        if not c.release_when_idle() and c.epoch_slots:
            next(iter(c.epoch_slots)).defer(c.release_when_idle)


def dev_of_name(by_name: dict[str, HCQDevice], env: Any, name: str) -> HCQDevice:
    """The device object of ``name`` (looked up once)."""
    if name not in by_name:
        by_name[name] = env.hcq_device(name)
    return by_name[name]


def _link_copy(batch: CompiledBatch, sub: Submitter, runtime: str, dev_of: Any, by_name: dict[str, HCQDevice],
               env: Any) -> LinkedCopy:  # fmt: skip
    regions: dict[UOp, Region] = {}
    signals: list[Signal] = []
    blocks: list[tuple[HCQDevice, Region]] = []
    # block memory per device: command buffers, data blocks, gather tables, the input table
    layout: dict[HCQDevice, list[tuple[UOp, int]]] = {}
    sizes: dict[HCQDevice, int] = {}

    def place(buf: UOp) -> None:
        dev = dev_of(buf)
        assert isinstance(buf.dtype, PtrDType)
        nbytes = max(buf.dtype.size, 1) * buf.dtype.base.itemsize
        off = round_up(sizes.get(dev, 0), BLOCK_ALIGN)
        layout.setdefault(dev, []).append((buf, off))
        sizes[dev] = off + nbytes

    for block in batch.blocks:
        place(block.buf)
    for g in batch.patches.gathers:
        place(g.table)
    place(sub.table)
    for dev, placed in layout.items():
        region = dev.block_pool.alloc(sizes[dev])
        blocks.append((dev, region))
        for buf, off in placed:
            assert isinstance(buf.dtype, PtrDType)
            regions[buf] = region.sub(off, max(buf.dtype.size, 1) * buf.dtype.base.itemsize)
    # every other placeholder the batch uses: in command words, in the submitter, as signals
    wanted = [u for b in batch.blocks for _, w in b.patches for u in w.toposort() if u.op is Ops.HCQBUF]
    wanted += [u for e in batch.encoded for u in e.queue.toposort() if u.op is Ops.HCQBUF] + list(sub.params)
    for buf in wanted:
        if buf not in regions:
            regions[buf] = _region_of(buf, dev_of(buf), regions, signals)

    def addr_of(g: UOp) -> int:
        region = regions[g.src[0]]
        owner = region.owner if region.owner is not None else dev_of(g.src[0])
        return owner.map_region(region, dev_of_name(by_name, env, str(g.arg)))

    # blobs, then link-time words, gather tables and link-time table entries
    for block in batch.blocks:
        regions[block.buf].view.write(0, block.blob)
    for block, off, w in batch.patches.link:
        value = eval_word(w, addr_of)
        regions[block.buf].view.write(off, struct.pack("<I" if block.word_dtype.itemsize == 4 else "<Q", value))
    for g in batch.patches.gathers:
        regions[g.table].view.write(0, struct.pack(f"<{4 * len(g.entries)}Q", *[x for e in g.entries for x in e]))
    table_view = regions[sub.table].view.view(0, regions[sub.table].size, "Q")
    n_inputs = len(batch.patches.inputs)
    for k, entry in enumerate(sub.link_entries):
        table_view[n_inputs + k] = addr_of(entry)
    # signals: queue signals are reset before each execution; epoch slots; profile pairs per device
    queue_signals, epoch_slots = [], {}
    for buf, region in regions.items():
        if buf.op is Ops.HCQBUF and buf.arg.role == "signal" and buf.arg.key[0] == "queue":
            queue_signals.append(_signal(region, signals))
        if buf.op is Ops.HCQBUF and buf.arg.role == "epoch":
            epoch_slots[dev_of(buf)] = _signal(region, signals)
    profile: dict[HCQDevice, list[tuple[str, str, Signal, Signal]]] = {}
    for dev_name, queue, name, start, end in batch.profile:
        profile.setdefault(by_name[dev_name], []).append((queue, name, _signal(regions[start], signals),
                                                          _signal(regions[end], signals)))  # fmt: skip
    if runtime == "auto":  # compiled where every region the submitter touches is host memory, else interpreted
        runtime = "CPU" if all(host_reachable(regions[p]) for p in sub.params) else "PYTHON"
        if DEBUG.value >= 1 and runtime == "PYTHON":
            print(f"HCQ: submitters of {', '.join(by_name)} run interpreted (HCQ_RUNTIME_DEV=auto: not host memory)")
    missing = [str(p.arg) for p in sub.params if regions[p].view is None and runtime == "PYTHON"]
    if missing:
        raise RuntimeError(f"HCQ_RUNTIME_DEV=PYTHON cannot reach {', '.join(missing)}: no CPU view")
    if runtime == "CPU":
        for p in sub.params:
            view = regions[p].view
            if view is not None and not is_host_view(view):
                owner = dev_of(p).device
                raise RuntimeError(f"HCQ_RUNTIME_DEV=CPU cannot drive {owner}: its {p.arg.role} is not host memory "
                                   f"({type(view).__name__}); use HCQ_RUNTIME_DEV=PYTHON")  # fmt: skip
    bound = BoundSubmitter(sub, runtime, [regions[p] for p in sub.params])
    return LinkedCopy(regions, bound, queue_signals, epoch_slots, profile, table_view, blocks, signals)


def _signal(region: Region, signals: list[Signal]) -> Signal:
    for s in signals:
        if s.region.va == region.va:
            return s
    return Signal(region)


def host_reachable(region: Region) -> bool:
    """Whether a compiled (CPU) submitter can write the region through its address."""
    return region.view is None or is_host_view(region.view)
