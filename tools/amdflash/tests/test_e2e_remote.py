"""Scenario 19: the real `amdflash` console script, as a subprocess, against a remote PCI server serving the simulator.

The in-thread server (tg.drivers' RemoteServerThread) keeps the board in this process, so its state can be inspected;
a second test starts the real `tg-pci-server` process with `--mock-model amdflash.sim:served_device`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdflash.sim import SimConfig, SimulatedNavi31, assert_registers_restored, build_ifwi, make_sim_device
from amdflash.sim.harness import never_happen
from tg.drivers.mock import RemoteServerThread

WARNING = "warning: raw ROM_SW access over remote has not been validated on hardware"


def amdflash_command() -> list[str]:
    script = Path(sys.executable).parent / "amdflash"
    if script.exists():
        return [str(script)]
    found = shutil.which("amdflash")
    return [found] if found else [sys.executable, "-m", "amdflash"]


def run(address: str | dict[str, str], *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The console script with `REMOTE=address` (or the environment `address` names: REMOTE and its token)."""
    env = {**os.environ, **(address if isinstance(address, dict) else {"REMOTE": address})}
    return subprocess.run(
        [*amdflash_command(), "--transport", "remote", *argv], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def served() -> Iterator[tuple[SimulatedNavi31, dict[str, str]]]:
    """The board and the client environment: REMOTE and TG_REMOTE_TOKEN of the in-thread server."""
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1)))
    with RemoteServerThread(device=make_sim_device(board, lock=False)) as srv:
        yield board, srv.env


def test_remote_info_read_flash_probe(served: tuple[SimulatedNavi31, dict[str, str]], tmp_path: Path) -> None:
    board, address = served
    image1, image2 = build_ifwi(1), build_ifwi(2)
    p = run(address, "romsw", "info")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0].startswith("JEDEC capture: c86015c8")
    assert p.stderr.strip() == WARNING
    p = run(address, "romsw", "read", "0", "0x400")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == image1[:0x400].hex()
    b = tmp_path / "b.bin"
    b.write_bytes(image2)
    p = run(address, "romsw", "flash", str(b), "--start-sector", "0", "--sector-count", "4", "--yes")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len([line for line in lines if line.startswith("OK sector ")]) == 4
    assert lines[-1] == "flash complete: sectors 0..3 verified"
    assert board.flash[: 4 * 0x1000] == image2[: 4 * 0x1000]
    assert board.flash[4 * 0x1000 :] == image1[4 * 0x1000 :]
    assert board.erase_count == 4
    p = run(address, "fw", "probe")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[3] == "transfer_type: error=0x0 response=0x1"
    assert_registers_restored(board)
    never_happen(board)


def test_remote_list_and_refusal(served: tuple[SimulatedNavi31, dict[str, str]]) -> None:
    board, address = served
    p = run(address, "list")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("0 remote remote:") and lines[0].endswith("(0x1002:0x744c)")
    p = run(address, "--device", "1", "fw", "probe")
    assert (p.returncode, p.stderr.strip()) == (1, "error: device index 1 out of range (found 1)")
    assert board.psp_log == []


@pytest.mark.slow
def test_remote_full_dump(served: tuple[SimulatedNavi31, dict[str, str]], tmp_path: Path) -> None:
    board, address = served
    out = tmp_path / "a.bin"
    p = run(address, "romsw", "dump", str(out), timeout=900)
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == bytes(board.flash)
    assert p.stdout.splitlines()[-1] == f"wrote {out} sha256={hashlib.sha256(bytes(board.flash)).hexdigest()}"
    never_happen(board)


def test_real_pci_server_process_with_mock_model(tmp_path: Path) -> None:
    pytest.importorskip("tg_pci_server", reason="the tg-pci-server distribution is not installed")
    env = {**os.environ, "AMDFLASH_SIM_SEED": "3"}
    server = subprocess.Popen(
        [sys.executable, "-m", "tg_pci_server", "--mock-model", "amdflash.sim:served_device", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline().strip()  # no token given: the server makes one in the user's token file
        assert first.startswith("token file: "), (first, server.stderr.read() if server.poll() is not None else "")
        second = server.stdout.readline().strip()
        assert second.startswith("listening on "), second
        address = second.removeprefix("listening on ")
        p = run(address, "romsw", "info")  # the client (same user, same XDG_CONFIG_HOME) finds that token file
        assert p.returncode == 0, p.stderr
        assert "CMP=clear" in p.stdout
        p = run(address, "romsw", "read", "0", "0x100")
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == build_ifwi(3)[:0x100].hex()
        p = run(address, "fw", "probe")
        assert p.returncode == 0, p.stderr
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()
