"""float32 math within 2 ulp of the correctly rounded result (numpy float64 as reference), over random and edge
inputs, on the libm path (TRANSCENDENTAL=1) and the polynomial path (TRANSCENDENTAL=2) of the device under test.

`scripts/ulp_table.py` imports CASES and `max_ulp` from here to print the README table.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from tg.tensor import Context, Tensor, dtypes

F32 = np.finfo(np.float32)
EDGES = np.array([0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38, -1.1754944e-38, 1.0, -1.0, 0.5, 2.0,
                  F32.max, -F32.max, np.inf, -np.inf, np.nan], np.float32)  # fmt: skip
HUGE_TRIG = np.array([1e8, -3e9, 1.5e15, 2.0**60, 1e30, -1.7e38, 2.0**127, F32.max, 13176794.0, 16367173.0], np.float32)

_erf = np.frompyfunc(math.erf, 1, 1)


def _log_uniform(rng: np.random.Generator, n: int, lo_exp: float, hi_exp: float, signed: bool) -> np.ndarray:
    x = np.exp2(rng.uniform(lo_exp, hi_exp, n))
    return x * rng.choice([-1.0, 1.0], n) if signed else x


@dataclass(frozen=True)
class Case:
    """A function, its float64 reference, and how to draw inputs (uniform range plus log-uniform magnitudes)."""

    name: str
    fn: Callable[[Tensor], Tensor]
    ref: Callable[[np.ndarray], np.ndarray]
    lo: float
    hi: float
    mag: tuple[float, float]  # log2 magnitudes for the log-uniform part
    signed: bool = True
    huge_trig: bool = False

    def inputs(self, n: int, rng: np.random.Generator) -> np.ndarray:
        uni = rng.uniform(self.lo, self.hi, n // 2)
        logu = _log_uniform(rng, n - n // 2, *self.mag, self.signed)
        extra = [EDGES, HUGE_TRIG] if self.huge_trig else [EDGES]
        return np.concatenate([uni, logu, *extra]).astype(np.float32)


def _f32(x: np.ndarray) -> np.ndarray:
    """x rounded to float32, back in float64 (an operand the tensor side computes in float32)."""
    return x.astype(np.float32).astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


CASES = [
    Case("exp", Tensor.exp, np.exp, -104, 89, (-30, 7)),
    Case("exp2", Tensor.exp2, np.exp2, -150, 128, (-30, 7.3)),
    Case("expm1", Tensor.expm1, np.expm1, -20, 89, (-40, 6.5)),
    Case("log", Tensor.log, np.log, 0, 100, (-149, 128), signed=False),
    Case("log2", Tensor.log2, np.log2, 0, 100, (-149, 128), signed=False),
    Case("log1p", Tensor.log1p, np.log1p, -1, 10, (-60, 128), signed=False),
    Case("sqrt", Tensor.sqrt, np.sqrt, 0, 100, (-149, 128), signed=False),
    Case("rsqrt", Tensor.rsqrt, lambda x: 1 / np.sqrt(x), 0, 100, (-149, 128), signed=False),
    Case("sin", Tensor.sin, np.sin, -10, 10, (-40, 128), huge_trig=True),
    Case("cos", Tensor.cos, np.cos, -10, 10, (-40, 128), huge_trig=True),
    Case("tan", Tensor.tan, np.tan, -10, 10, (-40, 128), huge_trig=True),
    Case("tanh", Tensor.tanh, np.tanh, -10, 10, (-60, 7)),
    Case("sigmoid", Tensor.sigmoid, _sigmoid, -110, 110, (-60, 7)),
    Case("softplus", Tensor.softplus, lambda x: np.logaddexp(0, x), -110, 110, (-60, 128)),
    Case("erf", Tensor.erf, lambda x: _erf(x).astype(np.float64), -5, 5, (-60, 3)),
    Case(
        "pow(x, y)",
        lambda t: t.abs().pow(t * 0.37),
        lambda x: np.abs(x) ** _f32(x * float(np.float32(0.37))),
        -100,
        100,
        (-30, 8),
    ),
    Case("pow(10, x)", lambda t: 10.0**t, lambda x: 10.0**x, -45, 39, (-30, 5.3)),
    Case("pow(x, 3.0)", lambda t: t.pow(t.full_like(3.0)), lambda x: x**3.0, -1e12, 1e12, (-40, 42)),
]


def ulp_errors(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 spacing at the rounded reference; NaN and inf must match exactly."""
    with np.errstate(all="ignore"):
        ref32 = ref.astype(np.float32)
        spacing = np.spacing(np.abs(ref32)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref) / spacing
    same = (np.isnan(got) & np.isnan(ref)) | (got.astype(np.float64) == ref) | (got == ref32)
    err[same] = 0.0
    err[np.isnan(got) != np.isnan(ref32)] = np.inf
    err[np.isinf(ref32) & (got != ref32)] = np.inf
    return err


