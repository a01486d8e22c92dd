"""The `amdflash` command line: argument parsing, dispatch, and the mapping of errors to exit codes."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from amdflash import commands, flashing, regs
from amdflash.__about__ import __version__
from amdflash.device import TRANSPORTS, list_candidates, open_gpu
from amdflash.romsw import DEFAULT_PRESCALE
from amdflash.settings import Settings
from amdflash.util import parse_int
from tg.drivers.interrupts import DEFERRED_SIGNALS, critical, signal_guard

EPILOG = """\
safety: nothing is erased, programmed or streamed without --yes; images must be exactly 2 MiB and valid IFWIs
(checked whole before anything is written), with right checksums and signature blobs, built for this board (their
VBIOS against the board's ids and the flash's VBIOS; --force overrides); romsw flash --dry-run shows what would
change; the original contents of every sector about to change are backed up first, with a journal that makes an
interrupted flash resumable and `romsw restore` possible; every written sector is read back and compared; Ctrl-C
lets the current hardware step finish and restore its registers (exit 130). Progress goes to stderr, results to
stdout. Side effect: every romsw command writes ROM_CNTL once (prescale override, prescaler, bit 0) and leaves that
value in place until the board is reset. Try it without hardware with --sim.
"""


def _int(text: str) -> int:
    try:
        return parse_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None


def _add_globals(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # Below the top level every default is SUPPRESS, so an option given after the group name overrides the top-level
    # value and an option not given there keeps it.
    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument("--device", type=int, default=default(0), metavar="N", help="candidate index (default 0)")
    parser.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default=default(None),
        help="device access path (default: usb for romsw, auto for fw; remote is never part of auto)",
    )
    parser.add_argument("--verbose", action="store_true", default=default(False), help="tracebacks and transport logs")
    parser.add_argument(
        "--sim", action="store_true", default=default(False), help="use the simulated Navi31 board (no hardware)"
    )
    parser.add_argument(
        "--sim-state",
        default=default(None),
        metavar="PATH",
        help="simulator state file (default $XDG_CACHE_HOME/amdflash/sim-board.bin or ~/.cache/amdflash/...)",
    )


def _add_backup_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backup-dir",
        metavar="DIR",
        default=None,
        help="where the original contents of replaced sectors and the flash journal go (default "
        "$AMDFLASH_BACKUP_DIR, else $XDG_STATE_HOME/amdflash/backups; with --sim: next to the state file)",
    )


def _add_prescale(parser: argparse.ArgumentParser, *, top: bool) -> None:
    parser.add_argument(
        "--prescale",
        type=int,
        default=DEFAULT_PRESCALE if top else argparse.SUPPRESS,
        metavar="P",
        help="SPI clock prescaler 0..15 (romsw only, default 8); written to ROM_CNTL and left there",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `amdflash`."""
    parser = argparse.ArgumentParser(
        prog="amdflash",
        description="SPI flash recovery for Navi31 boards (GD25LQ16E) over USB, native PCI or a remote PCI server.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"amdflash {__version__}")
    _add_globals(parser, top=True)
    _add_prescale(parser, top=True)
    groups = parser.add_subparsers(dest="group", required=True, metavar="{list,romsw,fw}")

    p = groups.add_parser("list", help="list candidate devices without opening them")
    _add_globals(p, top=False)
    p.set_defaults(func=None)

    romsw = groups.add_parser(
        "romsw",
        help="raw SPI access through the ROM_SW engine (only while the PSP boot loader is stalled)",
        description="Raw SPI access through the SMUIO ROM_SW engine. Works only while an empty or corrupt flash has "
        "stalled the PSP boot loader. Side effect: ROM_CNTL is written once (override bit 28, prescaler bits 27:24, "
        "bit 0) and not restored.",
    )
    _add_globals(romsw, top=False)
    _add_prescale(romsw, top=False)
    rs = romsw.add_subparsers(dest="command", required=True)

    def leaf(subparsers: Any, name: str, *, prescale: bool, **kw: Any) -> argparse.ArgumentParser:
        # every leaf accepts the global options too (`amdflash romsw info --sim`), and its --help lists them
        p = subparsers.add_parser(name, **kw)
        _add_globals(p, top=False)
        if prescale:
            _add_prescale(p, top=False)
        return p

    p = leaf(rs, "info", prescale=True, help="JEDEC id, status registers, SFDP header")
    p.set_defaults(func=commands.romsw_info)
    p = leaf(rs, "read", prescale=True, help="read SIZE bytes at ADDRESS (hex line, or -o file)")
    p.add_argument("address", type=_int, metavar="ADDRESS", help="flash byte address (0x..., decimal, ...)")
    p.add_argument("size", type=_int, metavar="SIZE", help="number of bytes")
    p.add_argument("-o", "--output", metavar="OUTPUT", help="write the bytes to OUTPUT instead of printing hex")
    p.set_defaults(func=commands.romsw_read)
    p = leaf(rs, "dump", prescale=True, help="dump the whole 2 MiB flash to OUTPUT (atomically)")
    p.add_argument("output", metavar="OUTPUT")
    p.set_defaults(func=commands.romsw_dump)
    p = leaf(rs, "verify", prescale=True, help="compare the flash with a 2 MiB IMAGE")
    p.add_argument("image", metavar="IMAGE", help="exactly 0x200000 bytes")
    p.set_defaults(func=commands.romsw_verify)
    p = leaf(
        rs,
        "flash",
        prescale=True,
        help="erase, program and verify sectors from a 2 MiB IMAGE (needs --yes)",
        description="Erase, program and read back each 4 KiB sector of the range. An interrupted flash prints the "
        "--start-sector/--sector-count to resume with; any range can be rewritten independently.",
    )
    p.add_argument("image", metavar="IMAGE", help="exactly 0x200000 bytes")
    p.add_argument("--start-sector", type=_int, default=None, metavar="S", help="first 4 KiB sector (default 0)")
    p.add_argument("--sector-count", type=_int, default=None, metavar="C", help="sectors to write (default: to end)")
    p.add_argument("--clear-cmp", action="store_true", help="clear SR2.CMP (only that bit) if it protects the array")
    p.add_argument(
        "--skip-image-check",
        action="store_true",
        help="write an image that is not a valid IFWI (e.g. to blank the chip); by default the whole image is checked",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write an image that fails its checksums, signature-blob or board-identity checks (they are refused "
        "by default)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check everything and report which sectors would change; erase, program and back up nothing",
    )
    _add_backup_dir(p)
    p.add_argument("--yes", action="store_true", help="really erase and program")
    p.set_defaults(func=flashing.romsw_flash)
    p = leaf(
        rs,
        "restore",
        prescale=True,
        help="write the sectors a flash backed up back to their original contents (needs --yes)",
        description="Put back the original contents of the sectors a `romsw flash` replaced, from its journal and "
        "backup (printed when the flash ended, or in the backup directory).",
    )
    p.add_argument("journal", metavar="JOURNAL", help="the flash's journal file (journal*.jsonl)")
    p.add_argument("--clear-cmp", action="store_true", help="clear SR2.CMP (only that bit) if it protects the array")
    p.add_argument("--dry-run", action="store_true", help="report which sectors differ; write nothing")
    p.add_argument("--yes", action="store_true", help="really erase and program")
    p.set_defaults(func=flashing.romsw_restore)

    fw = groups.add_parser("fw", help="firmware-mediated access: PSP mailbox and the ROM_INDEX/ROM_DATA aperture")
    _add_globals(fw, top=False)
    fs = fw.add_subparsers(dest="command", required=True)
    p = leaf(fs, "probe", prescale=False, help="read-only PSP mailbox queries")
    p.set_defaults(func=commands.fw_probe)
    p = leaf(fs, "dump", prescale=False, help="raw 2 MiB dump through ROM_INDEX/ROM_DATA, validated, to OUTPUT")
    p.add_argument("output", metavar="OUTPUT")
    p.set_defaults(func=commands.fw_dump)
    p = leaf(
        fs,
        "ifwi-all",
        prescale=False,
        help="stream every requested IFWI item to the PSP (needs --yes; power cycle after)",
    )
    p.add_argument("ifwi", metavar="IFWI", help="the 2 MiB IFWI image")
    p.add_argument(
        "--force", action="store_true", help="stream an image that fails its checksums or board-identity checks"
    )
    p.add_argument("--yes", action="store_true", help="really start PSP transfers")
    p.set_defaults(func=commands.fw_ifwi_all)
    p = leaf(fs, "stream", prescale=False, help="disabled: stock reflash validation failed")
    p.add_argument("item_type", type=_int, metavar="ITEM_TYPE")
    p.add_argument("image", metavar="IMAGE")
    p.add_argument("--yes", action="store_true")
    p.set_defaults(func=commands.fw_disabled)
    for name in ("ifwi-step", "live-flash"):
        p = leaf(fs, name, prescale=False, help="disabled: stock reflash validation failed")
        p.add_argument("ifwi", metavar="IFWI")
        p.add_argument("--yes", action="store_true")
        p.set_defaults(func=commands.fw_disabled)
    return parser


def _printer(stream: TextIO) -> Callable[[str], None]:
    def emit(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()

    return emit


def _list(args: argparse.Namespace, out: Callable[[str], None], err: Callable[[str], None], sim: bool) -> int:
    if sim:
        out("0 sim sim:0 (0x1002:0x744c)")
        return 0
    candidates = list_candidates(args.transport or "auto", warn=err)
    if not candidates:
        out("no devices found")
    for c in candidates:
        out(c.describe())
    return 0


def main(
    argv: list[str] | None = None,
    *,
    opener: Callable[[int, str], Any] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    settings: Settings | None = None,
) -> int:
    """Run `amdflash` with `argv` and return the exit code (0 ok, 1 error, 2 usage, 3 internal, 130 interrupted).

    `opener(index, transport) -> PCIDevice` replaces device discovery (the hook for end-to-end tests); `settings`
    overrides the library timeouts.
    """
    stdout = stdout if stdout is not None else sys.stdout
    stderr = stderr if stderr is not None else sys.stderr
    out, err = _printer(stdout), _printer(stderr)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    verbose = bool(args.verbose) or os.environ.get("AMDFLASH_DEBUG") == "1"
    handler: logging.Handler | None = None
    logger = logging.getLogger("amdflash")
    if args.verbose:
        handler = logging.StreamHandler(stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        with signal_guard():  # SIGINT/SIGTERM wait for the hardware step in flight (tg.drivers.interrupts)
            return _run(args, opener, settings, out, err, verbose, stderr)
    except KeyboardInterrupt as exc:  # a signal while reporting: the command is over either way
        return int(getattr(exc, "exit_code", 130))
    finally:
        if handler is not None:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)


def _run(
    args: argparse.Namespace,
    opener: Callable[[int, str], Any] | None,
    settings: Settings | None,
    out: Callable[[str], None],
    err: Callable[[str], None],
    verbose: bool,
    stderr: TextIO | None = None,
) -> int:
    """Dispatch a parsed command and map its outcome to an exit code."""
    try:
        if args.sim and opener is None:
            return _run_sim(args, settings, out, err, stderr)
        if args.group == "list":
            return _list(args, out, err, sim=False)
        if opener is None:

            def opener(index: int, transport: str) -> Any:
                return open_gpu(index, transport, warn=err)

        ctx = commands.Context(args, out, err, opener, settings or Settings(), stderr)
        return int(args.func(ctx))
    except KeyboardInterrupt as exc:
        code = int(getattr(exc, "exit_code", 130))
        with critical():  # a further Ctrl-C waits for this line
            err("error: terminated" if code == 128 + signal.SIGTERM else "error: interrupted")
        return code
    except (RuntimeError, TimeoutError, ValueError, OSError) as exc:
        with critical():  # a Ctrl-C now waits for the error line (then exits 130)
            if verbose:
                err(traceback.format_exc().rstrip())
            err(f"error: {exc}")
        return 1
    except Exception as exc:
        with critical():
            if verbose:
                err(traceback.format_exc().rstrip())
            err(f"error: internal error: {type(exc).__name__}: {exc}")
        return 3


def _run_sim(
    args: argparse.Namespace,
    settings: Settings | None,
    out: Callable[[str], None],
    err: Callable[[str], None],
    stderr: TextIO | None = None,
) -> int:
    """Run a command against the simulated board of the `--sim-state` file.

    The state file's lock is held from loading the state to saving it, so concurrent invocations cannot lose each
    other's writes; the board is saved (atomically, with SIGINT/SIGTERM deferred) even when the command fails or is
    interrupted, twice. A state path that could not be saved is refused before the command runs.
    """
    import hashlib

    from amdflash.sim.device import make_sim_device
    from amdflash.sim.state import default_state_path, load_board, save_board
    from tg.drivers.lock import acquire_device_lock, lock_name

    if args.group == "list":
        return _list(args, out, err, sim=True)
    path = os.path.abspath(args.sim_state or default_state_path())
    check_state_path(path)
    tag = hashlib.sha256(path.encode()).hexdigest()[:12]
    with acquire_device_lock(lock_name(regs.LOCK_PREFIX, f"sim-{tag}")):
        board = load_board(path)

        def open_sim(index: int, transport: str) -> Any:
            if index != 0:
                raise RuntimeError(f"device index {index} out of range (found 1)")
            return make_sim_device(board, lock=False)

        if getattr(args, "backup_dir", "unset") is None:  # the simulated board's backups live beside its state
            args.backup_dir = path + ".backups"
        # the simulated flash finishes erases and programs at once: no need to sleep between busy polls
        ctx = commands.Context(args, out, err, open_sim, settings or Settings(busy_poll_interval=0.0), stderr)
        try:
            return int(args.func(ctx))
        finally:
            with critical():  # a (second) Ctrl-C waits until the state file is replaced
                save_board(board, path)


def check_state_path(path: str) -> None:
    """Refuse a `--sim-state` path that could not be saved to (before any work is done).

    The file is replaced atomically, so its directory (or the nearest existing ancestor, which `save_board` creates
    the rest of) must be writable; an existing file must be readable and not a directory.
    """
    if os.path.isdir(path):
        raise ValueError(f"--sim-state path is a directory: {path}")
    if os.path.exists(path) and not os.access(path, os.R_OK):
        raise PermissionError(f"--sim-state file is not readable: {path}")
    directory = os.path.dirname(path)
    while not os.path.isdir(directory):
        if os.path.exists(directory):
            raise ValueError(f"--sim-state directory {directory} is not a directory")
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(f"--sim-state directory is not writable: {directory} (the state could not be saved)")


def console_main() -> None:
    """Console-script wrapper: exit with `main()`'s code; signals after `main` returned cannot change it."""
    code = 130
    try:
        code = main()
    except KeyboardInterrupt as exc:  # a signal between main's own handling and here
        code = int(getattr(exc, "exit_code", 130))
    finally:
        for signum in DEFERRED_SIGNALS:  # the process is exiting: a late Ctrl-C must not kill it mid-flush
            signal.signal(signum, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    console_main()
