"""The AMD device on the mock KFD (DEV=MOCKKFD+AMD): device strings and their errors, a kernel end to end, GPU
order by interface indices, and, in child processes (each has its own mock), the fault test of amd.md 4.6, an injected
memory fault and TG_MOCKGPU_EMU=0. The big suites (tests/test_tiny.py, test_hcq.py, test_jit.py, tests/test_multi.py)
run on the mock in CI's MOCKKFD+AMD stage."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tg.ir.helpers import Context
from tg.ir.target import TargetError
from tg.runtime.device import Device, DeviceUnavailable

pytest.importorskip("llvmlite", reason="the AMD device compiles with llvmlite (tg-runtime[llvm])")
ROOT = Path(__file__).resolve().parents[3]
CHILD_TIMEOUT = 300  # s: a guard against a hung child, not a timing requirement


def test_dev_amd_without_a_gpu_raises_one_clear_error() -> None:
    if os.path.exists("/dev/kfd"):
        pytest.skip("this machine has KFD")
    with Context(DEV="AMD"), pytest.raises(DeviceUnavailable, match=r"AMD: no AMD GPU here: .*KFD.* is not loaded"):
        Device["AMD"]


@pytest.mark.parametrize("dev, error", [
    ("FOO+AMD", "AMD has no interface 'FOO'; available: KFD, MOCKKFD, PCI, USB, MOCKPCI, MOCKUSB"),
    ("MOCKKFD+AMD:CLANG", "has no renderer 'CLANG'; available: LLVM"),
    ("MOCKKFD+AMD:LLVM:gfx1030", "unknown AMD arch 'gfx1030'; available: gfx1100"),
    ("MOCKPCI+AMD:LLVM:gfx1030", "unknown AMD arch 'gfx1030'; available: gfx1100"),  # the AM interfaces
    ("MOCKUSB+AMD:CLANG", "has no renderer 'CLANG'; available: LLVM"),
])  # fmt: skip
def test_device_strings_name_the_wrong_part(dev: str, error: str) -> None:
    with Context(DEV=dev), pytest.raises(TargetError, match=re.escape(error)):
        Device["AMD"]


def test_a_kernel_end_to_end_on_the_mock() -> None:
    from tg.tensor import Tensor

    with Context(DEV="MOCKKFD+AMD:LLVM:gfx1100"):
        dev = Device["AMD"]
        assert dev.arch == "gfx1100" and dev.emulated and dev.peer_group == "MOCKKFD+AMD"  # type: ignore[attr-defined]
        x = np.arange(40, dtype=np.float32)
        np.testing.assert_array_equal((Tensor(x, device="AMD") * 2 + 1).numpy(), x * 2 + 1)
        assert set(dev.hw_queues) == {"COMPUTE:0", "COPY:0"}  # type: ignore[attr-defined]


def test_interface_indices_order_the_gpus() -> None:
    with Context(DEV="MOCKKFD:1,0+AMD"):
        first, second = Device["AMD"], Device["AMD:1"]
        ids = [g.gpu_id for g in first.iface.kfd.gpus]  # type: ignore[attr-defined]
        assert (first.iface.gpu_id, second.iface.gpu_id) == (ids[1], ids[0])  # type: ignore[attr-defined]
        with pytest.raises(DeviceUnavailable, match="lists 2 GPU"):
            Device["AMD:2"]


def _child(code: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    full = {**os.environ, "DEV": "MOCKKFD+AMD", "HCQ_RUNTIME_DEV": "PYTHON", **env}
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=ROOT,
                         timeout=CHILD_TIMEOUT)  # fmt: skip
    return res, time.perf_counter() - start


FAULT_CHILD = """
import struct, sys, traceback
from tg.ir import dtypes
from tg.runtime.device import Buffer, Device
from tg.runtime.engine import CompiledRunner, method_cache
from tg.runtime.amd.program import CodeObject
from tg.tensor import Tensor

(Tensor.empty(1) + 1).realize()  # compiles the kernel and runs it
good = next(r for r in method_cache.values() if isinstance(r, CompiledRunner) and r.device == "AMD")
text = CodeObject(good.lib, good.p.name).elf.section(".text")
lib = bytearray(good.lib)
at = next(o for o in range(text.offset, text.offset + text.size, 4) if lib[o:o + 4] == struct.pack("<I", 0xBFB00000))
lib[at:at + 4] = struct.pack("<I", 0x7E01FE00)  # the first s_endpgm becomes a word no RDNA3 encoding has
bad = CompiledRunner(good.p, "AMD", bytes(lib))
bufs = [Buffer("AMD", 1, dtypes.float32).ensure_allocated() for _ in range(2)]
bad(bufs, {})
dev = Device["AMD"]
try:
    dev.synchronize()
except Exception:
    traceback.print_exc()
    print(f"error state: {type(dev.error_state).__name__}", file=sys.stderr)
    try:
        dev.synchronize()
    except Exception as e:
        print(f"afterwards: {e}", file=sys.stderr)
    sys.exit(1)
print("the bad kernel did not fail", file=sys.stderr)
"""


def test_a_bad_instruction_fails_the_device_at_once() -> None:
    # amd.md 4.6: exit 1, the word named, the device failed afterwards; found by the first wait, not the timeout
    res, seconds = _child(FAULT_CHILD)
    print(f"fault child: exit {res.returncode} after {seconds:.1f} s")
    assert res.returncode == 1, res.stderr[-3000:]
    assert "unknown rdna3 instruction word=0x7e01fe00" in res.stderr
    assert "error state: DeviceHangError" in res.stderr
    assert "afterwards: AMD is in an error state after an earlier hang" in res.stderr
    waited = re.search(r"waited for >= \d+ for ([\d.]+) s", res.stderr)
    assert waited is not None and float(waited.group(1)) < 9.0, res.stderr[-2000:]  # not HCQDEV_WAIT_TIMEOUT_MS


INJECTED_CHILD = """
import sys
import numpy as np
from tg.runtime.device import Device
from tg.tensor import Tensor

# GPU 1 retires dispatches without running them (TG_MOCKGPU_EMU=0): the queue completes, the output stays unwritten
y = (Tensor(np.ones(8, np.float32), device="AMD:1") + 1).realize()
print("emu off:", y.numpy().tolist(), Device["AMD:1"].mock.gpu(Device["AMD:1"].iface.gpu_id).dispatches)
# GPU 0's next dispatch faults at TG_MOCKGPU_FAULT_VA: KFD reports it through WAIT_EVENTS
try:
    (Tensor(np.ones(8, np.float32), device="AMD") + 1).realize()
    Device["AMD"].synchronize()
except Exception as e:
    print(f"fault: {type(e).__name__}: {e}")
    sys.exit(0)
print("no fault")
"""


def test_an_injected_memory_fault_and_emulation_off() -> None:
    res, _ = _child(INJECTED_CHILD, TG_MOCKGPU_FAULT_VA="0x7eed000", TG_MOCKGPU_EMU="0", HCQDEV_WAIT_TIMEOUT_MS="3000")
    assert res.returncode == 0, res.stderr[-3000:]
    emu = next(line for line in res.stdout.splitlines() if line.startswith("emu off:"))
    values, dispatches = emu[len("emu off: ") : emu.rindex("]") + 1], int(emu.rsplit(" ", 1)[1])
    assert dispatches >= 1 and "2.0" not in values  # dispatched, never computed
    assert "fault: DeviceHangError: AMD did not finish" in res.stdout
    assert "MMU fault at 0x7eed000: not present" in res.stdout
