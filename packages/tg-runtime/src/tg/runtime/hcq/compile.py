"""The HCQ compiler: a slotted schedule through stages S0-S5 into a :class:`CompiledProgram`.

``compile_linear(slotted, env, profile)`` prepares the schedule (S0), and for each HCQ batch schedules its queues
(S1), merges them (S2), encodes them per device (S3), classifies the patch words (S4) and builds the submitter
(S5, when the env can). Host calls between batches stay CALLs. The result depends only on the slotted schedule, the
profile flag and the submitter runtime: `tg.runtime.hcq.run` caches it under that key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tg.ir import Ops, UOp
from tg.ir.helpers import DEBUG
from tg.runtime.hcq import ir
from tg.runtime.hcq.encode import Block, EncodedQueue, decode_block, encode_queue
from tg.runtime.hcq.patches import PatchPlan, plan_patches
from tg.runtime.hcq.prepare import BATCH, PrepareEnv, prepare
from tg.runtime.hcq.schedule import ScheduledBatch, call_name, merge_queues, schedule_batch


@dataclass
class CompiledBatch:
    """One HCQ batch compiled: its queues before encoding (``queues``, for listings), the encoded submits, every
    block (command buffers, then encoder data blocks), the patch plan, the devices taking part, the variables the
    submitter takes (sorted DEFINE_VARs), the profiled calls and the names of its calls (for hang messages).
    ``submitter`` is the S5 kernel (filled by the runtime)."""

    devices: tuple[str, ...]
    queues: list[UOp]
    encoded: list[EncodedQueue]
    blocks: list[Block]
    patches: PatchPlan
    variables: list[UOp]
    profile: list[tuple[str, str, str, UOp, UOp]]
    call_names: list[str]
    submitter: Any = None

    def listing(self) -> str:
        """The merged queues, then every block decoded (DEBUG>=4)."""
        out = [ir.format_queues(self.queues)]
        for b in self.blocks:
            out.append(f"{b.buf.arg} on {b.device} ({b.nwords} words):\n{decode_block(b)}")
        return "\n".join(out)


@dataclass
class CompiledProgram:
    """A compiled schedule: HCQ batches and host CALLs in order, over ``slot_count`` slots."""

    steps: list[CompiledBatch | UOp]
    slot_count: int
    profile: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def batches(self) -> list[CompiledBatch]:
        """The HCQ batches."""
        return [s for s in self.steps if isinstance(s, CompiledBatch)]


def compile_batch(calls: Sequence[UOp], env: PrepareEnv, profile: bool = False,
                  batch_size: int | None = None) -> CompiledBatch:  # fmt: skip
    """S1-S4 for one batch of lowered calls."""

    def has_copy_queue(dev: str) -> bool:
        d = env.hcq_device(dev)
        return d is not None and d.has_copy_queue

    sched: ScheduledBatch = schedule_batch(calls, has_copy_queue, profile)
    merged = merge_queues(sched.queues, batch_size)
    return _encoded_batch(merged, sched.devices, sched.profile, [call_name(c) for c in calls], env)


def compile_queues(queues: Sequence[UOp], env: PrepareEnv, finalize: bool = True) -> CompiledBatch:
    """A batch of hand-made QUEUEs (QCMDs and lowered CALLs, in the caller's order: no dependency tracking), e.g.
    for device tests. ``finalize`` starts each (device, queue) after the device's earlier work (its timeline) and
    ends every queue other than a device's COMPUTE:0 with a signal its COMPUTE:0 waits for, then signals the
    device's timeline (so ``synchronize`` and the host fence work as usual)."""
    queues = list(queues)
    devices = tuple(dict.fromkeys(q.arg.device for q in queues))
    if finalize:
        first = {(q.arg.device, q.arg.name): i for i, q in reversed(list(enumerate(queues)))}
        for (dev, _), i in first.items():
            q = queues[i]
            queues[i] = q.replace(src=(ir.barrier(), ir.wait(ir.timeline(dev), ir.minus(ir.epoch(dev), 1)), *q.src))
        last = {(q.arg.device, q.arg.name): i for i, q in enumerate(queues)}
        for (dev, name), i in last.items():
            if name != "COMPUTE:0":
                q = queues[i]
                queues[i] = q.replace(src=(*q.src, ir.signal(ir.queue_signal(dev, name), 1)))
        for d in devices:
            waits = [ir.wait(ir.queue_signal(d, name), 1) for dev, name in last if dev == d and name != "COMPUTE:0"]
            queues.append(ir.queue(d, "COMPUTE:0", [*waits, ir.signal(ir.timeline(d), ir.epoch(d))]))
    names = [call_name(c) for q in queues for c in q.src if c.op is Ops.CALL]
    return _encoded_batch(queues, devices, [], names or ["queues"], env)


def _encoded_batch(merged: list[UOp], devices: tuple[str, ...], profile: list[Any], names: list[str],
                   env: PrepareEnv) -> CompiledBatch:  # fmt: skip
    encoded: list[EncodedQueue] = []
    for i, q in enumerate(merged):
        dev = env.hcq_device(q.arg.device)
        if dev is None:
            raise RuntimeError(f"queue on {q.arg.device}, which is not an HCQ device")
        encoded.append(encode_queue(q, dev, i))
    blocks = [e.cmdbuf for e in encoded] + [b for e in encoded for b in e.data]
    patches = plan_patches(blocks)
    variables = sorted({u for _, _, w, _ in patches.runtime for u in w.toposort() if u.op is Ops.DEFINE_VAR},
                       key=lambda v: v.arg[0])  # fmt: skip
    batch = CompiledBatch(devices, merged, encoded, blocks, patches, variables, profile, names)
    if DEBUG.value >= 4:
        print(batch.listing())
    return batch


def compile_linear(slotted: UOp, slot_count: int, env: PrepareEnv, profile: bool = False,
                   batch_size: int | None = None) -> CompiledProgram:  # fmt: skip
    """S0-S4 of a slotted schedule (see the module docstring)."""
    prepared = prepare(slotted, env)
    steps: list[CompiledBatch | UOp] = []
    for s in prepared.src:
        if s.op is Ops.LINEAR and s.arg == BATCH:
            steps.append(compile_batch(s.src, env, profile, batch_size))
        else:
            steps.append(s)
    return CompiledProgram(steps, slot_count, profile)
