"""The CPU batch runner: a captured run of CPU kernels and copies executed by one native call per replay.

A small C library (generated for the kernel signatures a batch needs, compiled once by the CPU device's compiler
and disk-cached) walks an entry table: each entry is a kernel function pointer and its argument words, or a memcpy.
Every argument word is fixed at build time except the *patches*: the words that hold a slot buffer's address (plus a
byte offset, for views) or a variable's value. A replay writes this call's slot values into one array and makes one
ctypes call, which patches the words and runs every entry; Python does no per-kernel work.

Calling a kernel goes through a trampoline per signature (number of buffer and int arguments), so the kernels
themselves are the ordinary ``void name(T* data0, ..., const int var0)`` functions the C renderer emits.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tg.runtime.c_compiler import CCompiler
from tg.runtime.device import Buffer, Device
from tg.runtime.engine import BufferCopy, CompiledRunner, ExecItem, _update_stats

if TYPE_CHECKING:
    from tg.runtime.jit import SlotUse

MEMCPY = -1  # entry kind of a copy between two CPU devices (same host memory)


class _Entry(ctypes.Structure):
    _fields_ = (("fn", ctypes.c_void_p), ("args", ctypes.c_void_p), ("kind", ctypes.c_int32), ("pad", ctypes.c_int32))


class _Patch(ctypes.Structure):
    _fields_ = (("word", ctypes.c_uint32), ("slot", ctypes.c_uint32), ("offset", ctypes.c_uint64))


class _Batch(ctypes.Structure):
    _fields_ = (
        ("table", ctypes.c_void_p),
        ("patches", ctypes.c_void_p),
        ("npatch", ctypes.c_int32),
        ("nentries", ctypes.c_int32),
        ("slot_values", ctypes.c_void_p),
        ("entries", ctypes.c_void_p),
    )


def _is_cpu(device: str) -> bool:
    """A plain CPU device (host memory, kernels called from the host; not CPU behind HCQ)."""
    from tg.runtime.backends.cpu import CPUDevice

    return device.split(":", 1)[0] == "CPU" and isinstance(Device[device], CPUDevice)


def _trampoline(kind: int, nbufs: int, nvars: int) -> str:
    params = ", ".join(["void*"] * nbufs + ["int"] * nvars) or "void"
    args = ", ".join([f"(void*)a[{i}]" for i in range(nbufs)] + [f"(int)a[{nbufs + i}]" for i in range(nvars)])
    return f"    case {kind}: ((void (*)({params}))e->fn)({args}); break;"


@functools.cache
def _library(signatures: tuple[tuple[int, int], ...]) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    """The batch runner compiled for these (nbufs, nvars) kernel signatures (entry kind k = signatures[k])."""
    from tg.runtime.backends.cpu_program import load_shared_object

    cases = "\n".join(_trampoline(k, nb, nv) for k, (nb, nv) in enumerate(signatures))
    src = f"""#include <stdint.h>
#include <string.h>
typedef struct {{ void *fn; const uint64_t *args; int32_t kind; int32_t pad; }} tg_entry;
typedef struct {{ uint32_t word; uint32_t slot; uint64_t offset; }} tg_patch;
typedef struct {{ uint64_t *table; const tg_patch *patches; int32_t npatch; int32_t nentries;
                 const uint64_t *slot_values; const tg_entry *entries; }} tg_batch;
