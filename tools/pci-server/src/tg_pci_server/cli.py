"""The `tg-pci-server` command line."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import signal
import sys
import threading
from types import FrameType

from tg.drivers.remote.protocol import DEFAULT_PORT, MAX_TOKEN_LEN
from tg.drivers.remote.server import DeviceProvider, Limits, RemoteServer, parse_allow
from tg.drivers.remote.token import TokenFileError, default_token_path, ensure_token_file
from tg_pci_server.__about__ import __version__

DESCRIPTION = """\
Serve PCI devices to tg.drivers' RemotePCIDevice (REMOTE=host:port) over TCP or a unix socket.

SECURITY: a client of this server gets raw read/write access to device BARs, config space, DMA memory and device
reset. A malicious client can DMA-attack this host through a bus-mastering device, brick the device, or exhaust
memory. There is no TLS: the token and all traffic travel in clear text, so reach a server on another machine through
an SSH tunnel (ssh -L 6667:127.0.0.1:6667 host) or over a network you trust. The server binds to 127.0.0.1 by
default, and every TCP listener, loopback included, requires a token: --token, --token-file FILE (readable by its owner
only; created with a fresh token if it does not exist) or TG_REMOTE_TOKEN; without any, a token is generated and
written to the token file (mode 0600, default ~/.config/tg/remote-token or TG_REMOTE_TOKEN_FILE), whose path is
printed. Clients of the same user find it there; give it to others through TG_REMOTE_TOKEN or TG_REMOTE_TOKEN_FILE.
--insecure is the only way to serve TCP without a token. A unix socket (--unix) is created mode 0600 and needs no
token. Every request is validated (BAR, config-space and allocation bounds, sizes, handles) before the device is
touched: a bad read gets an error reply, a bad posted write (MMIO_WRITE/SYSMEM_WRITE) drops the session and is never
partly applied, an unknown command gets an error and the connection is closed. One client is served at a time: an
authenticated second client waits up to 0.5 s for the current session to end, then is answered "server busy" and
closed. A client's state (opened devices and their locks, mappings, DMA allocations) is freed when it disconnects.

Unauthenticated connections never hold the session: every connection must send its AUTH (or, without a token, its
first request) within 5 s of connecting, at most one AUTH frame is buffered for it, and it is handled without a thread.
Each source (IP address; for loopback and unix peers, IP and user) has a budget of failed authentications after which
it is refused for an exponentially growing back-off; other sources are not affected. Unauthenticated connections are
bounded per source and overall, the idlest evicted first. A client that does not read its replies stops being read.

Once ready, the server prints "listening on <address>" on stdout (after "token file: <path>" when it uses one). It logs
one line per session opened or closed and one per error on stderr; rejected connections are logged a few at a time,
then summarised every 10 s (--verbose: one line per request and per connection). SIGTERM or SIGINT stops it. Sizes
accept K/M/G suffixes (binary: 64M = 64 MiB).
"""

EPILOG = """\
environment:
  TG_REMOTE_TOKEN      shared secret (same as --token); clients read the same variable (REMOTE_TOKEN is an alias)
  TG_REMOTE_TOKEN_FILE the token file used when no token is given (default ~/.config/tg/remote-token); clients too
  TG_DRIVERS_LOCK_DIR  directory of device lock files (default: the temp dir)

examples:
  tg-pci-server --backend mock                       # simulated GPU on 127.0.0.1:6667, token in the token file
  tg-pci-server --backend mock --mock-model pkg.sim:make_board
  tg-pci-server --allow 1002:744c --token-file ~/.tg-token   # local Navi31 GPUs only, this token file
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
        "to the network (a warning is printed); use an SSH tunnel instead where you can",
    )
    net.add_argument(
        "--insecure",
        action="store_true",
        help="serve TCP without a token (a warning is printed): every user who can reach the port, local users "
        "included, gets raw device access",
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
        "--token-file",
        metavar="FILE",
        help="read the shared secret from FILE (surrounding whitespace stripped; refused if group or others can "
        "read or write it); a missing FILE is created (mode 0600) with a fresh random token",
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
    lim.add_argument(
        "--first-request-timeout",
        type=_seconds,
        default=d.first_request_timeout,
        help="seconds a new connection has to send its AUTH (without a token: its first request) before it is "
        "dropped (default 5)",
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


def _token(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[bytes | None, str | None, bool]:
    """The token given on the command line or in TG_REMOTE_TOKEN, the token file it came from (if any) and whether
    that file was just created."""
    if args.token is not None and args.token_file is not None:
        parser.error("give either --token or --token-file, not both")
    token: str | bytes | None = args.token
    path: str | None = None
    created = False
    if args.token_file is not None:
        path = os.path.abspath(os.path.expanduser(args.token_file))
        token, created = _load_token_file(path, parser, "--token-file", make_parents=False)
    if token is None:
        token = os.environ.get("TG_REMOTE_TOKEN") or None
    if token is None:
        return None, None, False
    raw = token.encode() if isinstance(token, str) else token
    if not 0 < len(raw) <= MAX_TOKEN_LEN:
        parser.error(f"the token must be 1..{MAX_TOKEN_LEN} bytes, got {len(raw)}")
    return raw, path, created


def _load_token_file(
    path: str, parser: argparse.ArgumentParser, what: str, *, make_parents: bool
) -> tuple[bytes, bool]:
    try:
        return ensure_token_file(path, make_parents=make_parents)
    except TokenFileError as e:
        parser.error(str(e))
    except OSError as e:
        parser.error(f"cannot use the {what} {path}: {e}")


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
    token, token_path, created = _token(args, parser)
    tcp = args.unix is None
    if tcp and token is None and not args.insecure:  # every TCP listener needs a token: make (or reuse) one
        token_path = default_token_path()
        token, created = _load_token_file(token_path, parser, "token file", make_parents=True)
    try:
        limits = Limits(
            max_xfer=args.max_xfer,
            max_alloc=args.max_alloc,
            max_total=args.max_total,
            io_timeout=args.io_timeout,
            idle_timeout=args.idle_timeout,
            first_request_timeout=args.first_request_timeout,
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
    server = RemoteServer(
        provider, limits=limits, token=token, allow=args.allow, deny_reset=args.deny_reset, insecure=args.insecure
    )
    try:
        if args.unix is not None:
            where = server.bind_unix(args.unix)
        else:
            host = args.host or "127.0.0.1"
            # printed, not logged: these must reach the operator whatever the logging configuration
            if not _is_loopback(host):
                print(
                    f"tg-pci-server: WARNING: binding to {host}: every client that can reach this address and "
                    "knows the token gets raw read/write access to the served devices' BARs, config space and DMA "
                    "memory; the token and the traffic are not encrypted (prefer an SSH tunnel to 127.0.0.1)",
                    file=sys.stderr,
                    flush=True,
                )
            if token is None:
                print(
                    f"tg-pci-server: WARNING: --insecure: no token; every user who can reach {host} (local users "
                    "included) gets raw read/write access to the served devices",
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
    if token_path is not None:
        state = "generated" if created else "existing"
        print(f"token file: {token_path} ({state}; clients read it there or through TG_REMOTE_TOKEN)", flush=True)
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
