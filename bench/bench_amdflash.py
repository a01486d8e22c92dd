"""amdflash on the simulated board: `romsw flash`, `romsw dump` and `romsw verify` timed directly (`--sim`) and over
`--transport remote` through a real `tg-pci-server` process on loopback, with the remote/direct ratio.

    python bench/bench_amdflash.py                    # flash 32, 128 and 512 sectors (growth), then dump and verify
    python bench/bench_amdflash.py --sectors 64       # one flash size only
    hatch run bench:amdflash

Times are wall-clock seconds of the CLI entry point run in this process (the server is a separate process). The
machine may be loaded: compare the ratios within one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from amdflash.cli import main
from amdflash.sim import build_ifwi
from tg.drivers.remote.client import clear_connections


def run(argv: list[str]) -> float:
    """Run one amdflash command in-process; return its wall time (fails loudly on a non-zero exit)."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    code = main(argv, stdout=out, stderr=err)
    elapsed = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"amdflash {' '.join(argv)} failed ({code}): {err.getvalue().strip()}")
    return elapsed


def start_server() -> tuple[subprocess.Popen[str], str]:
    script = shutil.which("tg-pci-server", path=os.path.dirname(sys.executable)) or shutil.which("tg-pci-server")
    cmd = [script] if script else [sys.executable, "-m", "tg_pci_server.cli"]
    env = {k: v for k, v in os.environ.items() if k not in ("AMDFLASH_SIM_STATE", "AMDFLASH_SIM_SEED")}
    proc = subprocess.Popen(
        [*cmd, "--port", "0", "--mock-model", "amdflash.sim:served_device"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"tg-pci-server did not start: {line!r}")
    return proc, line.split()[-1]


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sectors", type=int, action="append", help="flash sizes in 4 KiB sectors (repeatable)")
    args = parser.parse_args()
    sizes = args.sectors or [32, 128, 512]
    work = tempfile.mkdtemp(prefix="bench-amdflash-")
    image = os.path.join(work, "new.bin")
    with open(image, "wb") as f:
        f.write(build_ifwi(1))
    state = os.path.join(work, "sim.bin")
    direct = ["--sim", "--sim-state", state]
    remote = ["--transport", "remote"]
    proc, address = start_server()
    os.environ["REMOTE"] = address
    rows: list[tuple[str, float, float]] = []

    def both(name: str, argv: Callable[[list[str], str], list[str]]) -> None:
        d = run(argv(direct, "direct"))
        r = run(argv(remote, "remote"))
        rows.append((name, d, r))
        print(f"{name:<24} direct {d:8.2f} s   remote {r:8.2f} s   remote/direct {r / d:5.2f}x", flush=True)

    try:
        print(f"amdflash on the simulator, direct (--sim) vs remote (tg-pci-server on {address})")
        for n in sizes:
            flash = [image, "--sector-count", str(n), "--yes"]
            both(f"flash {n} sectors", lambda base, side, flash=flash: [*base, "romsw", "flash", *flash])
        # each side verifies against its own dump (the boards may hold a partly flashed image)
        both("dump 2 MiB", lambda base, side: [*base, "romsw", "dump", os.path.join(work, f"{side}.bin")])
        both("verify 2 MiB", lambda base, side: [*base, "romsw", "verify", os.path.join(work, f"{side}.bin")])
    finally:
        clear_connections()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    worst = max(r / d for _, d, r in rows)
    print(f"worst remote/direct ratio: {worst:.2f}x (the target for a 2 MiB flash is at most 3x)")


if __name__ == "__main__":
    main_bench()
