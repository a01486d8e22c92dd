"""Remote PCI latency and throughput benchmark: `python -m tg_pci_server.bench [--remote HOST:PORT]`.

Measures PING round trips, then BAR and sysmem reads and writes of 4 B, 1 KiB and 8 MiB, against a running server
(`--remote`, default: the `REMOTE` variable) or an in-process simulated one (`--self`). It prints numbers and is not
a test.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from tg.drivers.mmio import MMIOView
from tg.drivers.remote import RemoteCmd, RemotePCIDevice, remote_list

SIZES = (4, 1024, 8 << 20)


def _timeit(fn: Callable[[], object], budget: float = 0.5, max_iters: int = 10000) -> tuple[float, int]:
    fn()  # warm up
    iters, start = 0, time.perf_counter()
    while iters < max_iters and time.perf_counter() - start < budget:
        fn()
        iters += 1
    return (time.perf_counter() - start) / iters, iters


def _bench_view(label: str, view: MMIOView, device: RemotePCIDevice) -> None:
    for size in SIZES:
        if size > view.nbytes:
            continue
        data = os.urandom(size)

        def read(size: int = size) -> bytes:
            return view.read(0, size)

        read_s, _ = _timeit(read)

        def write_and_flush(data: bytes = data) -> None:
            view.write(0, data)
            device.connection.rpc(RemoteCmd.PING)  # posted writes: a round trip makes the time honest

        write_s, _ = _timeit(write_and_flush)
        print(
            f"{label:7s} {size:>9,d} B   read {read_s * 1e6:10.1f} us {size / read_s / 1e6:9.1f} MB/s   "
            f"write {write_s * 1e6:10.1f} us {size / write_s / 1e6:9.1f} MB/s"
        )


def run(remote: str, token: str | None = None) -> None:
    """Benchmark the first device of vendor 0x1002 (any device id) on the `remote` server (authenticating with
    `token`, default: the client's usual token, `TG_REMOTE_TOKEN` or the token file)."""
    found = remote_list(0x1002, ((0, (0,)),), remote=remote, token=token)
    if not found:
        raise SystemExit(f"no AMD device on {remote}")
    conn, name = found[0]
    dev = RemotePCIDevice("BENCH", name, conn)
    try:
        ping_s, n = _timeit(lambda: conn.rpc(RemoteCmd.PING), max_iters=100000)
        print(f"{name}\nPING    {ping_s * 1e6:10.1f} us ({n} round trips)")
        bar = max(range(6), key=lambda b: dev.bar_info(b)[1])
        _bench_view(f"BAR{bar}", dev.map_bar(bar), dev)
        mem, _ = dev.alloc_sysmem(8 << 20)
        _bench_view("sysmem", mem, dev)
    finally:
        dev.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m tg_pci_server.bench`."""
    parser = argparse.ArgumentParser(prog="python -m tg_pci_server.bench", description=__doc__)
    parser.add_argument("--remote", default=os.environ.get("REMOTE", ""), help="server address (default: $REMOTE)")
    parser.add_argument(
        "--self",
        dest="self_serve",
        action="store_true",
        help="start a simulated server in this process and benchmark it",
    )
    args = parser.parse_args(argv)
    if args.self_serve:
        from tg.drivers.mock import RemoteServerThread
        from tg_pci_server.backends import demo_devices

        with RemoteServerThread(devices=demo_devices()) as srv:
            run(srv.address, srv.token)
        return 0
    if not args.remote:
        parser.error("give --remote HOST:PORT, set REMOTE, or use --self")
    run(args.remote)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
