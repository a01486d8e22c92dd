"""Check the RDNA3 decoder on every kernel of a test run: its listing must equal LLVM's, instruction for instruction.

Input: kernel ASTs pickled by tests/plugins/kernel_capture.py (`TG_CAPTURE_KERNELS=asts.pkl pytest -p kernel_capture
...`, any device; under pytest-xdist each worker writes `asts.pkl.<worker>`, all read here). Each distinct AST is
rendered for gfx1100 with the AMD device's optimisations, compiled by llvmlite into a code object and loaded by
tg.runtime.amd.program, exactly as `DEV=NULL:AMD:gfx1100` does (tg.runtime.amd.sim.kernel.EmulatedKernel); the
decoder's listing of the code object (tg.runtime.amd.sim.decode) is compared with LLVM's own assembly of the same
module (`differential.listing_mismatch`: names and operands; whitespace and comments normalised, branch targets as
instruction indices). Nothing runs: a kernel of any size is checked in the time LLVM takes to compile it twice.

    python scripts/check_amd_listings.py asts.pkl [asts.pkl ...] [--arch gfx1100] [--shard K/N]

`--shard K/N` checks the kernels whose index is K modulo N (N processes share the work; the counts add up), `--start
I` those from index I on.

HCQ's submitter programs (`hcq_submit`, recorded by the tests of the HCQ runtime) are host programs: they run on the
host CPU (compiled C) or interpreted, never on the GPU, so they are counted as host programs and not checked.

Prints the counts (kernels, host programs left out, distinct code objects, instructions compared) and each failure;
exit status 1 if any kernel fails to compile or its listing differs.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
import time
from pathlib import Path


def load_asts(paths: list[Path]) -> list:
    """The distinct ASTs of the given pickles and of their per-worker siblings (`<path>.gw0`, ...)."""
    files: list[Path] = []
    for p in paths:
        files += [f for f in [p, *sorted(p.parent.glob(p.name + ".gw*"))] if f.exists() and f not in files]
    if not files:
        raise SystemExit(f"no capture files at {', '.join(map(str, paths))}")
    asts: dict = {}
    for f in files:
        with open(f, "rb") as fh:
            asts.update(dict.fromkeys(pickle.load(fh)))
    return list(asts)


def check_listings(asts: list, arch: str = "gfx1100", progress: bool = True) -> tuple[list[str], dict[str, int]]:
    """(failures, counts) of comparing the decoder's listing with LLVM's for every AST."""
    from tg.runtime.amd.sim.differential import listing_mismatch
    from tg.runtime.amd.sim.kernel import EmulatedKernel
    from tg.runtime.hcq.submit import SUBMITTER_NAME

    failures: list[str] = []
    seen: set[str] = set()
    host = [a for a in asts if getattr(a.arg, "name", None) == SUBMITTER_NAME]
    asts = [a for a in asts if getattr(a.arg, "name", None) != SUBMITTER_NAME]
    counts = {"kernels": len(asts), "host programs": len(host), "code objects": 0, "instructions": 0}
    t0 = time.perf_counter()
    for n, ast in enumerate(asts):
        if progress and n and n % 250 == 0:
            print(f"  {n}/{len(asts)} kernels, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        try:
            kernel = EmulatedKernel(ast, arch=arch)
            sha = hashlib.sha256(kernel.lib).hexdigest()
            if sha in seen:
                continue
            seen.add(sha)
            if (msg := listing_mismatch(kernel)) is not None:
                failures.append(f"{kernel.name}: {msg}")
            counts["code objects"] += 1
            counts["instructions"] += len(kernel.decoder_listing())
        except Exception as e:  # collect every failure, not just the first
            failures.append(f"{type(e).__name__}: {str(e)[:1000]}")
    return failures, counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("asts", type=Path, nargs="+")
    ap.add_argument("--arch", default="gfx1100")
    ap.add_argument("--shard", default="0/1", help="K/N: only the kernels whose index is K modulo N")
    ap.add_argument("--start", type=int, default=0, help="only the kernels from this index on (resuming a run)")
    args = ap.parse_args()
    k, n = (int(x) for x in args.shard.split("/"))
    if not 0 <= k < n:
        ap.error(f"--shard {args.shard}: K must be in 0..N-1")
    everything = load_asts(args.asts)
    asts = [everything[i] for i in range(args.start, len(everything)) if i % n == k]
    t0 = time.perf_counter()
    failures, counts = check_listings(asts, args.arch)
    print(f"decoder listings vs LLVM ({args.arch}, shard {args.shard}): {counts['kernels']} kernels, "
          f"{counts['host programs']} host programs left out, {counts['code objects']} distinct code objects, "
          f"{counts['instructions']:,} instructions compared, {len(failures)} failures "
          f"({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    for msg in failures[:40]:
        print(msg)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
