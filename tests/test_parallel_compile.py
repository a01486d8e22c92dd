"""A schedule's new kernels compile together (engine.precompile): same results as one by one, compile errors
surface with the compiler's log, and the kernel/schedule caches never hand a program to the wrong shape, dtype or
device."""

from __future__ import annotations

import numpy as np
import pytest

from tg.ir import Context
from tg.runtime import engine
from tg.runtime.device import CompileError, Device
from tg.tensor import Tensor, dtypes


def _softmax_np(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("parallel", [False, True])
def test_new_shapes_compile_together_with_identical_results(parallel: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(int(parallel))
    compiled: list[int] = []
    real = engine.precompile

    def counting(items: object) -> None:
        before = len(engine.method_cache)
        if parallel:
            real(items)  # type: ignore[arg-type]
        compiled.append(len(engine.method_cache) - before)

    monkeypatch.setattr(engine, "precompile", counting)
    for rows in (3 + 2 * parallel, 17 + 2 * parallel, 130 + 2 * parallel):  # new kernels: shapes used only here
        data = rng.standard_normal((rows, 37)).astype(np.float32)
        got = Tensor(data).softmax(-1).numpy()
        np.testing.assert_allclose(got, _softmax_np(data), rtol=1e-5, atol=1e-6)
    if parallel:
        assert max(compiled) >= 2  # softmax is several kernels: they compiled together before the run
    else:
        assert max(compiled) == 0


def test_precompile_under_another_transcendental_setting_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels generated under TRANSCENDENTAL=2 are cached under their own key: the default setting compiles its
    own code (a stale program would differ in its source)."""
    # a fresh cache: kernels that earlier tests on this worker compiled for plain CPU must not count here
    monkeypatch.setattr(engine, "method_cache", {})
    data = np.linspace(-3, 3, 29 * 23, dtype=np.float32).reshape(29, 23)
    with Context(TRANSCENDENTAL=2):
        a = Tensor(data, device="CPU").softmax(-1).numpy()
    keys_t2 = {k[1] for k in engine.method_cache if k[0].endswith("+TRANSCENDENTAL=2")}
    cpu = str(Device.target("CPU"))  # the key of the default setting: the CPU's target (CPU, or CPU:CLANG:arch)
    assert len(keys_t2) >= 2 and not keys_t2 & {k[1] for k in engine.method_cache if k[0] == cpu}
    b = Tensor(data, device="CPU").softmax(-1).numpy()
    assert keys_t2 <= {k[1] for k in engine.method_cache if k[0] == cpu}  # compiled again for the default
    np.testing.assert_allclose(a, _softmax_np(data), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, _softmax_np(data), rtol=1e-5, atol=1e-6)


def test_parallel_compile_error_carries_compiler_log(monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = Device["CPU"].compiler
    real = type(compiler).compile
    broken = "tg_test_broken_kernel"

    compiled: list[str] = []

    def compile_broken(self: object, src: str) -> bytes:
        compiled.append(src)
        return real(self, f"#error {broken}\n{src}" if "41" in src else src)  # type: ignore[arg-type]

    monkeypatch.setattr(type(compiler), "compile", compile_broken)
    monkeypatch.setattr(engine, "method_cache", {})  # every kernel of the softmax is new
    with Context(CACHELEVEL=0), pytest.raises(CompileError, match=broken) as info:
        Tensor.ones(41, 41, device="CPU").contiguous().softmax(-1).realize()
    assert "--- source ---" in str(info.value)
    # raised from the parallel compile: every kernel was compiled once, the failing ones were not compiled again
    assert len(compiled) >= 2 and len(compiled) == len(set(compiled))


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int16])
def test_eager_repeats_never_reuse_a_program_of_another_shape_or_dtype(dtype: object) -> None:
    """The same expression over shapes and dtypes in turn (each a cache hit after its first run) gives numpy's
    values every time."""
    npdt = {dtypes.float32: np.float32, dtypes.float64: np.float64, dtypes.int32: np.int32, dtypes.int16: np.int16}
    shapes = [(4,), (5,), (2, 3), (4,), (3, 2), (5,)]
    for i, shape in enumerate(shapes * 2):
        base = np.arange(np.prod(shape)).reshape(shape).astype(npdt[dtype])  # type: ignore[index]
        x = Tensor(base, dtype=dtype)
        for _ in range(3):
            x = (x + 1).realize()
        np.testing.assert_array_equal(x.numpy(), base + 3, err_msg=f"step {i} shape {shape}")


def test_eager_repeats_on_two_devices_stay_apart() -> None:
    a = Tensor([1.0, 2.0, 3.0], device="CPU").realize()
    b = Tensor([10.0, 20.0, 30.0], device="CPU:1").realize()
    for _ in range(4):
        a, b = (a + 1).realize(), (b + 1).realize()
    assert a.device == "CPU" and b.device == "CPU:1"
    np.testing.assert_array_equal(a.numpy(), [5.0, 6.0, 7.0])
    np.testing.assert_array_equal(b.numpy(), [14.0, 24.0, 34.0])
