"""Device providers behind `tg-pci-server`: the local sysfs bus, the built-in simulated GPU, or a user's mock model."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import Any

from tg.drivers.mock import BarSpec, DwordRegisterFile, MockPCIDevice
from tg.drivers.pci.base import PCIDevice
from tg.drivers.remote.devices import DeviceFactory, DeviceFilter, StaticProvider

MIB = 1 << 20


def demo_devices() -> list[PCIDevice]:
    """The built-in simulated device of `--backend mock`: a Navi31-like GPU (1002:744c) at `mock:0`.

    BAR0: 64 MiB, 64-bit prefetchable, resizable to 256 MiB; BAR2: 2 MiB, 64-bit; BAR5: 1 MiB register file.
    Memory is plain (no register behaviour); use `--mock-model` for a real simulator.
    """
    dev = MockPCIDevice(
        "SV",
        "mock:0",
        bars={
            0: BarSpec(64 * MIB, is64=True, prefetch=True),
            2: BarSpec(2 * MIB, is64=True, prefetch=True),
            5: BarSpec(1 * MIB, backing=DwordRegisterFile(1 * MIB)),
        },
        rebar={0: [64 * MIB, 256 * MIB]},
        shared_sysmem=True,  # DMA memory can be handed to unix-socket clients as an fd (MAP_SYSMEM_FD)
        lock=False,  # a simulation has no hardware to protect; parallel test servers must not collide
    )
    return [dev]


def _import_target(module: str) -> Any:
    if module.endswith(".py") or os.sep in module:
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise ValueError(f"--mock-model file {module!r} does not exist")
        name = f"_tg_pci_server_model_{abs(hash(path))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot load --mock-model file {module!r}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(module)


def load_mock_model(target: str) -> list[PCIDevice]:
    """Resolve `module:factory` (or `path/to/file.py:factory`), call the factory, return the device(s) it built.

    The factory takes no arguments and returns a `PCIDevice` (normally a `MockPCIDevice`) or a sequence of them. It is
    called once at server start, so the simulated state persists across client sessions.
    """
    module, sep, attr = target.rpartition(":")
    if not sep or not module or not attr:
        raise ValueError(f"--mock-model must look like 'package.module:factory' or 'file.py:factory', got {target!r}")
    try:
        obj: Any = _import_target(module)
    except ImportError as e:
        raise ValueError(f"--mock-model: cannot import {module!r}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"--mock-model: {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"--mock-model: {target!r} is not callable")
    built = obj()
    devices = [built] if isinstance(built, PCIDevice) else list(built) if isinstance(built, Sequence) else None
    if not devices or not all(isinstance(d, PCIDevice) for d in devices):
        raise ValueError(
            f"--mock-model: {target!r} must return a PCIDevice (e.g. MockPCIDevice) or a non-empty list of them, "
            f"got {type(built).__name__}"
        )
    return devices


def mock_provider(model: str | None) -> StaticProvider:
    """The provider of `--backend mock`: the built-in demo GPU, or the device(s) of `--mock-model`."""
    return StaticProvider(load_mock_model(model) if model else demo_devices())


def sysfs_provider(vendor: int, devices: DeviceFilter, base_class: int | None) -> list[tuple[DeviceFactory, str]]:
    """The provider of `--backend sysfs`: local PCI devices found on /sys/bus/pci, opened as LinuxPCIDevice.

    A device with a bound kernel driver is refused when a session opens it (DriverBoundError, sent to the client):
    the server never unbinds drivers.
    """
    from tg.drivers.pci import LinuxPCIDevice, scan_bus

    return [(LinuxPCIDevice, bus) for bus in scan_bus(vendor, devices, base_class)]
