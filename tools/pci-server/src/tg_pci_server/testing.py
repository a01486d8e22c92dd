"""Test helpers: a real `tg-pci-server` process on an ephemeral loopback port (for end-to-end and attack tests)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tg.drivers.remote import RemoteCmd
from tg.drivers.remote.protocol import pack_request

__all__ = ["ServerProcess", "server_command"]


def server_command() -> list[str]:
    """The installed console script next to this interpreter, else `python -m tg_pci_server`."""
    script = shutil.which("tg-pci-server", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "tg_pci_server"]


class ServerProcess:
    """A `tg-pci-server --port 0` child; stdout and stderr go to files in `workdir`."""

    def __init__(self, workdir: Path, args: list[str], env: dict[str, str]) -> None:
        """Start `tg-pci-server --port 0 *args` with environment `env`; return once it listens."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.log, out = workdir / "server.log", workdir / "server.out"
        with open(out, "wb") as stdout, open(self.log, "wb") as stderr:
            command = [*server_command(), "--port", "0", *args]
            self.proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=env)
        self.token: bytes | None = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = out.read_text()
            if "listening on " in text:
                if "token file: " in text:
                    self.token = Path(text.split("token file: ", 1)[1].split()[0]).read_bytes().strip()
                self.host, port = text.split("listening on ", 1)[1].split()[0].rsplit(":", 1)
                self.port = int(port)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tg-pci-server did not start: {self.log.read_text()}")

    @property
    def address(self) -> tuple[str, int]:
        """`(host, port)` it listens on."""
        return self.host, self.port

    @property
    def auth(self) -> bytes:
        """The AUTH frame of this server's token."""
        assert self.token is not None
        return pack_request(RemoteCmd.AUTH, arg1=len(self.token), payload=self.token)

    def rss(self) -> int:
        """Its resident memory in bytes (Linux)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> int:
        """SIGTERM (then SIGKILL after 10 s); its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode
