"""Core Tensor ops against numpy on random inputs, for float32, float16, int32, int64 and bool."""

import math

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes

DTYPES = ["float32", "float16", "int32", "int64", "bool"]
TOL = {"float32": 1e-5, "float16": 2e-3, "int32": 0, "int64": 0, "bool": 0}


def data(rng, shape, dt, positive=False):
    if dt == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dt.startswith("int"):
        return rng.integers(1 if positive else -20, 20, shape).astype(dt)
    x = rng.standard_normal(shape).astype(dt)
    return np.abs(x) + np.asarray(0.1, dt) if positive else x


def close(got, want, dt):
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    tol = TOL.get(dt, 1e-5)
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want).astype(np.float64), rtol=tol, atol=tol)


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "lt": lambda a, b: a < b,
    "gt": lambda a, b: a > b,
    "le": lambda a, b: a <= b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}


@pytest.mark.parametrize(
    "op,dt", [(op, dt) for op in BINARY for dt in DTYPES if not (dt == "bool" and op in ("add", "sub", "mul"))]
)
def test_binary(op, dt, device, size, rng):
    a, b = data(rng, (size(7), size(9)), dt), data(rng, (size(7), size(9)), dt)
    close(BINARY[op](Tensor(a, device=device), Tensor(b, device=device)).numpy(), BINARY[op](a, b), dt)


@pytest.mark.parametrize("dt", ["float32", "float16", "int32", "int64"])
def test_broadcast_and_scalars(dt, device, size, rng):
    a, b = data(rng, (size(4), 1, 3), dt), data(rng, (size(6), 1), dt)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    close((ta + tb).numpy(), a + b, dt)
    close((ta * 3).numpy(), a * np.asarray(3, dt), dt)
    close((2 - ta).numpy(), np.asarray(2, dt) - a, dt)
    assert (ta + 1).dtype == ta.dtype  # a Python scalar is weak: it takes the tensor's dtype


def test_weak_scalar_promotion(device):
    i = Tensor([1, 2, 3], device=device)
    h = Tensor([1.0, 2.0], device=device, dtype=dtypes.float16)
    assert (i + 1).dtype is dtypes.int32
    assert (i + 1.5).dtype is dtypes.default_float
    assert (h * 2.5).dtype is dtypes.float16
    assert (Tensor([True, False], device=device) + 1).dtype is dtypes.int32
    np.testing.assert_allclose((i + 1.5).numpy(), [2.5, 3.5, 4.5])
    assert (i + Tensor([1.0, 2.0, 3.0], device=device)).dtype is dtypes.float32


@pytest.mark.parametrize("dt", ["float32", "float16"])
def test_division_and_pow(dt, device, size, rng):
    a, b = data(rng, (size(8),), dt, positive=True), data(rng, (size(8),), dt, positive=True)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    close((ta / tb).numpy(), a / b, dt)
    close((ta**2).numpy(), a**2, dt)
    close((ta**-1).numpy(), a**-1, dt)
    close((ta**0.5).numpy(), np.sqrt(a), dt)
    np.testing.assert_allclose((ta**tb).numpy().astype(np.float64), (a**b).astype(np.float64), rtol=5e-3)
    n = Tensor([-2.0, -2.0, 0.0, 3.0], device=device)
    np.testing.assert_allclose(
        (n ** Tensor([2.0, 3.0, 2.0, 0.0], device=device)).numpy(), [4.0, -8.0, 0.0, 1.0], rtol=1e-5
    )


def test_int_division_gives_float(device):
    r = Tensor([1, 2, 3], device=device) / 2
    assert r.dtype is dtypes.default_float
    np.testing.assert_allclose(r.numpy(), [0.5, 1.0, 1.5])


UNARY = {
    "neg": (lambda t: -t, lambda a: -a, False),
    "exp": (lambda t: t.exp(), np.exp, False),
    "log": (lambda t: t.log(), np.log, True),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, True),
    "sin": (lambda t: t.sin(), np.sin, False),
    "cos": (lambda t: t.cos(), np.cos, False),
    "relu": (lambda t: t.relu(), lambda a: np.maximum(a, 0), False),
    "sigmoid": (lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), False),
    "tanh": (lambda t: t.tanh(), np.tanh, False),
    "abs": (lambda t: t.abs(), np.abs, False),
    "reciprocal": (lambda t: t.reciprocal(), lambda a: 1 / a, True),
}


@pytest.mark.parametrize("dt", ["float32", "float16"])
@pytest.mark.parametrize("op", list(UNARY))
def test_unary(op, dt, device, size, rng):
    fn, ref, positive = UNARY[op]
    a = data(rng, (size(6), size(5)), dt, positive)
    got = fn(Tensor(a, device=device)).numpy()
    want = ref(a.astype(np.float32)).astype(dt)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5 if dt == "float32" else 5e-3,
                               atol=1e-6 if dt == "float32" else 5e-3)  # fmt: skip


