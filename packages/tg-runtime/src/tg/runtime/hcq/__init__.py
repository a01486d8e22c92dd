"""HCQ: the schedule compiled to hardware command queues (design: shared/specs/hcq.md).

Compiler stages: S0 `prepare` (slots, kernels, batches), S1/S2 `schedule` (dependencies, queues, merging), S3
`encode` (per-device rule tables), S4 `patches` (patch classes), S5 `submit` (the submitter kernel and its
runtimes); `compile` runs them. S6 `link` binds a compiled batch to memory, S7 `exec` runs it. Devices: `device`
(`HCQDevice`, timeline, waits, `DeviceHangError`; it runs its transfers on the stages above), `region`
(`Region`, `Signal`, `SignalPool`), `alloc` (buffers, staging ring), `cpu` (`HCQ+CPU`).
`run` is the engine's entry; `graph` the JIT executor; `profile` the records and the Chrome trace.

Importing this package does no work; devices and workers start on first use.
"""

from tg.runtime.hcq.compile import CompiledBatch, CompiledProgram, compile_batch, compile_linear, compile_queues
from tg.runtime.hcq.encode import Block, EncodeCtx, EncodedQueue, QueueSpec, decode_block, encode_queue, make_block
from tg.runtime.hcq.patches import PatchClass, PatchPlan, classify, plan_patches
from tg.runtime.hcq.prepare import ProgramInfo, prepare, slot_linear
from tg.runtime.hcq.schedule import DepsTracker, merge_queues, schedule_batch

__all__ = [
    "Block",
    "CompiledBatch",
    "CompiledProgram",
    "DepsTracker",
    "EncodeCtx",
    "EncodedQueue",
    "PatchClass",
    "PatchPlan",
    "ProgramInfo",
    "QueueSpec",
    "classify",
    "compile_batch",
    "compile_linear",
    "compile_queues",
    "decode_block",
    "encode_queue",
    "make_block",
    "merge_queues",
    "plan_patches",
    "prepare",
    "schedule_batch",
    "slot_linear",
]