void tg_batch_run(const tg_batch *b) {{
  for (int32_t i = 0; i < b->npatch; i++) {{
    const tg_patch *p = &b->patches[i];
    b->table[p->word] = b->slot_values[p->slot] + p->offset;
  }}
  for (int32_t i = 0; i < b->nentries; i++) {{
    const tg_entry *e = &b->entries[i];
    const uint64_t *a = e->args;
    switch (e->kind) {{
    case {MEMCPY}: memcpy((void*)a[0], (const void*)a[1], (size_t)a[2]); break;
{cases}
    default: break;
    }}
  }}
}}
"""
    # the batch runner is C: the CPU device's compiler, or the host C compiler when the device compiles something else
    # (CPU:LLVM's compiler takes LLVM IR)
    compiler = Device["CPU"].compiler
    lib = (compiler if isinstance(compiler, CCompiler) else CCompiler()).compile_cached(src)
    fn = load_shared_object("tg_batch_run", lib).tg_batch_run
    fn.argtypes, fn.restype = [ctypes.c_void_p], None
    return fn


class CPUBatchExecutor:
    """Runs items ``indices`` of a captured program (all CPU kernels or CPU-to-CPU copies) in one native call.

    ``uses[slot]`` lists where each slot buffer appears (item index in ``items``, argument position, byte offset).
    Call it with this replay's slot buffers (and variable values, by name).
    """

    @staticmethod
    def supports(ei: ExecItem) -> bool:
        """Whether the batch runner can run this item natively."""
        runner = ei.runner
        if isinstance(runner, CompiledRunner):
            p = runner.p
            return (
                _is_cpu(runner.device)
                and type(runner._prg).__name__ == "CPUProgram"
                and p.global_size is None
                and p.local_size is None
                and getattr(p, "threads", 1) == 1  # THREAD kernels run on the Python-side pool: ExecItems
            )
        if isinstance(runner, BufferCopy):
            return len(ei.bufs) == 2 and _is_cpu(ei.bufs[0].device) and _is_cpu(ei.bufs[1].device)
        return False

    @classmethod
    def build(cls, program: Any, indices: Sequence[int]) -> CPUBatchExecutor:
        """The executor of a CapturedProgram's items ``indices`` (the executor registry's constructor)."""
        return cls(program.items, indices, program.uses)

    def __init__(self, items: Sequence[ExecItem], indices: Sequence[int], uses: Sequence[Sequence[SlotUse]]) -> None:
        self.items = [items[i] for i in indices]
        where = {item_index: k for k, item_index in enumerate(indices)}
        signatures: dict[tuple[int, int], int] = {}
        words: list[int] = []
        entry_words: list[int] = []
        kinds: list[int] = []
        fns: list[int] = []
        self.var_names: list[str] = []
        var_words: list[tuple[int, str]] = []
        word_of: dict[tuple[int, int], int] = {}  # (k, pos) -> word index of that buffer argument
        for k, ei in enumerate(self.items):
            entry_words.append(len(words))
            if isinstance(ei.runner, CompiledRunner):
                nvars = len(ei.runner.var_names)
                kinds.append(signatures.setdefault((len(ei.bufs), nvars), len(signatures)))
                fns.append(ctypes.cast(ei.runner._prg.fxn, ctypes.c_void_p).value or 0)  # type: ignore[attr-defined]
                for pos, b in enumerate(ei.bufs):
                    word_of[(k, pos)] = len(words)
                    words.append(b._buf.addr)
                for name in ei.runner.var_names:
                    value = ei.fixedvars.get(name)
                    if value is None:
                        var_words.append((len(words), name))
                    words.append(0 if value is None else int(value))
            else:  # a copy between CPU devices: destination, source, byte count
                kinds.append(MEMCPY)
                fns.append(0)
                for pos, b in enumerate(ei.bufs[:2]):
                    word_of[(k, pos)] = len(words)
                    words.append(b._buf.addr)
                words.append(ei.bufs[0].nbytes)
        patches: list[tuple[int, int, int]] = []
        self.slot_count = len(uses)
        for slot, slot_uses in enumerate(uses):
            for u in slot_uses:
                if (entry := where.get(u.item)) is not None:
                    patches.append((word_of[(entry, u.pos)], slot, u.byte_offset))
        self.used_slots = sorted({p[1] for p in patches})
        for word, name in var_words:
            if name not in self.var_names:
                self.var_names.append(name)
            patches.append((word, self.slot_count + self.var_names.index(name), 0))
        self._fn = _library(tuple(signatures))
        self._table = (ctypes.c_uint64 * max(len(words), 1))(*words)
        table_addr = ctypes.addressof(self._table)
        self._entries = (_Entry * len(self.items))(
            *(_Entry(fn, table_addr + 8 * w, kind, 0) for fn, w, kind in zip(fns, entry_words, kinds, strict=True))
        )
        self._patches = (_Patch * max(len(patches), 1))(*(_Patch(w, s, o) for w, s, o in patches))
        self._slot_values = (ctypes.c_uint64 * (self.slot_count + len(self.var_names) or 1))()
        self._batch = _Batch(
            table_addr, ctypes.addressof(self._patches), len(patches), len(self.items),
            ctypes.addressof(self._slot_values), ctypes.addressof(self._entries),
        )  # fmt: skip
        self._batch_ptr = ctypes.addressof(self._batch)
        # GlobalCounters totals, precomputed when no estimate depends on a variable
        ops = [ei.runner.ops for ei in self.items]
        mem = [ei.runner.mem for ei in self.items]
        self._static_stats = all(o.__class__ is int for o in ops) and all(m.__class__ is int for m in mem)
        self._ops: int = sum(ops) if self._static_stats else 0
        self._mem: int = sum(mem) if self._static_stats else 0

    def __call__(self, slots: Sequence[Buffer], var_vals: dict[str, int]) -> None:
        sv = self._slot_values
        for slot in self.used_slots:
            sv[slot] = slots[slot]._buf.addr
        if self.var_names:
            base = self.slot_count
            for i, name in enumerate(self.var_names):
                sv[base + i] = var_vals[name]
        self._fn(self._batch_ptr)
        from tg.ir.helpers import GlobalCounters

        if self._static_stats:
            GlobalCounters.kernel_count += len(self.items)
            GlobalCounters.global_ops += self._ops
            GlobalCounters.global_mem += self._mem
        else:
            for ei in self.items:
                _update_stats(ei.runner, len(ei.bufs), var_vals, None)
