"""RemoteServerThread: the real remote PCI server, run in a background thread on loopback (or a unix socket).

    with RemoteServerThread(device=MockPCIDevice(lock=False)) as srv:
        os.environ.update(srv.env)                  # REMOTE="127.0.0.1:<port>" and TG_REMOTE_TOKEN=<its token>
        (conn, name), = remote_list(0x1002, ((0xffff, (0x744c,)),))

Like every TCP listener of the real server it requires a token: a random one is made unless `token=` is given (or
`insecure=True`, or a unix socket, where the socket's 0600 mode is the protection).

Serve either a `provider` (a discovery backend such as `MockPCIDevice.make_backend([...])`: each session opens its own
device instances) or fixed `device`/`devices` (a `StaticProvider`: the same objects for every session, so their state,
e.g. a simulated flash chip, persists across connections).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from tg.drivers.pci.base import PCIDevice
from tg.drivers.remote.server import DeviceProvider, Limits, RemoteServer, StaticProvider

__all__ = ["RemoteServerThread"]


class RemoteServerThread:
    """Run a `RemoteServer` in a daemon thread; a context manager (`start()`/`stop()` also work).

    `address` is the `REMOTE`-style address once started: `"127.0.0.1:<port>"` (ephemeral port by default) or
    `"unix:<path>"` when `unix_path` is given. `token` is the token clients must send (generated for TCP unless given
    or `insecure=True`; None on a unix socket without one); `env` has both as `REMOTE` and `TG_REMOTE_TOKEN`.
    """

    def __init__(
        self,
        provider: DeviceProvider | None = None,
        *,
        device: PCIDevice | None = None,
        devices: Sequence[PCIDevice] | None = None,
        token: str | bytes | None = None,
        limits: Limits | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        unix_path: str | None = None,
        allow: Iterable[tuple[int, int | None]] = (),
        deny_reset: bool = False,
        insecure: bool = False,
        **server_kwargs: Any,
    ) -> None:
        given = [x is not None for x in (provider, device, devices)]
        if sum(given) != 1:
            raise ValueError("RemoteServerThread needs exactly one of provider=, device= or devices=")
        if provider is None:
            provider = StaticProvider([device] if device is not None else list(devices or []))
        if token is None and unix_path is None and not insecure:
            token = secrets.token_hex(16)
        self.token: str | None = token.decode() if isinstance(token, bytes) else token
        self.server = RemoteServer(
            provider,
            token=token,
            limits=limits,
            allow=allow,
            deny_reset=deny_reset,
            insecure=insecure,
            **server_kwargs,
        )
        self.host, self.port, self.unix_path = host, port, unix_path
        self.address = ""
        self._thread: threading.Thread | None = None

    def start(self) -> RemoteServerThread:
        """Bind and start serving; returns self."""
        if self._thread is not None:
            raise RuntimeError("RemoteServerThread already started")
        if self.unix_path is not None:
            self.server.bind_unix(self.unix_path)
            self.address = f"unix:{self.unix_path}"
        else:
            host, port = self.server.bind_tcp(self.host, self.port)
            self.host, self.port = host, port
            self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="tg-pci-server", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server and wait for its thread (idempotent)."""
        self.server.shutdown(timeout)
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def env(self) -> dict[str, str]:
        """`REMOTE` (and `TG_REMOTE_TOKEN` when there is a token) for a client of this server, e.g. a subprocess."""
        env = {"REMOTE": self.address}
        if self.token is not None:
            env["TG_REMOTE_TOKEN"] = self.token
        return env

    @property
    def alive(self) -> bool:
        """Whether the accept loop is still running."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> RemoteServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
