"""tg-pci-server command line: option parsing, the mock backends (`--mock-model`) and the safety checks."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tg.drivers.mock import MockPCIDevice
from tg.drivers.remote import RemoteCmd
from tg.drivers.remote.protocol import encode_probe_payload, pack_request
from tg_pci_server import backends, cli
from tg_pci_server.cli import _is_loopback, build_parser, main, parse_size

MODEL_SOURCE = """
from tg.drivers.mock import BarSpec, MockPCIDevice

def make():
    return MockPCIDevice("SV", "sim:board", vendor=0x1002, device=0x744C, bars={5: BarSpec(4096)}, lock=False)

def make_two():
    return [make(), MockPCIDevice("SV", "sim:nic", vendor=0x8086, device=0x1533, lock=False)]

def make_nothing():
    return 42

NOT_CALLABLE = 1
"""


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "sim_model.py"
    path.write_text(MODEL_SOURCE)
    return path


def test_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for flag in (
        "--host",
        "--insecure",
        "--port",
        "--unix",
        "--token",
        "--token-file",
        "--allow",
        "--deny-reset",
        "--max-xfer",
        "--max-alloc",
        "--max-total",
        "--io-timeout",
        "--idle-timeout",
        "--first-request-timeout",
        "--backend",
        "--mock-model",
        "--verbose",
        "127.0.0.1",
        "TG_REMOTE_TOKEN",
        "SECURITY",
    ):
        assert flag in out, flag
    # the behaviour spec section 6.7 requires, not just the flags
    text = " ".join(out.split())
    for phrase in (
        "binds to 127.0.0.1 by default",
        "--insecure is the only way to serve TCP without a token",
        "There is no TLS",
        "SSH tunnel",
        "written to the token file (mode 0600",
        "whose path is printed",
        "within 5 s of connecting",
        "0600",
        "a stale socket file is replaced",
        "server busy",
        "freed when it disconnects",
        "never partly applied",
        "listening on <address>",
        "one line per session opened or closed",
        "summarised every 10 s",
        "other sources are not affected",
        "K/M/G",
        "0 = never",
    ):
        assert phrase in text, phrase


def test_parse_size() -> None:
    assert parse_size("65536") == 65536
    assert parse_size("64K") == 64 << 10
    assert parse_size("64M") == 64 << 20
    assert parse_size("64MiB") == 64 << 20
    assert parse_size("1g") == 1 << 30
    for bad in ("", "0", "-1", "1.5M", "12Q"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_size(bad)


def test_defaults_and_parsing() -> None:
    args = build_parser().parse_args([])
    assert (args.host, args.port, args.unix, args.backend) == (None, 6667, None, None)
    assert (args.max_xfer, args.max_alloc, args.max_total) == (64 << 20, 256 << 20, 1 << 30)
    assert (args.io_timeout, args.idle_timeout, args.deny_reset, args.verbose) == (30.0, 600.0, False, False)
    args = build_parser().parse_args(["--allow", "1002:744c", "--allow", "8086", "--max-xfer", "1M"])
    assert args.allow == [(0x1002, 0x744C), (0x8086, None)] and args.max_xfer == 1 << 20
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--allow", "zz"])


def test_is_loopback() -> None:
    assert _is_loopback("127.0.0.1") and _is_loopback("::1") and _is_loopback("localhost")
    assert not _is_loopback("0.0.0.0") and not _is_loopback("10.1.2.3") and not _is_loopback("example.com")


def test_load_mock_model_from_file_and_module(model_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (dev,) = backends.load_mock_model(f"{model_file}:make")
    assert isinstance(dev, MockPCIDevice) and dev.pcibus == "sim:board"
    assert [d.pcibus for d in backends.load_mock_model(f"{model_file}:make_two")] == ["sim:board", "sim:nic"]
    monkeypatch.syspath_prepend(str(model_file.parent))
    (dev,) = backends.load_mock_model("sim_model:make")
    assert dev.pcibus == "sim:board"
    monkeypatch.delitem(sys.modules, "sim_model")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon", "must look like"),
        ("{file}:", "must look like"),
        ("surely_not_a_module_xyz:make", "cannot import"),
        ("{file}:missing", "has no attribute"),
        ("{file}:NOT_CALLABLE", "is not callable"),
        ("{file}:make_nothing", "must return a PCIDevice"),
        ("/nonexistent/model.py:make", "does not exist"),
    ],
)
def test_load_mock_model_errors(model_file: Path, target: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        backends.load_mock_model(target.format(file=model_file))


def test_demo_device() -> None:
    (dev,) = backends.demo_devices()
    assert dev.read_config(0, 4) == 0x744C1002
    assert dev.bar_info(0)[1] == 64 << 20 and dev.bar_info(5)[1] == 1 << 20
    dev.resize_bar(0)
    assert dev.bar_info(0)[1] == 256 << 20


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--unix", "/tmp/x.sock", "--host", "127.0.0.1"], "exclusive"),
        (["--backend", "sysfs", "--mock-model", "a:b"], "needs --backend mock"),
        (["--port", "70000"], "--port must be"),
        (["--token", "a", "--token-file", "b"], "either --token or --token-file"),
        (["--token", "x" * 300], "1..256 bytes"),
        (["--token-file", "/nonexistent/token"], "cannot use the --token-file /nonexistent/token"),
        (["--io-timeout", "0"], "io_timeout must be positive"),
    ],
)
def test_argument_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_mock_model_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mock-model", "surely_not_a_module_xyz:make"]) == 2
    assert "cannot import" in capsys.readouterr().err


class FakeServer:
    """Stands in for RemoteServer so `main` can be run without binding a real socket."""

    instances: list[FakeServer] = []

    def __init__(self, provider: Any, **kwargs: Any) -> None:
        self.provider, self.kwargs = provider, kwargs
        self.sessions_served = 0
        FakeServer.instances.append(self)

    def bind_tcp(self, host: str, port: int) -> tuple[str, int]:
        return host, 4242

    def bind_unix(self, path: str) -> str:
        return path

    def serve_forever(self) -> None:
        pass

    def request_stop(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


def test_non_loopback_bind_warns(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "RemoteServer", FakeServer)
    monkeypatch.setenv("TG_REMOTE_TOKEN", "from-env")
    assert main(["--backend", "mock", "--host", "0.0.0.0", "--allow", "1002", "--deny-reset"]) == 0
    captured = capsys.readouterr()
    assert "listening on 0.0.0.0:4242" in captured.out and "token file" not in captured.out
    assert "WARNING: binding to 0.0.0.0" in captured.err and "raw read/write access" in captured.err
    assert "not encrypted" in captured.err
    server = FakeServer.instances[-1]
    assert server.kwargs["token"] == b"from-env" and server.kwargs["allow"] == [(0x1002, None)]
    assert server.kwargs["deny_reset"] is True and server.kwargs["insecure"] is False
    monkeypatch.delenv("TG_REMOTE_TOKEN")
    assert main(["--backend", "mock", "--host", "0.0.0.0", "--insecure"]) == 0
    err = capsys.readouterr().err
    assert "WARNING: binding to 0.0.0.0" in err and "WARNING: --insecure: no token" in err  # allowed, loudly
    assert FakeServer.instances[-1].kwargs["token"] is None and FakeServer.instances[-1].kwargs["insecure"] is True
    assert main(["--backend", "mock", "--unix", "/tmp/tg-test.sock"]) == 0
    captured = capsys.readouterr()
    assert "listening on /tmp/tg-test.sock" in captured.out and "WARNING" not in captured.err
    assert FakeServer.instances[-1].kwargs["token"] is None  # a 0600 unix socket needs no token


def test_loopback_tcp_without_a_token_generates_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29 finding 1: `tg-pci-server --backend mock` served loopback TCP without a token ("token off")."""
    monkeypatch.setattr(cli, "RemoteServer", FakeServer)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert main(["--backend", "mock"]) == 0
    captured = capsys.readouterr()
    path = tmp_path / "config" / "tg" / "remote-token"
    assert f"token file: {path} (generated;" in captured.out and "WARNING" not in captured.err
    assert captured.out.index("token file:") < captured.out.index("listening on")
    token = FakeServer.instances[-1].kwargs["token"]
    assert token and path.read_bytes().strip() == token and len(token) >= 32
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert token.decode() not in captured.out + captured.err  # the path is printed, never the secret
    assert main(["--backend", "mock"]) == 0  # the next start reuses it: clients keep working
    assert f"token file: {path} (existing;" in capsys.readouterr().out
    assert FakeServer.instances[-1].kwargs["token"] == token
    explicit = tmp_path / "mine"
    assert main(["--backend", "mock", "--token-file", str(explicit)]) == 0  # a missing --token-file is created
    assert f"token file: {explicit} (generated;" in capsys.readouterr().out
    assert FakeServer.instances[-1].kwargs["token"] == explicit.read_bytes().strip()
    monkeypatch.setenv("TG_REMOTE_TOKEN_FILE", str(tmp_path / "elsewhere"))
    assert main(["--backend", "mock"]) == 0
    assert (tmp_path / "elsewhere").exists()


