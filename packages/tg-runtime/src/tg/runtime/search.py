"""BEAM search (`BEAM=n`): pick a kernel's opts by compiling and timing candidates on the device.

The search starts from the heuristic kernel (so it can only improve on it) and keeps the `n` fastest kernels per
round. Each round expands every kernel in the beam by the legal opts of the action list
(`tg.codegen.opt.actions`), drops candidates that reach an AST already seen or exceed the register model, builds
them (code generation and the C compiler) in parallel worker processes, one per core (forked, so they share this
process's settings and caches; threads where fork is unavailable), and, once the round is built, times them on the
device with the compilers idle: one run, and two more only for a candidate within 1.5x of the best so far. The
search stops when `BEAM_TIME` (default 8 s per kernel, the final pick included) would be exceeded or when a round
improves by less than 1%. The final pick is made by timing the beam and the heuristic kernel again, interleaved,
up to `FINAL_ROUNDS` times within the time left, exactly as they run in a program (warm, threads on the CPU thread
pool); a kernel must beat the heuristic one there by `MIN_GAIN` (3%, about the run-to-run noise) to be picked, so
the winner is never slower than the heuristic kernel by the search's own final timing (`last_search` records it).

Winners are cached on disk per (kernel AST, renderer, compiler, beam width); `IGNORE_BEAM_CACHE=1` searches again.
Progress: a tqdm bar on stderr at DEBUG>=1 or BEAM_PROGRESS=1.
"""

from __future__ import annotations

import array
import concurrent.futures
import hashlib
import json
import multiprocessing
import sys
import time
import warnings
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tg.codegen.linearize import LinearizeError
from tg.codegen.opt import Opt, OptKernel, OptOps, hand_coded_opts
from tg.codegen.opt.actions import legal_children
from tg.codegen.opt.heuristic import matmul_tile_variants
from tg.codegen.opt.kernel import vector_lanes
from tg.codegen.program import ProgramSpec, get_program
from tg.codegen.render.renderer import Renderer
from tg.ir.dtype import DType, PtrDType, dtypes
from tg.ir.helpers import BEAM, BEAM_PROGRESS, BEAM_TIME, DEBUG, IGNORE_BEAM_CACHE, NOOPT, cache_dir
from tg.ir.ops import AxisType, KernelInfo, Ops
from tg.ir.uop import UOp, sym_infer
from tg.runtime.device import Buffer, CompileError, Device

SEARCH_VERSION = 3
FINAL_ROUNDS = 5  # interleaved re-timings of the finalists (the beam and the heuristic kernel), at most
FINAL_SHARE = 0.15  # part of the time limit kept for the final timing
RETIME_WITHIN = 1.5  # a candidate whose first run is within this factor of the best gets two more runs
MIN_GAIN = 0.03  # a pick must beat the heuristic kernel by this fraction in the final timing (else: noise)

# what the last search measured in its final comparison (seconds per run): heuristic_s, best_s, rounds, opts
last_search: dict[str, Any] = {}


def _opts_to_json(opts: Sequence[Opt]) -> list[Any]:
    return [[o.op.name, o.axis, [o.arg[0], o.arg[1].name, o.arg[2]] if o.op is OptOps.SPLIT else o.arg] for o in opts]


def _opts_from_json(data: list[Any]) -> list[Opt]:
    ret = []
    for op, axis, arg in data:
        if op == "SPLIT":
            arg = (int(arg[0]), AxisType[arg[1]], bool(arg[2]))
        ret.append(Opt(OptOps[op], int(axis), arg))
    return ret


def _cache_file(ast: UOp, renderer: Renderer, compiler_key: str, width: int) -> Path:
    h = hashlib.sha256(b"|".join([ast.key, repr(renderer).encode(), compiler_key.encode(),
                                  f"{width}|{SEARCH_VERSION}".encode()])).hexdigest()  # fmt: skip
    return Path(cache_dir()) / "beam" / h[:2] / f"{h}.json"


def _fits_registers(k: OptKernel) -> bool:
    """The register model: accumulator vectors + one operand vector per tile column + 1 <= vector registers."""
    regs = getattr(k.renderer, "vector_registers", 0)
    if not regs:
        return True
    w = vector_lanes(k.renderer, k.dtype_itemsize)
    up = k.type_product(AxisType.UPCAST)
    acc = max(1, up * k.type_product(AxisType.GROUP_REDUCE) // w)
    unroll = k.type_product(AxisType.UNROLL)
    return acc + 2 <= regs + 8 and up * unroll <= 4096


@dataclass(frozen=True)
class Built:
    """A compiled candidate: what timing it needs, small enough to send back from a worker process."""

    name: str
    src: str
    lib: bytes
    params: tuple[tuple[DType, int], ...]  # (dtype, elements) of each kernel argument, in PARAM order
    var_values: tuple[int, ...]  # each variable at its lower bound (>= 1)
    var_names: tuple[str, ...]
    threads: int = 1
    global_size: tuple[Any, ...] | None = None
    local_size: tuple[Any, ...] | None = None

    @staticmethod
    def of(p: ProgramSpec, lib: bytes) -> Built:
        """The timing view of a rendered program and its binary."""
        params = []
        for u in (u for u in p.uops if u.op is Ops.PARAM):
            assert isinstance(u.dtype, PtrDType)
            params.append((u.dtype.base, max(u.dtype.size, 1)))
        return Built(p.name, p.src, lib, tuple(params), tuple(max(1, int(v.arg[1])) for v in p.vars),
                     tuple(str(v.arg[0]) for v in p.vars), p.threads, p.global_size, p.local_size)  # fmt: skip


_FILL = {dtypes.float32: "f", dtypes.float64: "d", dtypes.int32: "i", dtypes.int64: "q", dtypes.uint32: "I",
         dtypes.uint64: "Q", dtypes.int16: "h", dtypes.uint16: "H", dtypes.int8: "b", dtypes.uint8: "B"}  # fmt: skip


def _test_buffers(b: Built, device: str) -> list[Buffer]:
    """One buffer per kernel argument, filled with ones (no division by zero, no denormals)."""
    bufs = []
    for dt, n in b.params:
        buf = Buffer(device, n, dt).ensure_allocated()
        if (fmt := _FILL.get(dt)) is not None:
            buf.copyin(memoryview(array.array(fmt, [1]) * n).cast("B"))
        bufs.append(buf)
    return bufs


class _Timer:
    """Times compiled candidates of one kernel on one device, sharing buffers between candidates."""

    def __init__(self, device: str) -> None:
        self.device, self.dev = device, Device[device]
        self.bufs: list[Buffer] | None = None
        self._programs: dict[tuple[str, str], Any] = {}

    def __call__(self, p: ProgramSpec | Built, lib: bytes, best: float, runs: int = 3, warmup: bool = True) -> float:
        """The fastest of up to `runs` runs (after a warm-up run), stopping after a run slower than 2x `best`."""
        b = p if isinstance(p, Built) else Built.of(p, lib)
        key = (b.name, b.src)
        prg: Any = self._programs.get(key)
        if prg is None:
            prg = self._programs[key] = self.dev.runtime(b.name, lib)
        if self.bufs is None:
            self.bufs = _test_buffers(b, self.device)
        args = [x._buf for x in self.bufs]
        kw: dict[str, Any] = {"threads": b.threads} if b.threads > 1 else {}
        if b.global_size is not None:  # GPU devices: launch the whole grid (variables at the values used here)
            var_vals = dict(zip(b.var_names, b.var_values, strict=True))
            kw["global_size"] = tuple(sym_infer(g, var_vals) for g in b.global_size)
            kw["local_size"] = b.local_size
        if warmup:
            prg(*args, vals=b.var_values, **kw)
        tm = float("inf")
        for _ in range(runs):
            t = float(prg(*args, vals=b.var_values, wait=True, **kw))
            tm = min(tm, t)
            if t > 2 * best:
                break
        return tm

    def candidate(self, b: Built, best: float) -> float:
        """A candidate's time for ranking: one run (no warm-up: the buffers and pool are shared and warm), and the
        best of two more only when it is within `RETIME_WITHIN` of the best so far (a loser costs one run)."""
        t = self(b, b.lib, best, runs=1, warmup=False)
        if t <= best * RETIME_WITHIN:
            t = min(t, self(b, b.lib, best, runs=2, warmup=False))
        return t


def _build(k: OptKernel, compiler: Any) -> Built | None:
    """Code generation and compilation of one candidate; None for a candidate that cannot lower or compile."""
    try:
        p = get_program(k.ast, k.renderer, ())
        return Built.of(p, compiler.compile_cached(p.src))
    except (CompileError, ValueError, NotImplementedError, LinearizeError):  # a candidate that can't lower is skipped
        return None


# the candidates of the round being built: forked workers read them from their copy of this process's memory
_round: tuple[list[OptKernel], Any] = ([], None)


def _build_in_worker(i: int) -> tuple[int, Built | None]:
    return i, _build(_round[0][i], _round[1])


def _fork_safe(compiler: Any) -> bool:
    """Whether candidates may be built in forked processes: on Linux, with a compiler that runs as its own process
    (the C compiler). A driver's in-process compiler (OpenCL, NVRTC) holds threads and handles a fork must not copy."""
    from tg.runtime.c_compiler import CCompiler

    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods() and \
        isinstance(compiler, CCompiler)  # fmt: skip


def _build_round(cands: list[OptKernel], compiler: Any, workers: int, deadline: float) -> list[tuple[OptKernel, Built]]:
    """Build a round's candidates, `workers` at a time: in forked processes (code generation is Python, so threads
    would take turns) where that is safe, else in threads. Results after `deadline` are dropped."""
    global _round
    out: list[tuple[OptKernel, Built]] = []
    if workers > 1 and len(cands) > 1 and _fork_safe(compiler):
        _round = (cands, compiler)
        try:
            ctx = multiprocessing.get_context("fork")
            # Python 3.12 warns about any fork of a process with threads; the children here only generate code and
            # run the C compiler, touching none of the locks the other threads (the CPU thread pool) hold
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
                pool = concurrent.futures.ProcessPoolExecutor(min(workers, len(cands)), mp_context=ctx)
                futures = [pool.submit(_build_in_worker, i) for i in range(len(cands))]
            with pool:
                for fut in futures:
                    if time.perf_counter() > deadline:
                        break
                    i, built = fut.result()
                    if built is not None:
                        out.append((cands[i], built))
                for fut in futures:
                    fut.cancel()
            return out
        except (BrokenProcessPool, OSError):  # no processes here (limits, sandbox): build in threads
            out = []
        finally:
            _round = ([], None)
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as tpool:
        tfutures = [tpool.submit(_build, c, compiler) for c in cands]
        for c, tfut in zip(cands, tfutures, strict=True):
            if time.perf_counter() > deadline:
                break
            if (built := tfut.result()) is not None:
                out.append((c, built))
        for tfut in tfutures:
            tfut.cancel()
    return out


def beam_search(ast: UOp, renderer: Renderer, width: int, device: str | None = None,
                time_limit: float | None = None) -> list[Opt]:  # fmt: skip
    """The opts of the fastest kernel BEAM search finds for `ast` on `device` (default: the renderer's device)."""
    device = device or renderer.device
    dev = Device[device]
    compiler = dev.compiler
    cfile = _cache_file(ast, renderer, getattr(compiler, "cachekey", "") or "", width)
    if not IGNORE_BEAM_CACHE.value:
        try:
            return _opts_from_json(json.loads(cfile.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    limit = float(BEAM_TIME.value) if time_limit is None else time_limit
    start = time.perf_counter()
    search_end = start + limit * (1 - FINAL_SHARE)  # new rounds stop here; the rest is for the final pick
    timer = _Timer(device)
    k0 = hand_coded_opts(OptKernel(ast, renderer))
    first = _build(k0, compiler)
    if first is None:
        return list(k0.applied)
    best_t = heuristic_t = timer(first, first.lib, float("inf"))
    beam: list[tuple[float, OptKernel, Built]] = [(best_t, k0, first)]
    seen = {k0.ast.key}
    bar = _progress(first.name)
    workers = max(1, getattr(renderer, "thread_max", 1))
    rounds = 0
    while time.perf_counter() < search_end:
        rounds += 1
        # round 1 also tries other register tiles from scratch (matmul-like kernels): children of the heuristic
        # kernel can only add opts to its tile
        variants = matmul_tile_variants(OptKernel(ast, renderer)) if rounds == 1 else []
        cands = [v for v in variants if v.ast.key not in seen]
        seen.update(v.ast.key for v in cands)
        for _, k, _ in beam:
            for c in legal_children(k):
                if c.ast.key not in seen and _fits_registers(c):
                    seen.add(c.ast.key)
                    cands.append(c)
        if not cands:
            break
        # build the whole round first, then time with the compilers idle: a compile running on another core while
        # a threaded kernel is timed would slow that kernel down and distort the ranking
        built = _build_round(cands, compiler, workers, search_end)
        timed: list[tuple[float, OptKernel, Built]] = []
        for c, b in built:
            if time.perf_counter() > search_end:
                break
            tm = timer.candidate(b, best_t)
            timed.append((tm, c, b))
            best_t = min(best_t, tm)
            if bar is not None:
                bar.set_postfix_str(f"round {rounds} {len(timed)}/{len(cands)} best {best_t * 1e3:.2f} ms "
                                    f"{time.perf_counter() - start:.1f}/{limit:.0f} s")  # fmt: skip
                bar.update(1)
        old_best = beam[0][0]
        beam = sorted(beam + timed, key=lambda x: x[0])[:width]
        if beam[0][0] > old_best * 0.99:
            break
    if bar is not None:
        bar.close()
    # the final pick: the beam and the heuristic kernel timed again, interleaved (one noisy lucky run above must not
    # decide), each as the benchmark runs it: warm, on the same buffers and thread pool; as many rounds as fit
    finalists = [(k0, first)] + [(k, b) for _, k, b in beam if k is not k0]
    lap = time.perf_counter()
    final = [timer(b, b.lib, float("inf"), runs=1) for _, b in finalists]  # warm again (caches, pool)
    lap = time.perf_counter() - lap
    left = start + limit - time.perf_counter()
    for _ in range(min(FINAL_ROUNDS - 1, max(1, int(left / max(lap, 1e-6))))):
        for i, (_, b) in enumerate(finalists):
            final[i] = min(final[i], timer(b, b.lib, float("inf"), runs=1, warmup=False))
    pick = min(range(len(finalists)), key=lambda i: final[i])
    if final[pick] > final[0] * (1 - MIN_GAIN):  # within timing noise of the heuristic kernel: keep the heuristic
        pick = 0
    best = list(finalists[pick][0].applied)
    last_search.update(heuristic_s=final[0], best_s=final[pick], rounds=rounds, opts=best,
                       seconds=time.perf_counter() - start)  # fmt: skip
    if DEBUG >= 1:
        print(
            f"BEAM {first.name}: {final[pick] * 1e3:.3f} ms (heuristic {final[0] * 1e3:.3f} ms, first timing "
            f"{heuristic_t * 1e3:.3f} ms) after {rounds} rounds, {time.perf_counter() - start:.1f} s: "
            f"{' '.join(str(o) for o in best)}",
            file=sys.stderr,
        )
    try:
        cfile.parent.mkdir(parents=True, exist_ok=True)
        cfile.write_text(json.dumps(_opts_to_json(best)))
    except OSError:
        pass
    return best


def _progress(name: str) -> Any:
    if not (DEBUG >= 1 or BEAM_PROGRESS.value):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(desc=f"BEAM {name}", unit="kernel", file=sys.stderr, leave=False)


def beam_opts(ast: UOp, renderer: Renderer) -> list[Opt] | None:
    """The opts the engine passes to `get_program` for `ast`: BEAM search's pick when `BEAM>=1`, else None (codegen
    decides: the kernel's own `opts_to_apply`, the heuristics, or none under NOOPT).

    Only the CPU is searched (PYTHON and the GPU backends keep the heuristics); a kernel that replays recorded opts,
    or has no axis to optimise, is never searched."""
    if BEAM < 1 or NOOPT or renderer.device != "CPU":
        return None
    if isinstance(ast.arg, KernelInfo) and ast.arg.opts_to_apply is not None:
        return None
    if not OptKernel(ast, renderer).ranges:
        return None
    return beam_search(ast, renderer, int(BEAM))
