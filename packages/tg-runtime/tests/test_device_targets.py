"""Device strings reach the backends: Device[name] opens a device with the Target that DEV gives it (renderer, arch,
interface), the arch drives the C compiler's flags and the renderer's vector widths, and a bad string fails once,
naming the wrong part and the choices."""

import shutil
import subprocess

import numpy as np
import pytest

from tg.codegen.program import get_program
from tg.ir import Context, Target, TargetError
from tg.ir.dtype import dtypes
from tg.ir.uop import UOp
from tg.runtime.backends.cpu import CPUDevice
from tg.runtime.c_compiler import find_c_compiler, host_cpu_flags, probe_vector_bytes, target_macros
from tg.runtime.cpu_arch import AARCH64, CPU_ARCHS, X86_64, cpu_arch, host_machine
from tg.runtime.device import Buffer, Device, DeviceUnavailable, instance_target
from tg.runtime.engine import get_runner

HOST = host_machine()
NATIVE_MACROS = target_macros(find_c_compiler(), host_cpu_flags())


def runs_here(arch: str) -> bool:
    """Whether code for this named arch executes on the machine running the tests."""
    a = CPU_ARCHS[arch]
    return a.machine == HOST and all(f in NATIVE_MACROS for f in a.features)


def axpy_ast() -> UOp:
    """out[i] = a[i] * 3 + b[i] over 1024 float32: a kernel the heuristics vectorise at the widest float32 vector."""
    r = UOp.range(1024, 0)
    a, b = (UOp.param(i, dtypes.float32, 1024).index(r).load() for i in (1, 2))
    return UOp.sink(UOp.param(0, dtypes.float32, 1024).index(r).store(a * UOp.const(dtypes.float32, 3.0) + b).end(r))


def test_plain_names_open_with_their_plain_target() -> None:
    with Context(DEV=""):
        assert Device["CPU"].target == Target("CPU")
        assert Device["cpu:1"].target == Target("CPU", index=1)
        assert Device.target("CPU:0") == Target("CPU")
    assert instance_target("DISK:/tmp/x") == Target("DISK", path="/tmp/x")


def test_dev_gives_every_instance_of_its_device_the_renderer_and_arch() -> None:
    with Context(DEV="PYTHON;CPU:CLANG:x86-64-v2"):
        assert Device.DEFAULT == "PYTHON"
        assert Device.target("CPU") == Target("CPU", renderer="CLANG", arch="x86-64-v2")
        assert Device.target("CPU:1") == Target("CPU", index=1, renderer="CLANG", arch="x86-64-v2")
        assert Device.target("PYTHON") == Target("PYTHON")


@pytest.mark.parametrize("arch", ["x86-64-v2", "x86-64-v3", "x86-64"])
def test_the_arch_sets_march_and_the_vector_width_and_the_code_runs(arch: str) -> None:
    if not runs_here(arch):
        pytest.skip(f"{arch} code does not run on this {HOST} CPU")
    want = CPU_ARCHS[arch]
    with Context(DEV=f"CPU:CLANG:{arch}"):
        dev = Device["CPU"]
        assert isinstance(dev, CPUDevice) and dev.target.arch == arch
        assert f"-march={arch}" in dev.compiler.flags
        assert dev.renderer.vector_bytes == want.vector_bytes
        runner = get_runner("CPU", axpy_ast())
        assert f"tg_f32x{want.vector_bytes // 4}" in runner.p.src
        a, b = np.arange(1024, dtype=np.float32), np.linspace(-1, 1, 1024, dtype=np.float32)
        bufs = [Buffer("CPU", 1024, dtypes.float32).ensure_allocated() for _ in range(3)]
        bufs[1].copyin(a.data)
        bufs[2].copyin(b.data)
        runner(bufs, {})
        out = np.frombuffer(bufs[0].as_memoryview(), dtype=np.float32)
        np.testing.assert_array_equal(out, a * np.float32(3) + b)


def test_each_target_keeps_its_own_compiled_kernels() -> None:
    if not (runs_here("x86-64-v2") and runs_here("x86-64-v3")):
        pytest.skip("needs an x86-64 host with AVX2")
    ast = axpy_ast()
    with Context(DEV="CPU:CLANG:x86-64-v2"):
        narrow = get_runner("CPU", ast)
    with Context(DEV="CPU:CLANG:x86-64-v3"):
        wide = get_runner("CPU", ast)
    assert narrow is not wide and "tg_f32x4" in narrow.p.src and "tg_f32x8" in wide.p.src


def test_native_probes_the_host_compiler() -> None:
    with Context(DEV="CPU:CLANG:native"):
        dev = Device["CPU"]
        assert dev.compiler.flags[-len(host_cpu_flags()) :] == host_cpu_flags() or not host_cpu_flags()
        assert dev.renderer.vector_bytes == probe_vector_bytes(dev.compiler.cc, dev.compiler.flags)


def test_an_arch_this_cpu_cannot_run_is_refused_with_what_is_missing() -> None:
    foreign = "cortex-a72" if HOST == X86_64 else "x86-64-v3"
    with Context(DEV=f"CPU:CLANG:{foreign}"), pytest.raises(DeviceUnavailable, match=f"{foreign} is an .* arch"):
        Device["CPU"]
    if HOST == X86_64 and not runs_here("x86-64-v4"):
        with Context(DEV="CPU:CLANG:x86-64-v4"), pytest.raises(DeviceUnavailable, match="lacks AVX512F"):
            Device["CPU"]


