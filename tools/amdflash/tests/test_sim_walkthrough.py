"""The `--sim` walk-through across separate invocations: state persists in the state file, written atomically."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amdflash import regs
from amdflash.cli import main
from amdflash.sim import build_ifwi
from amdflash.sim.harness import Result
from amdflash.sim.state import load_board


def run(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return Result(code, out.getvalue(), err.getvalue())


def test_walkthrough_in_process(tmp_path: Path) -> None:
    state = str(tmp_path / "board.bin")
    sim = ("--sim", "--sim-state", state)
    r = run(*sim, "romsw", "info")
    assert r.code == 0 and r.lines[0].startswith("JEDEC capture: c86015c8")
    assert os.path.exists(state)
    image = build_ifwi(2)
    (tmp_path / "new.bin").write_bytes(image)
    r = run(*sim, "romsw", "flash", str(tmp_path / "new.bin"), "--sector-count", "4", "--yes")
    assert r.code == 0, r.err
    r = run(*sim, "romsw", "read", "0", "0x10")
    assert r.lines == [image[:0x10].hex()]
    target = tmp_path / "target.bin"
    target.write_bytes(image[: 4 * 0x1000] + b"\xff" * (0x200000 - 4 * 0x1000))
    r = run(*sim, "romsw", "verify", str(target))
    assert r.lines == [f"verified 0x200000 bytes sha256={hashlib.sha256(target.read_bytes()).hexdigest()}"]
    target.unlink()
    board = load_board(state)
    assert board.flash[: 4 * 0x1000] == image[: 4 * 0x1000]
    assert board.flash[4 * 0x1000 :] == b"\xff" * (0x200000 - 4 * 0x1000)
    # the documented persistent ROM_CNTL change survives between invocations too
    assert board.regs[regs.ROM_CNTL] == (0x07000002 & 0xE0FFFFFF) | 1 << 28 | 8 << 24 | 1
    assert sorted(os.listdir(tmp_path)) == ["board.bin", "board.bin.backups", "new.bin"]
    backups = sorted(os.listdir(tmp_path / "board.bin.backups"))  # the replaced sectors, and the finished journal
    assert len(backups) == 2 and backups[0].startswith("backup-") and backups[1].startswith("journal-")
    assert os.path.getsize(tmp_path / "board.bin.backups" / backups[0]) == 4 * 0x1000
    r = run(*sim, "list")
    assert r.lines == ["0 sim sim:0 (0x1002:0x744c)"]
    r = run(*sim, "--device", "1", "romsw", "info")
    assert (r.code, r.err.strip()) == (1, "error: device index 1 out of range (found 1)")


def test_walkthrough_default_state_in_cache_dir(tmp_path: Path, monkeypatch: object) -> None:
    # XDG_CACHE_HOME is pointed at a temporary directory by the autouse fixture
    r = run("--sim", "romsw", "info")
    assert r.code == 0
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "amdflash" / "sim-board.bin"
    assert cache.exists()


def test_console_entry_point_subprocess(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "amdflash"]
    p = subprocess.run([*cmd, "--sim", "romsw", "info"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[1] == "SR1/SR2/SR3: 00/00/00  CMP=clear"
    p = subprocess.run([*cmd, "fw", "live-flash", "x.bin"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert p.stderr.startswith("error: firmware writes are disabled")
    p = subprocess.run([*cmd, "romsw", "bogus"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2


@pytest.mark.slow
def test_walkthrough_subprocesses(tmp_path: Path) -> None:
    """info -> flash (a few sectors of a full image) -> dump -> verify, each its own `python -m amdflash` process."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    image = build_ifwi(7)
    flash_all_but_tail = tmp_path / "target.bin"
    flash_all_but_tail.write_bytes(image[: 2 * 0x1000] + b"\xff" * (0x200000 - 2 * 0x1000))

    def amdflash(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "amdflash", "--sim", *argv], env=env, capture_output=True, text=True, timeout=120
        )

    p = amdflash("romsw", "info")
    assert p.returncode == 0, p.stderr
    assert "CMP=clear" in p.stdout
    p = amdflash("romsw", "flash", str(flash_all_but_tail), "--sector-count", "2")
    assert (p.returncode, p.stderr.strip()) == (1, "error: refusing to write without --yes")
    p = amdflash("romsw", "flash", str(flash_all_but_tail), "--sector-count", "2", "--yes")
    assert (p.returncode, p.stdout) == (1, "")  # blank from 0x2000 on: not a valid IFWI, nothing is written
    assert p.stderr.strip() == "error: invalid IFWI image: item 0x2: invalid PSP directory at 0x2000"
    p = amdflash("romsw", "flash", str(flash_all_but_tail), "--sector-count", "2", "--skip-image-check", "--yes")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "flash complete: sectors 0..1 verified"
    p = amdflash("romsw", "verify", str(flash_all_but_tail))
    assert p.returncode == 0, p.stderr
    digest = hashlib.sha256(flash_all_but_tail.read_bytes()).hexdigest()
    assert p.stdout.strip() == f"verified 0x200000 bytes sha256={digest}"
    p = amdflash("fw", "probe")
    assert p.returncode == 0 and "transfer_type: error=0x0 response=0x1" in p.stdout