def test_token_file_is_never_followed_through_a_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "RemoteServer", FakeServer)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "token"
    link.symlink_to(victim)
    with pytest.raises(SystemExit) as exc:
        main(["--backend", "mock", "--token-file", str(link)])
    assert exc.value.code == 2 and "cannot use the --token-file" in capsys.readouterr().err
    assert victim.read_text() == "keep"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_token_file_readable_by_others_is_refused(
    tmp_path: Path, mode: int, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(mode)
    with pytest.raises(SystemExit) as exc:
        main(["--backend", "mock", "--token-file", str(token)])
    assert exc.value.code == 2
    assert f"is readable or writable by group or others (mode {mode:04o}); run: chmod 600" in capsys.readouterr().err


def test_private_token_file_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "RemoteServer", FakeServer)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    assert main(["--backend", "mock", "--host", "0.0.0.0", "--token-file", str(token)]) == 0
    assert FakeServer.instances[-1].kwargs["token"] == b"s3cret"


def test_main_serves_until_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real server in a thread (main only installs signal handlers in the main thread)."""
    import socket
    import time

    path = str(tmp_path / "s.sock")
    result: list[int] = []
    captured: dict[str, Any] = {}
    real = cli.RemoteServer

    def capture(*args: Any, **kwargs: Any) -> Any:
        captured["server"] = real(*args, **kwargs)
        return captured["server"]

    cli.RemoteServer = capture  # type: ignore[misc,assignment]
    try:
        thread = threading.Thread(target=lambda: result.append(main(["--backend", "mock", "--unix", path])))
        thread.start()
        deadline = time.monotonic() + 10
        while "server" not in captured or captured["server"].address is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            payload = encode_probe_payload(((0xFFFF, (0x744C,)),))
            sock.sendall(pack_request(RemoteCmd.PROBE, 0, 0, 0, len(payload), 0x1002, payload))
            reply = b""
            while len(reply) < 17 + len(b"mock:0:0"):
                reply += sock.recv(64)
            assert reply[17:] == b"mock:0:0"
        captured["server"].shutdown()
        thread.join(10)
    finally:
        cli.RemoteServer = real  # type: ignore[misc]
    assert result == [0]
    assert f"listening on {path}" in capsys.readouterr().out


def test_sysfs_provider_uses_the_sysfs_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.drivers.errors import NoPCIBusError

    monkeypatch.setenv("TG_DRIVERS_SYSFS_ROOT", str(tmp_path))
    with pytest.raises(NoPCIBusError):
        backends.sysfs_provider(0x1002, ((0xFFFF, (0x744C,)),), None)
    dev = tmp_path / "bus" / "pci" / "devices" / "0000:03:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x1002\n")
    (dev / "device").write_text("0x744c\n")
    (dev / "class").write_text("0x030000\n")
    found = backends.sysfs_provider(0x1002, ((0xFFFF, (0x744C,)),), None)
    assert [name for _, name in found] == ["0000:03:00.0"]
    assert backends.sysfs_provider(0x1002, ((0xFFFF, (0x7480,)),), None) == []


def test_bench_needs_a_server(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tg_pci_server import bench

    monkeypatch.delenv("REMOTE", raising=False)
    with pytest.raises(SystemExit) as exc:
        bench.main([])
    assert exc.value.code == 2 and "--remote" in capsys.readouterr().err
