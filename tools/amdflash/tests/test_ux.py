"""What a new user meets: install hints, file and size errors, global options everywhere, progress on stderr."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from amdflash import cli
from amdflash.progress import Progress
from amdflash.sim import SimConfig, SimulatedNavi31, build_ifwi
from amdflash.sim.harness import FAST_SETTINGS, PROGRESS_LINE, Result, SimOpener, run_cli

README = Path(__file__).resolve().parents[1] / "README.md"


def run(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    return Result(cli.main(list(argv), stdout=out, stderr=err), out.getvalue(), err.getvalue())


def test_missing_libusb_hint_mentions_sim(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.drivers.errors import libusb_missing_error
    from tg.drivers.usb import USB3

    def no_libusb(vendor: int, product: int) -> list[object]:
        raise libusb_missing_error(FileNotFoundError(2, "cannot find a suitable libusb-1.0"))

    monkeypatch.setattr(USB3, "list_devices", no_libusb)
    r = run("romsw", "info")
    assert r.code == 1
    assert r.err.startswith("error: libusb-1.0 not found; install libusb-1.0-0 (Debian/Ubuntu)")
    assert r.err.rstrip().endswith("; to try amdflash without hardware, add --sim")


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (("romsw", "verify", "{path}"), "image"),
        (("romsw", "flash", "{path}", "--yes"), "image"),
        (("fw", "ifwi-all", "{path}", "--yes"), "IFWI image"),
    ],
)
def test_missing_file_and_directory_are_named(tmp_path: Path, argv: tuple[str, ...], what: str) -> None:
    board = SimulatedNavi31()
    spy = SimOpener(board)
    missing = tmp_path / "nope.bin"
    r = run_cli(spy, *(a.format(path=missing) for a in argv))
    assert (r.code, r.err.strip()) == (1, f"error: {what} file not found: {missing}")
    r = run_cli(spy, *(a.format(path=tmp_path) for a in argv))
    assert (r.code, r.err.strip()) == (1, f"error: {what} path is a directory: {tmp_path}")
    assert spy.calls == []


def test_leaf_commands_accept_and_list_the_global_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = str(tmp_path / "s.bin")
    r = run("romsw", "info", "--sim", "--sim-state", state)
    assert r.code == 0, r.err
    assert r.lines[0].startswith("JEDEC capture: c86015c8")
    r = run("romsw", "read", "0", "4", "--sim", "--sim-state", state, "--prescale", "4")
    assert (r.code, r.lines) == (0, ["ffffffff"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["romsw", "info", "--help"])
    text = capsys.readouterr().out
    for option in ("--device", "--transport", "--verbose", "--sim", "--sim-state", "--prescale"):
        assert option in text, option
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["fw", "probe", "--help"])
    text = capsys.readouterr().out
    assert "--sim-state" in text and "--prescale" not in text  # fw commands have no SPI clock


def test_refusal_without_yes_exits_1_as_documented(tmp_path: Path) -> None:
    r = run_cli(SimulatedNavi31(), "romsw", "flash", str(tmp_path / "any.bin"))
    assert (r.code, r.err.strip()) == (1, "error: refusing to write without --yes")
    text = README.read_text()
    assert "| 1 | operational error (`error: <message>`), including a refusal without `--yes`" in text


def test_remote_without_remote_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REMOTE", raising=False)
    r = run("--transport", "remote", "romsw", "info")
    assert r.code == 1
    assert "REMOTE environment variable, which is not set: REMOTE=host:port" in r.err


def test_unusable_sim_state_fails_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = tmp_path / "new.bin"
    image.write_bytes(build_ifwi(1))
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    for state, message in (
        (blocker / "state.bin", f"--sim-state directory {blocker} is not a directory"),
        (tmp_path, f"--sim-state path is a directory: {tmp_path}"),
    ):
        r = run("--sim", "--sim-state", str(state), "romsw", "flash", str(image), "--sector-count", "1", "--yes")
        assert (r.code, r.out, r.err.strip()) == (1, "", f"error: {message}")
    # an unwritable directory (simulated: the tests may run as root, for whom every directory is writable)
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(locked) else real_access(p, mode))
    r = run("--sim", "--sim-state", str(locked / "s.bin"), "romsw", "dump", str(tmp_path / "out.bin"))
    assert r.code == 1 and r.out == ""
    assert r.err.strip() == f"error: --sim-state directory is not writable: {locked} (the state could not be saved)"
    assert not (tmp_path / "out.bin").exists()


@pytest.mark.slow  # a whole simulated flash; the short CLI flows run by default
def test_blank_sim_flash_means_a_stalled_psp(tmp_path: Path) -> None:
    """README table: the PSP mailbox answers only after the PSP booted; a blank flash stalls its boot loader."""
    sim = ("--sim", "--sim-state", str(tmp_path / "s.bin"))
    r = run(*sim, "fw", "probe")
    assert r.code == 1
    assert r.err.splitlines()[0].startswith("hint: the PSP has not booted (as with an empty or corrupt flash")
    image = tmp_path / "new.bin"
    image.write_bytes(build_ifwi(1))
    assert run(*sim, "romsw", "info").code == 0  # while the raw path works
    assert run(*sim, "romsw", "flash", str(image), "--yes").code == 0
    r = run(*sim, "fw", "probe")  # the next power-up boots the valid image
    assert (r.code, r.lines[3]) == (0, "transfer_type: error=0x0 response=0x1")


# --- progress: a tqdm bar on a terminal, plain lines about every 10% otherwise; stdout unchanged ---------------------
class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def flash_4(stderr: io.StringIO, tmp_path: Path) -> tuple[int, str, str]:
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1)))
    image = tmp_path / "b.bin"
    image.write_bytes(build_ifwi(2))
    out = io.StringIO()
    argv = ["romsw", "flash", str(image), "--sector-count", "4", "--yes"]
    code = cli.main(argv, opener=SimOpener(board), stdout=out, stderr=stderr, settings=FAST_SETTINGS)
    return code, out.getvalue(), stderr.getvalue()


def test_progress_in_pipe_mode_is_plain_lines(tmp_path: Path) -> None:
    code, out, err = flash_4(io.StringIO(), tmp_path)
    assert code == 0
    assert [line.split(" elapsed=")[0] for line in out.splitlines()[:-2]] == [
        f"OK sector {n:03d}/511 @{n * 0x1000:#07x}" for n in range(4)
    ]
    assert out.splitlines()[-2].startswith("backup of the 4 replaced sectors: ")
    lines = err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        *(f"read: {p}%" for p in (25, 50, 75, 100)),  # the sectors are read first, to find those that change
        *(f"flash: {p}%" for p in (25, 50, 75, 100)),
    ]
    assert all(PROGRESS_LINE.match(line) for line in lines)
    assert lines[-1].startswith("flash: 100% (16.0 KiB/16.0 KiB, ") and lines[-1].endswith("/s)")


def test_progress_on_a_terminal_is_a_tqdm_bar(tmp_path: Path) -> None:
    code, out, err = flash_4(TTY(), tmp_path)
    assert code == 0
    assert out.splitlines()[-1] == "flash complete: sectors 0..3 verified"
    assert "\r" in err and "flash: 100%" in err and "16.0k/16.0k" in err  # a redrawn bar with bytes and rate
    assert "B/s" in err
    assert not [line for line in err.splitlines() if PROGRESS_LINE.match(line)]


def test_plain_progress_prints_about_every_ten_percent() -> None:
    stream = io.StringIO()
    with Progress(1000, "dump", stream) as bar:
        for _ in range(100):
            bar.update(10)
    assert [line.split("%")[0] for line in stream.getvalue().splitlines()] == [f"dump: {p}" for p in range(10, 101, 10)]
    silent = Progress(10, "x", None)
    silent.update(10)
    assert silent.done == 10


# --- whole-image validation: nothing reaches the flash or the PSP unless the whole image is a valid IFWI -------------
def bad_images() -> dict[str, bytes]:
    import random

    from amdflash.sim import corrupt_sgn, huge_sgn_count

    valid = build_ifwi(3)
    no_ish = bytearray(valid)
    no_ish[0x12018:0x1201C] = (0x300000).to_bytes(4, "little")  # ISH payload size past the end of the image
    return {
        "zeros": bytes(0x200000),
        "all-ff": b"\xff" * 0x200000,
        "random": random.Random(4).randbytes(0x200000),
        "truncated": valid[:0x1FF000],
        "magic-only": valid[:4] + bytes(0x200000 - 4),
        "corrupt-sgn": corrupt_sgn(3),
        "huge-sgn-count": huge_sgn_count(3),
        "ish-beyond-end": bytes(no_ish),
    }


@pytest.mark.parametrize("name", list(bad_images()))
def test_invalid_images_send_nothing(tmp_path: Path, name: str) -> None:
    image = tmp_path / f"{name}.bin"
    image.write_bytes(bad_images()[name])
    for argv in (("romsw", "flash", str(image), "--yes"), ("fw", "ifwi-all", str(image), "--yes")):
        board = SimulatedNavi31(SimConfig(flash=build_ifwi(1)))
        spy = SimOpener(board)
        r = run_cli(spy, *argv)
        assert r.code == 1, (argv, r.err)
        assert r.err.startswith("error: "), r.err
        assert spy.calls == []  # refused before the device is opened
        assert board.transactions == [] and board.psp_log == [] and board.erase_count == 0
        assert board.flash == build_ifwi(1)