def test_concurrent_sim_invocation_is_refused(tmp_path: Path) -> None:
    import hashlib as _hashlib

    from tg.drivers.lock import acquire_device_lock, lock_name

    state = str(tmp_path / "board.bin")
    tag = _hashlib.sha256(os.path.abspath(state).encode()).hexdigest()[:12]
    with acquire_device_lock(lock_name("AM", f"sim-{tag}")):
        r = run("--sim", "--sim-state", state, "romsw", "info")
    assert r.code == 1
    assert r.err.startswith("error: Failed to acquire lock file")
    assert not os.path.exists(state)  # nothing was loaded, so nothing was saved
    assert run("--sim", "--sim-state", state, "romsw", "info").code == 0


# slow: a real signal to a flashing `--sim` process is test_interrupts.py's SIGTERM test by default, the interrupted
# flash, its backup, journal and resume are test_e2e_cli.py's test_interrupted_flash_resumed
@pytest.mark.slow
def test_ctrl_c_during_sim_flash_then_resume(tmp_path: Path) -> None:
    """A real SIGINT in the middle of `romsw flash`: exit 130, resume hint, the state saved, no stray files."""
    import signal

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    image = build_ifwi(8)
    (tmp_path / "new.bin").write_bytes(image)
    cmd = [sys.executable, "-m", "amdflash", "--sim", "romsw", "flash", str(tmp_path / "new.bin"), "--yes"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    done = [proc.stdout.readline() for _ in range(3)]
    assert all(line.startswith("OK sector ") for line in done), done
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    backup, hint, last = err.strip().splitlines()[-3:]
    assert last == "error: interrupted"
    assert backup.startswith("hint: the original contents of the sectors being replaced are in ")
    assert hint.startswith("hint: flash stopped at sector ")
    stopped = int(hint.split()[5].rstrip(";"))
    assert stopped >= 3
    assert hint.endswith(f"resume with --start-sector {stopped} --sector-count {512 - stopped} --yes")
    state = tmp_path / "cache" / "amdflash" / "sim-board.bin"
    board = load_board(state)
    assert board.flash[: stopped * 0x1000] == image[: stopped * 0x1000]
    assert sorted(os.listdir(state.parent)) == ["sim-board.bin", "sim-board.bin.backups"]  # no stray temp files
    assert "journal.jsonl" in os.listdir(state.parent / "sim-board.bin.backups")  # unfinished: resumable
    r = run(
        "--sim",
        "--sim-state",
        str(state),
        "romsw",
        "flash",
        str(tmp_path / "new.bin"),
        "--start-sector",
        str(stopped),
        "--sector-count",
        "2",
        "--yes",
    )
    assert r.code == 0, r.err
    assert r.err.startswith("resuming the unfinished flash recorded in ")
    assert load_board(state).flash[: (stopped + 2) * 0x1000] == image[: (stopped + 2) * 0x1000]


def readme_sim_walkthrough() -> list[str]:
    """The commands of the README's `--sim` walk-through block, without their comments."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    section = text.split("## Trying it without hardware", 1)[1]
    block = section.split("```", 2)[1]
    return [line.split("   #")[0].strip() for line in block.strip().splitlines()]


@pytest.mark.slow
def test_readme_walkthrough_verbatim(tmp_path: Path) -> None:
    """Every command of the README's `--sim` block, as written, each in its own process: the full 2 MiB flows."""
    commands = readme_sim_walkthrough()
    expected_codes = [0, 0, 0, 1, 0, 0, 1, 0, 0, 0]
    assert len(commands) == len(expected_codes), commands
    state = tmp_path / "board.bin"
    amdflash = f"{sys.executable} -m amdflash --sim --sim-state {state}"
    results = []
    for command, code in zip(commands, expected_codes, strict=True):
        shell = command.replace("amdflash --sim", amdflash).replace("python -c", f"{sys.executable} -c")
        p = subprocess.run(shell, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert p.returncode == code, (command, p.stderr)
        results.append(p)
    image = build_ifwi(1)
    assert (tmp_path / "new.bin").read_bytes() == image
    assert (tmp_path / "before.bin").read_bytes() == b"\xff" * 0x200000
    assert results[3].stderr.strip() == "error: refusing to write without --yes"
    ok = [line for line in results[4].stdout.splitlines() if line.startswith("OK sector ")]
    assert len(ok) == 512
    assert results[4].stdout.splitlines()[-1] == "flash complete: sectors 0..511 verified"
    digest = hashlib.sha256(image).hexdigest()
    assert results[5].stdout.strip() == f"verified 0x200000 bytes sha256={digest}"
    assert results[6].stderr.strip() == "error: verify mismatch at 0x0: flash=aa image=ff"
    assert (tmp_path / "raw.bin").read_bytes() == image
    assert results[8].stdout.splitlines()[3] == "transfer_type: error=0x0 response=0x1"
    steps = [line for line in results[9].stdout.splitlines() if line.startswith("IFWI step ")]
    assert len(steps) == 18
    assert sorted(os.listdir(tmp_path)) == ["before.bin", "board.bin", "board.bin.backups", "new.bin", "raw.bin"]
    backups = sorted(os.listdir(tmp_path / "board.bin.backups"))  # the 512 replaced (blank) sectors, the journal
    assert [name.split("-")[0] for name in backups] == ["backup", "journal"]
