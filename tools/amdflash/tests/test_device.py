"""Candidate discovery and opening through tg-drivers' real discovery code, with mock backends."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdflash import cli, device
from amdflash.sim import SimulatedNavi31, make_sim_device
from amdflash.sim.harness import Result
from tg.drivers.mock import MockUSBContext
from tg.drivers.pci import register_backend, unregister_backend


@pytest.fixture
def pci_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[SimulatedNavi31]:
    board = SimulatedNavi31()

    def backend(vendor: int, devices: object, base_class: int | None) -> list[tuple[object, str]]:
        if vendor != 0x1002:
            return []
        return [(lambda devpref, name: make_sim_device(board, pcibus=name), "0000:03:00.0")]

    register_backend("amdflash-test", backend)  # type: ignore[arg-type]
    monkeypatch.setenv("TG_DRIVERS_BACKEND", "amdflash-test")
    MockUSBContext.clear()
    yield board
    unregister_backend("amdflash-test")


def run(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return Result(code, out.getvalue(), err.getvalue())


def test_pci_candidates_and_open(pci_backend: SimulatedNavi31) -> None:
    found = device.list_candidates("pci")
    assert [c.describe() for c in found] == ["0 pci 0000:03:00.0 (0x1002:0x744c)"]
    dev = device.open_gpu(0, "pci")
    try:
        assert device.Bar5(dev).read32(0x5A380) == 0x07000002
    finally:
        dev.close()
    with pytest.raises(RuntimeError, match=r"^device index 1 out of range \(found 1\)$"):
        device.open_gpu(1, "pci")
    r = run("fw", "--transport", "pci", "probe")
    assert r.code == 0 and len(r.lines) == 4
    assert pci_backend.psp_log


def test_auto_skips_unavailable_usb_with_warning(pci_backend: SimulatedNavi31, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_libusb() -> list[object]:
        raise OSError("libusb-1.0 not found; install libusb-1.0-0")

    monkeypatch.setattr(device, "_usb_candidates", no_libusb)
    warnings: list[str] = []
    assert [c.transport for c in device.list_candidates("auto", warn=warnings.append)] == ["pci"]
    assert warnings == ["warning: USB transport unavailable: libusb-1.0 not found; install libusb-1.0-0"]
    with pytest.raises(OSError, match="libusb"):
        device.list_candidates("usb")
    r = run("list")
    assert r.out == "0 pci 0000:03:00.0 (0x1002:0x744c)\n"
    assert "warning: USB transport unavailable" in r.err


def test_no_candidates_message(pci_backend: SimulatedNavi31, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "_pci_candidates", lambda: [])
    monkeypatch.setattr(device, "_usb_candidates", lambda: [])
    r = run("fw", "probe")
    assert (r.code, r.err.strip()) == (1, "error: no supported auto AMD GPU found")
    r = run("list")
    assert (r.code, r.out) == (0, "no devices found\n")


def test_unknown_transport() -> None:
    with pytest.raises(ValueError, match="unknown transport"):
        device.list_candidates("serial")


def test_remote_is_never_part_of_auto(pci_backend: SimulatedNavi31, monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[str] = []
    monkeypatch.setattr(device, "_remote_candidates", lambda: called.append("remote") or [])
    device.list_candidates("auto")
    device.list_candidates("pci")
    assert called == []
    device.list_candidates("remote")
    assert called == ["remote"]


def test_pci_ignores_remote_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With REMOTE set, tg-drivers' list_devices would return the remote devices; `pci` must stay native."""
    dev = tmp_path / "bus" / "pci" / "devices" / "0000:03:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x1002\n")
    (dev / "device").write_text("0x744c\n")
    (dev / "class").write_text("0x030000\n")
    other = tmp_path / "bus" / "pci" / "devices" / "0000:04:00.0"
    other.mkdir(parents=True)
    (other / "vendor").write_text("0x1002\n")
    (other / "device").write_text("0x73bf\n")
    (other / "class").write_text("0x030000\n")
    monkeypatch.setenv("TG_DRIVERS_SYSFS_ROOT", str(tmp_path))
    monkeypatch.setenv("REMOTE", "127.0.0.1:9")  # nothing listens there; it must not be contacted
    monkeypatch.delenv("TG_DRIVERS_BACKEND", raising=False)
    found = device.list_candidates("pci")
    assert [c.describe() for c in found] == ["0 pci 0000:03:00.0 (0x1002:0x744c)"]
