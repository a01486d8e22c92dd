"""The AM driver's bring-up on the mock AM GPU (amd.md 5.3, 6.3): cold boot in the firmware's order, partial boot on a
second open, AM_RESET, a crashed or failed session forcing a full boot with a mode-1 reset, the USB path, firmware
errors, discovery, the memory manager against the mock's page-table walker; no strict-mode violations anywhere."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("tg.drivers")

from tg.runtime.amd.am import AM_TAG, AMDev, FirmwareFiles, discovery
from tg.runtime.amd.am.firmware import FIRMWARE
from tg.runtime.amd.am.memory import HUGE, PAGE, MemoryManager, RangeAllocator
from tg.runtime.amd.sim import fw_fake
from tg.runtime.amd.sim.am_gpu import GC_INFO, IP_LAYOUT, MockAMGPU


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_DRIVERS_LOCK_DIR", str(tmp_path))


@pytest.fixture
def gpu() -> Iterator[MockAMGPU]:
    g = MockAMGPU(256)
    yield g
    assert g.violations == []


def boot(gpu: MockAMGPU, **kw: object) -> tuple[AMDev, object]:
    pci = gpu.pci_device()
    return AMDev(pci, firmware=fw_fake.firmware_files(), hw_delays=False, **kw), pci  # type: ignore[arg-type]


def psp_events(gpu: MockAMGPU, since: int = 0) -> list[str]:
    return [e for e in gpu.events[since:] if e.startswith(("psp", "smu"))]


def test_cold_boot_follows_the_firmware_order(gpu: MockAMGPU) -> None:
    dev, pci = boot(gpu)
    ev = psp_events(gpu)
    bl = [e.split()[2] for e in ev if e.startswith("psp bootloader")]
    assert bl == ["LOAD_KEY_DATABASE", "LOAD_TOS_SPL_TABLE", "LOAD_SYSDRV", "LOAD_SOCDRV", "LOAD_INTFDRV",
                  "LOAD_DBGDRV", "LOAD_RASDRV", "LOAD_SOSDRV"]  # fmt: skip
    order = [
        next(i for i, e in enumerate(ev) if e.startswith("psp bootloader LOAD_SOSDRV")),
        ev.index("psp ring created"),
        ev.index("psp LOAD_TOC"),
        ev.index("psp LOAD_IP_FW SMU"),
        ev.index("psp SETUP_TMR"),
        ev.index("psp LOAD_IP_FW RS64_MEC"),
        ev.index("psp LOAD_IP_FW RLC_G"),
        ev.index("psp AUTOLOAD_RLC"),
    ]
    assert order == sorted(order)
    assert not any("refused" in e for e in ev)
    # the PSP got each image the files hold
    fw = dev.fw
    loaded = gpu.psp.loaded
    assert loaded[fw.ip[2][0][0]] == hashlib.sha256(fw.ip[2][1]).hexdigest()
    assert fw.ip[2][1].startswith(b"fake:gc_11_0_0_mec.bin:code")
    assert gpu.reg_value("SCRATCH_REG7") == AM_TAG and gpu.reg_value("SCRATCH_REG6") == 1
    assert not dev.partial_boot and "smu mode1 reset" not in gpu.events
    assert dev.ip_versions["GC"] == (11, 0, 0) and dev.vram_size == 256 << 20
    dev.fini()
    assert gpu.reg_value("SCRATCH_REG6") == 0
    pci.close()  # type: ignore[attr-defined]


def test_second_open_is_a_partial_boot(gpu: MockAMGPU) -> None:
    dev, pci = boot(gpu)
    dev.fini()
    pci.close()  # type: ignore[attr-defined]
    n = len(gpu.events)
    dev2, pci2 = boot(gpu)
    assert dev2.partial_boot
    assert psp_events(gpu, n) == []  # no PSP or SMU-reset traffic
    assert dev2.mm.root == dev.mm.root and dev2.ih.rings == dev.ih.rings  # boot memory did not move
    assert gpu.reg_value("SCRATCH_REG6") == 1
    dev2.fini()
    pci2.close()  # type: ignore[attr-defined]


def test_am_reset_forces_a_full_boot_with_mode1_reset(gpu: MockAMGPU, monkeypatch: pytest.MonkeyPatch) -> None:
    dev, pci = boot(gpu)
    dev.fini()
    pci.close()  # type: ignore[attr-defined]
    n = len(gpu.events)
    monkeypatch.setenv("AM_RESET", "1")
    from tg.ir.helpers import Context

    with Context(AM_RESET=1):
        dev2, pci2 = boot(gpu)
    ev = psp_events(gpu, n)
    assert not dev2.partial_boot
    assert ev[0] == "smu mode1 reset" and "psp AUTOLOAD_RLC" in ev
    dev2.fini()
    pci2.close()  # type: ignore[attr-defined]


def test_crashed_session_forces_a_full_boot(gpu: MockAMGPU) -> None:
    _, pci = boot(gpu)
    pci.close()  # type: ignore[attr-defined]  # no fini: the session died, SCRATCH_REG6 stays 1
    assert gpu.reg_value("SCRATCH_REG6") == 1
    n = len(gpu.events)
    dev2, pci2 = boot(gpu)
    assert not dev2.partial_boot
    ev = psp_events(gpu, n)
    assert ev[0] == "smu mode1 reset" and ev[-1] == "psp AUTOLOAD_RLC"
    dev2.fini()
    pci2.close()  # type: ignore[attr-defined]


def test_board_left_by_the_kernel_driver_is_reset_first() -> None:
    gpu = MockAMGPU(256, cold=False)  # sOS and SMU running, no AM tag
    dev, pci = boot(gpu)
    assert not dev.partial_boot and psp_events(gpu)[0] == "smu mode1 reset"
    assert gpu.violations == []
    pci.close()  # type: ignore[attr-defined]


def test_failed_partial_boot_is_recovered_by_the_next_session(gpu: MockAMGPU) -> None:
    dev, pci = boot(gpu)
    dev.fini()
    pci.close()  # type: ignore[attr-defined]
    from tg.runtime.amd.am.gfx import GFX

    def broken(self: GFX) -> None:
        raise RuntimeError("injected failure while resetting the MEC")

    pci2 = gpu.pci_device()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(GFX, "reset_mec", broken)
        with pytest.raises(RuntimeError, match="injected failure"):
            AMDev(pci2, firmware=fw_fake.firmware_files(), hw_delays=False)
    pci2.close()
    assert gpu.reg_value("SCRATCH_REG6") == 1  # marked unfinished before anything was touched
    n = len(gpu.events)
    dev3, pci3 = boot(gpu)
    assert not dev3.partial_boot and psp_events(gpu, n)[0] == "smu mode1 reset"
    dev3.fini()
    pci3.close()  # type: ignore[attr-defined]


def test_usb_bridge_boot() -> None:
    from tg.drivers.usb.usbpci import USBPCIDevice

    gpu = MockAMGPU(256)
    dev = AMDev(USBPCIDevice("AM", gpu.usb_bridge(), "usb:mock-am"), firmware=fw_fake.firmware_files(), hw_delays=False)
    assert not dev.large_bar or dev.vram.nbytes >= dev.vram_size
    assert "psp AUTOLOAD_RLC" in gpu.events and gpu.violations == []
    dev.fini()
    assert gpu.reg_value("SCRATCH_REG6") == 0


def test_missing_firmware_names_files_and_places(tmp_path: Path) -> None:
    files = FirmwareFiles([tmp_path])
    with pytest.raises(FileNotFoundError) as e:
        files.load_all(list(FIRMWARE))
    msg = str(e.value)
    assert all(name in msg for name in FIRMWARE) and str(tmp_path) in msg and "TG_AMD_FW_DIR" in msg


def test_wrong_firmware_hash_is_refused(tmp_path: Path) -> None:
    for name, blob in fw_fake.fake_blobs().items():
        (tmp_path / name).write_bytes(blob)
    with pytest.raises(ValueError, match=r"psp_13_0_0_sos.bin has sha256 [0-9a-f]{64}, tg expects 4a51299f"):
        FirmwareFiles([tmp_path]).load_all(["psp_13_0_0_sos.bin"])
    assert FirmwareFiles([tmp_path], hashes={n: hashlib.sha256(b).hexdigest() for n, b in
                                             fw_fake.fake_blobs().items()}).load_all(["sdma_6_0_0.bin"])  # fmt: skip


def test_discovery_round_trip_and_props() -> None:
    d = discovery.parse(discovery.build(IP_LAYOUT, GC_INFO).ljust(discovery.TABLE_BYTES, b"\0"))
    assert d.versions == {ip: v for ip, (v, _) in IP_LAYOUT.items()}
    assert d.bases["GC"][0][:2] == (0x1260, 0xA000)
    p = d.props()
    assert (p["simd_count"], p["array_count"], p["simd_arrays_per_engine"], p["cu_per_simd_array"]) == (192, 12, 2, 8)
    assert p["gfx_target_version"] == 110000 and p["lds_size_in_kb"] == 64 and p["max_slots_scratch_cu"] == 32
    with pytest.raises(discovery.DiscoveryError, match="binary signature 0x00000000"):
        discovery.parse(bytes(discovery.TABLE_BYTES))


def test_range_allocator_coalesces() -> None:
    a = RangeAllocator(1 << 20, base=0x1000_0000)
    x, y, z = a.alloc(0x1000), a.alloc(0x4000, 0x4000), a.alloc(0x1000)
    assert y % 0x4000 == 0 and len({x, y, z}) == 3
    for p in (y, x, z):
        a.free(p)
    assert a.free_bytes == 1 << 20 and list(a.free_blocks.items()) == [(0x1000_0000, 1 << 20)]
    with pytest.raises(MemoryError, match="no free range of 0x200000 bytes"):
        a.alloc(2 << 20)
    with pytest.raises(ValueError, match="not an allocation"):
        a.free(x)


def test_page_tables_match_the_mock_walker(gpu: MockAMGPU) -> None:
    dev, pci = boot(gpu)
    mm = dev.mm
    small = mm.valloc(3 * PAGE)
    big = mm.valloc(8 << 20)
    host_va = MemoryManager.alloc_va(2 * PAGE)
    host = mm.map_range(host_va, 2 * PAGE, [(0x1_2345_6000, PAGE), (0x1_3000_0000, PAGE)], system=True, snooped=True)
    for m in (small, big, host):
        for off in (0, PAGE + 8, m.size - 4):
            want = mm.translate(m.va + off)
            got = gpu.translate(m.va + off)
            assert want is not None and got is not None and (got[0], got[1]) == want
    assert gpu.translate(big.va + HUGE)[2] == HUGE  # type: ignore[index]  # a 2 MiB page
    assert gpu.translate(host.va + PAGE)[:2] == (0x1_3000_0000, True)  # type: ignore[index]
    mm.vfree(small)
    assert mm.translate(small.va) is None and gpu.translate(small.va) is None  # unmapped and the TLB invalidated
    with pytest.raises(ValueError, match="outside the AM GPU address range"):
        mm.translate(0x1000)
    dev.fini()
    pci.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["MOCKPCI", "MOCKUSB"])
def test_interface_memory_and_reopen(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.runtime.amd.am import iface

    monkeypatch.setattr(iface, "_mock_gpus", {kind: [MockAMGPU(256)]})
    am = iface.AMIface(kind, 0)
    assert not am.dev.partial_boot and am.props["gfx_target_version"] == 110000
    assert am.can_map_host is False  # mocks (and USB) copy through staging, host memory is not DMA-able
    a = am.alloc(100, uncached=True, cpu_access=True)
    a.view.write(0, b"signal!!")
    phys, system = am.dev.mm.translate(a.va)  # type: ignore[misc]
    assert not system and bytes(am.dev.vram.read(phys, 8)) == b"signal!!"
    big = am.alloc(9 << 20)
    assert big.view is None and big.va % (2 << 20) == 0
    am.free(a)
    am.free(big)
    assert am.dev.mm.translate(a.va) is None
    with pytest.raises(ValueError, match="queue kind"):
        am.create_queue("video", 4096)
    am.close()
    again = iface.AMIface(kind, 0)
    assert again.dev.partial_boot
    again.close()
    with pytest.raises(Exception, match=f"{kind}\\+AMD:1 does not exist"):
        iface.AMIface(kind, 1)
    assert iface._mock_gpus[kind][0].violations == []
