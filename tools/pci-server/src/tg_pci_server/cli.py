"""The `tg-pci-server` command line."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import signal
import stat
import sys
import threading
from types import FrameType

from tg.drivers.remote.protocol import DEFAULT_PORT, MAX_TOKEN_LEN
from tg.drivers.remote.server import DeviceProvider, Limits, RemoteServer, parse_allow
from tg_pci_server.__about__ import __version__

DESCRIPTION = """\
Serve PCI devices to tg.drivers' RemotePCIDevice (REMOTE=host:port) over TCP or a unix socket.

SECURITY: a client of this server gets raw read/write access to device BARs, config space, DMA memory and device
reset. A malicious client can DMA-attack this host through a bus-mastering device, brick the device, or exhaust
memory. The server therefore binds to 127.0.0.1 by default; reach it from another machine through an SSH tunnel
(ssh -L 6667:127.0.0.1:6667 host), or bind elsewhere with --host and a token (--token-file, readable by its owner
only, or TG_REMOTE_TOKEN): a non-loopback bind without a token is refused unless --insecure is given.
Every request is validated (BAR, config-space and allocation bounds, sizes, handles) before the device is touched:
a bad read gets an error reply, a bad posted write (MMIO_WRITE/SYSMEM_WRITE) drops the session and is never partly
applied, an unknown command gets an error and the connection is closed. One client is served at a time: a second
connection waits up to 0.5 s for the current session to end, then is answered "server busy" and closed. A client's
state (opened devices and their locks, mappings, DMA allocations) is freed when it disconnects. Every connection must
complete its first request (its AUTH when a token is set) within 5 s of connecting or it is dropped; until it has, it
holds nothing, so a silent or byte-dripping connection never locks out a client that authenticates.

Once ready, the server prints "listening on <address>" on stdout. It logs one line per connection opened or closed
and one per error on stderr (--verbose: one per request). SIGTERM or SIGINT stops it. Sizes accept K/M/G suffixes
(binary: 64M = 64 MiB).
"""

EPILOG = """\
environment:
  TG_REMOTE_TOKEN   shared secret (same as --token); clients read the same variable (REMOTE_TOKEN is an alias)
  TG_DRIVERS_LOCK_DIR  directory of device lock files (default: the temp dir)

examples:
  tg-pci-server --backend mock                       # simulated GPU on 127.0.0.1:6667
  tg-pci-server --backend mock --mock-model pkg.sim:make_board
  tg-pci-server --allow 1002:744c --token-file ~/.tg-token   # local Navi31 GPUs only, with a token
  tg-pci-server --unix /run/user/1000/tg-pci.sock
"""

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Parse a byte count such as `65536`, `64M`, `64MiB` or `1G` (binary units)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size like 65536, 64M or 1G, got {text!r}")
    value = int(m.group(1)) << (10 * " kmgt".index(m.group(2).lower() or " "))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"seconds must be >= 0, got {text!r}")
    return value


def _allow(text: str) -> tuple[int, int | None]:
    try:
        return parse_allow(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `tg-pci-server`."""
    p = argparse.ArgumentParser(
        prog="tg-pci-server",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"tg-pci-server {__version__}")
    net = p.add_argument_group("where to listen")
    net.add_argument(
        "--host",
        default=None,
        help="TCP address to bind (default 127.0.0.1). Anything but loopback exposes raw device access "
        "to the network: it needs a token, or --insecure",
    )
    net.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback --host without a token (a warning is printed); anyone who can reach the port "
        "gets raw device access",
    )
    net.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0 picks one)")
    net.add_argument(
        "--unix",
        metavar="PATH",
        help="listen on a unix socket instead of TCP (created mode 0600; a stale socket file is "
        "replaced); enables MAP_SYSMEM_FD",
    )
    auth = p.add_argument_group("access control")
    auth.add_argument(
        "--token",
        help="shared secret clients must send first (AUTH); visible in `ps`, prefer --token-file or TG_REMOTE_TOKEN",
    )
    auth.add_argument(
        "--token-file", metavar="FILE", help="read the shared secret from FILE (surrounding whitespace stripped)"
    )
    auth.add_argument(
        "--allow",
        action="append",
        type=_allow,
        default=[],
        metavar="VENDOR[:DEVICE]",
        help="only report and open these devices (hex ids, repeatable; default: every device the "
        "client's PROBE filter matches)",
    )
    auth.add_argument("--deny-reset", action="store_true", help="refuse the RESET command")
    lim = p.add_argument_group("limits")
    d = Limits()
    lim.add_argument(
        "--max-xfer", type=parse_size, default=d.max_xfer, help="largest single MMIO/sysmem transfer (default 64M)"
    )
    lim.add_argument(
        "--max-alloc", type=parse_size, default=d.max_alloc, help="largest single sysmem allocation (default 256M)"
    )
    lim.add_argument("--max-total", type=parse_size, default=d.max_total, help="total sysmem per session (default 1G)")
    lim.add_argument(
        "--io-timeout",
        type=_seconds,
        default=d.io_timeout,
        help="seconds a started request (header + payload) may take to arrive, and a reply to be sent (default 30)",
    )
    lim.add_argument(
        "--idle-timeout",
        type=_seconds,
        default=d.idle_timeout,
        help="close a session idle this many seconds (default 600; 0 = never)",
    )
    dev = p.add_argument_group("devices")
    dev.add_argument(
        "--backend",
        choices=("sysfs", "mock"),
        default=None,
        help="sysfs: local PCI devices (default); mock: a simulated device, for demos and tests",
    )
    dev.add_argument(
        "--mock-model",
        metavar="MODULE:FACTORY",
        help="with --backend mock (implied): serve the device(s) returned by calling FACTORY() from "
        "MODULE (a dotted module name or a path to a .py file); called once at start, so the "
        "simulated state persists across sessions",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="trace every request on stderr")
    return p


