"""The AMD device on the AM driver (DEV=MOCKPCI+AMD, DEV=MOCKUSB+AMD): the same PM4/SDMA queues as on KFD, run by
the register-level mock AM GPU. Device strings, a kernel end to end over PCI and USB with no register violations,
host memory refused where the GPU cannot reach it, peer-to-peer copies between two mock GPUs, and, in child processes
(each has its own mock GPUs), an injected page fault named in the DeviceHangError, the error state sticking until
``recover()``, the device usable afterwards, both engines restarted after a hang, and a clean
session end recorded for the next boot; ``PCI+AMD`` through ``REMOTE=`` against the real tg-pci-server serving a mock
AM GPU (a cold boot, then a partial boot from a new process). tests/test_tiny.py and test_hcq.py run on MOCKPCI+AMD in
CI's mockpci-amd stage (scripts/amd_check.sh)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tg.ir import dtypes
from tg.ir.helpers import Context
from tg.runtime.device import Buffer, Device, DeviceUnavailable

pytest.importorskip("llvmlite", reason="the AMD device compiles with llvmlite (tg-runtime[llvm])")
ROOT = Path(__file__).resolve().parents[3]
CHILD_TIMEOUT = 300  # s: a guard against a hung child, not a timing requirement


def test_pci_and_usb_without_a_gpu_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.drivers.pci.discovery import list_devices
    from tg.runtime.amd.am.iface import AMD_GPU_IDS

    monkeypatch.delenv("REMOTE", raising=False)
    if list_devices(0x1002, ((0xFFFF, AMD_GPU_IDS),)):
        pytest.skip("this machine has an AMD GPU on the PCI bus: opening it would reset and boot it")
    with Context(DEV="PCI+AMD"), pytest.raises(DeviceUnavailable) as e:
        Device["AMD"]
    assert str(e.value) == "PCI+AMD:0 does not exist (0 AMD GPU(s) on the PCI bus found)"
    try:
        from tg.drivers.usb.transport import USB3

        if USB3.list_devices(0xADD1, 0x0001) or USB3.list_devices(0x3801, 0x0001):
            pytest.skip("this machine has an ASM24 bridge")
    except (ImportError, OSError) as err:
        pytest.skip(f"no USB access here: {err}")
    with Context(DEV="USB+AMD"), pytest.raises(DeviceUnavailable, match=r"USB\+AMD:0 does not exist \(0 ASM24"):
        Device["AMD"]


def test_plain_amd_never_drives_a_pci_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # amd.md 1: only PCI+AMD / USB+AMD boot a GPU with the AM driver. With an AMD GPU on the PCI bus (here a mock AM GPU
    # a REMOTE= server offers, so discovery finds it), DEV=AMD and the default device still use KFD alone, and the
    # board is never touched
    if os.path.exists("/dev/kfd"):
        pytest.skip("this machine has KFD: DEV=AMD opens its GPUs")
    from tg.drivers.mock import RemoteServerThread
    from tg.drivers.pci.discovery import list_devices
    from tg.runtime.amd.am.iface import AMD_GPU_IDS
    from tg.runtime.amd.sim.am_gpu import MockAMGPU

    gpu = MockAMGPU(256, name="bystander")
    board = gpu.pci_device("AM", "mock:am:bystander", lock=False)
    with RemoteServerThread(device=board, unix_path=str(tmp_path / "pci.sock")) as srv:
        monkeypatch.setenv("REMOTE", srv.address)
        assert len(list_devices(0x1002, ((0xFFFF, AMD_GPU_IDS),))) == 1  # what PCI+AMD would open
        with Context(DEV="AMD"), pytest.raises(DeviceUnavailable, match="AMD: no AMD GPU here"):
            Device["AMD"]
        assert Device.DEFAULT != "AMD"
    assert gpu.events == [] and gpu.reg_value("SCRATCH_REG7") == 0 and gpu.queues == {}


@pytest.mark.parametrize("iface", ["MOCKPCI", "MOCKUSB"])
def test_a_kernel_end_to_end(iface: str) -> None:
    from tg.tensor import Tensor

    with Context(DEV=f"{iface}+AMD"):  # one target per board in a process (another string would open it again)
        dev = Device["AMD"]
        assert dev.arch == "gfx1100" and dev.emulated and dev.can_recover  # type: ignore[attr-defined]
        assert not dev.can_map_host  # type: ignore[attr-defined]  # the mock's host memory is not reachable by its GPU (nor over USB)
        x = np.arange(300, dtype=np.float32)
        np.testing.assert_array_equal((Tensor(x, device="AMD") * 2 + 1).numpy(), x * 2 + 1)
        assert set(dev.hw_queues) == {"COMPUTE:0", "COPY:0"}  # type: ignore[attr-defined]
        gpu = dev.am_mock  # type: ignore[attr-defined]
        assert gpu.core.dispatches >= 1 and gpu.violations == []
        # GPU addresses are not host addresses: the buffers live in the AM GPU's address range, reached through BAR0
        buf = Buffer("AMD", 300, dtypes.float32).ensure_allocated().copyin(x.data)._buf
        assert buf.va >= 0x2000_0000_0000 and buf.view is None and gpu.translate(buf.va) is not None
        with pytest.raises(ValueError, match="cannot use host memory at a raw pointer"):
            Tensor.from_blob(x.ctypes.data, (300,), device="AMD").realize()


def test_switching_dev_between_two_boards_runs_each_kernel_on_its_own_board(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.drivers.pci.discovery import list_devices
    from tg.runtime.amd.am.iface import AMD_GPU_IDS
    from tg.tensor import Tensor

    # "AMD" names another device under another DEV (each board stays open): the same schedule run again under the
    # second DEV, after a failed open of a third, must run on the second board, not on the first with the second's
    # buffers ("AMD memory cannot be mapped into AMD" before the HCQ launchers were keyed on DEV)
    monkeypatch.delenv("REMOTE", raising=False)
    if not list_devices(0x1002, ((0xFFFF, AMD_GPU_IDS),)):  # (a real AMD GPU would be reset and booted)
        with Context(DEV="PCI+AMD"), pytest.raises(DeviceUnavailable):
            Device["AMD"]
    x = np.arange(300, dtype=np.float32)
    boards: dict[str, object] = {}
    dispatches: dict[str, int] = {}
    for iface in ("MOCKPCI", "MOCKUSB", "MOCKPCI"):
        with Context(DEV=f"{iface}+AMD"):
            gpu = boards.setdefault(iface, Device["AMD"].am_mock)  # type: ignore[attr-defined]
            np.testing.assert_array_equal((Tensor(x, device="AMD") * 2 + 1).numpy(), x * 2 + 1)
            assert gpu.core.dispatches > dispatches.get(iface, 0) and gpu.violations == []  # type: ignore[attr-defined]
            dispatches[iface] = gpu.core.dispatches  # type: ignore[attr-defined]
    assert boards["MOCKPCI"] is not boards["MOCKUSB"]


def test_the_compiled_submitter_is_refused_with_the_remedy() -> None:
    from tg.tensor import Tensor

    # rings and signals live in VRAM behind a BAR view (no host pointers): only the interpreted submitter drives them
    with Context(DEV="MOCKPCI+AMD", HCQ_RUNTIME_DEV="CPU"), pytest.raises(RuntimeError) as e:
        (Tensor(np.ones(4, np.float32), device="AMD") + 1).realize()
    assert "HCQ_RUNTIME_DEV=CPU cannot drive AMD" in str(e.value) and "use HCQ_RUNTIME_DEV=PYTHON" in str(e.value)
    with Context(DEV="MOCKPCI+AMD"):  # the device is unharmed
        np.testing.assert_array_equal((Tensor(np.ones(4, np.float32), device="AMD") + 1).numpy(), np.full(4, 2.0))


def test_peer_to_peer_copies_between_two_mock_gpus() -> None:
    from tg.tensor import Tensor

    with Context(DEV="MOCKPCI+AMD"):
        d0, d1 = Device["AMD"], Device["AMD:1"]
        assert d0.peer_group == d1.peer_group == "MOCKPCI+AMD"  # type: ignore[attr-defined]
        data = np.random.default_rng(1).standard_normal(5000).astype(np.float32)
        y = (Tensor(data, device="AMD") * 2).to("AMD:1").realize()
        np.testing.assert_array_equal((y + 1).numpy(), data * 2 + 1)
        # the SDMA of GPU 0 wrote GPU 1's VRAM through GPU 1's BAR0 (its own bus address)
        assert d0.am_mock.bar0_bus != d1.am_mock.bar0_bus  # type: ignore[attr-defined]
        assert d0.am_mock.violations == d1.am_mock.violations == []  # type: ignore[attr-defined]


def _child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "DEV": "MOCKPCI+AMD", "HCQ_RUNTIME_DEV": "PYTHON", "TG_MOCKGPU_COUNT": "1", **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=ROOT,
                          timeout=CHILD_TIMEOUT)  # fmt: skip


FAULT_CHILD = """
import numpy as np
from tg.ir import dtypes
from tg.runtime.device import Buffer, Device, DeviceUnavailable
from tg.tensor import Tensor