@pytest.mark.parametrize(
    "dev, words",
    [
        ("CPU:CLANG:pentium9", ["unknown CPU arch 'pentium9'", "x86-64-v3", "cortex-a72", "native"]),
        ("CPU:CUDA", ["CPU has no renderer 'CUDA'", "available: CLANG"]),
        ("FOO+CPU", ["CPU has no interface 'FOO'"]),
        ("PYTHON::x86-64", ["PYTHON takes no arch"]),
        ("NULL:CL:gfx1100", ["NULL takes no arch", "NULL:CL"]),
        ("NULL:CUDA:90", ["CUDA arch '90'", "sm_90"]),
        ("NULL:CLANG:sm_90", ["unknown CPU arch 'sm_90'"]),
        ("NULL:LLAMA", ["unknown renderer 'LLAMA'"]),
    ],
)
def test_a_bad_device_string_fails_naming_the_part_and_the_choices(dev: str, words: list[str]) -> None:
    device = dev.split("+")[-1].split(":")[0]
    with Context(DEV=dev), pytest.raises(TargetError) as info:
        Device[device]
    for word in words:
        assert word in str(info.value)
    assert f"device string '{dev}'" in str(info.value) or dev in str(info.value)


def test_an_instance_name_carries_no_renderer() -> None:
    with pytest.raises(ValueError, match=r"index must be a non-negative integer.*DEV=CPU:LLVM"):
        Device["CPU:LLVM"]


def test_an_interface_opens_the_class_the_backend_names(monkeypatch: pytest.MonkeyPatch) -> None:
    # a backend lists its interfaces as lazily imported classes; any Compiled subclass can stand in for one here
    monkeypatch.setattr(CPUDevice, "interfaces", {"SIM": "tg.runtime.backends.python:PYTHONDevice"})
    with Context(DEV="SIM+CPU"):
        dev = Device["CPU"]
        assert type(dev).__name__ == "PYTHONDevice" and dev.target == Target("CPU", iface="SIM")
        assert Device.DEFAULT == "CPU"
    with Context(DEV="SIM+CPU:CLANG"), pytest.raises(TargetError, match="SIM\\+CPU has no renderer 'CLANG'"):
        Device["CPU"]


@pytest.mark.parametrize("arch", sorted(a for a in CPU_ARCHS if CPU_ARCHS[a].machine == X86_64))
def test_x86_arch_table_agrees_with_the_compiler(arch: str) -> None:
    if HOST != X86_64:
        pytest.skip("the host compiler targets another family")
    a = CPU_ARCHS[arch]
    cc = find_c_compiler()
    assert probe_vector_bytes(cc, a.flags) == a.vector_bytes
    macros = target_macros(cc, a.flags)
    assert ("__FMA__" in macros) == a.fma
    assert set(a.features) <= macros


@pytest.mark.parametrize("arch", sorted(a for a in CPU_ARCHS if CPU_ARCHS[a].machine == AARCH64))
def test_aarch64_arch_table_agrees_with_clang(arch: str) -> None:
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("needs clang (it targets aarch64 from any host)")
    a = CPU_ARCHS[arch]
    cmd = [clang, "--target=aarch64-linux-gnu", *a.flags, "-dM", "-E", "-x", "c", "/dev/null"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if res.returncode != 0:
        pytest.skip(f"this clang does not know {a.flags[0]}: {res.stderr.strip()[:200]}")
    macros = {line.split()[1] for line in res.stdout.splitlines() if line.startswith("#define ")}
    assert "__ARM_NEON" in macros and ("__ARM_FEATURE_FMA" in macros) == a.fma and a.vector_bytes == 16


def test_aarch64_choices_render_through_null() -> None:
    ast = axpy_ast()
    for arch in ("cortex-a72", "neoverse-n1", "armv8-a"):
        with Context(DEV=f"NULL:CLANG:{arch}"):
            dev = Device["NULL"]
            assert dev.renderer.vector_bytes == 16  # NEON: 128-bit registers
            prg = get_program(ast, dev.renderer)
            assert "tg_f32x4" in prg.src and "tg_f32x8" not in prg.src
            flag = CPU_ARCHS[arch].flags[0]
            assert flag.startswith("-mcpu=" if arch.startswith(("cortex", "neoverse")) else "-march=")
            if HOST == AARCH64:
                assert flag in dev.compiler.flags  # type: ignore[attr-defined]
            get_runner("NULL", ast)  # renders (and on an aarch64 host compiles); runs nothing


def test_null_compiles_c_for_an_arch_this_cpu_lacks() -> None:
    if HOST != X86_64:
        pytest.skip("x86 archs compile on an x86 host")
    with Context(DEV="NULL:CLANG:x86-64-v4"):
        runner = get_runner("NULL", axpy_ast())
        assert "tg_f32x16" in runner.p.src
        assert runner.lib[:4] == b"\x7fELF"  # a shared object, compiled with -march=x86-64-v4, never run


def test_cpu_arch_of_a_target() -> None:
    assert cpu_arch(Target("CPU")).is_native
    assert cpu_arch(Target("CPU", renderer="CLANG", arch="x86-64-v3")).vector_bytes == 32
    with pytest.raises(TargetError, match="unknown CPU arch"):
        cpu_arch(Target("CPU", arch="i486"))
