"""Convolution gradients as convolutions (tg.tensor.nnops._conv_gradient through gradient.set_custom_gradient):
values against a numpy reference (and torch where installed) for strides, dilations, groups, asymmetric padding
and 1-d/3-d kernels, and the shape of the programs: the input gradient is one reduction without remainders or
divisions in its indices (the node-by-node gradient of the sliding windows was an im2col-shaped product plus an
overlap-add through MOD), and the CPU heuristic keeps several accumulators in the weight gradient."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from tg.codegen.schedule import create_schedule
from tg.ir import Ops, UOp
from tg.tensor import Tensor


def _np_conv_grads(
    x: np.ndarray, w: np.ndarray, gy: np.ndarray, groups: int, stride: tuple[int, ...], dilation: tuple[int, ...],
    pads: list[tuple[int, int]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Forward, input gradient and weight gradient of an N-d convolution, in float64, one kernel offset at a time."""
    x, w, gy = x.astype(np.float64), w.astype(np.float64), gy.astype(np.float64)
    bs, cin = x.shape[:2]
    cout, cin_g = w.shape[:2]
    cout_g = cout // groups
    xp = np.pad(x, [(0, 0), (0, 0), *pads])
    out_sp = gy.shape[2:]
    y = np.zeros(gy.shape)
    dxp = np.zeros(xp.shape)
    dw = np.zeros(w.shape)
    for k in itertools.product(*(range(s) for s in w.shape[2:])):
        sl = tuple(
            slice(kk * d, kk * d + (o - 1) * s + 1, s) for kk, d, o, s in zip(k, dilation, out_sp, stride, strict=True)
        )
        patch = xp[(slice(None), slice(None), *sl)].reshape(bs, groups, cin_g, -1)  # spatial flattened: p
        at_k: Any = (slice(None), slice(None), *k)
        wk = w[at_k].reshape(groups, cout_g, cin_g)
        y += np.einsum("ngcp,goc->ngop", patch, wk).reshape(gy.shape)
        g = gy.reshape(bs, groups, cout_g, -1)
        dxp[(slice(None), slice(None), *sl)] += np.einsum("ngop,goc->ngcp", g, wk).reshape(bs, cin, *out_sp)
        dw[at_k] += np.einsum("ngop,ngcp->goc", g, patch).reshape(cout, cin_g)
    crop = tuple(slice(b, b + s) for (b, _), s in zip(pads, x.shape[2:], strict=True))
    return y, dxp[(slice(None), slice(None), *crop)], dw


# (input shape, weight shape, conv2d keyword arguments, the padding pairs they mean)
CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any], list[tuple[int, int]]]] = [
    ((2, 3, 8, 8), (4, 3, 3, 3), {"padding": 1}, [(1, 1), (1, 1)]),
    # even channel counts: the CPU weight gradient is a dot tile of Cout x Cin x the kernel column (heuristic.py)
    ((4, 4, 8, 8), (4, 4, 3, 3), {"padding": (1, 1)}, [(1, 1), (1, 1)]),
    (
        (2, 4, 7, 6),
        (6, 2, 3, 2),
        {"groups": 2, "stride": (2, 1), "dilation": (1, 2), "padding": (1, 2)},
        [(1, 1), (2, 2)],
    ),
    ((2, 3, 7, 7), (4, 3, 3, 3), {"stride": 2, "padding": (1, 0, 2, 1)}, [(2, 1), (1, 0)]),
    ((2, 3, 6, 6), (4, 3, 2, 2), {"padding": 3}, [(3, 3), (3, 3)]),
    ((1, 2, 9), (3, 2, 4), {"stride": 3, "padding": 2}, [(2, 2)]),
    ((2, 2, 5, 5, 5), (2, 2, 3, 3, 3), {"padding": "same"}, [(1, 1)] * 3),
]


@pytest.mark.parametrize(("xs", "ws", "kw", "pads"), CASES, ids=[str(c[2]) for c in CASES])
def test_conv_gradients_equal_numpy(
    rng: np.random.Generator, device: str, xs: Any, ws: Any, kw: Any, pads: Any
) -> None:
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    xt, wt = Tensor(x, device=device, requires_grad=True), Tensor(w, device=device, requires_grad=True)
    out = xt.conv2d(wt, **kw)
    gy = rng.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(gy, device=device)).sum().backward()
    assert xt.grad is not None and wt.grad is not None
    groups = kw.get("groups", 1)
    n = len(ws) - 2
    stride = kw.get("stride", 1)
    dilation = kw.get("dilation", 1)
    stride = (stride,) * n if isinstance(stride, int) else stride
    dilation = (dilation,) * n if isinstance(dilation, int) else dilation
    y, dx, dw = _np_conv_grads(x, w, gy, groups, stride, dilation, pads)
    np.testing.assert_allclose(out.numpy(), y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-4, atol=1e-4)


