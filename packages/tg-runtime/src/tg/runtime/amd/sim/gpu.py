"""The mock gfx1100 as its command processor sees it: queues consumed in order, a register file, the emulator.

:class:`MockGPU` is what every mock AMD interface drives (MOCKKFD here; the AM driver's register-level mock reuses
it behind its PCI model): it owns the queue executors (PM4 compute rings in tg.runtime.amd.sim.pm4_exec, SDMA rings
in tg.runtime.amd.sim.sdma_exec), the SH/uconfig register file PM4 packets write, the GPU clock (100 ticks per
microsecond: the host's ``perf_counter``), and launches dispatches on the RDNA3 emulator (tg.runtime.amd.sim.emu).
All of its memory accesses go through a ``GPUMemory`` (``read(va, n)``/``write(va, data)``, EmulatorError for an
unmapped address, ``extent(va)`` = end of the mapped run holding ``va``), so the same executors run over identity host
memory (MOCKKFD) or a page-table walker over VRAM (the AM mock).

Progress (``pump``): every queue runs until its ring is empty or it waits on an unsatisfied WAIT, round-robin until
no queue moves. The owner pumps on doorbell writes and while the host waits. Faults do not escape into the code that
rang a doorbell: a malformed packet (:class:`MockError`, naming the packet and where it is) or an EmulatorError stops
the queue and is recorded in ``error``, which ``check()`` raises (the host's next wait: hcq.md 4.2); memory faults
are also reported through ``on_fault`` (KFD: a memory exception event; AM: an interrupt-handler entry).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from tg.runtime.amd.sim.decode import EmulatorError
from tg.runtime.amd.sim.wave import GPUMemory as EmulatorMemory


class MockError(RuntimeError):
    """A command the mock GPU cannot execute (unknown packet, wrong length, unsupported mode) or a bad request to a
    mock interface (unknown ioctl, unmapped address)."""


class GPUMemory(EmulatorMemory, Protocol):
    """GPU virtual memory as the command processor and the emulator see it: the emulator's (read, write) and the end
    of a mapped run, with which the emulator finds a kernel's text once per code (emu.code_in_memory)."""

    def extent(self, va: int) -> int:
        """The end of the mapped run holding ``va`` (EmulatorError when unmapped)."""
        ...


class QueueExecutor(Protocol):
    """A queue the mock GPU consumes (pm4_exec.PM4Executor, sdma_exec.SDMAExecutor)."""

    name: str
    halted: bool

    def step(self) -> bool:
        """Run until the ring is empty or a WAIT is unsatisfied; whether anything was consumed."""
        ...

    def describe(self) -> str:
        """Where the queue stands (for hang messages)."""
        ...


class QueueHalted(Exception):
    """Raised inside an executor when the GPU stops the queue (a fault); the queue makes no further progress."""


class MockGPU:
    """A mock gfx1100 (see the module docstring). ``emulate=False`` retires dispatches without running them (submit
    cost benchmarks); ``fault_va`` makes the next dispatch fault at that address, as a kernel touching an unmapped
    page would (the queue stops and ``on_fault`` reports it; nothing is raised to the host until it looks)."""

    TICKS_PER_US = 100

    def __init__(self, name: str, mem: GPUMemory, *, emulate: bool = True, fault_va: int = 0,
                 on_interrupt: Callable[[int], None] | None = None,
                 on_fault: Callable[[int, str], None] | None = None) -> None:  # fmt: skip
        self.name, self.mem, self.emulate, self.fault_va = name, mem, emulate, fault_va
        self.on_interrupt = on_interrupt or (lambda ctxid: None)
        self.on_fault = on_fault or (lambda va, why: None)
        self.regs: dict[int, int] = {}
        self.queues: list[QueueExecutor] = []
        self.error: Exception | None = None
        self.dispatches = 0  # DISPATCH_DIRECTs executed (or retired with emulate=False)

    # ---- queues and progress ---------------------------------------------------------------------------------------

    def add_queue(self, q: QueueExecutor) -> None:
        """Start consuming a queue."""
        self.queues.append(q)

    def remove_queue(self, q: QueueExecutor) -> None:
        """Stop consuming a queue (destroyed by the driver)."""
        self.queues.remove(q)

    def step(self) -> bool:
        """One round over the queues; whether any moved. Faults halt their queue and are recorded, never raised."""
        moved = False
        for q in self.queues:
            if q.halted:
                continue
            try:
                moved |= q.step()
            except QueueHalted:
                q.halted = True
            except (MockError, EmulatorError) as e:
                q.halted = True
                if self.error is None:
                    self.error = e
        return moved

    def pump(self) -> None:
        """Run queues until none moves."""
        while self.step():
            pass

    def check(self) -> None:
        """Raise the recorded fault (sticky: a faulted GPU stays faulted)."""
        if self.error is not None:
            raise self.error

    def hang_detail(self) -> str:
        """Each queue's state: where it is and what it waits for."""
        return "; ".join(q.describe() for q in self.queues)

    # ---- what executors use -----------------------------------------------------------------------------------------

    def clock(self) -> int:
        """The GPU clock counter: 100 ticks per microsecond of the host's perf_counter."""
        return int(time.perf_counter() * 1e6 * self.TICKS_PER_US)

    def read_u32(self, va: int) -> int:
        return int(struct.unpack("<I", self.mem.read(va, 4))[0])

    def read_u64(self, va: int) -> int:
        return int(struct.unpack("<Q", self.mem.read(va, 8))[0])

    def write_u32(self, va: int, value: int) -> None:
        self.mem.write(va, struct.pack("<I", value & 0xFFFFFFFF))

    def write_u64(self, va: int, value: int) -> None:
        self.mem.write(va, struct.pack("<Q", value & 0xFFFFFFFFFFFFFFFF))

    def read_dwords(self, va: int, n: int) -> tuple[int, ...]:
        return struct.unpack(f"<{n}I", self.mem.read(va, 4 * n))

    def fault(self, va: int, why: str) -> None:
        """A memory fault at ``va``: reported through ``on_fault``; the queue that caused it stops."""
        self.on_fault(va, why)
        raise QueueHalted(f"{self.name}: memory fault at {va:#x}: {why}")

    def dispatch(self, entry: int, rsrc1: int, rsrc2: int, user_data: Sequence[int], groups: tuple[int, int, int],
                 local: tuple[int, int, int], lds_bytes: int, private_bytes: int) -> None:  # fmt: skip
        """Run a grid on the emulator (the code is read from GPU memory at ``entry``)."""
        self.dispatches += 1
        if self.fault_va:
            va, self.fault_va = self.fault_va, 0
            self.fault(va, "not present (injected by TG_MOCKGPU_FAULT_VA)")
        if not self.emulate:
            return
        from tg.runtime.amd.sim import emu

        try:
            emu.dispatch(self.mem, entry, rsrc1, rsrc2, user_data, groups, local, lds_bytes, private_bytes,
                         kernel=f"the kernel at {entry:#x}")  # fmt: skip
        except EmulatorError as e:
            at = getattr(self.mem, "last_fault", None)
            if at is not None:
                self.on_fault(at, str(e))
            raise

    def __repr__(self) -> str:
        return f"<MockGPU {self.name}: {len(self.queues)} queues{', faulted' if self.error else ''}>"
