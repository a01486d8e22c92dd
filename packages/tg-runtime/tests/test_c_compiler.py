"""C compiler selection (with fake PATHs), the compile cache, and running hand-written C kernels on the CPU."""

import os
import shutil
import stat
import struct
from pathlib import Path

import pytest

from tg.ir.dtype import dtypes
from tg.ir.helpers import Context
from tg.runtime.backends.cpu import CPUDevice, CPUProgram
from tg.runtime.c_compiler import CCompiler, CompilerNotFoundError, direct_linker, find_c_compiler, host_cpu_flags
from tg.runtime.device import Buffer, CompileError, Device, DeviceUnavailable

ADD_SRC = """
void add(float* restrict out, const float* restrict a, const float* restrict b, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}
"""


def fake_compiler(folder: Path, name: str, version: str = "1.0", fail: bool = False) -> Path:
    """A shell script named `name` that prints a version (and fails compiles when `fail`)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    body = 'echo "error: fake failure" >&2; exit 1' if fail else "exit 0"
    script.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "fake {name} {version}"; exit 0; fi\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


@pytest.fixture
def no_cc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)


# ---- selection ----


@pytest.mark.usefixtures("no_cc")
def test_only_gcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gcc = fake_compiler(tmp_path / "bin", "gcc")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert find_c_compiler() == str(gcc)


@pytest.mark.usefixtures("no_cc")
def test_only_clang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clang = fake_compiler(tmp_path / "bin", "clang")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert find_c_compiler() == str(clang)


@pytest.mark.usefixtures("no_cc")
def test_clang_preferred_across_path_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_compiler(tmp_path / "a", "gcc")
    clang = fake_compiler(tmp_path / "b", "clang")
    monkeypatch.setenv("PATH", f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}")
    assert find_c_compiler() == str(clang)


def test_cc_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gcc = fake_compiler(tmp_path / "bin", "gcc")
    fake_compiler(tmp_path / "bin", "clang")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("CC", "gcc")
    assert find_c_compiler() == str(gcc)
    monkeypatch.setenv("CC", str(gcc))
    assert find_c_compiler() == str(gcc)
    monkeypatch.setenv("CC", "tcc")
    with pytest.raises(CompilerNotFoundError, match=r"CC='tcc' is not an executable.*apt-get install"):
        find_c_compiler()
    monkeypatch.setenv("CC", "ccache gcc")
    with pytest.raises(CompilerNotFoundError, match="single compiler executable"):
        find_c_compiler()


@pytest.mark.usefixtures("no_cc")
def test_no_compiler_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(CompilerNotFoundError, match=r"no C compiler found.*apt-get install clang.*apt-get install gcc"):
        find_c_compiler()
    # the CPU device is then unavailable, with the same explanation
    with pytest.raises(DeviceUnavailable, match="apt-get install"):
        CPUDevice("CPU:7")


def test_host_cpu_flags() -> None:
    assert host_cpu_flags("x86_64") == ("-march=native",)
    assert host_cpu_flags("aarch64") == ("-mcpu=native",)
    assert host_cpu_flags("weird") == ()
    flags = CCompiler().flags
    assert "-ffast-math" not in flags and "-ffp-contract=off" in flags and "-shared" in flags


def test_no_fma_contraction() -> None:
    # with contraction a*b+c would round once; IEEE-as-written rounds the product first
    src = "void k(float* restrict o, const float* restrict a) { o[0] = a[0] * a[1] + a[2]; }"
    prg = CPUProgram("k", CCompiler().compile(src))
    # the exact product 1 + 2**-11 + 2**-24 rounds (tie to even) to 1 + 2**-11 before the add; an FMA keeps 2**-24
    a, b, c = 1.0 + 2.0**-12, 1.0 + 2.0**-12, -(1.0 + 2.0**-11)
    out, inp = Buffer("CPU", 1, dtypes.float32), Buffer("CPU", 3, dtypes.float32)
    inp.copyin(struct.pack("3f", a, b, c))
    prg(out.ensure_allocated()._buf, inp._buf)
    assert struct.unpack("f", out.as_memoryview()) == (0.0,)


# ---- really compiling with only gcc / only clang on PATH ----


@pytest.mark.parametrize("name", ["gcc", "clang"])
@pytest.mark.usefixtures("no_cc")
def test_compiles_and_runs_with_only(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.which(name)
    if real is None:
        pytest.skip(f"{name} is not installed here")
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / name).symlink_to(real)
    for tool in ("as", "ld"):  # the compiler driver runs the assembler and linker from PATH
        if found := shutil.which(tool):
            (folder / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(folder))
    compiler = CCompiler()
    assert compiler.cc == str(folder / name)
    prg = CPUProgram("add", compiler.compile(ADD_SRC))
    out = run_add(prg, [1, 2, 3], [10, 20, 30])
    assert out == [11, 22, 33]


# libm's expf and libgcc's 128-bit division (__divti3, __modti3): the libraries a kernel may need from its link
HELPERS_SRC = """
#include <math.h>
void helpers(float* restrict out, const float* restrict a, long long* restrict q, const long long* restrict b) {
  out[0] = expf(a[0]);
  __int128 big = (__int128)b[0] * (__int128)b[1];
  q[0] = (long long)(big / b[2]);
  q[1] = (long long)(big % b[2]);
}
"""


@pytest.mark.parametrize("name", ["gcc", "clang"])
@pytest.mark.usefixtures("no_cc")
def test_direct_link_resolves_libm_and_libgcc(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Linux the driver compiles to an object and ld links it (one driver start, not two); the kernel's math and
    compiler-helper calls resolve, and the results are exact."""
    real = shutil.which(name)
    if real is None or os.uname().sysname != "Linux":
        pytest.skip(f"{name} is not installed here, or not Linux")
    monkeypatch.setenv("CC", real)
    compiler = CCompiler()
    assert direct_linker(compiler.cc) is not None
    prg = CPUProgram("helpers", compiler.compile(HELPERS_SRC))
    out, a = Buffer("CPU", 1, dtypes.float32), Buffer("CPU", 1, dtypes.float32)
    q, b = Buffer("CPU", 2, dtypes.int64), Buffer("CPU", 3, dtypes.int64)
    a.copyin(struct.pack("f", 1.0))
    x, y, d = 3_000_000_007, 5_000_000_011, 1_000_003  # the product needs 63+ bits, so the division is 128-bit
    b.copyin(struct.pack("3q", x, y, d))
    prg(out.ensure_allocated()._buf, a._buf, q.ensure_allocated()._buf, b._buf)
    assert struct.unpack("f", out.as_memoryview()) == (struct.unpack("f", struct.pack("f", 2.718281828459045))[0],)
    assert struct.unpack("2q", q.as_memoryview()) == ((x * y) // d, (x * y) % d)


def run_add(prg: CPUProgram, xs: list[float], ys: list[float], device: str = "CPU") -> list[float]:
    n = len(xs)
    out, a, b = (Buffer(device, n, dtypes.float32) for _ in range(3))
    a.copyin(struct.pack(f"{n}f", *xs))
    b.copyin(struct.pack(f"{n}f", *ys))
    prg(out._buf, a._buf, b._buf, vals=(n,))
    return list(struct.unpack(f"{n}f", out.as_memoryview()))


# ---- the compile cache ----


class CountingCompiler(CCompiler):
    def __init__(self, flags: tuple[str, ...] | None = None) -> None:
        super().__init__(flags=flags)
        self.compiles = 0

    def compile(self, src: str) -> bytes:
        self.compiles += 1
        return super().compile(src)


def test_compile_cache_hit_and_miss(cache_dir: Path) -> None:
    compiler = CountingCompiler()
    lib = compiler.compile_cached(ADD_SRC)
    assert compiler.compiles == 1 and list(cache_dir.rglob("*"))
    assert compiler.compile_cached(ADD_SRC) == lib and compiler.compiles == 1
    # a fresh compiler object (as in a new process) hits the disk cache too
    again = CountingCompiler()
    assert again.compile_cached(ADD_SRC) == lib and again.compiles == 0
    # other source or other flags: miss
    again.compile_cached(ADD_SRC.replace("a[i] + b[i]", "a[i] * b[i]"))
    other_flags = CountingCompiler(flags=("-O1",))
    other_flags.compile_cached(ADD_SRC)
    assert again.compiles == 1 and other_flags.compiles == 1


def test_cachelevel_zero_disables_cache(cache_dir: Path) -> None:
    compiler = CountingCompiler()
    with Context(CACHELEVEL=0):
        compiler.compile_cached(ADD_SRC)
        compiler.compile_cached(ADD_SRC)
    assert compiler.compiles == 2
    assert not [p for p in cache_dir.rglob("*") if p.is_file()]


@pytest.mark.usefixtures("no_cc")
def test_cache_key_has_compiler_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_compiler(tmp_path / "v1", "clang", version="1.0")
    fake_compiler(tmp_path / "v2", "clang", version="2.0")
    monkeypatch.setenv("PATH", str(tmp_path / "v1"))
    key1 = CCompiler().cachekey
    monkeypatch.setenv("PATH", str(tmp_path / "v2"))
    key2 = CCompiler().cachekey
    assert key1 != key2 and str(tmp_path / "v1" / "clang") in key1


# ---- errors ----


def test_compile_error_shows_compiler_output_and_source() -> None:
    with pytest.raises(CompileError, match=r"(?s)failed with exit code.*error.*undeclared_thing.*--- source ---"):
        CCompiler().compile("void k(int* a) { a[0] = undeclared_thing; }")


@pytest.mark.usefixtures("no_cc")
def test_failing_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_compiler(tmp_path / "bin", "gcc", fail=True)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(CompileError, match="fake failure"):
        CCompiler().compile("void k(void) {}")


def test_load_error_is_clear() -> None:
    with pytest.raises(RuntimeError, match="cannot load the compiled kernel 'bad'"):
        CPUProgram("bad", b"not an ELF file")


def test_missing_function_name() -> None:
    with pytest.raises(RuntimeError, match="no function named 'nope'"):
        CPUProgram("nope", CCompiler().compile(ADD_SRC))


# ---- running C kernels on CPU buffers ----


def test_cpu_kernel_results_and_timing() -> None:
    cpu = Device["CPU"]
    prg = cpu.runtime("add", cpu.compiler.compile_cached(ADD_SRC))
    xs, ys = [float(i) for i in range(100)], [0.5 * i for i in range(100)]
    out = run_add(prg, xs, ys)
    assert out == [x + y for x, y in zip(xs, ys, strict=True)]
    a = Buffer("CPU", 1, dtypes.float32).ensure_allocated()
    elapsed = prg(a._buf, a._buf, a._buf, vals=(1,), wait=True)
    assert isinstance(elapsed, float) and elapsed >= 0
    assert prg(a._buf, a._buf, a._buf, vals=(1,)) is None


def test_cpu_kernel_on_views_and_int_types() -> None:
    src = "void scale(int* restrict x, int k, int n) { for (int i = 0; i < n; i++) x[i] *= k; }"
    prg = CPUProgram("scale", Device["CPU"].compiler.compile_cached(src))
    base = Buffer("CPU", 6, dtypes.int32).copyin(struct.pack("6i", *range(6)))
    view = base.view(3, dtypes.int32, 8)  # elements 2, 3, 4
    prg(view.ensure_allocated()._buf, vals=(10, 3))
    assert struct.unpack("6i", base.as_memoryview()) == (0, 1, 20, 30, 40, 5)


def test_cpu_devices_are_separate_but_all_run() -> None:
    for name in ("CPU", "CPU:1", "CPU:2"):
        dev = Device[name]
        prg = dev.runtime("add", dev.compiler.compile_cached(ADD_SRC))
        out = run_add(prg, [1.0], [2.0], device=name)
        assert out == [3.0]