def test_unary_on_ints_gives_float(device):
    t = Tensor([1, 4, 9], device=device)
    assert t.sqrt().dtype is dtypes.default_float
    np.testing.assert_allclose(t.sqrt().numpy(), [1, 2, 3], rtol=1e-6)
    np.testing.assert_array_equal((-t).numpy(), [-1, -4, -9])
    np.testing.assert_array_equal(t.relu().numpy(), [1, 4, 9])


@pytest.mark.parametrize("dt", ["float32", "float16", "int32", "int64", "bool"])
def test_where_maximum_minimum_cast(dt, device, size, rng):
    a, b = data(rng, (size(5), 4), dt), data(rng, (size(5), 4), dt)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    close((ta < tb).where(ta, tb).numpy(), np.where(a < b, a, b), dt)
    if dt != "bool":
        close(ta.maximum(tb).numpy(), np.maximum(a, b), dt)
        close(ta.minimum(tb).numpy(), np.minimum(a, b), dt)
    for to in ["float32", "int32", "bool"]:
        got = ta.cast(to).numpy()
        assert got.dtype == np.dtype(to)
        np.testing.assert_array_equal(got, a.astype(to))


@pytest.mark.parametrize("dt", ["float32", "float16", "int32", "int64", "bool"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(dt, axis, keepdim, device, size, rng):
    a = data(rng, (size(4), size(6), 3), dt)
    t = Tensor(a, device=device)
    close(
        t.sum(axis, keepdim=keepdim).numpy(), a.sum(axis, keepdims=keepdim), "float16" if dt == "float16" else "float32"
    )
    close(t.max(axis, keepdim=keepdim).numpy(), a.max(axis, keepdims=keepdim), dt)
    close(t.min(axis, keepdim=keepdim).numpy(), a.min(axis, keepdims=keepdim), dt)
    if dt != "bool":
        want = a.astype(np.float64).mean(axis, keepdims=keepdim)
        close(t.mean(axis, keepdim=keepdim).numpy(), want, "float16" if dt == "float16" else "float32")


def test_reduction_dtypes(device):
    assert Tensor([True, True, False], device=device).sum().dtype is dtypes.int32
    assert Tensor([True, True, False], device=device).sum().item() == 2
    assert Tensor([1.0], dtype=dtypes.float16, device=device).sum().dtype is dtypes.float16
    assert Tensor([1, 2], device=device).mean().dtype is dtypes.default_float
    assert Tensor(5.0, device=device).sum().item() == 5.0


def test_unsigned_min(device):
    t = Tensor(np.array([[3, 200], [7, 9]], dtype=np.uint8), device=device)
    np.testing.assert_array_equal(t.min(1).numpy(), [3, 7])


@pytest.mark.parametrize("dt", ["float32", "float16", "int32"])
@pytest.mark.parametrize(
    "sa,sb",
    [((3, 5), (5, 4)), ((5,), (5, 4)), ((3, 5), (5,)), ((5,), (5,)), ((2, 3, 5), (2, 5, 4)), ((2, 3, 5), (5, 4)),
     ((3, 5), (2, 5, 4)), ((2, 1, 3, 5), (4, 5, 2)), ((1, 3, 5), (2, 1, 5, 4)), ((0, 5), (5, 3)), ((3, 0), (0, 2))],
)  # fmt: skip
def test_matmul(sa, sb, dt, device, rng):
    a, b = data(rng, sa, dt), data(rng, sb, dt)
    got = (Tensor(a, device=device) @ Tensor(b, device=device)).numpy()
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(
        got.astype(np.float64), want, rtol=1e-2 if dt == "float16" else 1e-5, atol=5e-2 if dt == "float16" else 1e-4
    )


@pytest.mark.parametrize(
    "sa,sb", [((3, 5), (5, 4)), ((2, 3, 5), (5, 4)), ((3, 5), (2, 5, 4)), ((2, 1, 3, 5), (4, 5, 2))]
)
def test_matmul_builds_the_graph_of_its_definition(sa, sb):
    # matmul builds its graph from UOps directly for speed; it must be the graph of the tensor-method definition
    # (broadcast multiply, sum over the shared dim), node for node, so that caches and rewrites see one structure
    a, b = Tensor.ones(*sa).contiguous(), Tensor.ones(*sb).contiguous()
    if a.ndim > 2 and b.ndim == 2:  # batched rows times one matrix: one (rows, k) @ (k, m) product, reshaped
        flat = a.reshape(-1, sa[-1])
        by_definition = (flat.unsqueeze(-2) * b.transpose(-1, -2).unsqueeze(-3)).sum(-1).reshape(*sa[:-1], sb[-1])
    else:
        by_definition = (a.unsqueeze(-2) * b.transpose(-1, -2).unsqueeze(-3)).sum(-1)
    assert (a @ b).uop is by_definition.uop


def test_matmul_shape_error_names_both_shapes(device):
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 2\)"):
        Tensor.ones(3, 4, device=device) @ Tensor.ones(5, 2, device=device)


def test_softmax_and_argmax(device, size, rng):
    a = data(rng, (size(4), size(7)), "float32")
    t = Tensor(a, device=device)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(t.softmax(1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(t.argmax(1).numpy(), a.argmax(1))
    assert t.argmax().item() == a.argmax()


def test_math_helpers(device):
    t = Tensor([-1.5, 0.0, 2.5], device=device)
    np.testing.assert_allclose(t.clip(-1, 1).numpy(), [-1, 0, 1])
    np.testing.assert_allclose(t.sign().numpy(), [-1, 0, 1])
    np.testing.assert_allclose(t.trunc().numpy(), [-1, 0, 2])
    np.testing.assert_allclose(t.square().numpy(), [2.25, 0, 6.25])
    np.testing.assert_allclose(Tensor([4.0], device=device).rsqrt().numpy(), [0.5])
    assert math.isclose(Tensor([1.0, 2.0], device=device).log_softmax().exp().sum().item(), 1.0, rel_tol=1e-6)


def test_bitwise_and_shifts(device):
    a = Tensor([0b1100, 0b1010], device=device)
    np.testing.assert_array_equal((a & 0b1000).numpy(), [8, 8])
    np.testing.assert_array_equal((a | 1).numpy(), [13, 11])
    np.testing.assert_array_equal((a ^ 0b1111).numpy(), [3, 5])
    np.testing.assert_array_equal((a << 1).numpy(), [24, 20])
    np.testing.assert_array_equal((a >> 2).numpy(), [3, 2])
    np.testing.assert_array_equal((~Tensor([True, False], device=device)).numpy(), [False, True])


@pytest.mark.parametrize("dt", ["int32", "int64", "float32"])
def test_floordiv_mod_floor_ceil(dt, device):
    a = np.array([-7, -6, -1, 0, 1, 6, 7], dtype=dt)
    b = np.array([2, -4, 3, 5, -3, 4, -2], dtype=dt)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal((ta // tb).numpy(), a // b)
    np.testing.assert_array_equal((ta % tb).numpy(), a % b)
    np.testing.assert_array_equal((ta // 3).numpy(), a // 3)
    np.testing.assert_array_equal((ta % 3).numpy(), a % 3)
    np.testing.assert_array_equal((10 // tb).numpy(), np.asarray(10, dt) // b)
    f = Tensor([-1.5, -0.5, 0.0, 0.5, 1.5, 2.0], device=device)
    np.testing.assert_array_equal(f.floor().numpy(), np.floor([-1.5, -0.5, 0.0, 0.5, 1.5, 2.0]).astype(np.float32))
    np.testing.assert_array_equal(f.ceil().numpy(), np.ceil([-1.5, -0.5, 0.0, 0.5, 1.5, 2.0]).astype(np.float32))


def _f16_ulps(got: np.ndarray, want: np.ndarray) -> int:
    """Largest distance in float16 units in the last place (values of one sign compare by their bit patterns)."""
    g, w = (a.astype(np.float16).view(np.int16).astype(np.int32) for a in (got, want))
    return int(np.max(np.abs(g - w)))


@pytest.mark.parametrize(
    "name,ours,ref",
    [
        ("exp", lambda t: t.exp(), np.exp),
        ("log", lambda t: t.log(), np.log),
        ("sigmoid", lambda t: t.sigmoid(), lambda v: 1 / (1 + np.exp(-v))),
        ("tanh", lambda t: t.tanh(), np.tanh),
        ("cos", lambda t: t.cos(), np.cos),
        ("pow", lambda t: t**1.5, lambda v: v**1.5),
    ],
)
def test_float16_transcendentals_round_once(name, ours, ref, device, size, rng):
    # computed in float32 and rounded once: within 1 ulp of numpy's float32 result rounded to float16
    x = (np.abs(rng.standard_normal(size(64))) * 2 + 0.1).astype(np.float16)
    if name in ("sigmoid", "tanh", "cos"):
        x = x * np.where(rng.random(x.shape) > 0.5, 1, -1).astype(np.float16)
    got = ours(Tensor(x, device=device))
    assert got.dtype is dtypes.float16
    assert _f16_ulps(got.numpy(), ref(x.astype(np.float32))) <= 1
    assert _f16_ulps(Tensor([10.0], dtype=dtypes.float16, device=device).exp().numpy(), np.exp(np.float32(10))) == 0
