"""Check the RDNA3 emulator against the PYTHON device on real kernel calls (amd.md 4.7, item 3).

`record_calls()` records every kernel a block of code runs (AST, variable values, the bytes of its buffers before and
after); `replay(records)` renders each recorded kernel for gfx1100 (`EmulatedKernel`), runs it on the emulator from
the recorded inputs and compares its buffers with the PYTHON device's: the recorded outputs when the calls ran on
PYTHON, else the kernel run again on PYTHON from the same inputs. Integers and floats must match bit for bit (any NaN
equals any NaN), except in kernels using instructions that hardware computes approximately (v_exp_f32, v_rcp_f32...;
amd.md 4.5), compared within `APPROX_ULPS` (or REORDER_EPS of the value's magnitude). Kernels with transcendentals
(EXP2, LOG2, SIN, POW) are compared first with the PYTHON device computing them by tg's polynomials
(TRANSCENDENTAL=2), as the AMD renderer does where the GPU has no instruction (float64, POW): bit for bit, or within
the tolerance above when hardware approximations are used too; failing that (float32 hardware instructions against
polynomials), with the PYTHON device's own math within the tolerance. Float reductions: the GPU
optimisations (locals, group reduces) add in another order than the PYTHON device's heuristics, so those are compared
within a reduction-order tolerance, and once more with no optimisations on either side, bit for bit. Each kernel's
decoder listing is also compared with LLVM's own assembly of it, instruction for instruction.
"""

from __future__ import annotations

import contextlib
import math
import struct
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tg.ir.dtype import DType, PtrDType, dtypes
from tg.ir.helpers import TRANSCENDENTAL as TRANSCENDENTAL_LEVEL
from tg.ir.ops import Ops
from tg.ir.uop import UOp
from tg.runtime.amd.sim.decode import EmulatorError
from tg.runtime.amd.sim.kernel import EmulatedKernel
from tg.runtime.device import Buffer, Device
from tg.runtime.engine import CompiledRunner

APPROX_ULPS = 4  # results of kernels with hardware-approximate instructions may differ by this many ulps
REORDER_EPS = 64  # a reordered float reduction may differ by this many eps of the output's magnitude


@dataclass
class CallRecord:
    """One kernel call: the AST, its buffers (AST PARAM slots in argument order) before and after, the variables."""

    ast: UOp
    name: str
    slots: tuple[int, ...]
    before: list[bytes]
    after: list[bytes]
    var_vals: dict[str, int]
    device: str


@dataclass
class Recording:
    """What `record_calls` saw: the calls kept, and how many were left out for size."""

    calls: list[CallRecord] = field(default_factory=list)
    skipped_too_big: int = 0


@contextlib.contextmanager
def record_calls(per_kernel: int = 2, max_bytes: int = 1 << 20) -> Iterator[Recording]:
    """Record the kernel calls run inside the block: at most `per_kernel` calls of one AST (with different variable
    values), none whose buffers hold more than `max_bytes`."""
    rec = Recording()
    seen: dict[UOp, set[Any]] = {}
    original = CompiledRunner.__call__

    def recording_call(self: CompiledRunner, bufs: Any, var_vals: dict[str, int], wait: bool = False) -> Any:
        vals = {k: var_vals[k] for k in self.var_names if k in var_vals}
        keys = seen.setdefault(self.p.ast, set())
        key = tuple(sorted(vals.items()))
        if key in keys or len(keys) >= per_kernel:
            return original(self, bufs, var_vals, wait)
        if sum(b.nbytes for b in bufs) > max_bytes:
            rec.skipped_too_big += 1
            return original(self, bufs, var_vals, wait)
        before = [bytes(b.as_memoryview()) for b in bufs]
        et = original(self, bufs, var_vals, wait)
        keys.add(key)
        rec.calls.append(CallRecord(self.p.ast, self.p.name, tuple(self.p.globals), before,
                                    [bytes(b.as_memoryview()) for b in bufs], vals, self.device))  # fmt: skip
        return et

    CompiledRunner.__call__ = recording_call  # type: ignore[method-assign]
    try:
        yield rec
    finally:
        CompiledRunner.__call__ = original  # type: ignore[method-assign]


