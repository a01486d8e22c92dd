"""`tg.tensor.nn.functional` (imported as `F`): PyTorch's functional forms with torch's argument names, each a thin
call of the Tensor method that computes it.

>>> from tg.tensor import Tensor
>>> from tg.tensor.nn import functional as F
>>> F.relu(Tensor([-1.0, 2.0])).tolist()
[0.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tg.tensor.tensor import Tensor

__all__ = [
    "adaptive_avg_pool2d", "avg_pool1d", "avg_pool2d", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "celu", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "cosine_similarity", "cross_entropy", "dropout",
    "elu", "embedding", "gelu", "glu", "group_norm", "hardsigmoid", "hardswish", "hardtanh", "interpolate", "l1_loss",
    "layer_norm", "leaky_relu", "linear", "log_softmax", "logsigmoid", "max_pool1d", "max_pool2d", "mish", "mse_loss",
    "nll_loss", "normalize", "one_hot", "pad", "relu", "relu6", "rms_norm", "scaled_dot_product_attention", "selu",
    "sigmoid", "silu", "smooth_l1_loss", "softmax", "softmin", "softplus", "softsign", "tanh",
]  # fmt: skip


# ---- activations --------------------------------------------------------------------------------------------------


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0)."""
    return input.relu()


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6)."""
    return input.relu6()


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, else negative_slope * x."""
    return input.leaky_relu(negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha * (exp(x) - 1)."""
    return input.elu(alpha)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    return input.celu(alpha)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with torch's constants."""
    return input.selu()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (erf form, torch's default) or its tanh approximation (`approximate="tanh"`)."""
    return input.gelu(approximate=approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(x)."""
    return input.silu()


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """x * tanh(softplus(x))."""
    return input.mish()


def sigmoid(input: Tensor) -> Tensor:
    """1 / (1 + exp(-x))."""
    return input.sigmoid()


def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)), without overflow."""
    return input.logsigmoid()


def tanh(input: Tensor) -> Tensor:
    """Hyperbolic tangent."""
    return input.tanh()


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta * x)) / beta, linear above `threshold`."""
    return input.softplus(beta, threshold)


def softsign(input: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    return input.softsign()


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """clamp(x, min_val, max_val)."""
    return input.hardtanh(min_val, max_val)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6."""
    return input.hardsigmoid()


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """x * relu6(x + 3) / 6."""
    return input.hardswish()


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b) for the two halves (a, b) of `input` along `dim`."""
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def softmax(input: Tensor, dim: int | None = None, dtype: Any = None) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim`."""
    return input.softmax(-1 if dim is None else dim, dtype)


def log_softmax(input: Tensor, dim: int | None = None, dtype: Any = None) -> Tensor:
    """log(softmax(x)) along `dim`, computed stably."""
    return input.log_softmax(-1 if dim is None else dim, dtype)


