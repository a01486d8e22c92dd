"""Persistence of the `--sim` board between CLI invocations: flash contents, status registers and ROM registers.

File format: one line `AMDFLASH-SIM 1 <json>\n` followed by the raw 2 MiB flash. Writes are atomic.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from amdflash.ifwi import IFWI_MAGIC
from amdflash.sim.board import PLAIN_REGS, SimulatedNavi31
from amdflash.sim.config import FLASH_SIZE, SimConfig
from amdflash.util import atomic_write

MAGIC = b"AMDFLASH-SIM 1 "


def boot_psp_mode(flash: bytes) -> str:
    """How the PSP comes out of a power-up with this flash: booted ("early") only from an image with the IFWI magic;
    with a blank or corrupt flash its boot loader stalls ("not_ready"): the mailbox never answers, the raw path works.

    Every `--sim` invocation is such a power-up, so the simulator agrees with the README's table of access paths.
    """
    return "early" if bytes(flash[:4]) == IFWI_MAGIC else "not_ready"


def default_state_path() -> Path:
    """`$XDG_CACHE_HOME/amdflash/sim-board.bin`, or `~/.cache/amdflash/sim-board.bin`."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "amdflash" / "sim-board.bin"


def load_board(path: str | os.PathLike[str]) -> SimulatedNavi31:
    """The board saved at `path`, or a fresh default board (blank flash) when the file does not exist."""
    p = Path(path)
    if not p.exists():
        return SimulatedNavi31(SimConfig(psp=boot_psp_mode(SimConfig().flash)))
    blob = p.read_bytes()
    newline = blob.find(b"\n")
    if not blob.startswith(MAGIC) or newline < 0:
        raise ValueError(f"{p} is not an amdflash simulator state file")
    try:
        meta = json.loads(blob[len(MAGIC) : newline])
    except ValueError as exc:
        raise ValueError(f"{p} is not an amdflash simulator state file: {exc}") from exc
    flash = blob[newline + 1 :]
    if len(flash) != FLASH_SIZE:
        raise ValueError(f"{p} is truncated: flash holds {len(flash):#x} bytes, expected {FLASH_SIZE:#x}")
    initial = {int(k): int(v) for k, v in meta.get("initial_regs", {}).items()}
    sr1, sr2, sr3 = (int(meta.get(name, 0)) for name in ("sr1", "sr2", "sr3"))
    config = SimConfig(flash=flash, sr1=sr1, sr2=sr2, sr3=sr3, psp=boot_psp_mode(flash))
    if initial:
        config.initial_regs = initial
    board = SimulatedNavi31(config)
    for k, v in meta.get("regs", {}).items():
        if int(k) in PLAIN_REGS:
            board.regs[int(k)] = int(v)
    return board


def save_board(board: SimulatedNavi31, path: str | os.PathLike[str]) -> None:
    """Save the board's persistent state atomically to `path`, creating its directory."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "sr1": board.sr1,
        "sr2": board.sr2,
        "sr3": board.sr3,
        "initial_regs": {str(k): v for k, v in board.initial_regs.items()},
        "regs": {str(k): board.regs[k] for k in PLAIN_REGS},
    }
    atomic_write(p, MAGIC + json.dumps(meta, sort_keys=True).encode() + b"\n" + bytes(board.flash))
