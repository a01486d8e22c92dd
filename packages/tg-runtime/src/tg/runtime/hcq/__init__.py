"""HCQ: the schedule compiled to hardware command queues (design: shared/specs/hcq.md).

Stages: S0 `prepare` (slots, kernels, batches), S1/S2 `schedule` (dependencies, queues, merging), S3 `encode`
(per-device rule tables), S4 `patches` (patch classes); `compile` runs them.
"""

from tg.runtime.hcq.compile import CompiledBatch, CompiledProgram, compile_batch, compile_linear
from tg.runtime.hcq.encode import Block, EncodeCtx, EncodedQueue, QueueSpec, decode_block, encode_queue, make_block
from tg.runtime.hcq.patches import PatchClass, PatchPlan, classify, plan_patches
from tg.runtime.hcq.prepare import ProgramInfo, prepare, slot_linear
from tg.runtime.hcq.schedule import HCQ_BATCH_SIZE, DepsTracker, merge_queues, schedule_batch

__all__ = [
    "HCQ_BATCH_SIZE",
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
    "decode_block",
    "encode_queue",
    "make_block",
    "merge_queues",
    "plan_patches",
    "prepare",
    "schedule_batch",
    "slot_linear",
]