def slot_dtypes(ast: UOp) -> dict[int, DType]:
    """The element dtype of each buffer slot (PARAM) of a kernel AST."""
    return {u.arg: u.dtype.base for u in ast.toposort() if u.op is Ops.PARAM and isinstance(u.dtype, PtrDType)}


def float_reduce(ast: UOp) -> bool:
    """Whether the kernel reduces floats (its GPU optimisations may then add in another order than PYTHON's)."""
    return any(u.op is Ops.REDUCE and dtypes.is_float(u.dtype.scalar()) for u in ast.toposort())


TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})


def transcendental(ast: UOp) -> bool:
    """Whether the kernel computes EXP2/LOG2/SIN/POW: the PYTHON device evaluates them with Python's double math, the
    AMD renderer with tg's polynomials (or, in float32, hardware instructions), so their results are approximations of
    each other; the PYTHON device made to use the same polynomials (TRANSCENDENTAL=2) is the exact reference."""
    return any(u.op in TRANSCENDENTAL for u in ast.toposort())


def python_run(rec: CallRecord, opts: Sequence[Any] | None = None, polynomials: bool = False) -> list[bytes]:
    """The recorded kernel run on the PYTHON device from the recorded inputs: its buffers' bytes afterwards. With
    `polynomials`, transcendentals are computed by tg's polynomial decompositions (TRANSCENDENTAL=2), as the AMD
    renderer does where the GPU has no instruction for them (float64, POW)."""
    from tg.codegen.program import get_program
    from tg.ir.helpers import Context

    with Context(TRANSCENDENTAL=2 if polynomials else int(TRANSCENDENTAL_LEVEL.value)):
        spec = get_program(rec.ast, Device["PYTHON"].renderer, opts)
    runner = CompiledRunner(spec, "PYTHON")
    kinds = slot_dtypes(rec.ast)
    bufs = []
    for slot, data in zip(rec.slots, rec.before, strict=True):
        dt = kinds.get(slot, dtypes.uint8)
        buf = Buffer("PYTHON", max(1, len(data) // dt.itemsize), dt).ensure_allocated()
        bufs.append(buf.copyin(data.ljust(buf.nbytes, b"\0")))
    by_slot = dict(zip(rec.slots, bufs, strict=True))
    runner([by_slot[s] for s in runner.p.globals], rec.var_vals)
    return [bytes(b.as_memoryview())[: len(d)] for b, d in zip(bufs, rec.before, strict=True)]


_FLOAT_FORMATS = {dtypes.float16: ("e", "h"), dtypes.float32: ("f", "i"), dtypes.float64: ("d", "q")}


def compare(got: bytes, want: bytes, dt: DType, mode: str = "exact") -> str | None:
    """None when the buffers agree, else what differs: bit for bit (NaNs equal) in mode 'exact'; within
    APPROX_ULPS in 'approximate'; within REORDER_EPS of the output's magnitude in 'reordered'; either of the two in
    'approximate, reordered' (a float reduction using hardware-approximate instructions)."""
    if got == want:
        return None
    if len(got) != len(want):
        return f"{len(got)} bytes, expected {len(want)}"
    if dt not in _FLOAT_FORMATS:
        n = max(1, dt.itemsize)
        bad = [i for i in range(0, len(got), n) if got[i : i + n] != want[i : i + n]]
        i = bad[0]
        return (f"{len(bad)} of {len(got) // n} {dt} values differ; first at [{i // n}]: emulator "
                f"{got[i : i + n].hex()}, PYTHON {want[i : i + n].hex()}")  # fmt: skip
    ffmt, ifmt = _FLOAT_FORMATS[dt]
    count = len(got) // dt.itemsize
    g, w = struct.unpack(f"<{count}{ffmt}", got), struct.unpack(f"<{count}{ffmt}", want)
    gi, wi = struct.unpack(f"<{count}{ifmt}", got), struct.unpack(f"<{count}{ifmt}", want)
    eps = {2: 2.0**-10, 4: 2.0**-23, 8: 2.0**-52}[dt.itemsize]
    scale = max((abs(x) for x in w if math.isfinite(x)), default=0.0)

    def agree(k: int) -> bool:
        a, b = g[k], w[k]
        if gi[k] == wi[k] or (a != a and b != b):
            return True
        if "approximate" in mode:  # a few ulps apart, or a few more in magnitude after later arithmetic
            if (a >= 0) == (b >= 0) and abs(gi[k] - wi[k]) <= APPROX_ULPS:
                return True
            if math.isfinite(a) and math.isfinite(b) and abs(a - b) <= REORDER_EPS * eps * abs(b):
                return True
        if "reordered" in mode:
            return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= REORDER_EPS * eps * (abs(b) + scale)
        return False

    bad = [k for k in range(count) if not agree(k)]
    if not bad:
        return None
    k = bad[0]
    return f"{len(bad)} of {count} {dt} values differ; first at [{k}]: emulator {g[k]!r}, PYTHON {w[k]!r}"


def listing_mismatch(kernel: EmulatedKernel) -> str | None:
    """None when the decoder's listing of the kernel equals LLVM's own assembly, instruction for instruction."""
    aligned = kernel.llvm_listing(align=True)
    mine, llvm = kernel.decoder_listing(aligned), [x for x in aligned if not x.startswith(".")]
    if mine == llvm:
        return None
    k = next((i for i, (a, b) in enumerate(zip(mine, llvm, strict=False)) if a != b), min(len(mine), len(llvm)))
    a, b = (mine[k] if k < len(mine) else "<end>"), (llvm[k] if k < len(llvm) else "<end>")
    return f"the decoder's listing differs from LLVM's at instruction {k}: {a!r} vs LLVM {b!r}"


def replay(records: Sequence[CallRecord], listings: bool = True) -> tuple[list[str], Counter[str]]:
    """Run every recorded call on the emulator and compare with PYTHON (see the module docstring); returns the
    failures (one line each) and counts (calls, kernels, and comparisons by mode). With `listings`, the decoder's
    listing of each kernel is also compared with LLVM's assembly of it (amd.md 4.7, item 1)."""
    failures: list[str] = []
    counts: Counter[str] = Counter()
    kernels: dict[tuple[UOp, bool], EmulatedKernel] = {}
    for rec in records:
        kinds = slot_dtypes(rec.ast)
        reordered = float_reduce(rec.ast)
        variants: tuple[list[Any] | None, ...] = (None, []) if reordered else (None,)
        for opts in variants:
            label = rec.name if opts is None else f"{rec.name} (no opts)"
            key = (rec.ast, opts is None)
            got = {slot: bytearray(data) for slot, data in zip(rec.slots, rec.before, strict=True)}
            try:
                if key not in kernels:
                    kernels[key] = EmulatedKernel(rec.ast, opts)
                    if listings and (msg := listing_mismatch(kernels[key])) is not None:
                        failures.append(f"{label}: {msg}")
                    counts["listings"] += listings
                kernels[key](got, rec.var_vals)
            except (EmulatorError, ValueError) as e:
                failures.append(f"{label}: {type(e).__name__}: {e}")
                break
            kernel = kernels[key]
            order = "reordered" if reordered and opts is None else ""
            mode = ", ".join(m for m in ("approximate" if kernel.approximate else "", order) if m) or "exact"
            if transcendental(rec.ast):  # first against the same polynomials, in the kernel's own mode
                poly = python_run(rec, opts, polynomials=True)
                if all(compare(bytes(got[s]), w, kinds.get(s, dtypes.uint8), mode) is None
                       for s, w in zip(rec.slots, poly, strict=True)):  # fmt: skip
                    counts[f"{mode} (tg's polynomials)"] += 1
                    continue
                mode = ", ".join(m for m in ("approximate", order) if m)  # hardware instructions vs Python's math
            want = rec.after if opts is None and rec.device.startswith("PYTHON") else python_run(rec, opts)
            for slot, w in zip(rec.slots, want, strict=True):
                if (msg := compare(bytes(got[slot]), w, kinds.get(slot, dtypes.uint8), mode)) is not None:
                    failures.append(f"{label} buffer {slot} ({mode}): {msg}")
            counts[mode] += 1
        counts["calls"] += 1
    counts["kernels"] = len({k[0] for k in kernels})
    return failures, counts