def _token(args: argparse.Namespace, parser: argparse.ArgumentParser) -> bytes | None:
    if args.token is not None and args.token_file is not None:
        parser.error("give either --token or --token-file, not both")
    token: str | bytes | None = args.token
    if args.token_file is not None:
        try:
            with open(args.token_file, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode
                if mode & 0o077:
                    parser.error(
                        f"--token-file {args.token_file} is readable or writable by group or others "
                        f"(mode {stat.S_IMODE(mode):04o}); run: chmod 600 {args.token_file}"
                    )
                token = f.read().strip()
        except OSError as e:
            parser.error(f"cannot read --token-file: {e}")
    if token is None:
        token = os.environ.get("TG_REMOTE_TOKEN") or None
    if token is None:
        return None
    raw = token.encode() if isinstance(token, str) else token
    if not 0 < len(raw) <= MAX_TOKEN_LEN:
        parser.error(f"the token must be 1..{MAX_TOKEN_LEN} bytes, got {len(raw)}")
    return raw


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tg-pci-server` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.DEBUG if args.verbose else logging.INFO, format="tg-pci-server: %(message)s"
    )
    log = logging.getLogger("tg_pci_server")
    if args.unix is not None and args.host is not None:
        parser.error("--unix and --host are exclusive")
    if args.mock_model and args.backend == "sysfs":
        parser.error("--mock-model needs --backend mock")
    if not 0 <= args.port < 65536:
        parser.error(f"--port must be 0..65535, got {args.port}")
    token = _token(args, parser)
    if args.unix is None and args.host is not None and not _is_loopback(args.host) and token is None:
        if not args.insecure:
            print(
                f"tg-pci-server: error: refusing to serve {args.host} without a token: every client that can reach "
                "it would get raw device access. Set one (--token-file FILE with mode 0600, or TG_REMOTE_TOKEN), "
                "use an SSH tunnel to 127.0.0.1, or pass --insecure",
                file=sys.stderr,
                flush=True,
            )
            return 2
    try:
        limits = Limits(
            max_xfer=args.max_xfer,
            max_alloc=args.max_alloc,
            max_total=args.max_total,
            io_timeout=args.io_timeout,
            idle_timeout=args.idle_timeout,
        )
    except ValueError as e:
        parser.error(str(e))
    provider: DeviceProvider
    if args.backend == "mock" or args.mock_model:
        from tg_pci_server.backends import mock_provider

        try:
            provider = mock_provider(args.mock_model)
        except Exception as e:
            print(f"tg-pci-server: error: {e}", file=sys.stderr)
            return 2
    else:
        from tg_pci_server.backends import sysfs_provider

        provider = sysfs_provider
    server = RemoteServer(provider, limits=limits, token=token, allow=args.allow, deny_reset=args.deny_reset)
    try:
        if args.unix is not None:
            where = server.bind_unix(args.unix)
        else:
            host = args.host or "127.0.0.1"
            if not _is_loopback(host):
                # printed, not logged: this must reach the operator whatever the logging configuration
                print(
                    f"tg-pci-server: WARNING: binding to {host}: every client that can reach this address gets raw "
                    "read/write access to the served devices' BARs, config space and DMA memory"
                    + ("" if token else " (and no token is set: --insecure)"),
                    file=sys.stderr,
                    flush=True,
                )
            bound_host, port = server.bind_tcp(host, args.port)
            where = f"[{bound_host}]:{port}" if ":" in bound_host else f"{bound_host}:{port}"
    except OSError as e:
        print(f"tg-pci-server: error: cannot listen: {e}", file=sys.stderr)
        return 1

    def stop(signum: int, frame: FrameType | None) -> None:
        server.request_stop()

    if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    print(f"listening on {where}", flush=True)
    log.info(
        "backend %s%s, token %s, limits: xfer %d, alloc %d, total %d, io %gs, idle %gs",
        "mock" if args.backend == "mock" or args.mock_model else "sysfs",
        f" ({args.mock_model})" if args.mock_model else "",
        "required" if token else "off",
        limits.max_xfer,
        limits.max_alloc,
        limits.max_total,
        limits.io_timeout,
        limits.idle_timeout,
    )
    server.serve_forever()
    server.shutdown()
    log.info("stopped after %d session(s)", server.sessions_served)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
