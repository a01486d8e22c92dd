"""The kernel-count table of the scheduler's fusion rules (packages/tg-codegen/README.md, "## Scheduling"), measured
on Tensor graphs over `Tensor.empty` buffers without running anything, plus end-to-end numerics for its rows."""

from collections.abc import Callable

import numpy as np
import pytest

from tg.codegen.schedule import create_schedule, verify_schedule
from tg.ir import Ops, UOp
from tg.tensor import Tensor

D = "NULL"


def counts(*ts: Tensor) -> tuple[int, int]:
    """(kernels, copies) of the schedule of `ts`."""
    linear = create_schedule(UOp(Ops.SINK, src=tuple(t.uop for t in ts))).linear
    verify_schedule(linear)
    bodies = [c.src[0].op for c in linear.src]
    return bodies.count(Ops.SINK), bodies.count(Ops.COPY)


def e(*shape: int) -> Tensor:
    return Tensor.empty(*shape, device=D)


def block(x: Tensor, w: Tensor) -> Tensor:
    """The benchmark block: softmax, matmul, mean/var normalisation (7 kernels: the softmax is stored before the
    matmul, whose every column would otherwise recompute its exp and division, C3)."""
    x = x - x.max(-1, keepdim=True)
    x = x.exp()
    x = x / x.sum(-1, keepdim=True)
    x = x @ w
    m = x.mean(-1, keepdim=True)
    v = ((x - m) * (x - m)).mean(-1, keepdim=True)
    return (x - m) / (v + 1e-5).sqrt()


def _chain(n: int) -> Tensor:
    a = e(64)
    x = a
    for i in range(n):
        x = x + a if i % 2 else x * a
    return x


def _stored_shared() -> tuple[Tensor, ...]:
    s = e(4, 8).sum(1)
    return s + 1, s * 2


def _contiguous_twice() -> tuple[Tensor, ...]:
    x = (e(8) + e(8)).contiguous()
    return (x * 2 + x,)


def _exp_twice() -> tuple[Tensor, ...]:
    y = e(8).exp()
    return (y + y * 2,)


def _two_outputs_sharing() -> tuple[Tensor, ...]:
    a, b = e(8), e(8)
    return a + b, (a + b) * 2