@pytest.mark.torch
def test_conv_gradients_with_bias_and_relu_match_torch(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((4, 3, 9, 9)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    xt, wt, bt = (Tensor(a, requires_grad=True) for a in (x, w, b))
    xt.conv2d(wt, bt, stride=2, padding=1).relu().square().sum().backward()
    xr, wr, br = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    torch.nn.functional.conv2d(xr, wr, br, stride=2, padding=1).relu().square().sum().backward()
    for mine, ref in ((xt, xr), (wt, wr), (bt, br)):
        assert mine.grad is not None
        np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_gradient_of_a_gradient(rng: np.random.Generator, device: str) -> None:
    """create_graph: the input gradient (a convolution of the output gradient with the weight) is differentiable
    in the weight. d/dw of sum(dx * v) for loss sum(conv(x, w) * gy) is the weight gradient of v against gy."""
    x = rng.standard_normal((2, 2, 6, 6)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    xt, wt = Tensor(x, device=device, requires_grad=True), Tensor(w, device=device, requires_grad=True)
    out = xt.conv2d(wt, padding=1)
    gy = rng.standard_normal(out.shape).astype(np.float32)
    (dx,) = (out * Tensor(gy, device=device)).sum().gradient(xt)
    v = rng.standard_normal(x.shape).astype(np.float32)
    (dw2,) = (dx * Tensor(v, device=device)).sum().gradient(wt)
    # dx = conv_transpose(gy, w) is linear in w: its derivative against v is the weight gradient of input v
    _, _, want = _np_conv_grads(v, w, gy, 1, (1, 1), (1, 1), [(1, 1), (1, 1)])
    np.testing.assert_allclose(dw2.numpy(), want, rtol=1e-4, atol=1e-4)


def test_input_gradient_indexes_without_remainders() -> None:
    """The digits CNN's second convolution (8 -> 16 channels, 3x3, padding 1): its input gradient is scheduled as
    reductions whose indices have no MOD or IDIV (the overlap-add of the windows' repeat had both), and it reads no
    im2col-sized buffer (nothing of N x Cin x H x W x 3 x 3 elements is stored)."""
    x = Tensor.rand(64, 8, 8, 8, device="NULL", requires_grad=True)
    w = Tensor.rand(16, 8, 3, 3, device="NULL", requires_grad=True)
    x.conv2d(w, padding=1).relu().sum().backward()
    assert x.grad is not None and w.grad is not None
    for grad in (x.grad, w.grad):
        linear = create_schedule(UOp(Ops.SINK, src=(grad.uop,))).linear
        asts = [c.src[0] for c in linear.src if c.src[0].op is Ops.SINK]
        nodes = [u for ast in asts for u in ast.toposort()]
        assert not any(u.op in (Ops.MOD, Ops.IDIV) for u in nodes)
        sizes = [b.arg for c in linear.src for b in c.src[1:] if b.op is Ops.BUFFER]
        assert sizes and max(sizes) < 64 * 8 * 8 * 8 * 9, sizes


@pytest.mark.parametrize("shape", [(64, 8, 8, 8, 16), (32, 16, 32, 32, 16)], ids=["digits-cnn", "resnet-block"])
def test_weight_gradient_is_a_register_tile_of_dot_products(shape: tuple[int, ...]) -> None:
    """The weight gradient (output (Cout, Cin, 3, 3): no vector-wide contiguous output axis) reduces over the batch
    and the output positions, contiguous in both operands: the CPU heuristic splits that reduce into vector lanes
    and UPCASTs Cout and Cin (a tile of independent accumulators, each loaded vector used by several FMAs) instead of
    one accumulator per output (a single FMA chain streaming both operands once per output). The kernel column kw
    (the input's loads move by one element along it) is UPCAST too, all 3: each vector of the output gradient feeds
    3x the FMAs, and both operands are streamed once per larger tile."""
    from tg.codegen.program import get_program
    from tg.codegen.render.cstyle import ClangRenderer
    from tg.ir import AxisType

    bs, cin, h, w_, cout = shape
    x = Tensor.rand(bs, cin, h, w_, device="NULL", requires_grad=True)
    w = Tensor.rand(cout, cin, 3, 3, device="NULL", requires_grad=True)
    out = x.conv2d(w, padding=1)
    (out * Tensor.rand(*out.shape, device="NULL")).sum().backward()  # an output gradient that is loaded
    assert w.grad is not None
    linear = create_schedule(UOp(Ops.SINK, src=(w.grad.uop,))).linear
    asts = [c.src[0] for c in linear.src if c.src[0].op is Ops.SINK]
    (ast,) = [a for a in asts if any(u.op is Ops.REDUCE for u in a.toposort())]
    ren = ClangRenderer(32, 1, True)  # AVX2-sized lanes, one thread
    opts = [o for o in get_program(ast, ren).applied_opts if isinstance(o.arg, tuple)]
    kinds = [o.arg[1] for o in opts]
    assert kinds.count(AxisType.GROUP_REDUCE) == 1 and kinds.count(AxisType.UPCAST) == 3, kinds
    assert any(o.arg[:2] == (3, AxisType.UPCAST) for o in opts), opts  # the kernel column, whole


def test_padded_input_is_stored_once_for_the_forward_and_the_weight_gradient() -> None:
    """A padded convolution stores its input padded (one copy kernel), so neither the forward's reduction nor the
    weight gradient's gates its loads with the padding (no comparisons in their indices), and both read the same
    copy: the training step has exactly one padded buffer of x."""
    x = Tensor.rand(32, 16, 32, 32, device="NULL", requires_grad=True)
    w = Tensor.rand(16, 16, 3, 3, device="NULL", requires_grad=True)
    out = x.conv2d(w, padding=1)
    (out * Tensor.rand(*out.shape, device="NULL")).sum().backward()
    assert w.grad is not None
    linear = create_schedule(UOp(Ops.SINK, src=(out.uop, w.grad.uop))).linear
    asts = [c.src[0] for c in linear.src if c.src[0].op is Ops.SINK]
    reductions = [a for a in asts if any(u.op is Ops.REDUCE for u in a.toposort())]
    assert len(reductions) == 2  # the forward and the weight gradient
    for ast in reductions:
        assert not any(u.op is Ops.CMPLT for u in ast.toposort())
    padded = [b for c in linear.src for b in c.src[1:] if b.op is Ops.BUFFER and b.arg == 32 * 16 * 34 * 34]
    assert len(set(padded)) == 1
