"""LinuxPCIDevice against a fake sysfs tree: config space, BARs, resize, reset, driver binding, permissions."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tg.drivers.errors import DeviceBusyError, DeviceNotFoundError, DriverBoundError, NoPCIBusError
from tg.drivers.mmio import HostMMIO
from tg.drivers.pci import LinuxPCIDevice

BUS = "0000:03:00.0"


@pytest.fixture
def gpu(fake_sysfs: Any) -> Any:
    fake_sysfs.add_device(BUS, bars={0: 1 << 20, 2: 0x4000, 5: 0x8000}, resize_mask={0: 0x3F00})
    return fake_sysfs


def test_config_little_endian_read_write(gpu: Any) -> None:
    with LinuxPCIDevice("AM", BUS) as dev:
        assert dev.cfg_size == 4096
        assert dev.read_config(0, 4) == 0x744C1002 and dev.read_config(2, 2) == 0x744C
        dev.write_config(0x41, 0xAABBCC, 4)
        dev.write_config_flush(0x48, 0x1234, 2)
        with open(gpu.path(BUS, "config"), "rb") as f:
            raw = f.read()
        assert raw[0x41:0x45] == bytes([0xCC, 0xBB, 0xAA, 0x00]) and raw[0x48:0x4A] == b"\x34\x12"
        assert dev.read_config(0x42, 1) == 0xBB
        for bad in [(4095, 4), (-1, 1), (0, 3)]:
            with pytest.raises(ValueError):
                dev.read_config(*bad)
        with pytest.raises(ValueError, match="does not fit"):
            dev.write_config(0, 0x100, 1)
    with open(gpu.path(BUS, "enable")) as f:
        assert f.read() == "1"  # the device was enabled


def test_legacy_config_size(fake_sysfs: Any) -> None:
    fake_sysfs.add_device(BUS, cfg_size=256)
    with LinuxPCIDevice("AM", BUS) as dev:
        assert dev.cfg_size == 256
        with pytest.raises(ValueError, match="0x100-byte config space"):
            dev.read_config(0x100, 4)


def test_bar_info_parsing(gpu: Any) -> None:
    with LinuxPCIDevice("AM", BUS) as dev:
        assert dev.bar_info(0) == (0xF000_0000, 1 << 20)
        assert dev.bar_info(5) == (0xF000_0000 + 5 * 0x1000_0000, 0x8000)
        assert dev.bar_info(1) == (0, 0)  # absent BAR
        with pytest.raises(ValueError, match="BAR index"):
            dev.bar_info(6)
        with pytest.raises(ValueError, match=r"BAR 1 .* is absent"):
            dev.map_bar(1)


def test_map_bar_reads_and_writes_the_resource_file(gpu: Any) -> None:
    with LinuxPCIDevice("AM", BUS) as dev:
        v = dev.map_bar(5, fmt="I")
        assert isinstance(v, HostMMIO) and v.nbytes == 0x8000
        v[3] = 0xDEADBEEF
        part = dev.map_bar(5, off=0x1006, size=10)  # unaligned offset: mapped from the page, then a sub-view
        part.write(0, b"0123456789")
        tail = dev.map_bar(5, off=0x7000)
        assert tail.nbytes == 0x1000
        with pytest.raises(ValueError, match="exceeds the BAR size"):
            dev.map_bar(5, off=0x7000, size=0x1001)
    with open(gpu.path(BUS, "resource5"), "rb") as f:
        raw = f.read()
    assert raw[12:16] == bytes([0xEF, 0xBE, 0xAD, 0xDE]) and raw[0x1006:0x1010] == b"0123456789"


def test_views_refuse_access_after_close(gpu: Any) -> None:
    dev = LinuxPCIDevice("AM", BUS)
    bar = dev.map_bar(5, fmt="I")
    bar[0] = 1
    dev.close()
    with pytest.raises(RuntimeError, match="no longer mapped"):
        bar[0]
    with pytest.raises(RuntimeError, match="no longer mapped"):
        bar.view(4).read(0, 4)


def test_resize_bar_writes_largest_index(gpu: Any) -> None:
    with LinuxPCIDevice("AM", BUS) as dev:
        dev.bar_info(0)
        dev.resize_bar(0)
        with open(gpu.path(BUS, "resource0_resize")) as f:
            assert f.read() == "13"  # mask 0x3f00: sizes 2^8..2^13 MiB
        with pytest.raises(RuntimeError, match=r"Cannot resize BAR 2: .*Ensure the resizable BAR option is enabled"):
            dev.resize_bar(2)


def test_reset_writes_sysfs(gpu: Any) -> None:
    with LinuxPCIDevice("AM", BUS) as dev:
        dev.reset()
    with open(gpu.path(BUS, "reset")) as f:
        assert f.read() == "1"
    os.remove(gpu.path(BUS, "reset"))
    with LinuxPCIDevice("AM", BUS) as dev, pytest.raises(RuntimeError, match="no reset method"):
        dev.reset()


def test_bound_driver_is_refused_unless_unbinding_requested(fake_sysfs: Any) -> None:
    fake_sysfs.add_device(BUS, driver="amdgpu")
    with pytest.raises(DriverBoundError, match=r"driver 'amdgpu' is bound to 0000:03:00.0.*drivers/amdgpu/unbind"):
        LinuxPCIDevice("AM", BUS)
    with open(fake_sysfs.path(BUS, "enable")) as f:
        assert f.read().strip() == "0"  # nothing was touched
    # the fake unbind file cannot remove the symlink: unbinding "fails" and is reported
    with pytest.raises(DriverBoundError, match=r"Driver is bound to 0000:03:00.0"):
        LinuxPCIDevice("AM", BUS, unbind_driver=True)
    with open(os.path.join(fake_sysfs.root, "bus/pci/drivers/amdgpu/unbind")) as f:
        assert f.read() == BUS


def test_failed_open_releases_lock(fake_sysfs: Any) -> None:
    fake_sysfs.add_device(BUS, driver="amdgpu")
    with pytest.raises(DriverBoundError):
        LinuxPCIDevice("AM", BUS)
    os.remove(fake_sysfs.path(BUS, "driver"))
    with LinuxPCIDevice("AM", BUS):
        pass


def test_remove_siblings_is_opt_in(fake_sysfs: Any) -> None:
    fake_sysfs.add_device(BUS)
    fake_sysfs.add_device("0000:03:00.1", device=0xAB30)
    with LinuxPCIDevice("AM", BUS):
        pass
    assert not os.path.exists(fake_sysfs.path("0000:03:00.1", "remove"))
    with LinuxPCIDevice("AM", BUS, remove_siblings=True):
        pass
    with open(fake_sysfs.path("0000:03:00.1", "remove")) as f:
        assert f.read() == "1"


def test_lock_excludes_second_open_and_close_is_idempotent(gpu: Any) -> None:
    dev = LinuxPCIDevice("AM", BUS)
    with pytest.raises(DeviceBusyError, match=r"am_0000:03:00.0.lock"):
        LinuxPCIDevice("am", BUS)
    LinuxPCIDevice("SV", BUS).close()  # another prefix is another lock (tinygrad's scheme)
    dev.close()
    dev.close()
    with pytest.raises(RuntimeError, match="closed"):
        dev.read_config(0, 4)
    LinuxPCIDevice("AM", BUS).close()


def test_missing_device_and_bus(fake_sysfs: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    with pytest.raises(DeviceNotFoundError, match=r"PCI device 0000:09:00.0 does not exist"):
        LinuxPCIDevice("AM", "0000:09:00.0")
    with pytest.raises(ValueError, match="must look like"):
        LinuxPCIDevice("AM", "../../etc")
    monkeypatch.setenv("TG_DRIVERS_SYSFS_ROOT", str(tmp_path / "none"))
    with pytest.raises(NoPCIBusError):
        LinuxPCIDevice("AM", BUS)


@pytest.mark.skipif(os.geteuid() == 0, reason="root bypasses file permissions")
def test_permission_error_names_capabilities(gpu: Any) -> None:
    os.chmod(gpu.path(BUS, "enable"), 0o400)
    with pytest.raises(PermissionError, match="cap_sys_admin") as e:
        LinuxPCIDevice("AM", BUS)
    assert "setcap" in str(e.value) and "enable" in str(e.value)


def test_permission_error_text_via_simulated_denial(gpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same check when tests run as root: make opening ``enable`` fail with EACCES."""
    import builtins

    real_open = builtins.open

    def deny(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).endswith("/enable"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", deny)
    with pytest.raises(PermissionError, match=r"no permission to open PCI device 0000:03:00.0 .*setcap") as e:
        LinuxPCIDevice("AM", BUS)
    assert "cap_sys_rawio" in str(e.value) and "cap_ipc_lock" in str(e.value)


def test_vfio_requested_but_unavailable_falls_back(gpu: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"), LinuxPCIDevice("AM", BUS, use_vfio=True) as dev:
        assert dev.irq_poller is None and dev.irq_fd is None
        assert dev.read_config(0, 2) == 0x1002
    assert "vfio" in caplog.text.lower()


def test_vfio_container_failure_falls_back(
    gpu: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tg.drivers.pci import linux

    params = os.path.join(gpu.root, "module", "vfio", "parameters")
    os.makedirs(params)
    with open(os.path.join(params, "enable_unsafe_noiommu_mode"), "w") as f:
        f.write("0")
    devroot = tmp_path / "dev-vfio"
    devroot.mkdir()
    (devroot / "vfio").write_bytes(b"")  # a regular file: the VFIO ioctls fail with ENOTTY
    monkeypatch.setattr(linux, "VFIO_DEV_ROOT", str(devroot))
    monkeypatch.setattr(linux, "_vfio_container", None)
    monkeypatch.setenv("VFIO", "1")
    with caplog.at_level("WARNING"), LinuxPCIDevice("AM", BUS) as dev:
        assert dev.irq_fd is None
    with open(os.path.join(params, "enable_unsafe_noiommu_mode")) as f:
        assert f.read() == "1"
    assert "VFIO requested but unavailable" in caplog.text
    with open(gpu.path(BUS, "enable")) as f:
        assert f.read() == "1"  # fell back to the sysfs enable path
