"""Record kernel calls of some tests, then replay chosen ones on the RDNA3 emulator one by one, with their cost.

The differential check of tests/test_amd_emu_diff.py (tg.runtime.amd.sim.differential) replays a whole suite; this
runs it on a few calls at a time, printing per call the emulator's instruction count (wave-instructions and
lane-ops, `emu.stats`), its time and the comparison's outcome: for the few huge kernels of the tg-tensor suite, run
once in the background (`nice`), and for looking at one kernel.

    python scripts/emu_replay.py capture calls.pkl TEST [TEST...]      record (pytest on the CPU, not slow/torch)
    python scripts/emu_replay.py replay calls.pkl [--name REGEX] [--min-bytes N]

Exit status 1 if any replayed call mismatches.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def capture(out: Path, tests: list[str], dev: str) -> int:
    env = {**os.environ, "TG_CAPTURE_CALLS": str(out), "DEV": dev}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "plugins"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "kernel_calls", "-p", "no:randomly", "-p", "no:xdist", "-m",
           "not slow and not torch", *tests]  # fmt: skip
    rc = subprocess.run(cmd, env=env, cwd=ROOT, check=False).returncode
    with open(out, "rb") as f:
        calls = pickle.load(f)
    print(f"{len(calls['records'])} calls recorded ({calls['skipped']} left out for over 1 MiB); pytest exit {rc}")
    return 0


def replay_some(path: Path, name: str, min_bytes: int) -> int:
    from tg.runtime.amd.sim import emu
    from tg.runtime.amd.sim.differential import replay

    with open(path, "rb") as f:
        records = pickle.load(f)["records"]
    chosen = [r for r in records if re.search(name, r.name) and sum(map(len, r.before)) >= min_bytes]
    print(f"{len(chosen)} of {len(records)} calls chosen", flush=True)
    failed = 0
    for rec in chosen:
        emu.stats.update(instructions=0, lane_ops=0)
        t0, c0 = time.perf_counter(), time.process_time()
        failures, counts = replay([rec])
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        failed += bool(failures)
        print(f"{rec.name} ({sum(map(len, rec.before))} bytes of buffers): {emu.stats['instructions']:,} "
              f"wave-instructions, {emu.stats['lane_ops']:,} lane-ops; {wall:.0f} s wall, {cpu:.0f} s CPU (emulator "
              f"and PYTHON device); {'MISMATCH' if failures else 'ok'} {dict(counts)}", flush=True)  # fmt: skip
        for msg in failures:
            print("  " + msg, flush=True)
    print(f"{len(chosen) - failed} of {len(chosen)} calls match")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("out", type=Path)
    c.add_argument("tests", nargs="+")
    c.add_argument("--dev", default="CPU")
    r = sub.add_parser("replay")
    r.add_argument("calls", type=Path)
    r.add_argument("--name", default="", help="only kernels whose name matches this regular expression")
    r.add_argument("--min-bytes", type=int, default=0, help="only calls with at least this many bytes of buffers")
    args = ap.parse_args()
    if args.cmd == "capture":
        return capture(args.out, args.tests, args.dev)
    return replay_some(args.calls, args.name, args.min_bytes)


if __name__ == "__main__":
    sys.exit(main())