dev = Device["AMD"]
# the first dispatch faults at TG_MOCKGPU_FAULT_VA: the mock posts a UTCL2 fault to the interrupt ring
try:  # the copy back waits on the SDMA queue for the faulted kernel's signal, which never comes
    (Tensor(np.ones(8, np.float32), device="AMD") + 1).numpy()
    print("no fault")
except Exception as e:
    print(f"fault: {type(e).__name__}: {e}")
print("error state:", type(dev.error_state).__name__)
try:
    dev.synchronize()
except Exception as e:
    print(f"sticky: {e}")
print("recover:", dev.recover(), dev.error_state)
print("recovered:", (Tensor(np.arange(8, dtype=np.float32), device="AMD") * 3).numpy().tolist())
print("queues:", sorted(dev.am_mock.queues), "violations:", dev.am_mock.violations)
"""


def test_an_injected_page_fault_is_named_and_recovered() -> None:
    res = _child(FAULT_CHILD, TG_MOCKGPU_FAULT_VA="0x7eed000", HCQDEV_WAIT_TIMEOUT_MS="5000")
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "fault: DeviceHangError: AMD did not finish" in out, out
    assert "GPU page fault at 0x7eed000" in out  # the address, decoded from the interrupt ring's UTCL2 entry
    assert re.search(r"waited for >= \d+ for 0\.\d s", out), out  # found by the first wait, not the timeout
    assert "recover() on the device resets its engines" in out
    assert "error state: DeviceHangError" in out and "sticky: AMD is in an error state after an earlier hang" in out
    assert "recover: True None" in out  # the compute engine reset, the ring restarted, the error state cleared
    assert "recovered: [0.0, 3.0, 6.0, 9.0, 12.0, 15.0, 18.0, 21.0]" in out
    assert "violations: []" in out


SESSION_CHILD = """
import numpy as np
from tg.runtime.amd.am import iface
from tg.ir import dtypes
from tg.runtime.device import Buffer, Device, DeviceUnavailable
from tg.tensor import Tensor

