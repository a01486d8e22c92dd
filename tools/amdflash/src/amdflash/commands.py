"""The `romsw` and `fw` commands. Each validates its arguments and files before opening the device."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from amdflash import psp
from amdflash.device import Bar5, board_identity
from amdflash.fwdump import dump_rom_aperture
from amdflash.gd25 import (
    FLASH_SIZE,
    GD25LQ16E,
    OP_RDSR1,
    OP_RDSR2,
    OP_RDSR3,
    SECTOR_COUNT,
    SECTOR_SIZE,
    SR2_CMP,
    has_jedec,
)
from amdflash.ifwi import check_image_size, resolve_ifwi_item, validate_ifwi
from amdflash.image import find_vbios, identity_problems, image_problems
from amdflash.journal import default_backup_dir
from amdflash.progress import Progress
from amdflash.romsw import Navi31SPI, check_prescale
from amdflash.settings import Settings
from amdflash.util import atomic_write, atomic_writer, check_output_path

DISABLED = "firmware writes are disabled: stock reflash validation failed; use 'amdflash romsw flash' for recovery"
NOT_BOOTED_HINT = (
    "hint: the PSP has not booted (as with an empty or corrupt flash, where its boot loader stalls); "
    "the raw romsw commands work in that state"
)
MAX_IFWI_ITEMS = 19
BLOCK = 0x10000

log = logging.getLogger("amdflash")


@dataclass
class Context:
    """What a command needs: parsed arguments, output streams, the device opener and the timeouts."""

    args: argparse.Namespace
    out: Callable[[str], None]
    err: Callable[[str], None]
    opener: Callable[[int, str], Any]
    settings: Settings
    stderr: TextIO | None = None  # where progress goes (a tqdm bar on a terminal, plain lines otherwise)
    #: the device the command has open (set by `device()`), e.g. for its config-space ids
    current_device: Any = None

    def backup_dir(self) -> str:
        """Where `romsw flash` keeps its backups and journal: `--backup-dir`, else `default_backup_dir()`."""
        return str(getattr(self.args, "backup_dir", None) or default_backup_dir())

    def progress(self, total: int, desc: str) -> Progress:
        """Progress of a long operation of `total` bytes, on stderr."""
        return Progress(total, desc, self.stderr)

    @contextlib.contextmanager
    def device(self, transport: str) -> Iterator[Any]:
        """Open the selected device for the duration of the command; always close it (releasing its lock)."""
        log.debug("opening device %d over %s", self.args.device, transport)
        dev = self.opener(self.args.device, transport)
        log.debug("opened %s (%s)", getattr(dev, "pcibus", "?"), type(dev).__name__)
        self.current_device = dev
        try:
            yield dev
        finally:
            self.current_device = None
            dev.close()
            log.debug("closed %s", getattr(dev, "pcibus", "?"))

    @contextlib.contextmanager
    def flash(self) -> Iterator[GD25LQ16E]:
        """Open the device, set up the ROM_SW engine and check the JEDEC id before anything else."""
        with self.device(romsw_transport(self.args)) as dev:
            s = self.settings
            spi = Navi31SPI(Bar5(dev), self.args.prescale, timeout=s.transaction_timeout, poll_interval=s.poll_interval)
            chip = GD25LQ16E(spi, busy_poll_interval=s.busy_poll_interval)
            raw = chip.rdid()
            if not has_jedec(raw):
                raise RuntimeError(f"unexpected GD25LQ16E JEDEC capture: {raw.hex()}")
            yield chip

    def mailbox(self, dev: Any) -> psp.PSPFlashMailbox:
        """The PSP mailbox of an open device, printing through this context."""
        s = self.settings
        return psp.PSPFlashMailbox(
            Bar5(dev),
            poll_interval=s.poll_interval,
            command_timeout=s.command_timeout,
            end_timeout=s.end_timeout,
            out=self.out,
        )


def romsw_transport(args: argparse.Namespace) -> str:
    """The transport of a `romsw` command (USB unless chosen)."""
    return str(args.transport or "usb")


def fw_transport(args: argparse.Namespace) -> str:
    """The transport of a `fw` command (auto unless chosen)."""
    return str(args.transport or "auto")


def read_image(path: str, what: str = "image") -> bytes:
    """Read an image file and check that it is exactly 2 MiB (the error names the file and its actual size)."""
    try:
        with open(path, "rb") as f:
            data = f.read(FLASH_SIZE + 1)
            actual = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        raise ValueError(f"{what} file not found: {path}") from None
    except IsADirectoryError:
        raise ValueError(f"{what} path is a directory: {path}") from None
    except PermissionError:
        raise PermissionError(f"{what} file is not readable: {path}") from None
    return check_image_size(data, path, actual, what)


def sector_range(start: int | None, count: int | None) -> tuple[int, int]:
    """Validate `--start-sector`/`--sector-count` and return `(start, count)`."""
    s = 0 if start is None else start
    c = SECTOR_COUNT - s if count is None else count
    if not (0 <= s < SECTOR_COUNT and 1 <= c <= SECTOR_COUNT - s):
        raise ValueError("invalid sector range")
    return s, c


def mismatch(addr: int, got: bytes, want: bytes) -> RuntimeError:
    """The verify error for the first differing byte of `got` vs `want`, which start at flash address `addr`."""
    i = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
    return RuntimeError(f"verify mismatch at {addr + i:#x}: flash={got[i]:02x} image={want[i]:02x}")


# --- romsw ------------------------------------------------------------------------------------------------------------
def romsw_preflight(ctx: Context) -> None:
    """Checks common to every `romsw` command, before anything else happens."""
    check_prescale(ctx.args.prescale)
    transport = romsw_transport(ctx.args)
    if transport in ("pci", "remote"):
        ctx.err(f"warning: raw ROM_SW access over {transport} has not been validated on hardware")


def romsw_info(ctx: Context) -> int:
    """`romsw info`: JEDEC id, status registers and SFDP header."""
    romsw_preflight(ctx)
    with ctx.flash() as chip:
        sr1, sr2, sr3 = chip.status(OP_RDSR1), chip.status(OP_RDSR2), chip.status(OP_RDSR3)
        sfdp = chip.sfdp(24)
        pos = sfdp.find(b"SFDP")
        raw = chip.rdid()
    ctx.out(f"JEDEC capture: {raw.hex()} (C8 60 15 {'detected' if has_jedec(raw) else 'NOT detected'})")
    ctx.out(f"SR1/SR2/SR3: {sr1:02x}/{sr2:02x}/{sr3:02x}  CMP={'set' if sr2 & SR2_CMP else 'clear'}")
    ctx.out(f"SFDP capture: {sfdp.hex()}  signature_offset={pos}")
    return 0


def romsw_read(ctx: Context) -> int:
    """`romsw read ADDRESS SIZE [-o OUTPUT]`."""
    romsw_preflight(ctx)
    addr, size = ctx.args.address, ctx.args.size
    if addr < 0 or size < 0 or addr + size > FLASH_SIZE:
        raise ValueError("read outside 2 MiB flash")
    if ctx.args.output:
        check_output_path(ctx.args.output)
    with ctx.flash() as chip:
        data = chip.read(addr, size)
    if ctx.args.output:
        atomic_write(ctx.args.output, data)
    else:
        ctx.out(data.hex())
    return 0


def romsw_dump(ctx: Context) -> int:
    """`romsw dump OUTPUT`: the whole flash, sector by sector, into OUTPUT.partial, renamed when complete."""
    romsw_preflight(ctx)
    output = ctx.args.output
    check_output_path(output)
    digest = hashlib.sha256()
    with (
        atomic_writer(output, tmp_path=output + ".partial") as f,  # created first: a bad path fails before the device
        ctx.flash() as chip,
        ctx.progress(FLASH_SIZE, "dump") as bar,
    ):
        for addr in range(0, FLASH_SIZE, SECTOR_SIZE):
            data = chip.read(addr, SECTOR_SIZE)
            digest.update(data)
            f.write(data)
            bar.update(SECTOR_SIZE)
    ctx.out(f"wrote {output} sha256={digest.hexdigest()}")
    return 0


def romsw_verify(ctx: Context) -> int:
    """`romsw verify IMAGE`: compare the flash with IMAGE, sector by sector."""
    romsw_preflight(ctx)
    image = read_image(ctx.args.image)
    digest = hashlib.sha256()
    with ctx.flash() as chip, ctx.progress(FLASH_SIZE, "verify") as bar:
        for addr in range(0, FLASH_SIZE, SECTOR_SIZE):
            got = chip.read(addr, SECTOR_SIZE)
            want = image[addr : addr + SECTOR_SIZE]
            if got != want:
                raise mismatch(addr, got, want)
            digest.update(got)
            bar.update(SECTOR_SIZE)
    ctx.out(f"verified {FLASH_SIZE:#x} bytes sha256={digest.hexdigest()}")
    return 0


# --- fw ---------------------------------------------------------------------------------------------------------------
def fw_probe(ctx: Context) -> int:
    """`fw probe`: the four read-only mailbox queries."""
    with ctx.device(fw_transport(ctx.args)) as dev:
        try:
            results = ctx.mailbox(dev).probe()
        except RuntimeError as exc:
            if str(exc).startswith("PSP mailbox is not ready"):
                ctx.err(NOT_BOOTED_HINT)
            raise
    for name, error, response in results:
        ctx.out(f"{name}: error={error:#x} response={response:#x}")
        if name == "transfer_type" and error == psp.GATED_ERROR:
            ctx.err("update commands gated: reset card and do not initialize AMDev/SOS")
    return 0


def fw_dump(ctx: Context) -> int:
    """`fw dump OUTPUT`: raw image through ROM_INDEX/ROM_DATA, validated before anything is written."""
    output = ctx.args.output
    check_output_path(output)
    t0 = time.monotonic()
    with ctx.device(fw_transport(ctx.args)) as dev:
        with ctx.progress(FLASH_SIZE, "fw dump") as bar:
            data = dump_rom_aperture(Bar5(dev), progress=lambda done, total: bar.goto(done))
    atomic_write(output, data)
    elapsed = time.monotonic() - t0
    ctx.out(f"dumped {len(data):#x} bytes in {elapsed:.1f}s sha256={hashlib.sha256(data).hexdigest()}")
    return 0


def fw_ifwi_all(ctx: Context) -> int:
    """`fw ifwi-all IFWI --yes`: stream every item the PSP requests until its terminal phase."""
    if not ctx.args.yes:
        raise RuntimeError("refusing to stream without --yes")
    image = validate_ifwi(read_image(ctx.args.ifwi, "IFWI image"))  # nothing is streamed unless all of it is valid
    problems = image_problems(image)
    with ctx.device(fw_transport(ctx.args)) as dev:
        problems += identity_problems(find_vbios(image), board_identity(dev), None)
        if problems and not ctx.args.force:
            raise RuntimeError(
                "the image fails its checks: " + "; ".join(problems) + ". Nothing was streamed; --force streams it"
            )
        for problem in problems:
            ctx.err(f"warning: --force: {problem}")
        mailbox = ctx.mailbox(dev)
        current = mailbox.require(psp.GET_TRANSFER_TYPE, name="GET_TRANSFER_TYPE")
        for step in range(MAX_IFWI_ITEMS):
            request, phase = current & 0xFF, current >> 8
            ctx.out(f"IFWI step {step}: state={current:#x} item={request:#x} phase={phase}")
            _, payload = resolve_ifwi_item(image, request, out=ctx.out)
            with ctx.progress(len(payload), f"item {request:#x}") as bar:
                mailbox.stream(payload, request, transfer_type=current, progress=lambda done, total: bar.goto(done))
            if phase == 2:
                ctx.out(f"IFWI stream complete after terminal state {current:#x}; hard power cycle required")
                return 0
            current = mailbox.require(psp.GET_TRANSFER_TYPE, name="GET_TRANSFER_TYPE")
    raise RuntimeError(f"IFWI stream did not reach terminal phase after {MAX_IFWI_ITEMS} items (state={current:#x})")


def fw_disabled(ctx: Context) -> int:
    """`fw stream`, `fw ifwi-step`, `fw live-flash`: refused without touching any file or device."""
    raise RuntimeError(DISABLED)
