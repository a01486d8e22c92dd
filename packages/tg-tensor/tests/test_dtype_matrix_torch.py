# ruff: noqa: E501 - one case per line reads best as a table
"""The dtype x edge-value matrix against PyTorch (skipped where torch is absent).

(float16 forward and backward of the whole op table is in test_ops_torch.py.)
- elementwise ops and reductions over the edge values (0, -0, +-inf, NaN, huge, tiny, subnormal) in float32 and
  float16: NaN where torch has NaN, the same infinities, close finite values;
- integer dtypes and bool for the ops where they mean something: exact against torch.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg.tensor import Tensor

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
F = torch.nn.functional

# ---- elementwise ops and reductions at the edge values ------------------------------------------------------------

EDGES32 = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -2.5, 1e4, -1e4, 1e8, -1e8, 3e38, -3e38, 1e-8, -1e-8, 1e-30, 1e-40, -1e-40, 88.5, -88.5, 100.0, -100.0], np.float32)  # fmt: skip
EDGES16 = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -2.5, 1e3, -1e3, 6e4, -6e4, 1e-4, -1e-4, 6e-8, -6e-8, 10.5, -10.5, 11.5], np.float16)  # fmt: skip

Elementwise = tuple[str, Callable[[Tensor], Tensor], Callable[[Any], Any]]
ELEMENTWISE: list[Elementwise] = [
    ("neg", lambda x: -x, torch.neg),
    ("abs", lambda x: x.abs(), torch.abs),
    ("sign", lambda x: x.sign(), torch.sign),
    ("square", lambda x: x.square(), torch.square),
    ("reciprocal", lambda x: x.reciprocal(), torch.reciprocal),
    ("exp", lambda x: x.exp(), torch.exp),
    ("exp2", lambda x: x.exp2(), torch.exp2),
    ("log", lambda x: x.log(), torch.log),
    ("log2", lambda x: x.log2(), torch.log2),
    ("sqrt", lambda x: x.sqrt(), torch.sqrt),
    ("rsqrt", lambda x: x.rsqrt(), torch.rsqrt),
    ("sin", lambda x: x.sin(), torch.sin),
    ("cos", lambda x: x.cos(), torch.cos),
    ("tanh", lambda x: x.tanh(), torch.tanh),
    ("sigmoid", lambda x: x.sigmoid(), torch.sigmoid),
    ("relu", lambda x: x.relu(), torch.relu),
    ("relu6", lambda x: x.relu6(), F.relu6),
    ("hardsigmoid", lambda x: x.hardsigmoid(), F.hardsigmoid),
    ("hardswish", lambda x: x.hardswish(), F.hardswish),
    ("softplus", lambda x: x.softplus(), F.softplus),
    ("logsigmoid", lambda x: x.logsigmoid(), F.logsigmoid),
    ("silu", lambda x: x.silu(), F.silu),
    ("gelu", lambda x: x.gelu(), F.gelu),
    ("elu", lambda x: x.elu(), F.elu),
    ("leaky_relu", lambda x: x.leaky_relu(), F.leaky_relu),
    ("erf", lambda x: x.erf(), torch.erf),
    ("atan", lambda x: x.atan(), torch.atan),
    ("asinh", lambda x: x.asinh(), torch.asinh),
    ("sinh", lambda x: x.sinh(), torch.sinh),
    ("cosh", lambda x: x.cosh(), torch.cosh),
    ("floor", lambda x: x.floor(), torch.floor),
    ("ceil", lambda x: x.ceil(), torch.ceil),
    ("trunc", lambda x: x.trunc(), torch.trunc),
    ("round", lambda x: x.round(), torch.round),
    ("isnan", lambda x: x.isnan(), torch.isnan),
    ("isinf", lambda x: x.isinf(), torch.isinf),
    ("isfinite", lambda x: x.isfinite(), torch.isfinite),
    ("clip", lambda x: x.clip(-1.5, 2.0), lambda x: x.clip(-1.5, 2.0)),
    ("maximum_0", lambda x: x.maximum(0.0), lambda x: torch.maximum(x, torch.zeros_like(x))),
    ("pow_3", lambda x: x**3, lambda x: x**3),
    ("pow_half", lambda x: x**0.5, lambda x: x**0.5),
    ("mul_self_add", lambda x: x * x + x, lambda x: x * x + x),
    ("div_by_2_5", lambda x: x / 2.5, lambda x: x / 2.5),
]


def _edge_compare(ours: np.ndarray, ref: np.ndarray, rtol: float, what: str, tiny: float = 0.0) -> None:
    """NaN and infinities where torch has them; finite values within rtol (or `tiny`: a half subnormal step, where
    torch's float32 result rounds to the other side of a tie)."""
    if ref.dtype == bool:
        np.testing.assert_array_equal(ours, ref, err_msg=what)
        return
    ours, ref = ours.astype(np.float64), ref.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref), err_msg=f"{what}: NaN positions {ours} vs {ref}")
    inf = np.isinf(ref)
    np.testing.assert_array_equal(ours[inf], ref[inf], err_msg=f"{what}: infinities")
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(np.isinf(ours[finite]), False, err_msg=f"{what}: overflow where torch is finite")
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=rtol, atol=tiny or 1e-38, err_msg=what)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name,tg_fn,torch_fn", ELEMENTWISE, ids=[e[0] for e in ELEMENTWISE])
def test_elementwise_at_edge_values(name, tg_fn, torch_fn, dtype, device):
    values = EDGES32 if dtype == "float32" else EDGES16
    if name in TORCH_OVERFLOWS:  # torch's own result is wrong there: tg's is checked in test_torch_overflows_not_ours
        values = values[~np.isin(values, TORCH_OVERFLOWS[name])]
    out = tg_fn(Tensor(values, device=device)).numpy()
    ref = torch_fn(torch.tensor(values.astype(np.float32))).numpy()  # torch in float32, then rounded
    ref = ref if ref.dtype == bool else ref.astype(values.dtype)
    _edge_compare(
        out, ref, 2e-6 if dtype == "float32" else 1e-3, f"{name} {dtype}", tiny=0.0 if dtype == "float32" else 6e-8
    )


