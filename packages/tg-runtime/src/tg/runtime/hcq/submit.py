"""Stage S5 of the HCQ pipeline: the submitter, an ordinary tg kernel that starts a compiled batch (hcq.md 3.6).

Per compiled batch one kernel AST (a SINK of STOREs, RANGE loops, ALU) does, in order:

1. load each device's epoch ``epoch_d = V_d``;
2. compute the runtime patch words (value, epoch and input classes) into the command buffers: input words read the
   input table the host filled (one u64 per (slot, device)); blocks with many input words run a gather loop over
   their ``patch_pairs`` table;
3. hand each command buffer to its queue with the device's ``pm_submit`` fragment (ring copy, write pointer,
   doorbell; stores to them come after a BARRIER, a release fence);
4. store ``V_d = epoch_d + 1`` and ``E_Pd = epoch_d``.

Every piece of memory it touches is an HCQBUF, replaced by a PARAM in order of first use, so batches of one shape
share one submitter. ``HCQ_RUNTIME_DEV`` picks how it runs: ``CPU`` renders it with the C renderer and calls the
compiled function once per execution (PARAMs bound to host addresses); ``PYTHON`` interprets it with the PYTHON
backend's program translator, each PARAM bound to an MMIO-style view, so register models see every store in
program order; ``auto`` is CPU when every bound region is host memory.

``pm_submit`` rules match ``QUEUE(cmdbuf, *after)`` (``arg`` the QueueKey) with a :class:`SubmitCtx` and return the
fragment (a STORE or END chain); everything they read or write must be ordered after ``after`` (use
``buf.after(*after)``). A fragment may use the address of an HCQBUF (``ir.getaddr``: the command buffer an AMD
compute queue runs as an indirect buffer): it becomes a link-time entry of the input table.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tg.ir import KernelInfo, Ops, UOp, dtypes
from tg.ir.dtype import PtrDType
from tg.runtime.hcq import ir
from tg.runtime.hcq.compile import CompiledBatch
from tg.runtime.hcq.encode import QueueSpec
from tg.runtime.hcq.patches import PART_HIGH

I32, U64 = dtypes.int32, dtypes.uint64

# the kernel name of every submitter program: a host program (run by the host CPU or interpreted), never a device kernel
SUBMITTER_NAME = "hcq_submit"


@dataclass(frozen=True)
class SubmitCtx:
    """What a ``pm_submit`` rule gets as ``ctx``: the device and queue, the command buffer's size in words and
    entries (fixed-entry queues), the queue's spec, the device's static facts, and for fixed-entry queues
    ``used_words``: the words of an entry any of this submit's packets uses (the rest is zero padding a worker never
    reads)."""

    device: str
    queue: str
    nwords: int
    spec: QueueSpec
    facts: Any
    used_words: int = 0

    @property
    def nentries(self) -> int:
        """Ring entries the submit takes (fixed-entry queues), else words."""
        return self.nwords // self.spec.entry_words if self.spec.entry_words else self.nwords


@dataclass
class Submitter:
    """The S5 result for one batch: the kernel ``ast`` (PARAMs in order), the HCQBUF each PARAM stands for, the
    variables it takes (in the kernel's argument order: by name), the input table (its HCQBUF and the link-time
    addresses appended after the slot entries), and per submit (device, queue, words) for ring-space checks."""

    ast: UOp
    params: list[UOp]
    variables: list[UOp]
    table: UOp
    link_entries: list[UOp]
    submits: list[tuple[str, str, int]]


def _i(x: int) -> UOp:
    return UOp.const(I32, x)


def build_submitter(batch: CompiledBatch, env: Any) -> Submitter:
    """S5: the submitter kernel of a compiled batch (``env.hcq_device(name)`` gives each device's pm_submit)."""
    plan = batch.patches
    first = batch.devices[0] if batch.devices else batch.encoded[0].key[0]
    link_entries: list[UOp] = []
    n_inputs = len(plan.inputs)
    # the input table's size is known once every word reading it is built: a stand-in until then
    pending = ir.hcqbuf(first, "input_table", "pending", U64, 1)

    def table_load(k: int) -> UOp:
        return pending.index(_i(k)).load()

    def runtime_word(w: UOp) -> UOp:
        subs: dict[UOp, UOp] = {}
        for u in w.toposort():
            if u.op is Ops.GETADDR and u.src[0].op is Ops.PARAM:
                subs[u] = table_load(plan.inputs.index((int(u.src[0].arg[0]), str(u.arg))))
            elif u.op is Ops.GETADDR and u.src[0].op is Ops.HCQBUF:
                if u not in link_entries:
                    link_entries.append(u)
                subs[u] = table_load(n_inputs + link_entries.index(u))
        return w.substitute(subs) if subs else w

    stores: list[UOp] = []
    for block, byte_off, w, _ in plan.runtime:
        stores.append(block.buf.index(_i(byte_off // block.word_dtype.itemsize)).store(runtime_word(w)))
    for axis, g in enumerate(plan.gathers):
        r = UOp.range(_i(len(g.entries)), 1000 + axis)
        word, idx, off, part = (g.table.index(r * _i(4) + _i(k)).load() for k in range(4))
        addr = pending.index(idx.cast(I32)).load() + off
        high = addr >> UOp.const(U64, 32)
        value = part.eq(UOp.const(U64, PART_HIGH)).where(high, addr) if g.block.word_dtype is dtypes.uint32 else addr
        stores.append(g.block.buf.index(word.cast(I32)).store(value.cast(g.block.word_dtype)).end(r))
    prev: tuple[UOp, ...] = tuple(stores)
    submits = []
    for eq in batch.encoded:
        dev_name, queue = eq.key
        dev = env.hcq_device(dev_name)
        spec = dev.queues[queue]
        used = max((_used_words(p) for p in eq.queue.src), default=1) if spec.entry_words else 0
        ctx = SubmitCtx(dev_name, queue, eq.cmdbuf.nwords, spec, dev.encode_facts, used)
        frag = dev.pm_submit.rewrite(UOp(Ops.QUEUE, dtypes.void, (eq.cmdbuf.buf, *prev), eq.queue.arg), ctx)
        if frag is None:
            raise RuntimeError(f"{dev_name} has no submit rule for {queue}")
        prev = (runtime_word(frag),)  # addresses a fragment uses (an indirect buffer's) are link-time table entries
        submits.append((dev_name, queue, eq.cmdbuf.nwords))
    finals = []
    for d in batch.devices:
        e = ir.epoch(d)
        finals.append(ir.timeline_value(d).after(*prev).index(_i(0)).store(e + UOp.const(U64, 1)))
        finals.append(ir.epoch_slot(d).after(*prev).index(_i(0)).store(e))
    table = ir.hcqbuf(first, "input_table", "inputs", U64, max(n_inputs + len(link_entries), 1))
    sink = UOp.sink(*finals, *prev, arg=KernelInfo(name=SUBMITTER_NAME, opts_to_apply=())).substitute({pending: table})
    # every HCQBUF the kernel touches becomes a PARAM (order of first use; sizes dropped so batches share code)
    params = [u for u in sink.toposort() if u.op is Ops.HCQBUF]
    ast = _params_for(sink, {u: i for i, u in enumerate(params)})
    variables = sorted({u for u in ast.toposort() if u.op is Ops.DEFINE_VAR}, key=lambda v: v.arg[0])
    return Submitter(ast, params, variables, table, link_entries, submits)


def _used_words(packet: UOp) -> int:
    """Words of a packet up to its last word that is not a zero CONST."""
    n = len(packet.src)
    while n > 1 and packet.src[n - 1].op is Ops.CONST and packet.src[n - 1].arg == 0:
        n -= 1
    return n


def _params_for(sink: UOp, slot: dict[UOp, int]) -> UOp:
    """``sink`` with each HCQBUF a PARAM of unknown size (pointers through INDEX/AFTER retyped to match), so that
    submitters differing only in buffer sizes are one kernel."""
    new: dict[UOp, UOp] = {}
    for u in sink.toposort():
        if u.op is Ops.HCQBUF:
            assert isinstance(u.dtype, PtrDType)
            new[u] = UOp.param(slot[u], u.dtype.base)
            continue
        src = tuple(new[s] for s in u.src)
        dtype = src[0].dtype if u.op in (Ops.INDEX, Ops.AFTER) and isinstance(u.dtype, PtrDType) else u.dtype
        new[u] = u if src == u.src and dtype is u.dtype else UOp(u.op, dtype, src, u.arg, u.tag)
    return new[sink]


# ---- the runtimes ---------------------------------------------------------------------------------------------------


def _submitter_renderer() -> Any:
    """The C renderer of submitters: no restrict (submitter memory is device memory), BARRIER = a full fence,
    every program with an ``_entry(args, 0)`` wrapper (one pointer argument: one cheap ctypes call)."""
    from tg.codegen.render.cstyle import ClangRenderer

    class SubmitterRenderer(ClangRenderer):
        buffer_suffix = ""
        barrier = "__atomic_thread_fence(__ATOMIC_SEQ_CST);"

    return SubmitterRenderer(0, 1, False, entry_wrappers=True)


@functools.cache
def _program(ast: UOp, runtime: str) -> Any:
    """The submitter compiled for a runtime: (C entry function, its library) for CPU, a PythonProgram for PYTHON."""
    from tg.codegen.program import get_program
    from tg.ir.helpers import DEBUG

    if DEBUG.value >= 5:
        print(f"HCQ submitter ({runtime}):\n{ast}")
    if runtime == "PYTHON":
        from tg.codegen.render.python import PythonRenderer
        from tg.runtime.backends.python import PythonProgram

        p = get_program(ast, PythonRenderer(0, 1), ())
        return PythonProgram(p.name, p.src.encode()), p
    from tg.runtime.backends.cpu_program import load_shared_object

    p = get_program(ast, _submitter_renderer(), ())
    lib = load_shared_object(p.name, _compiler().compile_cached(p.src))
    entry = ctypes.cast(getattr(lib, f"{p.name}_entry"), ctypes.c_void_p).value
    assert entry is not None
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)(entry)
    return (fn, lib), p


@functools.cache
def _compiler() -> Any:
    from tg.runtime.c_compiler import CCompiler

    return CCompiler()


def compile_submitter(sub: Submitter, runtime: str) -> tuple[Any, Any]:
    """(the loaded submitter, its ProgramSpec) for ``runtime`` (CPU or PYTHON); compiled once per AST."""
    if runtime not in ("CPU", "PYTHON"):
        raise ValueError(f"HCQ_RUNTIME_DEV must be CPU, PYTHON or auto, got {runtime!r}")
    return _program(sub.ast, runtime)


class BoundSubmitter:
    """A submitter bound to the memory of one link copy: ``run(values)`` starts the batch (values: the variables'
    values in ``Submitter.variables`` order)."""

    def __init__(self, sub: Submitter, runtime: str, regions: Sequence[Any]) -> None:
        self.runtime = runtime
        prg, spec = compile_submitter(sub, runtime)
        self.spec = spec
        nparams, nvars = len(sub.params), len(sub.variables)
        self.nparams = nparams
        if runtime == "CPU":
            self._fn, self._lib = prg
            self._args = (ctypes.c_uint64 * max(nparams + nvars, 1))(*[r.va for r in regions])
            self._ptr = ctypes.addressof(self._args)
        else:
            from tg.runtime.hcq.views import memory_for

            self._prg = prg
            self._mems = [memory_for(r.view, p.dtype.base) for r, p in zip(regions, sub.params, strict=True)]

    def run(self, values: Sequence[int]) -> None:
        """Run the submitter once with the variables' ``values``."""
        if self.runtime == "CPU":
            args, base = self._args, self.nparams
            for i, v in enumerate(values):
                args[base + i] = v & 0xFFFFFFFFFFFFFFFF
            self._fn(self._ptr, 0)
        else:
            self._prg.run_on(self._mems, tuple(values))