assert (Tensor(np.ones(4, np.float32), device="AMD") + 1).numpy().tolist() == [2.0] * 4
gpu = Device["AMD"].am_mock
print("during:", gpu.reg_value("SCRATCH_REG6"))
Device["AMD"].iface.close()  # what the exit handler does
print("after:", gpu.reg_value("SCRATCH_REG6"), "queues:", sorted(gpu.queues))
again = iface.AMIface("MOCKPCI", 0)
print("next session partial boot:", again.dev.partial_boot)
again.close()
"""


def test_a_session_ends_clean_for_the_next_boot() -> None:
    res = _child(SESSION_CHILD)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "during: 1" in res.stdout and "after: 0 queues: []" in res.stdout, res.stdout
    assert "next session partial boot: True" in res.stdout


HANG_CHILD = """
import numpy as np
from tg.runtime.device import Device
from tg.runtime.hcq import compile_queues, ir
from tg.runtime.hcq.exec import execute
from tg.runtime.hcq.link import link_batch
from tg.runtime.hcq.run import ENV, submitter_of
from tg.tensor import Tensor

dev = Device["AMD"]
never = ir.signal_buf("AMD", "signal", ("never", 0))
for queue in ("COPY:0", "COMPUTE:0"):  # both engines stuck in a wait for a signal nobody sets
    batch = compile_queues([ir.queue("AMD", queue, [ir.wait(never, 1)])], ENV)
    execute(link_batch(batch, submitter_of(batch), ENV, "auto", 1), [], None)