def max_ulp(case: Case, device: str, n: int, seed: int = 0, transcendental: int = 1) -> tuple[float, float]:
    """(max ulp error, the input where it happens) of `case` on `device` over n random + the edge inputs."""
    x = case.inputs(n, np.random.default_rng(seed))
    with Context(TRANSCENDENTAL=transcendental), np.errstate(all="ignore"):
        got = case.fn(Tensor(x, device=device)).numpy()
        ref = np.asarray(case.ref(x.astype(np.float64)), np.float64)
    err = ulp_errors(got, ref)
    i = int(np.argmax(err))
    return float(err[i]), float(x[i])


@pytest.mark.parametrize("transcendental", [1, 2], ids=["libm", "poly"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_float32_math_within_2_ulp(device: str, case: Case, transcendental: int) -> None:
    n = 10_000 if device == "PYTHON" else 100_000
    err, at = max_ulp(case, device, n, transcendental=transcendental)
    assert err <= 2.0, f"{case.name} on {device} (TRANSCENDENTAL={transcendental}): {err:.2f} ulp at x={at!r}"


def test_stable_near_zero_and_at_extremes(device: str) -> None:
    def vals(t: Tensor) -> list[float]:
        return t.tolist()

    tiny = Tensor([1e-8, -1e-8, 1e-30], device=device)
    np.testing.assert_array_equal(vals(tiny.tanh()), np.float32([1e-8, -1e-8, 1e-30]))
    np.testing.assert_array_equal(vals(tiny.expm1()), np.float32([1e-8, -1e-8, 1e-30]))
    np.testing.assert_array_equal(vals(tiny.log1p()), np.float32([1e-8, -1e-8, 1e-30]))
    np.testing.assert_array_equal(vals(tiny.sin()), np.float32([1e-8, -1e-8, 1e-30]))
    big = Tensor([-1000.0, -100.0, 100.0, 1000.0], device=device)
    assert vals(big.tanh()) == [-1.0, -1.0, 1.0, 1.0]
    sig = vals(big.sigmoid())
    assert sig[0] == 0.0 and 0 < sig[1] < 1e-43 and sig[2:] == [1.0, 1.0]
    assert vals(big.softplus()) == [0.0, pytest.approx(3.7835e-44, rel=0.1), 100.0, 1000.0]
    assert vals(big.exp()) == [0.0, pytest.approx(3.72e-44, rel=0.1), math.inf, math.inf]
    lse = Tensor([[1000.0, 1000.0], [-math.inf, -math.inf], [-1000.0, 0.0]], device=device).logsumexp(1)
    np.testing.assert_allclose(vals(lse), [1000 + math.log(2), -math.inf, 0.0], rtol=1e-7)
    assert Tensor([[1.0, 2.0], [3.0, 4.0]], device=device).logsumexp().item() == pytest.approx(
        np.log(np.exp([1.0, 2.0, 3.0, 4.0]).sum()), rel=1e-6
    )


def test_pow_signs_and_specials(device: str) -> None:
    nan, inf = math.nan, math.inf
    base = np.array([-2.0, -2.0, -2.0, 0.0, -0.0, 0.0, 1.0, -1.0, nan, 2.0, -8.0, 10.0, -10.0], np.float32)
    expo = np.array([3.0, 2.0, 0.5, -1.0, 3.0, 0.0, nan, inf, 0.0, -inf, 1 / 3, 30.0, 39.0], np.float32)
    for mode in (1, 2):
        with Context(TRANSCENDENTAL=mode), np.errstate(all="ignore"):
            got = (Tensor(base, device=device) ** Tensor(expo, device=device)).numpy()
            np.testing.assert_array_equal(got, np.power(base, expo), err_msg=f"TRANSCENDENTAL={mode}")
    assert (10.0 ** Tensor([30.0], device=device)).item() == np.float32(1e30)
    assert (Tensor([-3.0], device=device) ** 5).item() == -243.0


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
@pytest.mark.parametrize("fn", ["exp", "log", "sin", "cos", "tanh", "sigmoid", "erf", "expm1", "log1p"])
def test_half_math_computed_in_float32_rounded_once(device: str, dtype: dtypes, fn: str) -> None:
    x = np.linspace(-4 if fn not in ("log", "log1p") else 0.01, 4, 41, dtype=np.float32)
    t = Tensor(x, device=device).cast(dtype)
    xs = np.array(t.cast(dtypes.float32).tolist(), np.float32)  # the inputs as the narrow dtype holds them
    got = np.array(getattr(t, fn)().cast(dtypes.float32).tolist(), np.float32)
    want32 = np.array(getattr(Tensor(xs, device=device), fn)().tolist(), np.float32)
    want = np.array(Tensor(want32, device=device).cast(dtype).cast(dtypes.float32).tolist(), np.float32)
    np.testing.assert_array_equal(got, want)
