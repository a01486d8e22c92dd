"""The tensor functions nn layers are built on: convolution (N-d, transposed), pooling, dropout, embedding lookup and
sparse cross-entropy.

Each one uses the Tensor method of the same name when the Tensor API provides it (the op table in tg-tensor's
README), else a composition of movement ops, elementwise ops and reductions defined here: im2col by strided
slices, so gradients come from the ordinary rule table. Keeping the fallbacks in one module lets the layers work
while the Tensor API grows, and lets them be deleted one by one as the Tensor methods land.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from tg.ir import dtypes
from tg.tensor.tensor import Tensor

PaddingArg = int | Sequence[int] | str


def _tuple(value: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    out = (value,) * n if isinstance(value, int) else tuple(value)
    if len(out) != n or not all(isinstance(v, int) for v in out):
        raise ValueError(f"{what} must be an int or {n} ints, got {value!r}")
    return out


def conv_padding(
    padding: PaddingArg, kernel: tuple[int, ...], dilation: tuple[int, ...], stride: tuple[int, ...]
) -> list[tuple[int, int]]:
    """Per spatial dim `(before, after)` from an int, a per-dim tuple, a flat F.pad-order tuple, 'same' or 'valid'."""
    n = len(kernel)
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError(f"padding='same' needs stride 1, got stride {stride}")
        total = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return [(t // 2, t - t // 2) for t in total]
    if isinstance(padding, str):
        raise ValueError(f"padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
    if isinstance(padding, int):
        return [(padding, padding)] * n
    pads = tuple(padding)
    if len(pads) == n:
        return [(p, p) for p in pads]
    if len(pads) == 2 * n:  # F.pad order: last dim first
        return [(pads[2 * i], pads[2 * i + 1]) for i in reversed(range(n))]
    raise ValueError(f"padding {padding!r} does not fit {n} spatial dims")


def conv(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    groups: int = 1,
    stride: int | Sequence[int] = 1,
    dilation: int | Sequence[int] = 1,
    padding: PaddingArg = 0,
) -> Tensor:
    """N-d convolution (cross-correlation, as torch): x (N, Cin, *S), weight (Cout, Cin/groups, *K)."""
    if hasattr(Tensor, "conv2d"):
        return x.conv2d(weight, bias, groups=groups, stride=stride, dilation=dilation, padding=padding)  # type: ignore[attr-defined]
    n = weight.ndim - 2
    if x.ndim != n + 2:
        raise ValueError(f"conv: input of shape {x.shape} does not fit weight of shape {weight.shape}")
    batch, cin, *spatial = x.shape
    cout, cin_group, *kernel = weight.shape
    if cin != cin_group * groups or cout % groups:
        raise ValueError(
            f"conv: input has {cin} channels, weight {weight.shape} with groups={groups} expects {cin_group * groups}"
        )
    strides, dilations = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
    pads = conv_padding(padding, tuple(kernel), dilations, strides)
    x = x.pad(((0, 0), (0, 0), *pads))
    padded = x.shape[2:]
    out = [(p - d * (k - 1) - 1) // s + 1 for p, k, d, s in zip(padded, kernel, dilations, strides, strict=True)]
    if any(o <= 0 for o in out):
        raise ValueError(f"conv: input {tuple(spatial)} (padded {padded}) is smaller than the kernel {tuple(kernel)}")
    windows = []
    for offsets in itertools.product(*(range(k) for k in kernel)):
        ranges = zip(offsets, dilations, out, strides, strict=True)
        windows.append(
            x[(slice(None), slice(None), *(slice(o * d, o * d + (m - 1) * s + 1, s) for o, d, m, s in ranges))]
        )
    taps = len(windows)
    cols = Tensor.stack(*windows, dim=2).reshape(batch, groups, 1, cin_group, taps, *out)
    w = weight.reshape(1, groups, cout // groups, cin_group, taps, *([1] * n))
    result = (cols * w).sum((3, 4)).reshape(batch, cout, *out)
    return result if bias is None else result + bias.reshape(1, cout, *([1] * n))


def conv_transpose(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    groups: int = 1,
    stride: int | Sequence[int] = 1,
    dilation: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
) -> Tensor:
    """N-d transposed convolution: x (N, Cin, *S), weight (Cin, Cout/groups, *K), as torch's conv_transpose."""
    if hasattr(Tensor, "conv_transpose2d"):
        return x.conv_transpose2d(  # type: ignore[attr-defined]
            weight,
            bias,
            groups=groups,
            stride=stride,
            dilation=dilation,
            padding=padding,
            output_padding=output_padding,
        )
    n = weight.ndim - 2
    cin, cout_group, *kernel = weight.shape
    if x.ndim != n + 2 or x.shape[1] != cin or cin % groups:
        raise ValueError(f"conv_transpose: input {x.shape} does not fit weight {weight.shape} with groups={groups}")
    strides, dilations = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
    pads, extra = _tuple(padding, n, "padding"), _tuple(output_padding, n, "output_padding")
    if any(e >= max(s, d) for e, s, d in zip(extra, strides, dilations, strict=True)):
        raise ValueError(f"output_padding {extra} must be smaller than stride {strides} or dilation {dilations}")
    spatial = x.shape[2:]
    # spread the input: stride - 1 zeros between neighbours
    for i, (size, s) in enumerate(zip(spatial, strides, strict=True)):
        if s > 1:
            axis = 2 + i
            shape = x.shape
            x = x.reshape(*shape[: axis + 1], 1, *shape[axis + 1 :])
            x = x.pad([(0, 0)] * (axis + 1) + [(0, s - 1)] + [(0, 0)] * (len(shape) - axis - 1))
            x = x.reshape(*shape[:axis], size * s, *shape[axis + 1 :])
            x = x.shrink(tuple((0, (size - 1) * s + 1) if j == axis else (0, d) for j, d in enumerate(x.shape)))
    full = [(d * (k - 1) - p, d * (k - 1) - p + e) for k, d, p, e in zip(kernel, dilations, pads, extra, strict=True)]
    w = weight.reshape(groups, cin // groups, cout_group, *kernel).transpose(1, 2)
    w = w.reshape(groups * cout_group, cin // groups, *kernel).flip(tuple(range(2, 2 + n)))
    flat_pad = [v for pair in reversed(full) for v in pair]
    return conv(x, w, bias, groups=groups, dilation=dilations, padding=flat_pad)


def max_pool(x: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None) -> Tensor:
    """Max pooling over the trailing `len(kernel_size)` dims (no padding), as torch's max_pool{1,2,3}d."""
    if hasattr(Tensor, "max_pool2d"):
        return x.max_pool2d(kernel_size, stride)  # type: ignore[attr-defined]
    n = 2 if isinstance(kernel_size, int) else len(kernel_size)
    kernel = _tuple(kernel_size, n, "kernel_size")
    strides = kernel if stride is None else _tuple(stride, n, "stride")
    lead, spatial = x.shape[:-n], x.shape[-n:]
    out = [(size - k) // s + 1 for size, k, s in zip(spatial, kernel, strides, strict=True)]
    if kernel == strides and all(size % k == 0 for size, k in zip(spatial, kernel, strict=True)):
        split = [v for o, k in zip(out, kernel, strict=True) for v in (o, k)]
        return x.reshape(*lead, *split).max(tuple(len(lead) + 2 * i + 1 for i in range(n)))
    windows = [
        x[(..., *(slice(o, o + (m - 1) * s + 1, s) for o, m, s in zip(offsets, out, strides, strict=True)))]
        for offsets in itertools.product(*(range(k) for k in kernel))
    ]
    return Tensor.stack(*windows, dim=0).max(0)


def dropout(x: Tensor, p: float = 0.5, training: bool | None = None) -> Tensor:
    """Zero each element with probability `p` and scale the rest by 1/(1-p) when training (else identity)."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not (Tensor.training if training is None else training) or p == 0:
        return x
    if p == 1:
        return x * 0
    keep = Tensor.rand(*x.shape, device=x.device) >= p
    return keep.where(x, 0) * (1 / (1 - p))


def embedding(weight: Tensor, idx: Tensor) -> Tensor:
    """Rows `weight[idx]` for an integer tensor `idx` of any shape: result shape `idx.shape + (embed,)`."""
    if not dtypes.is_int(idx.dtype):
        raise TypeError(f"embedding indices must be integers, got {idx.dtype.name}")
    vocab = weight.shape[0]
    one_hot = idx.reshape(*idx.shape, 1) == Tensor.arange(vocab, device=idx.device).reshape(*([1] * idx.ndim), vocab)
    return one_hot.cast(weight.dtype) @ weight


def sparse_categorical_crossentropy(logits: Tensor, labels: Tensor, ignore_index: int = -1) -> Tensor:
    """Mean cross-entropy of `logits` (..., classes) against integer `labels` (...); `ignore_index` labels count 0."""
    if hasattr(Tensor, "sparse_categorical_crossentropy"):
        return logits.sparse_categorical_crossentropy(labels, ignore_index=ignore_index)  # type: ignore[attr-defined]
    classes = logits.shape[-1]
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels of shape {labels.shape} do not fit logits of shape {logits.shape}")
    target = labels.reshape(*labels.shape, 1) == Tensor.arange(classes, device=labels.device)
    keep = labels != ignore_index
    picked = (logits.log_softmax(-1) * target).sum(-1)
    return -(picked * keep).sum() / keep.sum().maximum(1).cast(picked.dtype)


def kaiming_bound(fan_in: int) -> float:
    """The `U(-k, k)` bound torch's default layer init uses: `k = 1/sqrt(fan_in)`."""
    return 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def uniform_param(*shape: int, bound: float, device: Any = None) -> Tensor:
    """A trainable tensor drawn from `U(-bound, bound)`."""
    return Tensor.uniform(*shape, low=-bound, high=bound, device=device).requires_grad_()
