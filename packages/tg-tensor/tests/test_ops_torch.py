# ruff: noqa: E501 - one case per line reads best as a table
"""Forward and backward of the Tensor API against PyTorch, driven by one table (skipped where torch is absent).

Each case gives input generators, a tg function and a torch function taking the same inputs (translating argument
names where they differ). The test compares the forward value and, for float inputs, the gradient of
sum(out * r) for a random r (all ones would hide transposition bugs), in float32 and (slow) in float16.
"""

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
F = torch.nn.functional


def randn(*shape: int, scale: float = 1.0) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda r: (r.standard_normal(shape) * scale).astype(np.float32)


def uniform(lo: float, hi: float, *shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda r: r.uniform(lo, hi, shape).astype(np.float32)


def ints(lo: int, hi: int, *shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda r: r.integers(lo, hi, shape).astype(np.int64)


def distinct(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    """Values without ties (max/sort gradients are only unique then), also after rounding to float16/bfloat16:
    multiples of 1/8 with at most 8 significant bits (exact in bfloat16 for up to 512 elements)."""
    n = int(np.prod(shape))
    assert n <= 512, "distinct(): more values than bfloat16 holds exactly in this range"
    return lambda r: ((r.permutation(n) - n // 2).reshape(shape) / 8).astype(np.float32)


Case = tuple[str, list[Callable[[np.random.Generator], np.ndarray]], Callable[..., Any], Callable[..., Any]]

CASES: list[Case] = [
    # reductions with PyTorch argument names
    ("sum_dim", [randn(3, 4, 5)], lambda x: x.sum(dim=(0, 2), keepdim=True), lambda x: x.sum(dim=(0, 2), keepdim=True)),
    ("mean_keepdims", [randn(3, 4)], lambda x: x.mean(axis=1, keepdims=True), lambda x: x.mean(1, keepdim=True)),
    ("prod", [uniform(0.5, 1.5, 3, 4)], lambda x: x.prod(1), lambda x: x.prod(1)),
    ("max_dim", [distinct(3, 4)], lambda x: x.max(dim=1), lambda x: x.max(dim=1).values),
    ("min_all", [distinct(3, 4)], lambda x: x.min(), lambda x: x.min()),
    ("var", [randn(4, 5)], lambda x: x.var(dim=1), lambda x: x.var(dim=1)),
    ("var_biased", [randn(4, 5)], lambda x: x.var(0, correction=0), lambda x: x.var(0, correction=0)),
    ("std", [randn(4, 5)], lambda x: x.std(), lambda x: x.std()),
    ("logsumexp", [randn(3, 6, scale=10)], lambda x: x.logsumexp(dim=1), lambda x: x.logsumexp(dim=1)),
    ("softmax", [randn(3, 6, scale=5)], lambda x: x.softmax(dim=0), lambda x: x.softmax(dim=0)),
    ("log_softmax", [randn(3, 6, scale=5)], lambda x: x.log_softmax(1), lambda x: x.log_softmax(1)),
    ("softmin", [randn(3, 6)], lambda x: x.softmin(-1), lambda x: F.softmin(x, -1)),
    ("argmax", [distinct(3, 5)], lambda x: x.argmax(dim=1), lambda x: x.argmax(dim=1)),
    ("argmin_keepdim", [distinct(3, 5)], lambda x: x.argmin(0, keepdim=True), lambda x: x.argmin(0, keepdim=True)),
    # linear algebra
    ("matmul_batched", [randn(2, 3, 4), randn(4, 5)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul_broadcast", [randn(2, 1, 3, 4), randn(3, 4, 2)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("linear", [randn(5, 3), randn(3, 4), randn(4)], lambda x, w, b: x.linear(w, b), lambda x, w, b: x @ w + b),
    # movement
    ("cat_list", [randn(2, 3), randn(2, 2)], lambda a, b: Tensor.cat([a, b], dim=1), lambda a, b: torch.cat([a, b], dim=1)),
    ("stack_list", [randn(2, 3), randn(2, 3)], lambda a, b: Tensor.stack([a, b], dim=2), lambda a, b: torch.stack([a, b], 2)),
    ("pad_flat", [randn(2, 3, 4)], lambda x: x.pad((1, 2, 0, 1)), lambda x: F.pad(x, (1, 2, 0, 1))),
    ("pad_reflect", [randn(2, 3, 4)], lambda x: x.pad((2, 1, 1, 2), mode="reflect"), lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect")),
    ("pad_replicate", [randn(2, 3, 4)], lambda x: x.pad((2, 1), mode="replicate"), lambda x: F.pad(x, (2, 1), mode="replicate")),
    ("pad_circular", [randn(1, 3, 4)], lambda x: x.pad((1, 3), mode="circular"), lambda x: F.pad(x, (1, 3), mode="circular")),
    ("repeat", [randn(2, 3)], lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3)),
    ("repeat_interleave", [randn(2, 3)], lambda x: x.repeat_interleave(2, dim=1), lambda x: x.repeat_interleave(2, dim=1)),
    ("roll", [randn(3, 4)], lambda x: x.roll((1, -3), (0, 1)), lambda x: x.roll((1, -3), (0, 1))),
    ("split", [randn(5, 4)], lambda x: x.split([2, 3])[1], lambda x: x.split([2, 3])[1]),
    ("chunk", [randn(7, 4)], lambda x: x.chunk(3)[2], lambda x: x.chunk(3)[2]),
    ("unflatten", [randn(3, 8)], lambda x: x.unflatten(1, (2, -1)), lambda x: x.unflatten(1, (2, -1))),
    ("unfold", [randn(3, 10)], lambda x: x.unfold(1, 3, 2), lambda x: x.unfold(1, 3, 2)),
    ("tril", [randn(2, 4, 5)], lambda x: x.tril(1), lambda x: x.tril(1)),
    ("triu", [randn(4, 5)], lambda x: x.triu(-1), lambda x: x.triu(-1)),
    ("diagonal", [randn(3, 4, 5)], lambda x: x.diagonal(1, 1, 2), lambda x: x.diagonal(1, 1, 2)),
    ("diag", [randn(4)], lambda x: x.diag(-1), lambda x: x.diag(-1)),
    # scans, sorting, einsum, resampling
    ("cumsum", [randn(3, 6)], lambda x: x.cumsum(dim=1), lambda x: x.cumsum(dim=1)),
    ("cumsum_long", [randn(2, 600)], lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
    ("cumprod", [uniform(0.5, 1.5, 3, 6)], lambda x: x.cumprod(0), lambda x: x.cumprod(0)),
    ("cummax", [distinct(3, 6)], lambda x: x.cummax(1).values, lambda x: x.cummax(1).values),
    ("logcumsumexp", [randn(3, 6, scale=5)], lambda x: x.logcumsumexp(1), lambda x: x.logcumsumexp(1)),
    ("sort", [distinct(3, 6)], lambda x: x.sort(dim=1)[0], lambda x: x.sort(dim=1).values),
    ("sort_desc_indices", [distinct(3, 6)], lambda x: x.sort(0, descending=True)[1], lambda x: x.sort(dim=0, descending=True).indices),
    ("topk", [distinct(4, 7)], lambda x: x.topk(3)[0], lambda x: x.topk(3).values),
    ("einsum_batched", [randn(2, 3, 4), randn(4, 5)], lambda a, b: Tensor.einsum("bij,jk->bik", a, b), lambda a, b: torch.einsum("bij,jk->bik", a, b)),
    ("einsum_trace_outer", [randn(3, 3), randn(2)], lambda a, b: Tensor.einsum("ii,j->j", a, b), lambda a, b: torch.einsum("ii,j->j", a, b)),
    ("interpolate_bilinear", [randn(1, 2, 4, 5)], lambda x: x.interpolate((7, 3), mode="bilinear"),
     lambda x: F.interpolate(x, (7, 3), mode="bilinear")),
    ("interpolate_align", [randn(1, 2, 4, 5)], lambda x: x.interpolate((6, 8), mode="bilinear", align_corners=True),
     lambda x: F.interpolate(x, (6, 8), mode="bilinear", align_corners=True)),
    ("interpolate_nearest", [randn(1, 2, 4, 5)], lambda x: x.interpolate((8, 7), mode="nearest"), lambda x: F.interpolate(x, (8, 7), mode="nearest")),
    ("clone", [randn(3)], lambda x: x.clone() * 2, lambda x: x.clone() * 2),
    # indexing
    ("getitem_tensor", [randn(4, 5), ints(-4, 4, 2, 3)], lambda x, i: x[i, 1:4], lambda x, i: x[i, 1:4]),
    ("getitem_lists", [randn(4, 5, 3)], lambda x: x[[0, 0, 3], :, [1, 2, 0]], lambda x: x[[0, 0, 3], :, [1, 2, 0]]),
    ("gather", [randn(3, 5), ints(0, 5, 3, 4)], lambda x, i: x.gather(1, i), lambda x, i: x.gather(1, i)),
    ("scatter_add", [randn(3, 5), ints(0, 5, 3, 4), randn(3, 4)], lambda x, i, s: x.scatter(1, i, s, reduce="add"),
     lambda x, i, s: x.scatter_add(1, i, s)),
    ("scatter_reduce_amax", [distinct(3, 5), ints(0, 5, 3, 4), distinct(3, 4)],
     lambda x, i, s: x.scatter_reduce(1, i, s, "amax"), lambda x, i, s: x.scatter_reduce(1, i, s, "amax")),
    ("masked_fill", [randn(3, 5)], lambda x: x.masked_fill(x > 0, 0.5), lambda x: x.masked_fill(x > 0, 0.5)),
    # activations and composite math
    ("relu", [randn(4, 5)], lambda x: x.relu(), F.relu),
    ("gelu", [randn(4, 5)], lambda x: x.gelu(), F.gelu),
    ("silu", [randn(4, 5)], lambda x: x.silu(), F.silu),
    ("mish", [randn(4, 5)], lambda x: x.mish(), F.mish),
    ("elu", [randn(4, 5)], lambda x: x.elu(), F.elu),
    ("softplus", [randn(4, 5, scale=20)], lambda x: x.softplus(), F.softplus),
    ("logsigmoid", [randn(4, 5, scale=20)], lambda x: x.logsigmoid(), F.logsigmoid),
    ("hardswish", [randn(4, 5, scale=3)], lambda x: x.hardswish(), F.hardswish),
    ("leaky_relu", [randn(4, 5)], lambda x: x.leaky_relu(negative_slope=0.2), lambda x: F.leaky_relu(x, 0.2)),
    ("clamp_kw", [randn(4, 5)], lambda x: x.clamp(min=-0.5, max=0.5), lambda x: x.clamp(min=-0.5, max=0.5)),
    ("clip_max_only", [randn(4, 5)], lambda x: x.clip(max=0.3), lambda x: x.clip(max=0.3)),
    ("lerp", [randn(4), randn(4)], lambda a, b: a.lerp(b, 0.3), lambda a, b: a.lerp(b, 0.3)),
    ("logaddexp", [randn(5), randn(5)], lambda a, b: a.logaddexp(b), torch.logaddexp),
    ("atan", [randn(20, scale=3)], lambda x: x.atan(), torch.atan),
    ("asinh", [randn(20, scale=3)], lambda x: x.asinh(), torch.asinh),
    ("erf", [randn(20)], lambda x: x.erf(), torch.erf),
    ("acos", [uniform(-0.9, 0.9, 20)], lambda x: x.acos(), torch.acos),
    ("asin", [uniform(-0.9, 0.9, 20)], lambda x: x.asin(), torch.asin),
    ("atanh", [uniform(-0.9, 0.9, 20)], lambda x: x.atanh(), torch.atanh),
    ("acosh", [uniform(1.1, 5, 20)], lambda x: x.acosh(), torch.acosh),
    ("sinh_cosh", [randn(20)], lambda x: x.sinh() + x.cosh(), lambda x: x.sinh() + x.cosh()),
    ("log10_log2_exp2", [uniform(0.5, 3, 20)], lambda x: x.log10() + x.log2() + x.exp2(), lambda x: x.log10() + x.log2() + x.exp2()),
    ("celu_selu", [randn(20)], lambda x: x.celu(0.7) + x.selu(), lambda x: F.celu(x, 0.7) + F.selu(x)),
    ("softsign_swish", [randn(20)], lambda x: x.softsign() + x.swish(), lambda x: F.softsign(x) + F.silu(x)),
    ("relu6_hardsigmoid_hardtanh", [randn(20, scale=4)], lambda x: x.relu6() + x.hardsigmoid() + x.hardtanh(-2, 2),
     lambda x: F.relu6(x) + F.hardsigmoid(x) + F.hardtanh(x, -2, 2)),
    ("quick_gelu", [randn(20)], lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x)),
    ("copysign", [randn(10), randn(10)], lambda a, b: a.copysign(b), torch.copysign),
    ("minimum_sub_mul_neg", [randn(10), randn(10)], lambda a, b: a.minimum(b) + a.sub(b) * a.mul(2) - b.neg(),
     lambda a, b: torch.minimum(a, b) + (a - b) * (a * 2) + b),
    ("dot", [randn(3, 4), randn(4)], lambda a, b: a.dot(b), lambda a, b: a @ b),
    ("cummin", [distinct(3, 6)], lambda x: x.cummin(1).values, lambda x: x.cummin(1).values),
    ("var_mean_std_mean", [randn(4, 5)], lambda x: x.var_mean(1)[0] + x.std_mean(1)[0] * x.var_mean(1)[1],
     lambda x: torch.var_mean(x, 1)[0] + torch.std_mean(x, 1)[0] * torch.var_mean(x, 1)[1]),
    ("view_squeeze_unsqueeze_flatten", [randn(2, 1, 6)], lambda x: x.view(2, 6).unsqueeze(0).squeeze().flatten(),
     lambda x: x.view(2, 6).unsqueeze(0).squeeze().flatten()),
    ("contiguous_backward", [randn(4)], lambda x: (x * 2).contiguous().contiguous_backward() * x, lambda x: (x * 2) * x),
    ("pad_to_shrink_to", [randn(2, 3)], lambda x: x.pad_to(4, 5).shrink_to(3, 4), lambda x: F.pad(x, (0, 2, 0, 2))[:3, :4]),
    ("masked_select", [randn(3, 4)], lambda x: x.masked_select(x > 0), lambda x: x.masked_select(x > 0)),
    ("sequential", [randn(5)], lambda x: x.sequential([Tensor.relu, lambda t: t * 3]), lambda x: F.relu(x) * 3),
    ("rearrange", [randn(2, 12, 3)], lambda x: x.rearrange("b (h w) c -> b c h w", h=4),
     lambda x: x.reshape(2, 4, 3, 3).permute(0, 3, 1, 2)),
    ("round", [randn(10, scale=3)], lambda x: x.round() + x, lambda x: x.round() + x),
    # neural-network ops
    ("conv2d", [randn(2, 4, 7, 6), randn(6, 2, 3, 3), randn(6)],
     lambda x, w, b: x.conv2d(w, b, groups=2, stride=2, padding=1), lambda x, w, b: F.conv2d(x, w, b, 2, 1, 1, 2)),
    ("conv2d_same_dilated", [randn(1, 3, 8, 8), randn(4, 3, 3, 3)],
     lambda x, w: x.conv2d(w, padding="same", dilation=2), lambda x, w: F.conv2d(x, w, padding="same", dilation=2)),
    ("conv1d", [randn(2, 3, 9), randn(4, 3, 3)], lambda x, w: x.conv2d(w, stride=2), lambda x, w: F.conv1d(x, w, stride=2)),
    ("conv3d", [randn(1, 2, 4, 5, 4), randn(3, 2, 2, 2, 2)], lambda x, w: x.conv2d(w, padding=1), lambda x, w: F.conv3d(x, w, padding=1)),
    ("conv_transpose2d", [randn(2, 4, 5, 5), randn(4, 3, 3, 3)],
     lambda x, w: x.conv_transpose2d(w, stride=2, padding=1, output_padding=1),
     lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)),
    ("max_pool2d", [distinct(2, 3, 7, 7)], lambda x: x.max_pool2d(3, stride=2, padding=1),
     lambda x: F.max_pool2d(x, 3, stride=2, padding=1)),
    ("max_pool2d_indices", [distinct(1, 2, 6, 6)], lambda x: x.max_pool2d(2, return_indices=True)[1],
     lambda x: F.max_pool2d(x, 2, return_indices=True)[1]),
    ("max_unpool2d", [distinct(1, 2, 6, 6)], lambda x: x.max_pool2d(2, return_indices=True)[0].max_unpool2d(x.max_pool2d(2, return_indices=True)[1]),
     lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2)),
    ("dropout_eval_is_identity", [randn(5)], lambda x: x.dropout(0.5), lambda x: F.dropout(x, 0.5, training=False)),
    ("max_pool2d_ceil", [distinct(1, 2, 7, 6)], lambda x: x.max_pool2d(2, ceil_mode=True), lambda x: F.max_pool2d(x, 2, ceil_mode=True)),
    ("avg_pool2d", [randn(2, 3, 6, 7)], lambda x: x.avg_pool2d(3, stride=2, padding=1, count_include_pad=False),
     lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)),
    ("avg_pool2d_ceil", [randn(1, 2, 7, 7)], lambda x: x.avg_pool2d(2, ceil_mode=True), lambda x: F.avg_pool2d(x, 2, ceil_mode=True)),
    ("layernorm", [randn(3, 8)], lambda x: x.layernorm(), lambda x: F.layer_norm(x, (8,))),
    ("batchnorm", [randn(4, 3, 2), randn(3), randn(3), randn(3), uniform(0.5, 2, 3)],
     lambda x, w, b, m, v: x.batchnorm(w, b, m, v.rsqrt()),
     lambda x, w, b, m, v: (x - m[:, None]) * (w / v.sqrt())[:, None] + b[:, None]),
    ("normalize", [randn(3, 5)], lambda x: x.normalize(dim=1), lambda x: F.normalize(x, dim=1)),
    ("sdpa_causal", [randn(2, 3, 4, 8), randn(2, 3, 5, 8), randn(2, 3, 5, 8)],
     lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    ("cross_entropy", [randn(6, 5), ints(0, 5, 6)], lambda x, y: x.cross_entropy(y, label_smoothing=0.1),
     lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1)),
    ("cross_entropy_nd", [randn(2, 5, 3), ints(0, 5, 2, 3)], lambda x, y: x.cross_entropy(y), F.cross_entropy),
    ("sparse_ce", [randn(6, 5), ints(0, 5, 6)], lambda x, y: x.sparse_categorical_crossentropy(y), F.cross_entropy),
    ("nll_loss", [randn(6, 5), ints(0, 5, 6)], lambda x, y: x.log_softmax(1).nll_loss(y), lambda x, y: F.nll_loss(x.log_softmax(1), y)),
    ("bce", [uniform(0.05, 0.95, 4, 3), uniform(0, 1, 4, 3)], lambda p, y: p.binary_crossentropy(y), F.binary_cross_entropy),
    ("bce_logits", [randn(4, 3, scale=10), uniform(0, 1, 4, 3)], lambda x, y: x.binary_crossentropy_logits(y),
     F.binary_cross_entropy_with_logits),
]  # fmt: skip


@pytest.mark.parametrize("name,gens,tg_fn,torch_fn", CASES, ids=[c[0] for c in CASES])
def test_forward_and_backward_match_torch(name, gens, tg_fn, torch_fn, device):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    arrays = [g(rng) for g in gens]
    ours = [Tensor(a, device=device, requires_grad=True if a.dtype == np.float32 else None) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=a.dtype == np.float32) for a in arrays]
    out, ref = tg_fn(*ours), torch_fn(*theirs)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=f"{name} forward")
    if not out.requires_grad:
        return
    r = rng.standard_normal(ref.shape).astype(np.float32)
    (out * Tensor(r, device=device)).sum().backward()
    (ref * torch.tensor(r)).sum().backward()
    for i, (t, p) in enumerate(zip(ours, theirs, strict=True)):
        if p.grad is not None:
            if t.grad is None:  # no path to this input: torch's gradient must be zero then
                assert not p.grad.any(), f"{name}: input {i} got no gradient"
                continue
            np.testing.assert_allclose(t.grad.numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"{name} grad {i}")


@pytest.mark.parametrize(
    "name,tg_fn,torch_fn",
    [
        ("tanh", lambda x: x.tanh(), torch.tanh),
        ("softmax", lambda x: x.softmax(-1), lambda x: x.softmax(-1)),
        ("matmul", lambda x: x @ x.transpose(), lambda x: x @ x.T),
        ("sigmoid_mul", lambda x: x.sigmoid() * x, lambda x: x.sigmoid() * x),
    ],
)
def test_second_derivatives_match_torch(name, tg_fn, torch_fn, device):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    r = rng.standard_normal((3, 4) if name != "matmul" else (3, 3)).astype(np.float32)
    x = Tensor(a, device=device)
    (g,) = (tg_fn(x) * Tensor(r, device=device)).sum().gradient(x)
    (gg,) = (g * g).sum().gradient(x)
    px = torch.tensor(a, requires_grad=True)
    (pg,) = torch.autograd.grad((torch_fn(px) * torch.tensor(r)).sum(), px, create_graph=True)
    (pgg,) = torch.autograd.grad((pg * pg).sum(), px)
    np.testing.assert_allclose(g.numpy(), pg.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gg.numpy(), pgg.numpy(), rtol=1e-3, atol=1e-4)


# ---- float16 forward and backward over the whole op table --------------------------------------------------------

# ops whose half result is not comparable at half tolerance for a reason that is not a bug (none today: the
# `distinct` inputs stay distinct after rounding to float16/bfloat16, so indices of maxima are unique)
HALF_SKIP: dict[str, str] = {}


def _close(ours: np.ndarray, ref: np.ndarray, rtol: float, what: str) -> None:
    """Equal NaN/inf positions; finite values within rtol of the reference's scale (a gradient summed over many
    half terms is judged against its largest magnitude, as half rounding is relative to the operands)."""
    ours, ref = ours.astype(np.float64), ref.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref), err_msg=f"{what}: NaN positions")
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(
        ours[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)], err_msg=f"{what}: infinities"
    )
    scale = max(float(np.abs(ref[finite]).max(initial=0.0)), 1.0)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=rtol, atol=rtol * scale, err_msg=what)


