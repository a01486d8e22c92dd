"""float32 EXP2/LOG2 on vector lanes (tg.codegen.lower.transcendental exp2_f32/log2_f32): computed in float32 vectors,
not one libm call per lane, within the numerics contract's 2 ulp over a sample of every float32 bit pattern, with
the special values right; and the kernels that use them are vectorised."""

from collections import Counter

import numpy as np
import pytest

from tg.codegen.render.llvmir import LLVMRenderer
from tg.ir import Context, Ops
from tg.runtime.backends.python import count_ops
from tg.runtime.device import Device
from tg.tensor import Tensor


def _source_markers() -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    """What the CPU device's renderer prints (DEBUG=4) for: a kernel's start, a float32 vector type, libm exp2/log2
    calls, float64 values. Skips unless the renderer has vectors."""
    renderer = Device["CPU"].renderer
    if not getattr(renderer, "vector_bytes", 0):
        pytest.skip("a CPU renderer with vectors")
    if isinstance(renderer, LLVMRenderer):
        return "define ", " x float>", ("@exp2f(", "@log2f(", "@llvm.exp2.", "@llvm.log2."), ("double",)
    return "void ", "tg_f32x", ("exp2f(", "log2f("), ("double", "tg_f64")


def _every_float32(stride: int) -> np.ndarray:
    x = np.arange(0, 2**32, stride, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([x[np.isfinite(x)], np.float32([0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -150, 128, -149.5])])
    return x[: len(x) // 64 * 64]  # whole vectors: every lane takes the vector path


def _ulps(got: np.ndarray, ref: np.ndarray) -> float:
    with np.errstate(over="ignore"):
        ref32 = ref.astype(np.float32)
    inf = np.isinf(ref32)
    assert np.array_equal(np.isnan(got), np.isnan(ref32)) and np.array_equal(got[inf], ref32[inf])
    ok = np.isfinite(ref32)
    err = np.abs(got[ok].astype(np.float64) - ref[ok]) / np.spacing(np.abs(ref32[ok])).astype(np.float64)
    return float(np.max(err))


@pytest.mark.parametrize("name,ref,bound", [("exp2", np.exp2, 1.2), ("log2", np.log2, 1.3), ("exp", np.exp, 1.5),
                                            ("log", np.log, 1.8)])  # fmt: skip
def test_vector_float32_exp2_log2_within_bounds(device: str, name: str, ref: object, bound: float) -> None:
    x = _every_float32(997 if device != "PYTHON" else 4_000_037)
    got = getattr(Tensor(x, device=device), name)().numpy()
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))  # type: ignore[operator]
    assert _ulps(got, want) <= bound


def test_vector_kernels_call_no_libm(device: str, capsys: pytest.CaptureFixture[str]) -> None:
    if device != "CPU":
        pytest.skip("the CPU device's kernel source")
    start, f32_vector, libm, _ = _source_markers()
    x = Tensor(np.linspace(0.1, 4, 64, dtype=np.float32), device=device).realize()
    with Context(DEBUG=4):
        (x.exp2() + x.log2()).realize()
    src = capsys.readouterr().out
    assert start in src and f32_vector in src  # the kernel was printed, and it works on float vectors
    assert not any(call in src for call in libm)


def _gelu_ref(x: np.ndarray) -> np.ndarray:
    import math

    xs = x.astype(np.float64)
    erfc = np.frompyfunc(math.erfc, 1, 1)
    return (xs * 0.5 * erfc(-xs / math.sqrt(2)).astype(np.float64)).astype(np.float64)


def test_gelu_float32_relative_accuracy_everywhere(device: str) -> None:
    # the negative tail through erfc: 0.5*x*(1+erf(x/sqrt2)) in float32 is off by ~6e5 ulp at x = -5; below -5.65
    # (|gelu| < 3e-8) the result is -0, as torch's float32 gelu gives
    n = 64 * 40 if device == "PYTHON" else 64 * 4000
    x = np.concatenate([np.linspace(-5.6, 6, n // 2), -np.logspace(-30, 0.7, n // 4), np.logspace(-30, 1, n // 4)])
    x = x.astype(np.float32)
    got = Tensor(x, device=device).gelu().numpy()
    assert _ulps(got, _gelu_ref(x)) <= 6


def test_gelu_and_erf_kernels_are_float32_vectors(device: str, capsys: pytest.CaptureFixture[str]) -> None:
    if device != "CPU":
        pytest.skip("the CPU device's kernel source")
    start, f32_vector, libm, f64 = _source_markers()
    x = Tensor(np.linspace(-3, 3, 128, dtype=np.float32) + 0.01, device=device).realize()
    with Context(DEBUG=4):
        (x.gelu() + x.erf()).realize()
    src = capsys.readouterr().out
    body = src[src.index(start) :]  # the kernel, after the prelude's typedefs
    assert f32_vector in body and not any(t in body for t in f64) and not any(call in body for call in libm)


def _float_ops_per_element(fn: object, x: np.ndarray) -> tuple[float, Counter]:
    t = Tensor(x, device="PYTHON").realize()
    with count_ops() as n:
        fn(t).realize()  # type: ignore[operator]
    return sum(n.values()) / x.size, n


def test_float32_exp_reduces_its_argument_once() -> None:
    # e**r by its Taylor polynomial after the Cody-Waite reduction, not EXP2(r/ln2): an EXP2 without hardware (CPU
    # vector lanes) reduces, clamps and checks NaN again (47 ops per element before, counting EXP2 as one)
    per_element, n = _float_ops_per_element(Tensor.exp, np.linspace(-80, 80, 64, dtype=np.float32))
    assert n[Ops.EXP2] == 0 and per_element <= 36
    x = Tensor(np.float32([-80.0, -3.0, 0.5, 2.0, 80.0]), requires_grad=True)
    x.exp().sum().backward()  # the gradient is the rule g * exp(x), not the polynomial differentiated
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), np.exp(np.float64([-80.0, -3.0, 0.5, 2.0, 80.0])), rtol=2e-7)


def test_float32_gelu_costs_one_exp_and_a_short_polynomial() -> None:
    # Phi from exp(-x**2/2) * t * Q(u) with one division: 89 float ops per element (220 with the erf series and the
    # 20-term Chebyshev sum, each evaluated for every element by the vector selects)
    per_element, n = _float_ops_per_element(Tensor.gelu, np.linspace(-6, 6, 64, dtype=np.float32))
    assert per_element <= 100 and n[Ops.FDIV] == 64