CASES: dict[str, tuple[Callable[[], tuple[Tensor, ...]], int]] = {
    "elementwise (a+b)*c": (lambda: ((e(4, 8) + e(4, 8)) * e(4, 8),), 1),
    "(a*b).sum(1)": (lambda: ((e(4, 8) * e(4, 8)).sum(1),), 1),
    "matmul": (lambda: (e(3, 5) @ e(5, 4),), 1),
    "x.sum()+1": (lambda: (e(16).sum() + 1,), 1),
    "(a*b).sum(1)+1": (lambda: ((e(4, 8) * e(4, 8)).sum(1) + 1,), 1),
    "movement chain": (lambda: (e(4, 6).T.reshape(2, 12).flip(1)[:, ::3].pad(((1, 1), (0, 2))) + 1,), 1),
    "200-op chain": (lambda: (_chain(200),), 1),
    "3000-deep chain": (lambda: (_chain(3000),), 1),
    "x - x.max(1)": (lambda: ((x := e(4, 8)) - x.max(1, keepdim=True),), 2),
    "a + a.sum(1)": (lambda: ((x := e(4, 8)) + x.sum(1, keepdim=True),), 2),
    "x * exp(sum+1)": (lambda: ((x := e(4, 8)) * (x.sum(1, keepdim=True) + 1).exp(),), 2),
    "softmax": (lambda: (e(4, 8).softmax(1),), 3),
    "layernorm": (lambda: (e(4, 8).layernorm(),), 3),
    "s + s.flip(0)": (lambda: ((s := e(4, 8).sum(1)) + s.flip(0),), 2),
    "realize(s+1, s*2)": (_stored_shared, 3),
    "x.sum(2).max(1)": (lambda: (e(4, 8, 2).sum(2).max(1),), 1),
    "(a@b).sum()": (lambda: ((e(3, 5) @ e(5, 4)).sum(),), 1),
    "pad then sum": (lambda: (e(2, 3, 4, 4).pad(((0, 0), (0, 0), (1, 1), (1, 1))).sum((2, 3)),), 1),
    "nested reduce under broadcast": (lambda: (((x := e(4, 8, 2)).exp().sum(2, keepdim=True) * x).sum(1),), 2),
    "contiguous used twice": (_contiguous_twice, 2),
    "realize(a+b, (a+b)*2)": (_two_outputs_sharing, 2),
    "y = exp; y + y*2": (_exp_twice, 1),
    "cat": (lambda: (e(4, 3).cat(e(4, 5), dim=1),), 1),
    "softmax @ w": (lambda: (e(16, 64).softmax(1) @ e(64, 64),), 4),
    "two blocks": (lambda: (block(block(e(16, 64), (w := e(64, 64))), w),), 14),
    "gelu @ w": (lambda: (e(16, 64).gelu() @ e(64, 32),), 2),
    "big (a@b).sum()": (lambda: ((e(64, 64) @ e(64, 64)).sum(),), 2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_count_table(name: str) -> None:
    build, want = CASES[name]
    assert counts(*build()) == (want, 0)


@pytest.mark.parametrize("n", [1, 3, 10])
def test_blocks_are_seven_kernels_each(n: int) -> None:
    x, w = e(16, 64), e(64, 64)
    for _ in range(n):
        x = block(x, w)
    assert counts(x) == (7 * n, 0)


def test_copy_to_another_device_is_one_kernel_and_a_copy() -> None:
    assert counts((e(8) + 1).to("CPU")) == (1, 1)


def test_buffers_need_no_kernel() -> None:
    a = e(8)
    assert counts(a) == (0, 0)
    assert counts(a.contiguous()) == (0, 0)


@pytest.mark.parametrize(
    "name,update,want",
    [("t.assign(t+1)", lambda t: t + 1, 1), ("t.assign(t.flip(0))", lambda t: t.flip(0), 2),
     ("shift by pad+shrink", lambda t: t.pad(((1, 0),)).shrink(((0, 1000),)), 2)],
)  # fmt: skip
def test_assign_kernel_counts_and_values(name: str, update: Callable[[Tensor], Tensor], want: int) -> None:
    t = Tensor.empty(1000, device=D)
    assert counts(t.assign(update(t))) == (want, 0)
    start = np.arange(1000, dtype=np.float32)
    t = Tensor(start, device="CPU")
    expected = update(Tensor(start, device="CPU")).numpy()
    t.assign(update(t)).realize()
    np.testing.assert_array_equal(t.numpy(), expected)


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(1, keepdims=True))
    return z / z.sum(1, keepdims=True)


NUMERIC_ROWS: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "softmax": (lambda x, w: x.softmax(1), lambda x, w: _softmax(x)),
    "layernorm": (lambda x, w: x.layernorm(),
                  lambda x, w: (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)),
    "x * exp(sum+1)": (lambda x, w: x * (x.sum(1, keepdim=True) + 1).exp(),
                       lambda x, w: x * np.exp(x.sum(1, keepdims=True) + 1)),
    "softmax @ w": (lambda x, w: x.softmax(1) @ w, lambda x, w: _softmax(x) @ w),
    "s + s.flip(0)": (lambda x, w: (s := x.sum(1)) + s.flip(0), lambda x, w: (s := x.sum(1)) + s[::-1]),
    "two blocks": (lambda x, w: block(block(x, w), w), None),  # type: ignore[dict-item]
}  # fmt: skip


def _np_block(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x = _softmax(x) @ w
    m = x.mean(-1, keepdims=True)
    v = ((x - m) * (x - m)).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5)


@pytest.mark.parametrize("name", list(NUMERIC_ROWS))
def test_table_rows_compute_the_right_values(name: str, rng: np.random.Generator) -> None:
    x = rng.standard_normal((8, 8)).astype(np.float32)
    w = (rng.standard_normal((8, 8)) / 3).astype(np.float32)
    build, ref = NUMERIC_ROWS[name]
    want = _np_block(_np_block(x, w), w) if ref is None else ref(x, w)
    got = build(Tensor(x, device="CPU"), Tensor(w, device="CPU")).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