# (forward rtol, gradient rtol) per narrow dtype: a few roundings of the dtype's epsilon (2^-11, 2^-8)
NARROW_TOLERANCE = {"float16": (2e-2, 3e-2), "bfloat16": (6e-2, 1e-1)}


def _narrow(a: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to `dtype` (kept as float32 numbers, so both libraries start from the same ones)."""
    return torch.tensor(a).to(getattr(torch, dtype)).float().numpy()


@pytest.mark.slow
@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("name,gens,tg_fn,torch_fn", CASES, ids=[c[0] for c in CASES])
def test_narrow_float_forward_and_backward_match_torch(name, gens, tg_fn, torch_fn, half, device):
    """tg computes in the narrow dtype end to end (narrow gradients too); torch in float32 on the same rounded
    inputs."""
    if name in HALF_SKIP:
        pytest.skip(HALF_SKIP[name])
    if half == "bfloat16" and name == "clamp_kw":
        pytest.skip("rounding to bfloat16 puts an input exactly on a clamp bound (a kink: torch's gradient is 1 there)")
    rtol_fwd, rtol_grad = NARROW_TOLERANCE[half]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    arrays = [g(rng) for g in gens]
    rounded = [_narrow(a, half) if a.dtype == np.float32 else a for a in arrays]
    ours = [
        Tensor(a, device=device, dtype=half, requires_grad=True) if a.dtype == np.float32 else Tensor(a, device=device)
        for a in rounded
    ]
    theirs = [torch.tensor(a, requires_grad=a.dtype == np.float32) for a in rounded]
    out, ref = tg_fn(*ours), torch_fn(*theirs)
    if ref.dtype.is_floating_point:
        assert out.dtype is getattr(dtypes, half), f"{name}: {half} inputs gave {out.dtype.name}"
    got = out.float().numpy() if ref.dtype.is_floating_point else out.numpy()
    _close(got, ref.detach().numpy(), rtol_fwd, f"{name} forward")
    if not out.requires_grad:
        return
    r = _narrow(rng.standard_normal(ref.shape).astype(np.float32), half)
    (out * Tensor(r, device=device, dtype=half)).sum().backward()
    (ref * torch.tensor(r)).sum().backward()
    for i, (t, p) in enumerate(zip(ours, theirs, strict=True)):
        if p.grad is None:
            continue
        if t.grad is None:
            assert not p.grad.any(), f"{name}: input {i} got no gradient"
            continue
        assert t.grad.dtype is t.dtype, f"{name}: gradient {i} is {t.grad.dtype.name}"
        _close(t.grad.float().numpy(), p.grad.numpy(), rtol_grad, f"{name} grad {i}")