try:
    dev.synchronize()
    print("no hang")
except Exception as e:
    print(f"hang: {type(e).__name__}")
print("recover:", dev.recover())
x = np.arange(4096, dtype=np.float32)
print("after:", bool(((Tensor(x, device="AMD") * 3).numpy() == x * 3).all()), dev.am_mock.violations)
"""


def test_recover_restarts_both_engines_after_a_hang() -> None:
    # a hang (no fault): the compute and copy queues wait forever; recover() restarts both rings, so copies (SDMA)
    # and kernels work afterwards
    res = _child(HANG_CHILD, HCQDEV_WAIT_TIMEOUT_MS="1000")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "hang: DeviceHangError" in res.stdout and "recover: True" in res.stdout, res.stdout
    assert "after: True []" in res.stdout, res.stdout


REMOTE_CHILD = """
import hashlib
import numpy as np
from tg.runtime.amd.am import firmware
from tg.runtime.amd.sim import fw_fake
from tg.runtime.device import Device
from tg.tensor import Tensor

# the served board is a mock: it accepts the mock's fake firmware (TG_AMD_FW_DIR holds it), whose hashes tg must expect
firmware.FIRMWARE.update({n: hashlib.sha256(b).hexdigest() for n, b in fw_fake.fake_blobs().items()})
dev = Device["AMD"]
print("device:", dev.iface.kind, type(dev.iface.pci).__name__, "emulated:", dev.emulated)
print("partial boot:", dev.iface.dev.partial_boot, "host memory mapped:", dev.can_map_host)
x = np.arange(3000, dtype=np.float32)
print("result:", bool(((Tensor(x, device="AMD") * 2 + 1).numpy() == x * 2 + 1).all()))
"""


def test_remote_pci_through_the_pci_server_process(tmp_path: Path) -> None:
    # DEV=PCI+AMD with REMOTE= drives a board another process serves: the real tg-pci-server, on a unix socket, with a
    # mock AM GPU behind it (--mock-model). The first session boots it cold; the board stays booted in the server, so
    # the second session (a new process, as a user's next run) boots partially on a GPU whose VRAM still holds the
    # first session's queues and counters
    pytest.importorskip("tg_pci_server", reason="the tg-pci-server distribution is not installed")
    from tg.runtime.amd.sim import fw_fake

    fw = tmp_path / "firmware"
    fw.mkdir()
    for name, blob in fw_fake.fake_blobs().items():
        (fw / name).write_bytes(blob)
    sock = tmp_path / "pci.sock"
    server = subprocess.Popen([sys.executable, "-m", "tg_pci_server", "--mock-model",
                               "tg.runtime.amd.sim.am_gpu:served_device", "--unix", str(sock)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None and server.stderr is not None
        line = server.stdout.readline().strip()
        assert line == f"listening on {sock}", (line, server.stderr.read() if server.poll() is not None else "")
        for boot in ("False", "True"):
            res = _child(REMOTE_CHILD, DEV="PCI+AMD", REMOTE=f"unix:{sock}", TG_AMD_FW_DIR=str(fw))
            assert res.returncode == 0, res.stderr[-3000:]
            assert "device: PCI RemotePCIDevice emulated: False" in res.stdout, res.stdout
            assert f"partial boot: {boot} host memory mapped: True" in res.stdout, res.stdout
            assert "result: True" in res.stdout, res.stdout
    finally:
        server.terminate()
        try:
            _, err = server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
    assert "stopped after 2 session(s)" in err, err