def softmin(input: Tensor, dim: int | None = None, dtype: Any = None) -> Tensor:
    """softmax(-x) along `dim`."""
    return input.softmin(-1 if dim is None else dim, dtype)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero elements with probability `p` (scaling the rest by 1/(1-p)) when `training` (torch's default: True)."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0:
        return input
    with Tensor.train():
        return input.dropout(p)


# ---- linear, convolution, pooling ---------------------------------------------------------------------------------


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """input @ weight.T + bias (weight is (out_features, in_features))."""
    out = input @ weight.transpose(0, 1) if weight.ndim == 2 else input * weight
    return out if bias is None else out + bias


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-d convolution of (N, C, H, W) input with weight (out, in/groups, kh, kw)."""
    return input.conv2d(weight, bias, groups=groups, stride=stride, dilation=dilation, padding=padding)


conv1d = conv2d  # the convolution is generic over the spatial dims of `weight`


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """Transposed convolution with weight (in, out/groups, *kernel)."""
    return input.conv_transpose2d(
        weight, bias, groups=groups, stride=stride, dilation=dilation, padding=padding, output_padding=output_padding
    )


conv_transpose1d = conv_transpose2d


def max_pool2d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """Max over windows of the last two dims (`stride` defaults to `kernel_size`)."""
    return input.max_pool2d(kernel_size, stride, dilation, padding, ceil_mode, return_indices)


def max_pool1d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """Max over windows of the last dim."""
    return input.max_pool2d(_one(kernel_size), _one(stride), _one(dilation), _one(padding), ceil_mode, return_indices)


def avg_pool2d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """Mean over windows of the last two dims."""
    return input.avg_pool2d(kernel_size, stride, 1, padding, ceil_mode, count_include_pad)


def avg_pool1d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """Mean over windows of the last dim."""
    return input.avg_pool2d(_one(kernel_size), _one(stride), (1,), _one(padding), ceil_mode, count_include_pad)


def _one(v: Any) -> Any:
    """A 1-d pooling argument as a 1-tuple (None stays None)."""
    return v if v is None or isinstance(v, (tuple, list)) else (v,)


def adaptive_avg_pool2d(input: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """Mean over the windows that split the last two dims into `output_size` (torch's window bounds)."""
    size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    h, w = input.shape[-2:]
    oh, ow = (h if size[0] is None else size[0]), (w if size[1] is None else size[1])
    if h % oh == 0 and w % ow == 0:
        return input.avg_pool2d((h // oh, w // ow))
    rows = []
    for i in range(oh):
        r0, r1 = (i * h) // oh, -(-(i + 1) * h // oh)
        cols = [input[..., r0:r1, (j * w) // ow : -(-(j + 1) * w // ow)].mean((-2, -1)) for j in range(ow)]
        rows.append(Tensor.stack(*cols, dim=-1))
    return Tensor.stack(*rows, dim=-2)


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """torch's flat padding (last dim first: `(left, right, top, bottom, ...)`)."""
    return input.pad(tuple(pad), mode=mode, value=0.0 if value is None else value)


def interpolate(
    input: Tensor,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
) -> Tensor:
    """Resize the spatial dims (after N and C) to `size` or by `scale_factor`."""
    return input.interpolate(size=size, mode=mode, align_corners=bool(align_corners), scale_factor=scale_factor)


# ---- normalisation, embedding, attention ------------------------------------------------------------------------


def layer_norm(
    input: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise over the trailing `normalized_shape` dims, then `* weight + bias`."""
    axes = tuple(range(input.ndim - len(tuple(normalized_shape)), input.ndim))
    out = input.layernorm(axes, eps)
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


def rms_norm(
    input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None, eps: float | None = None
) -> Tensor:
    """x / sqrt(mean(x², trailing dims) + eps) * weight."""
    axes = tuple(range(input.ndim - len(tuple(normalized_shape)), input.ndim))
    out = input * (input.square().mean(axes, keepdim=True) + (1e-6 if eps is None else eps)).rsqrt()
    return out if weight is None else out * weight


def group_norm(
    input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """Normalise each of `num_groups` channel groups, then per-channel `* weight + bias`."""
    n, c = input.shape[:2]
    out = input.reshape(n, num_groups, -1).layernorm(-1, eps).reshape(input.shape)
    shape = (1, c) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    return out if bias is None else out + bias.reshape(shape)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along `dim`."""
    return input.normalize(p, dim, eps)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """<x1, x2> / (||x1|| ||x2||) along `dim`."""
    num = (x1 * x2).sum(dim)
    return num / (x1.square().sum(dim).sqrt() * x2.square().sum(dim).sqrt()).maximum(eps)


def embedding(input: Tensor, weight: Tensor) -> Tensor:
    """Rows of `weight` at the integer indices `input`."""
    return weight[input]


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """Integer labels as one-hot rows."""
    return tensor.one_hot(num_classes)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """softmax(q @ k.T * scale + mask) @ v (torch's arguments)."""
    return query.scaled_dot_product_attention(
        key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa
    )


# ---- losses ---------------------------------------------------------------------------------------------------


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross entropy of logits (classes on dim 1) against class indices or probabilities."""
    return input.cross_entropy(
        target, reduction=reduction, label_smoothing=label_smoothing, weight=weight, ignore_index=ignore_index
    )


def nll_loss(
    input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean"
) -> Tensor:
    """Negative log likelihood of log-probabilities (classes on dim 1) at the target classes."""
    return input.nll_loss(target, weight=weight, ignore_index=ignore_index, reduction=reduction)


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """(input - target)², reduced."""
    return _reduce((input - target).square(), reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """|input - target|, reduced."""
    return _reduce((input - target).abs(), reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """Huber-like: 0.5 d²/beta below beta, |d| - 0.5 beta above."""
    d = (input - target).abs()
    loss = (d < beta).where(0.5 * d.square() / beta, d - 0.5 * beta) if beta > 0 else d
    return _reduce(loss, reduction)


def binary_cross_entropy(
    input: Tensor, target: Tensor, weight: Tensor | None = None, reduction: str = "mean"
) -> Tensor:
    """-(y log p + (1 - y) log(1 - p)) of probabilities p."""
    loss = input.binary_crossentropy(target, reduction="none")
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """Binary cross entropy of logits (through logsigmoid: no overflow)."""
    loss = input.binary_crossentropy_logits(target, reduction="none", pos_weight=pos_weight)
    return _reduce(loss if weight is None else loss * weight, reduction)
