"""Stage S7 of the HCQ pipeline: execute a linked batch (hcq.md 3.7).

``execute(linked, slots, var_vals)``:

1. host fence: per device, wait until the previous execution of this link copy finished (``T_d >= E_Pd``), so its
   command buffers and signals can be rewritten (and collect its profile records);
2. the epochs of this execution (``V_d``; a device whose timeline passed HCQ_TIMELINE_WRAP is synchronized and
   rebased first);
3. reset the copy's queue signals to 0; write the input table (the address of each slot as each device sees it);
4. check ring space (static sizes; wait on the read pointer when a ring is full); run the submitter with the
   variables; kick the queues;
5. stamp every slot buffer with (device, epoch, generation) for the host fence rule;
6. ``wait``: synchronize and return the device time in seconds. An execution touching memory the caller owns and
   reads directly (``Tensor.from_blob``) finishes before ``execute`` returns.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from tg.ir.helpers import DEBUG, PROFILE
from tg.runtime.hcq.alloc import HCQBuffer
from tg.runtime.hcq.link import LinkedBatch
from tg.runtime.hcq.views import HostView


def execute(lb: LinkedBatch, slots: Sequence[HCQBuffer | None], var_vals: dict[str, int] | None = None,
            wait: bool = False, phases: dict[str, float] | None = None) -> float | None:  # fmt: skip
    """Run a linked batch once over ``slots`` (an HCQBuffer per slot the batch uses) with ``var_vals``; returns the
    device time in seconds when ``wait``. ``phases`` (benchmarks) accumulates the seconds of each step: fence, table,
    submit, kick, wait."""
    t = time.perf_counter() if phases is not None else 0.0
    copy = lb.copies[lb.count % len(lb.copies)]
    lb.count += 1
    # 1. the copy is free once its last execution finished on every device
    for dev, sig in copy.epoch_slots.items():
        dev.check_error()
        e = sig.words[0]
        if e and (dev.timeline.words[0] & 0xFFFFFFFF) < e:
            dev.wait_signal(dev.timeline, e, what="timeline (link copy)")
    if copy.pending_profile:
        for dev in lb.devices:
            dev.collect_profile()
        copy.pending_profile = []
    # 2. epochs
    epochs = [(dev, dev.next_epoch()) for dev in lb.devices]
    if phases is not None:
        t = _phase(phases, "fence", t)
    # 3. queue signals and the input table
    for sig in copy.queue_signals:
        sig.words[0] = 0
    table = copy.table.mv if isinstance(copy.table, HostView) else copy.table  # (host memory: no Python per write)
    for i, (slot, dev) in enumerate(lb.inputs):
        buf = slots[slot]
        if buf is None:
            raise RuntimeError(f"HCQ batch {lb.name}: slot {slot} has no buffer")
        table[i] = buf.va if buf.owner is dev else buf.owner.map_buffer(buf, dev)
    # 4. ring space (each queue's pointers read once: the submitter moves them only when it runs), submitter, kick
    for dev, queue, nwords, ring_words in lb.ring_checks:
        put, done = dev.ring_pointers(queue)
        if put + nwords - done > ring_words:
            dev.wait_ring(queue, put + nwords - ring_words)
    values = _values(lb, var_vals)
    if phases is not None:
        t = _phase(phases, "table", t)
    start = time.perf_counter() if wait else 0.0
    copy.submitter.run(values)
    if phases is not None:
        t = _phase(phases, "submit", t)
    for dev, queue in lb.kicks:
        dev.kick(queue)
    if phases is not None:
        t = _phase(phases, "kick", t)
    # 5. stamps
    st = tuple([(dev, e, dev.generation) for dev, e in epochs])
    external = False
    for slot in lb.used_slots:
        base = slots[slot].base  # type: ignore[union-attr]
        base.stamp = st
        external |= base.external
    record = PROFILE.value or DEBUG.value >= 2  # (timed calls have timestamps without recording them)
    for dev, e in epochs:
        dev.last_submitted = lb.name
        if record and (entries := copy.profile.get(dev)) is not None:
            copy.pending_profile.append(dev.add_profile(entries, e))
    if external and not wait:  # the caller reads memory it owns without asking us: it is done when this returns
        for dev, e in epochs:
            dev.wait_epoch(e, dev.generation)
    if not wait:
        return None
    for dev, e in epochs:
        dev.wait_epoch(e, dev.generation)
    end = time.perf_counter()
    if phases is not None:
        _phase(phases, "wait", t)
    pairs = [(s.timestamp, t.timestamp) for es in copy.profile.values() for _, _, s, t in es]
    if pairs and all(a and b for a, b in pairs):
        divider = lb.devices[0].timestamp_divider
        return (max(b for _, b in pairs) - min(a for a, _ in pairs)) / divider * 1e-6
    return end - start


def _phase(phases: dict[str, float], name: str, since: float) -> float:
    now = time.perf_counter()
    phases[name] = phases.get(name, 0.0) + now - since
    return now


def _values(lb: LinkedBatch, var_vals: dict[str, int] | None) -> list[int]:
    if not lb.sub.variables:
        return []
    try:
        return [int(var_vals[v.arg[0]]) for v in lb.sub.variables]  # type: ignore[index]
    except (KeyError, TypeError):
        names = [v.arg[0] for v in lb.sub.variables]
        raise ValueError(f"HCQ batch {lb.name} needs values for {names}; got {var_vals}") from None