# inputs where torch 2.13 float32 overflows inside the formula: gelu(inf) is NaN and gelu(3e38) inf in torch
TORCH_OVERFLOWS = {"gelu": np.array([np.inf, 3e38], np.float32), "hardswish": np.array([3e38], np.float32)}


def test_torch_overflows_not_ours(device):
    """gelu(x) = x * Phi(x) and hardswish(x) = x for huge x: tg gives x, torch overflows inside its formula."""
    out = Tensor(TORCH_OVERFLOWS["gelu"], device=device).gelu().numpy()
    np.testing.assert_array_equal(out, TORCH_OVERFLOWS["gelu"])
    np.testing.assert_array_equal(Tensor(np.float32(3e38), device=device).hardswish().numpy(), np.float32(3e38))


ROWS32 = np.array(
    [
        [1.0, -2.0, 3.0, 0.5, -0.0, 0.0],
        [1.0, np.nan, 3.0, 0.5, -1.0, 2.0],
        [np.inf, 1.0, -2.0, 0.0, 5.0, 1.0],
        [-np.inf, 1.0, -2.0, 0.0, 5.0, 1.0],
        [np.inf, -np.inf, 1.0, 2.0, 3.0, 4.0],
        [-np.inf, -np.inf, -np.inf, -np.inf, -np.inf, -np.inf],
        [3e38, 3e38, -1.0, 2.0, 1e-40, 0.0],
        [1e8, 1.0, 5e7, 1e-8, 2.0, -3.0],  # no cancellation: float32 sums in any order agree
    ],
    np.float32,
)

