"""`HCQDevice`: a device driven through hardware command queues (hcq.md section 4).

A backend (``HCQ+CPU`` in tg.runtime.hcq.cpu; AMD later) subclasses :class:`HCQDevice` and provides:

- ``queues``: ``{"COMPUTE:0": QueueSpec(...), "COPY:0": ...}``; ``has_copy_queue``; ``can_map_host``;
  ``timestamp_divider`` (device ticks per microsecond); ``encode_facts`` (static values its encoder rules read);
- ``pm_encode``: the rule table turning queue commands into PACKETs (tg.runtime.hcq.encode);
- ``pm_submit``: rules turning ``QUEUE(cmdbuf HCQBUF, after)`` into the submitter fragment that hands the command
  buffer to the queue (tg.runtime.hcq.submit);
- memory: ``alloc_region(size)`` (host-visible memory for signals, link blocks, staging), ``queue_region(queue,
  role)`` (rings, write/read pointers, doorbells), ``program_address(info)``, ``map_region(region, device)``;
- interface hooks: ``iface_sleep(ms, sig, value)`` (block a while without burning the CPU: KFD events, interrupts,
  a futex), ``kick(queue)`` (after a submit, e.g. wake a worker), ``pump()`` (mocks: advance the model and raise a
  recorded fault), ``ring_pointers(queue)`` (write and read pointer in words, for the ring-space check),
  ``hang_detail()`` (extra text for hang messages), ``abandon()`` (after a hang).

The base class owns the timeline (``T_d``, the signal the device sets to each finished epoch; ``V_d``, the next epoch
to signal, read by submitters at run time), the signal pool, host waits with a timeout that raise
:class:`DeviceHangError`, the sticky error state, the wrap of the timeline below 2^31, and profile collection.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tg.ir import PatternMatcher, UOp
from tg.ir.helpers import HCQ_TIMELINE_WRAP, HCQDEV_WAIT_TIMEOUT_MS
from tg.runtime.device import Allocator, Compiled, Compiler
from tg.runtime.hcq.encode import QueueSpec
from tg.runtime.hcq.profile import ProfileRecord
from tg.runtime.hcq.profile import records as profile_records
from tg.runtime.hcq.region import Region, Signal, SignalPool


class DeviceHangError(RuntimeError):
    """A device made no progress for the wait timeout; the message names device, queue, signal, expected and
    current value and the last command. The device stays in an error state afterwards."""


@dataclass
class _PendingProfile:
    entries: list[tuple[str, str, Signal, Signal]]  # (queue, name, start, end)
    epoch: int
    generation: int
    done: list[bool] = field(default_factory=lambda: [False])


class HCQDevice(Compiled):
    """A device driven through hardware command queues (see the module docstring for what a backend provides)."""

    is_hcq: ClassVar[bool] = True
    queues: ClassVar[dict[str, QueueSpec]] = {}
    pm_encode: ClassVar[PatternMatcher]
    pm_submit: ClassVar[PatternMatcher]
    has_copy_queue: bool = True
    can_map_host: bool = True
    can_recover: bool = False
    timestamp_divider: float = 1000.0  # device ticks per microsecond (CPU: nanoseconds)
    sigalloc_size: int = 0x1000  # bytes per signal page (256 signals)
    encode_facts: dict[str, Any] = {}

    def __init__(self, device: str, allocator: Allocator[Any], compiler: Compiler | None, runtime: Any,
                 renderer: Any = None, target: Any = None) -> None:  # fmt: skip
        from tg.runtime.hcq.alloc import BlockPool

        super().__init__(device, allocator, compiler, runtime, renderer, target)
        self.block_pool = BlockPool(self)  # link blocks and tables
        self.error_state: Exception | None = None
        self.signal_pool = SignalPool(self, self.sigalloc_size)
        self.timeline = self.signal_pool.alloc(0)  # T_d
        self.timeline_value = self.signal_pool.alloc(1)  # V_d (word 0): the next epoch to signal
        self.sentinel = self.signal_pool.alloc((1 << 63) - 1)
        self.generation = 0  # bumped by each timeline rebase: stamps of an older generation are complete
        self.epoch_slots: weakref.WeakSet[Any] = weakref.WeakSet()  # objects with reset_epochs(dev) (linked programs)
        self.last_submitted = "nothing"
        self._deferred: list[Any] = []  # callables returning True once they did their work (memory released)
        self._profile: list[_PendingProfile] = []
        self._clock_offset_us: float | None = None

    # ---- what a backend provides --------------------------------------------------------------------------------

    def alloc_region(self, size: int) -> Region:
        """``size`` bytes of zeroed host-visible memory of this device (signals, link blocks, staging)."""
        raise NotImplementedError(f"{type(self).__name__} must implement alloc_region")

    def free_region(self, region: Region) -> None:
        """Release memory from ``alloc_region`` (default: garbage collection does)."""

    def alloc_buffer(self, size: int, options: Any) -> Any:
        """A buffer (an HCQBuffer) of ``size`` bytes for the allocator."""
        raise NotImplementedError(f"{type(self).__name__} must implement alloc_buffer")

    def free_buffer(self, buf: Any) -> None:
        """Release a buffer from ``alloc_buffer`` (the allocator fenced it)."""

    def map_buffer(self, buf: Any, device: HCQDevice) -> int:
        """The address ``device`` uses for this device's buffer ``buf`` (default: the same: shared memory)."""
        return int(buf.va)

    def staging_region(self) -> Region:
        """The schedule staging buffer (copies between peer groups)."""
        raise NotImplementedError(f"{type(self).__name__} has no schedule staging buffer")

    def scratch_region(self) -> Region:
        """The device's grow-only scratch memory."""
        raise NotImplementedError(f"{type(self).__name__} has no scratch memory")

    def queue_region(self, queue: str, role: str) -> Region:
        """The ring, put/write pointer, read pointer or doorbell of ``queue``."""
        raise NotImplementedError(f"{type(self).__name__} has no queue structures")

    def program_address(self, info: Any) -> int:
        """The device address of a compiled program (a ProgramInfo)."""
        raise NotImplementedError(f"{type(self).__name__} cannot address programs")

    def map_region(self, region: Region, device: HCQDevice) -> int:
        """The address ``device`` uses for this device's ``region`` (default: the same address: shared memory)."""
        return region.va

    def ring_pointers(self, queue: str) -> tuple[int, int]:
        """(write pointer, read pointer) of ``queue`` in ring words (for the host's ring-space check)."""
        raise NotImplementedError

    def wait_ring(self, queue: str, rptr: int) -> None:
        """Wait until the read pointer of ``queue`` reached ``rptr`` words (room in a full ring)."""
        deadline = time.perf_counter() + HCQDEV_WAIT_TIMEOUT_MS.value / 1000
        while self.ring_pointers(queue)[1] < rptr:
            self.pump()
            if time.perf_counter() > deadline:
                raise DeviceHangError(f"{self.device} {queue}: the ring stayed full for HCQDEV_WAIT_TIMEOUT_MS")
            time.sleep(0.0001)

    def run_linear(self, linear: UOp, var_vals: dict[str, int]) -> None:
        """Run a schedule with a buffer on this device as queue programs (``engine.run_linear`` hands it here)."""
        from tg.runtime.hcq.run import run

        run(linear, var_vals)

    def transfer(self, dest: Any, src: Any, nbytes: int, touch: tuple[Any, ...] = ()) -> Any:
        """Copy ``nbytes`` from ``src`` to ``dest`` (buffers of this device or its peers) on this device's copy queue
        with its transfer program (async); returns the execution's stamp, also put on ``touch``."""
        from tg.runtime.hcq.exec import execute
        from tg.runtime.hcq.run import transfer_program

        execute(transfer_program(self, dest.owner.device), [dest, src], {"_nbytes": nbytes})
        st = dest.base.stamp
        for b in touch:
            b.base.stamp = st
        return st

    def kick(self, queue: str) -> None:
        """After a submit to ``queue`` (default: nothing; a doorbell write in the submitter suffices)."""

    def pump(self) -> None:
        """Advance a mock and raise its recorded fault (default: nothing)."""

    def iface_sleep(self, ms: float, sig: Signal, value: int) -> None:
        """Wait up to ``ms`` for ``sig`` to reach ``value`` without spinning hard (default: short sleeps)."""
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end and (sig.value & 0xFFFFFFFF) < value:
            time.sleep(0.0001)

    def hang_detail(self) -> str:
        """Extra text for a hang message (e.g. which queue is stuck in which WAIT)."""
        return ""

    def abandon(self) -> None:
        """After a hang: stop using the hung queues (default: nothing)."""

    @property
    def peer_group(self) -> str:
        """Devices of one peer group map each other's memory (default: one group per device class)."""
        return type(self).__name__

    # ---- waiting ---------------------------------------------------------------------------------------------------

    def check_error(self) -> None:
        """Raise the stored error of an earlier hang (the state is sticky)."""
        if self.error_state is not None:
            raise DeviceHangError(f"{self.device} is in an error state after an earlier hang (see above): "
                                  f"{self.error_state}") from self.error_state  # fmt: skip

    def wait_signal(self, sig: Signal, value: int, timeout_ms: float | None = None, what: str = "",
                    queue: str = "COMPUTE:0") -> None:  # fmt: skip
        """Wait until ``(sig & 0xFFFFFFFF) >= value``: spin, then ``iface_sleep``; the timer restarts whenever the
        value changes; after ``timeout_ms`` (HCQDEV_WAIT_TIMEOUT_MS; another value only where ``can_recover``)
        without progress the device hangs (:class:`DeviceHangError`)."""
        self.check_error()
        cur = sig.words[0]
        if (cur & 0xFFFFFFFF) >= value:
            return
        limit = (timeout_ms if timeout_ms is not None and self.can_recover else HCQDEV_WAIT_TIMEOUT_MS.value) / 1000
        last, last_change = cur, time.perf_counter()
        while True:
            try:
                self.pump()
            except Exception as e:
                self.on_hang(sig, value, what, queue, time.perf_counter() - last_change, cause=e)
            cur = sig.words[0]
            if (cur & 0xFFFFFFFF) >= value:
                return
            now = time.perf_counter()
            if cur != last:
                last, last_change = cur, now
            elif now - last_change > limit:
                self.on_hang(sig, value, what, queue, now - last_change)
            self.iface_sleep(min(200.0, max(1.0, (limit - (now - last_change)) * 1000)), sig, value)

    def on_hang(self, sig: Signal, value: int, what: str, queue: str, waited_s: float,
                cause: Exception | None = None) -> None:  # fmt: skip
        """Store and raise a DeviceHangError naming device, queue, signal, values and the last command."""
        detail = self.hang_detail()
        why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        msg = (f"{self.device} did not finish: {queue} {what or 'signal'} at {sig.va:#x} is {sig.value}, waited for "
               f">= {value} for {waited_s:.1f} s (HCQDEV_WAIT_TIMEOUT_MS){why}; last submitted: "
               f"{self.last_submitted}.{(' ' + detail) if detail else ''} The device is now in an error state; its "
               f"pending results are lost.")  # fmt: skip
        err = DeviceHangError(msg)
        self.error_state = err
        self.abandon()
        if cause is not None:
            raise err from cause
        raise err

    def wait_epoch(self, epoch: int, generation: int, what: str = "timeline") -> None:
        """Wait until the timeline reached ``epoch`` of timeline generation ``generation`` (older generations were
        complete when the timeline was rebased)."""
        if generation == self.generation and (self.timeline.words[0] & 0xFFFFFFFF) < epoch:
            self.wait_signal(self.timeline, epoch, what=what)

    def synchronize(self, timeout_ms: float | None = None) -> None:
        """Wait for all submitted work (``T_d >= V_d - 1``), collect profile records, rebase a long timeline."""
        self.check_error()
        target = int(self.timeline_value.words[0]) - 1
        if (self.timeline.words[0] & 0xFFFFFFFF) < target:
            self.wait_signal(self.timeline, target, timeout_ms, what="timeline")
        self.collect_profile()
        if self._deferred:
            self._run_deferred()
        if target + 1 > HCQ_TIMELINE_WRAP.value:
            self.rebase_timeline()

    def rebase_timeline(self) -> None:
        """On an idle device: ``T_d = 0``, ``V_d = 1``, every registered epoch slot 0, stamps of the old generation
        count as complete. Submitters read ``V_d`` at run time and linked programs keep only addresses, so nothing
        is relinked (hardware compares 32 bits: values stay below HCQ_TIMELINE_WRAP, default 2^31)."""
        self.collect_profile()
        self.timeline.value = 0
        self.timeline_value.value = 1
        for holder in list(self.epoch_slots):
            holder.reset_epochs(self)
        self.generation += 1

    def defer(self, fn: Any) -> None:
        """Run ``fn()`` at later submits and synchronizes until it returns True (e.g. free memory once idle)."""
        self._deferred.append(fn)

    def _run_deferred(self) -> None:
        self._deferred = [fn for fn in self._deferred if not fn()]

    def next_epoch(self) -> int:
        """The epoch the next submit on this device signals (``V_d``), rebasing first when it passed the wrap."""
        if self._deferred:
            self._run_deferred()
        v = int(self.timeline_value.words[0])
        if v > HCQ_TIMELINE_WRAP.value:
            self.synchronize()
            v = int(self.timeline_value.words[0])
        return v

    # ---- profiling ----------------------------------------------------------------------------------------------

    def add_profile(self, entries: list[tuple[str, str, Signal, Signal]], epoch: int) -> _PendingProfile:
        """Remember the timestamp signals of an execution that ends with ``epoch``; collected once it finished."""
        p = _PendingProfile(entries, epoch, self.generation)
        self._profile.append(p)
        return p

    def collect_profile(self) -> None:
        """Turn the finished executions' timestamp pairs into ProfileRecords (tg.runtime.hcq.profile.records)."""
        if not self._profile:
            return
        done_epoch = int(self.timeline.words[0])
        keep = []
        offset = None
        for p in self._profile:
            if p.generation == self.generation and p.epoch > done_epoch:
                keep.append(p)
                continue
            if offset is None:
                offset = self.clock_offset_us()
            for queue, name, start, end in p.entries:
                st, en = start.timestamp / self.timestamp_divider, end.timestamp / self.timestamp_divider
                profile_records.append(ProfileRecord(self.device, queue, name, st + offset, en + offset))
            p.done[0] = True
        self._profile = keep

    def clock_offset_us(self) -> float:
        """Host microseconds (``time.perf_counter``) minus device microseconds, measured at first use."""
        if self._clock_offset_us is None:
            self._clock_offset_us = self.measure_clock_offset()
        return self._clock_offset_us

    def measure_clock_offset(self) -> float:
        """The median over 5 round trips of (host time halfway through the submit-and-wait) - (device timestamp)."""
        import statistics

        from tg.runtime.hcq import ir
        from tg.runtime.hcq.compile import compile_queues
        from tg.runtime.hcq.exec import execute
        from tg.runtime.hcq.link import link_batch
        from tg.runtime.hcq.run import ENV, submitter_of

        sig = ir.signal_buf(self.device, "signal", ("clock", 0))
        batch = compile_queues([ir.queue(self.device, "COMPUTE:0", [ir.timestamp(sig)])], ENV)
        lb = link_batch(batch, submitter_of(batch), ENV, "auto", 1)
        diffs = []
        for _ in range(5):
            start = time.perf_counter() * 1e6
            execute(lb, [], wait=True)
            end = time.perf_counter() * 1e6
            diffs.append((start + end) / 2 - lb.signal(sig).timestamp / self.timestamp_divider)
        lb.release()
        return float(statistics.median(diffs))