Reduction = tuple[str, Callable[[Tensor], Tensor], Callable[[Any], Any]]
REDUCTIONS: list[Reduction] = [
    ("sum", lambda x: x.sum(1), lambda x: x.sum(1)),
    ("prod", lambda x: x.prod(1), lambda x: x.prod(1)),
    ("mean", lambda x: x.mean(1), lambda x: x.mean(1)),
    ("max", lambda x: x.max(1), lambda x: x.max(1).values),
    ("min", lambda x: x.min(1), lambda x: x.min(1).values),
    ("amax_all", lambda x: x.max(), lambda x: x.max()),
    ("argmax", lambda x: x.argmax(1), lambda x: x.argmax(1)),
    ("argmin", lambda x: x.argmin(1), lambda x: x.argmin(1)),
    ("logsumexp", lambda x: x.logsumexp(1), lambda x: x.logsumexp(1)),
    ("softmax", lambda x: x.softmax(1), lambda x: x.softmax(1)),
    ("log_softmax", lambda x: x.log_softmax(1), lambda x: x.log_softmax(1)),
    ("cumsum", lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
    ("cummax", lambda x: x.cummax(1).values, lambda x: x.cummax(1).values),
    ("any", lambda x: (x > 2).any(1), lambda x: (x > 2).any(1)),
    ("all", lambda x: (x < 4).all(1), lambda x: (x < 4).all(1)),
    ("var_finite_rows", lambda x: x[[0, 7]].var(1), lambda x: x[[0, 7]].var(1)),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name,tg_fn,torch_fn", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
def test_reductions_at_edge_values(name, tg_fn, torch_fn, dtype, device):
    rows = ROWS32 if dtype == "float32" else np.clip(ROWS32, -6e4, 6e4).astype(np.float16)
    if dtype == "float16":
        rows[np.isinf(ROWS32)] = ROWS32[np.isinf(ROWS32)]
    out = tg_fn(Tensor(rows, device=device)).numpy()
    ref = torch_fn(torch.tensor(rows.astype(np.float32))).numpy()
    if ref.dtype.kind == "i":
        np.testing.assert_array_equal(out, ref, err_msg=name)
        return
    ref = ref if ref.dtype == bool else ref.astype(rows.dtype)
    _edge_compare(out, ref, 1e-5 if dtype == "float32" else 2e-3, f"{name} {dtype}")


# ---- integer dtypes and bool ---------------------------------------------------------------------------------------

INT_DTYPES = ["int8", "uint8", "int16", "int32", "int64"]

IntOp = tuple[str, Callable[..., Tensor], Callable[..., Any]]
INT_BINARY: list[IntOp] = [
    ("add", lambda a, b: a + b, lambda a, b: a + b),
    ("sub", lambda a, b: a - b, lambda a, b: a - b),
    ("mul", lambda a, b: a * b, lambda a, b: a * b),
    ("floordiv", lambda a, b: a // b, lambda a, b: a // b),
    ("mod", lambda a, b: a % b, lambda a, b: a % b),
    ("maximum", lambda a, b: a.maximum(b), torch.maximum),
    ("minimum", lambda a, b: a.minimum(b), torch.minimum),
    ("and", lambda a, b: a & b, lambda a, b: a & b),
    ("or", lambda a, b: a | b, lambda a, b: a | b),
    ("xor", lambda a, b: a ^ b, lambda a, b: a ^ b),
    ("lt", lambda a, b: a < b, lambda a, b: a < b),
    ("eq", lambda a, b: a == b, lambda a, b: a == b),
    ("where", lambda a, b: (a > b).where(a, b), lambda a, b: torch.where(a > b, a, b)),
]
INT_UNARY: list[IntOp] = [
    ("neg", lambda a: -a, lambda a: -a),
    ("abs", lambda a: a.abs(), torch.abs),
    ("invert", lambda a: ~a, lambda a: ~a),
    ("sum", lambda a: a.sum(1), lambda a: a.sum(1)),
    ("prod", lambda a: a.prod(1), lambda a: a.prod(1)),
    ("max", lambda a: a.max(1), lambda a: a.max(1).values),
    ("min", lambda a: a.min(1), lambda a: a.min(1).values),
    ("argmax", lambda a: a.argmax(1), lambda a: a.argmax(1)),
    ("argmin", lambda a: a.argmin(1), lambda a: a.argmin(1)),
    ("cumsum", lambda a: a.cumsum(1), lambda a: a.cumsum(1)),
    ("cummax", lambda a: a.cummax(1).values, lambda a: a.cummax(1).values),
    ("sort", lambda a: a.sort(1)[0], lambda a: a.sort(dim=1, stable=True).values),
    (
        "argsort_desc",
        lambda a: a.sort(1, descending=True)[1],
        lambda a: a.sort(dim=1, descending=True, stable=True).indices,
    ),
    ("topk", lambda a: a.topk(2, 1)[0], lambda a: a.topk(2, 1).values),
    ("clip", lambda a: a.clip(1, 5), lambda a: a.clip(1, 5)),
    ("getitem", lambda a: a[[1, 0], 2:], lambda a: a[[1, 0], 2:]),
    ("flip_pad", lambda a: a.flip(1).pad(((0, 0), (1, 1)), value=7), lambda a: F.pad(a.flip(1), (1, 1), value=7)),
]


def _ints(dtype: str, shape: tuple[int, ...], rng: np.random.Generator, lo: int = -9, hi: int = 10) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(max(lo, info.min), min(hi, info.max), shape, endpoint=True).astype(dtype)


def _exact(ours: Tensor, ref: Any, what: str) -> None:
    """Same values (torch widens int sums to int64, tg keeps int32: the values must agree)."""
    np.testing.assert_array_equal(
        ours.numpy().astype(np.int64) if ref.dtype != torch.bool else ours.numpy(),
        ref.numpy().astype(np.int64) if ref.dtype != torch.bool else ref.numpy(),
        err_msg=what,
    )


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("name,tg_fn,torch_fn", INT_BINARY, ids=[o[0] for o in INT_BINARY])
def test_int_binary_ops_match_torch(name, tg_fn, torch_fn, dtype, device):
    rng = np.random.default_rng(3)
    a, b = _ints(dtype, (3, 5), rng), _ints(dtype, (3, 5), rng)
    if name in ("floordiv", "mod"):
        b[b == 0] = 3
    if name in ("add", "sub", "mul"):  # no overflow: torch and tg both wrap, but int8 sums of two small values fit
        a, b = a // 2, b // 2
    _exact(
        tg_fn(Tensor(a, device=device), Tensor(b, device=device)),
        torch_fn(torch.tensor(a), torch.tensor(b)),
        f"{name} {dtype}",
    )


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("name,tg_fn,torch_fn", INT_UNARY, ids=[o[0] for o in INT_UNARY])
def test_int_unary_and_reductions_match_torch(name, tg_fn, torch_fn, dtype, device):
    rng = np.random.default_rng(4)
    a = _ints(dtype, (3, 6), rng, -3 if name == "prod" else -9, 3 if name == "prod" else 10)
    a[0, :2] = a[0, 2:4]  # ties: first index wins (argmax) and stable order (sort)
    if name in ("neg", "abs") and dtype.startswith("uint"):
        pytest.skip("torch has no neg/abs semantics worth comparing for unsigned (wraps)")
    _exact(tg_fn(Tensor(a, device=device)), torch_fn(torch.tensor(a)), f"{name} {dtype}")


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_int_extremes_match_torch(dtype, device):
    """INT_MIN/INT_MAX: max/min/argmax/sort/abs/neg wrap or order exactly as torch."""
    info = np.iinfo(dtype)
    a = np.array([[info.min, info.max, 0, -1, 1, info.min + 1]], dtype)
    for name, f, g in [("max", lambda t: t.max(1), lambda t: t.max(1).values), ("min", lambda t: t.min(1), lambda t: t.min(1).values),
                       ("argmin", lambda t: t.argmin(1), lambda t: t.argmin(1)), ("sort", lambda t: t.sort(1)[1], lambda t: t.sort(dim=1, stable=True).indices),
                       ("neg", lambda t: -t, lambda t: -t), ("abs", lambda t: t.abs(), torch.abs), ("invert", lambda t: ~t, lambda t: ~t)]:  # fmt: skip
        _exact(f(Tensor(a, device=device)), g(torch.tensor(a)), f"{name} {dtype}")


def test_int_clip_bound_outside_the_dtype(device):
    """clip(-3, 5) on uint8 clamps as the math says (-3 bounds nothing); torch wraps -3 to 253 and returns all 5."""
    a = np.array([3, 200, 0, 255], np.uint8)
    np.testing.assert_array_equal(Tensor(a, device=device).clip(-3, 5).numpy(), [3, 5, 0, 5])
    np.testing.assert_array_equal(
        Tensor(a.astype(np.int8) // 2, device=device).clip(-300, 300).numpy(), a.astype(np.int8) // 2
    )


BOOL_OPS: list[IntOp] = [
    ("and", lambda a, b: a & b, lambda a, b: a & b),
    ("or", lambda a, b: a | b, lambda a, b: a | b),
    ("xor", lambda a, b: a ^ b, lambda a, b: a ^ b),
    ("eq", lambda a, b: a == b, lambda a, b: a == b),
    ("ne", lambda a, b: a != b, lambda a, b: a != b),
    ("where", lambda a, b: a.where(b, False), lambda a, b: torch.where(a, b, False)),
    ("logical_not_any", lambda a, b: a.logical_not().any(1), lambda a, b: a.logical_not().any(1)),
    ("all", lambda a, b: (a | b).all(0), lambda a, b: (a | b).all(0)),
    ("sum", lambda a, b: a.sum(1), lambda a, b: a.sum(1)),
    ("max", lambda a, b: a.max(1), lambda a, b: a.max(1).values),
    ("argmax_as_int", lambda a, b: a.int().argmax(1), lambda a, b: a.int().argmax(1)),  # torch: no bool argmax
    ("cumsum", lambda a, b: a.cumsum(1), lambda a, b: a.cumsum(1)),
    ("sort", lambda a, b: a.sort(1)[1], lambda a, b: a.sort(dim=1, stable=True).indices),
    ("getitem_mask", lambda a, b: a[b], lambda a, b: a[b]),
    (
        "cast_float_sum",
        lambda a, b: a.float().sum() + b.float().mean(),
        lambda a, b: a.float().sum() + b.float().mean(),
    ),
]


@pytest.mark.parametrize("name,tg_fn,torch_fn", BOOL_OPS, ids=[o[0] for o in BOOL_OPS])
def test_bool_ops_match_torch(name, tg_fn, torch_fn, device):
    rng = np.random.default_rng(5)
    a, b = rng.random((4, 5)) > 0.5, rng.random((4, 5)) > 0.3
    ours, ref = tg_fn(Tensor(a, device=device), Tensor(b, device=device)), torch_fn(torch.tensor(a), torch.tensor(b))
    if ref.dtype.is_floating_point:
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-6, err_msg=name)
    else:
        _exact(ours, ref, name)
