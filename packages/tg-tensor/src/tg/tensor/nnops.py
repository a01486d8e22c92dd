"""Neural-network ops as Tensor methods: convolution, pooling, normalisation, dropout, attention and losses.

Convolution and pooling are built from sliding windows (`movement.windows`, movement ops only) and one reduction,
so the scheduler fuses them like any other code. These functions are attached to `Tensor` in tensor.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from tg.ir import DType, UOp, dtypes
from tg.tensor.args import dtype_arg
from tg.tensor.errors import ArgumentError

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

IntOrTuple = int | Sequence[int]


def _tuple(op: str, name: str, v: IntOrTuple, n: int) -> tuple[int, ...]:
    t = (v,) * n if isinstance(v, int) else tuple(v)
    if len(t) != n or not all(isinstance(x, int) for x in t):
        raise ArgumentError(f"{op}: {name} must be an int or {n} ints, got {v!r}")
    return t


def _padding_pairs(
    op: str, padding: Any, n: int, kernel: Sequence[int], dilation: Sequence[int]
) -> list[tuple[int, int]]:
    """(before, after) per spatial dim from: an int, one int per dim, torch's flat F.pad order (2n ints, last dim
    first), 'valid', or 'same' (stride 1; the odd extra goes after, as torch)."""
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return [(t // 2, t - t // 2) for t in total]
    if isinstance(padding, str):
        raise ArgumentError(f"{op}: padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
    if isinstance(padding, int):
        return [(padding, padding)] * n
    p = list(padding)
    if len(p) == n and all(isinstance(x, int) for x in p):
        return [(x, x) for x in p]
    if len(p) == 2 * n and all(isinstance(x, int) for x in p):
        return [(p[2 * i], p[2 * i + 1]) for i in range(n)][::-1]
    raise ArgumentError(f"{op}: padding {padding!r} needs 1, {n} or {2 * n} ints for {n} spatial dims")


def conv2d(
    self: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    groups: int = 1,
    stride: IntOrTuple = 1,
    dilation: IntOrTuple = 1,
    padding: Any = 0,
    dtype: DType | str | None = None,
) -> Tensor:
    """N-d convolution (1-D, 2-D, 3-D by the weight's rank): input (N, Cin, *spatial), weight (Cout, Cin/groups, *k).

    `padding` is an int, one int per spatial dim, torch's flat F.pad order, 'same' or 'valid'.

    >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    n = weight.ndim - 2
    if n < 1 or self.ndim != weight.ndim:
        raise ArgumentError(
            f"conv2d: input {self.shape} and weight {weight.shape} need the same rank, (N, C, *spatial) and "
            "(Cout, Cin/groups, *kernel)"
        )
    bs, cin = self.shape[:2]
    cout, cin_g = weight.shape[:2]
    if groups < 1 or cin != cin_g * groups or cout % groups:
        raise ArgumentError(
            f"conv2d: input {self.shape} has {cin} channels, weight {weight.shape} with groups={groups} expects "
            f"{cin_g * groups} (and Cout={cout} divisible by groups)"
        )
    kernel = weight.shape[2:]
    strides, dils = _tuple("conv2d", "stride", stride, n), _tuple("conv2d", "dilation", dilation, n)
    if padding == "same" and any(s != 1 for s in strides):
        raise ArgumentError("conv2d: padding='same' needs stride 1")
    pads = _padding_pairs("conv2d", padding, n, kernel, dils)
    # a padded input is stored padded (one copy): the reduction below reads each element k x k x Cout times, and
    # through a padding gate the CPU's vector loads became per-lane scalar loads (ResNet block conv 16 -> 16 at
    # 32x32, batch 32, one thread: 15.6 -> 7.2 ms CPU time); the weight gradient reads the same stored copy
    x = self.pad([(0, 0), (0, 0), *pads]).contiguous() if any(p != (0, 0) for p in pads) else self
    for i, (size, k, d) in enumerate(zip(x.shape[2:], kernel, dils, strict=True)):
        if d * (k - 1) + 1 > size:
            raise ArgumentError(
                f"conv2d: kernel {tuple(kernel)} (dilation {dils}) is larger than the padded input "
                f"{tuple(x.shape[2:])} in spatial dim {i}"
            )
    dt = dtype_arg(dtype)
    windows = w = x._windows(kernel, strides, dils)  # (N, Cin, *o, *k)
    out_sp = w.shape[2 : 2 + n]
    rcout = cout // groups
    # (N, G, 1, Cin/G, *o, *k) * (1, G, Cout/G, Cin/G, 1.., *k), summed over Cin/G and the kernel
    w = w.reshape(bs, groups, 1, cin_g, *out_sp, *kernel)
    wt = weight.reshape(1, groups, rcout, cin_g, *[1] * n, *kernel)
    prod = w * wt if dt is None else w.cast(dt) * wt.cast(dt)
    ret = prod.sum([3, *range(4 + n, 4 + 2 * n)], dtype=dt).reshape(bs, cout, *out_sp)
    if dt is None and isinstance(self.device, str) and dtypes.is_float(self.dtype) and dtypes.is_float(weight.dtype):
        _conv_gradient(self, windows, weight, ret, groups, strides, dils, pads)
    if bias is not None:
        if bias.shape != (cout,):
            raise ArgumentError(f"conv2d: bias must have shape ({cout},), got {bias.shape}")
        ret = ret + bias.reshape(1, cout, *[1] * n)
    return ret


def _conv_gradient(
    x: Tensor, windows: Tensor, weight: Tensor, ret: Tensor, groups: int, strides: tuple[int, ...],
    dils: tuple[int, ...], pads: list[tuple[int, int]],
) -> None:  # fmt: skip
    """Give the convolution `ret` = conv(x, weight) its gradients as convolutions (tg.tensor.gradient's custom rule).

    Node by node, the sliding windows' gradient is an im2col-shaped product (the output gradient times the weight,
    summed over output channels) followed by an overlap-add through the windows' repeat: a scalar kernel over the
    3-wide kernel axis and a gather with remainders. The input gradient is instead the transposed convolution:
    the output gradient, stride-dilated and padded (stored: the convolution then loads it without gates), convolved
    with the flipped weight (input and output channels swapped per group), one reduction over (Cout/G, *k) that
    vectorises like the forward. The weight gradient is the forward's windows of its stored padded x times the output
    gradient, summed over the batch and the output positions. Only the gradients that lead to a target are built.
    """
    from tg.tensor.gradient import set_custom_gradient

    cls = x._tensor_class()
    x_u, w_u, windows_u = x.uop, weight.uop, windows.uop
    n = len(strides)
    bs, cin = x.shape[:2]
    cout, cin_g = weight.shape[:2]
    kernel, in_sp, out_sp = weight.shape[2:], x.shape[2:], ret.shape[2:]
    cout_g = cout // groups

    def rule(g_u: UOp, needed: tuple[bool, ...], _conv_u: UOp) -> tuple[UOp | None, ...]:
        g, xt, wt = cls(g_u), cls(x_u), cls(w_u)
        dx = _input_gradient(g, wt).cast(xt.dtype).uop if needed[0] else None
        dw = _weight_gradient(g).cast(wt.dtype).uop if needed[1] else None
        return dx, dw

    def _input_gradient(g: Tensor, wt: Tensor) -> Tensor:
        # input gradient: zeros between the output gradient's elements (stride), then the full padding of the window
        # span minus the forward's padding before; the after side makes the result exactly the input's size
        gz = g
        for i, s in enumerate(strides):
            if s > 1:
                d = 2 + i
                size = gz.shape[d]
                gz = gz.unsqueeze(d + 1).pad([(0, 0)] * (d + 1) + [(0, s - 1)] + [(0, 0)] * (gz.ndim - d - 1))
                gz = gz.flatten(d, d + 1).shrink([None] * d + [(0, (size - 1) * s + 1)] + [None] * (gz.ndim - d - 2))
        spans = [d * (k - 1) for k, d in zip(kernel, dils, strict=True)]
        full = [
            (span - pb, size - ((o - 1) * s + 1) + pb)
            for span, (pb, _), size, o, s in zip(spans, pads, in_sp, out_sp, strides, strict=True)
        ]
        gz = gz.pad([(0, 0), (0, 0), *full]).contiguous()
        wf = (
            wt.reshape(groups, cout_g, cin_g, *kernel).transpose(1, 2).reshape(cin, cout_g, *kernel)
            .flip(list(range(2, 2 + n)))
        )  # fmt: skip
        return conv2d(gz, wf, groups=groups, dilation=dils)

    def _weight_gradient(g: Tensor) -> Tensor:
        # the forward's windows of its (stored) padded input against the output gradient
        win = cls(windows_u).reshape(bs, groups, 1, cin_g, *out_sp, *kernel)
        gw = g.reshape(bs, groups, cout_g, 1, *out_sp, *[1] * n)
        return (win * gw).sum([0, *range(4, 4 + n)]).reshape(cout, cin_g, *kernel)

    set_custom_gradient(ret.uop, (x_u, w_u), rule)


def conv_transpose2d(
    self: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    groups: int = 1,
    stride: IntOrTuple = 1,
    dilation: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    output_padding: IntOrTuple = 0,
) -> Tensor:
    """Transposed N-d convolution: input (N, Cin, *spatial), weight (Cin, Cout/groups, *k) (torch's layout)."""
    n = weight.ndim - 2
    if n < 1 or self.ndim != weight.ndim:
        raise ArgumentError(f"conv_transpose2d: input {self.shape} and weight {weight.shape} need the same rank")
    cin, cout_g = weight.shape[:2]
    if groups < 1 or self.shape[1] != cin or cin % groups:
        raise ArgumentError(
            f"conv_transpose2d: input {self.shape} has {self.shape[1]} channels, weight {weight.shape} expects "
            f"{cin} (divisible by groups={groups})"
        )
    kernel = weight.shape[2:]
    strides = _tuple("conv_transpose2d", "stride", stride, n)
    dils = _tuple("conv_transpose2d", "dilation", dilation, n)
    pads = _tuple("conv_transpose2d", "padding", padding, n)
    out_pads = _tuple("conv_transpose2d", "output_padding", output_padding, n)
    for op_, s, d in zip(out_pads, strides, dils, strict=True):
        if op_ >= max(s, d):
            raise ArgumentError(f"conv_transpose2d: output_padding {out_pads} must be smaller than stride or dilation")
    # (G, Cin/G, Cout/G, *k) -> (Cout, Cin/G, *k), kernel flipped
    w = (
        weight.reshape(groups, cin // groups, cout_g, *kernel)
        .transpose(1, 2)
        .reshape(groups * cout_g, cin // groups, *kernel)
    )
    w = w.flip(list(range(2, 2 + n)))
    x = self
    for i, s in enumerate(strides):  # insert s-1 zeros between input elements
        if s > 1:
            d = 2 + i
            size = x.shape[d]
            x = x.unsqueeze(d + 1).pad([(0, 0)] * (d + 1) + [(0, s - 1)] + [(0, 0)] * (x.ndim - d - 1))
            x = x.flatten(d, d + 1).shrink([None] * d + [(0, (size - 1) * s + 1)] + [None] * (x.ndim - d - 2))
    full = [(d * (k - 1) - p, d * (k - 1) - p + op_) for k, d, p, op_ in zip(kernel, dils, pads, out_pads, strict=True)]
    x = x.pad([(0, 0), (0, 0), *full])
    return conv2d(x, w, bias, groups=groups, dilation=dils)


class _PoolPlan(NamedTuple):
    """A pool's windows per spatial dim: kernel, stride, dilation, the explicit padding pairs and the extra right
    padding ceil_mode adds."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dils: tuple[int, ...]
    pads: list[tuple[int, int]]
    extra: list[int]

    @property
    def full(self) -> list[tuple[int, int]]:
        """Explicit padding plus the ceil_mode extra, per spatial dim."""
        return [(b, a + e) for (b, a), e in zip(self.pads, self.extra, strict=True)]

    def windows(self, x: Tensor, fill: float) -> Tensor:
        """x padded with `fill` and cut into windows: (..., out_1..out_n, k_1..k_n); reduce the last n dims."""
        n, full = len(self.kernel), self.full
        if any(p != (0, 0) for p in full):
            x = x.pad([(0, 0)] * (x.ndim - n) + full, value=fill)
        return x._windows(self.kernel, self.strides, self.dils)


def _pool_setup(
    op: str, x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None, dilation: IntOrTuple, padding: Any,
    ceil_mode: bool,
) -> _PoolPlan:  # fmt: skip
    """The windows of a pool over the last len(kernel_size) dims of x (validated, in the user's terms)."""
    n = (
        1
        if isinstance(kernel_size, int) and x.ndim < 4
        else len(kernel_size)
        if not isinstance(kernel_size, int)
        else 2
    )
    if x.ndim < n:
        raise ArgumentError(f"{op}: input {x.shape} has fewer dims than the {n}-d kernel {kernel_size}")
    kernel = _tuple(op, "kernel_size", kernel_size, n)
    strides = kernel if stride is None else _tuple(op, "stride", stride, n)
    dils = _tuple(op, "dilation", dilation, n)
    pads = _padding_pairs(op, padding, n, kernel, dils)
    extra = []
    for i, (size, k, s, d, (pb, pa)) in enumerate(zip(x.shape[-n:], kernel, strides, dils, pads, strict=True)):
        if pb > k // 2 or pa > k // 2:
            raise ArgumentError(f"{op}: padding {padding} must be at most half the kernel size {kernel}")
        span = size + pb + pa - d * (k - 1) - 1
        if span < 0:
            raise ArgumentError(f"{op}: kernel {kernel} (dilation {dils}) is larger than the padded input in dim {i}")
        out = (span + s - 1) // s + 1 if ceil_mode else span // s + 1
        if ceil_mode and (out - 1) * s >= size + pb:  # the last window must start inside the input
            out -= 1
        extra.append(max(0, (out - 1) * s + d * (k - 1) + 1 - (size + pb + pa)))
    return _PoolPlan(kernel, strides, dils, pads, extra)


def max_pool2d(
    self: Tensor,
    kernel_size: IntOrTuple = (2, 2),
    stride: IntOrTuple | None = None,
    dilation: IntOrTuple = 1,
    padding: Any = 0,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """Max over windows of the last len(kernel_size) dims (default 2x2, stride = kernel); padding is -inf.
    With `return_indices`, also the flat spatial index of each maximum (for max_unpool2d), as torch."""
    plan = _pool_setup("max_pool2d", self, kernel_size, stride, dilation, padding, ceil_mode)
    n = len(plan.kernel)
    w = plan.windows(self, float("-inf") if dtypes.is_float(self.dtype) else self.dtype.min)
    axes = tuple(range(w.ndim - n, w.ndim))
    values = w.max(axes)
    if not return_indices:
        return values
    # flat spatial index of the first maximum of every window (padding never wins: its index is -1)
    cls = self._tensor_class()
    sizes = self.shape[-n:]
    flat = cls.arange(math.prod(sizes), device=self.device).reshape(*sizes)
    idx_w = plan.windows(flat, -1).reshape(*[1] * (self.ndim - n), *values.shape[-n:], -1)
    first = w.reshape(*w.shape[:-n], -1).argmax(-1, keepdim=True)
    picked = (first == cls.arange(idx_w.shape[-1], device=self.device)).where(idx_w, 0).sum(-1)
    return values, picked


def avg_pool2d(
    self: Tensor,
    kernel_size: IntOrTuple = (2, 2),
    stride: IntOrTuple | None = None,
    dilation: IntOrTuple = 1,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """Mean over windows of the last len(kernel_size) dims; padded zeros count when `count_include_pad` (torch),
    the extra padding of `ceil_mode` never does."""
    cls = self._tensor_class()
    plan = _pool_setup("avg_pool2d", self, kernel_size, stride, dilation, padding, ceil_mode)
    n = len(plan.kernel)
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    total = plan.windows(x, 0.0).sum(tuple(range(self.ndim, self.ndim + n)))
    if not any(plan.extra) and (count_include_pad or not any(p != (0, 0) for p in plan.pads)):
        return total / math.prod(plan.kernel)
    ones = cls.ones(*self.shape[-n:], dtype=x.dtype, device=self.device)
    counted = ones.pad(plan.pads, value=1.0) if count_include_pad else ones.pad(plan.pads)
    counts = counted.pad([(0, e) for e in plan.extra])._windows(plan.kernel, plan.strides, plan.dils)
    return total / counts.sum(tuple(range(n, 2 * n)))


def max_unpool2d(
    self: Tensor,
    indices: Tensor,
    kernel_size: IntOrTuple = (2, 2),
    stride: IntOrTuple | None = None,
    dilation: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    output_size: Sequence[int] | None = None,
) -> Tensor:
    """The inverse of max_pool2d(return_indices=True): each value goes to its flat spatial index, zeros elsewhere."""
    cls = self._tensor_class()
    n = 2 if isinstance(kernel_size, int) else len(kernel_size)
    kernel = _tuple("max_unpool2d", "kernel_size", kernel_size, n)
    strides = kernel if stride is None else _tuple("max_unpool2d", "stride", stride, n)
    dils = _tuple("max_unpool2d", "dilation", dilation, n)
    pads = _tuple("max_unpool2d", "padding", padding, n)
    if output_size is None:
        out = [(i - 1) * s - 2 * p + d * (k - 1) + 1 for i, s, p, d, k in
               zip(self.shape[-n:], strides, pads, dils, kernel, strict=True)]  # fmt: skip
    else:
        out = list(output_size)[-n:]
    lead = self.shape[:-n]
    total = math.prod(out)
    flat_vals = self.reshape(*lead, -1)
    base = cls.zeros(*lead, total, dtype=self.dtype, device=self.device)
    return base.scatter(-1, indices.reshape(*lead, -1), flat_vals).reshape(*lead, *out)


def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
    """`self @ weight + bias` with weight (in, out) as tinygrad (a 1-d weight multiplies elementwise)."""
    x = self.mul(weight) if weight.ndim == 1 else self.matmul(weight, dtype=dtype)
    return x if bias is None else x + bias


def layernorm(self: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over `axis` (biased variance; no affine part)."""
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()


def batchnorm(
    self: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    mean: Tensor,
    invstd: Tensor,
    axis: int | Sequence[int] = 1,
) -> Tensor:
    """(x - mean) * invstd * weight + bias with the per-channel tensors laid along `axis`."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % self.ndim for a in axes)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None:
        x = x * weight.reshape(shape)
    ret = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return ret + bias.reshape(shape) if bias is not None else ret


def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """self / max(||self||_p along dim, eps) (torch.nn.functional.normalize; p=0 counts the nonzeros, p=inf is
    the largest magnitude)."""
    a = self.abs()
    if p == 0:
        norm = (a != 0).sum(dim, keepdim=True).cast(self.dtype)
    elif p == math.inf:
        norm = a.max(dim, keepdim=True)
    elif p == -math.inf:
        norm = a.min(dim, keepdim=True)
    else:
        norm = (a**p).sum(dim, keepdim=True) ** (1.0 / p)
    return self / norm.maximum(eps)


def dropout(self: Tensor, p: float = 0.5) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p), in training mode only
    (`with Tensor.train():`); identity otherwise."""
    cls = self._tensor_class()
    if not 0.0 <= p <= 1.0:
        raise ArgumentError(f"dropout probability must be in [0, 1], got {p}")
    if not cls.training or p == 0:
        return self
    if p == 1:
        return self.zeros_like()
    keep = cls.rand(*self.shape, device=self.device) >= p
    return keep.where(self, 0) * (1.0 / (1.0 - p))


def one_hot(self: Tensor, num_classes: int = -1) -> Tensor:
    """int32 one-hot vectors along a new last dim (`num_classes=-1` uses max + 1, which realizes)."""
    cls = self._tensor_class()
    if dtypes.is_float(self.dtype) or self.dtype is dtypes.bool:
        raise TypeError(f"one_hot needs an integer tensor, got {self.dtype.name}")
    if num_classes == -1:
        num_classes = int(self.max().item()) + 1 if self.numel() else 0
    classes = cls.arange(num_classes, device=self.device, dtype=self.dtype)
    return (self.unsqueeze(-1) == classes).cast(dtypes.int32)


def _reduce_loss(op: str, loss: Tensor, reduction: str, count: Tensor | int | None = None) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / count if count is not None else loss.mean()
    raise ArgumentError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def sparse_categorical_crossentropy(
    self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean"
) -> Tensor:
    """Cross entropy of logits (classes on the last dim) against integer labels Y (Keras layout); labels equal to
    `ignore_index` count for nothing, the mean is over the others."""
    if Y.shape != self.shape[:-1]:
        raise ArgumentError(f"sparse_categorical_crossentropy: labels {Y.shape} must have the shape {self.shape[:-1]}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    log_probs = self.log_softmax(-1)
    keep = Y != ignore_index
    picked = _pick_class(log_probs, Y, keep, "sparse_categorical_crossentropy", self.ndim - 1, ignore_index)
    if label_smoothing:  # the smoothing term costs a reduction: built only when it counts
        loss = -((1 - label_smoothing) * picked + label_smoothing * log_probs.mean(-1) * keep)
    else:
        loss = -picked
    return _reduce_loss("sparse_categorical_crossentropy", loss, reduction, keep.sum())


def _classes_last(x: Tensor, cdim: int) -> Tensor:
    """`x` with the class dim moved last, the other dims in order (a transpose would reverse the spatial dims of
    inputs with more than one)."""
    return x if cdim == x.ndim - 1 else x.permute(*[i for i in range(x.ndim) if i != cdim], cdim)


def _pick_class(values: Tensor, labels: Tensor, keep: Tensor, op: str, dim: int, ignore: int | None) -> Tensor:
    """values[..., labels] along the last dim, 0 where `keep` (labels other than `ignore`) is False (one-hot select,
    differentiable). A kept label outside [0, classes) raises IndexOutOfRange (as torch does) when the labels are
    known, else when the result is realized: without the check that row would silently count for nothing."""
    from tg.tensor import bounds

    if dtypes.is_float(labels.dtype) or labels.dtype is dtypes.bool:
        raise TypeError(f"{op}: class labels must be an integer tensor, got {labels.dtype.name}")
    n = values.shape[-1]
    classes = values.arange(n, device=values.device, dtype=labels.dtype)
    hit = (labels.unsqueeze(-1) == classes) & keep.unsqueeze(-1)
    if not bounds.check_now(labels, n, op=op, dim=dim, negative_ok=False, skip=ignore):
        bounds.defer(keep.where(labels, 0), n, op=op, dim=dim, negative_ok=False, selection=hit)
    return hit.where(values, 0).sum(-1)


def cross_entropy(
    self: Tensor,
    Y: Tensor,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    weight: Tensor | None = None,
    ignore_index: int = -100,
) -> Tensor:
    """torch's cross_entropy: logits with classes on dim 1 (dim 0 for 1-d input); Y holds class indices (an int
    tensor, `ignore_index` skipped) or class probabilities (same shape as the logits)."""
    cdim = 0 if self.ndim == 1 else 1
    if not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    log_probs = _classes_last(self.log_softmax(cdim), cdim)
    n_classes = self.shape[cdim]
    w = weight.reshape(*[1] * (log_probs.ndim - 1), n_classes) if weight is not None else None
    if dtypes.is_float(Y.dtype):
        if Y.shape != self.shape:
            raise ArgumentError(
                f"cross_entropy: probability targets {Y.shape} must have the logits' shape {self.shape}"
            )
        target = _classes_last(Y, cdim) * (1 - label_smoothing) + label_smoothing / n_classes
        terms = target * log_probs * (w if w is not None else 1)
        return _reduce_loss("cross_entropy", -terms.sum(-1), reduction)
    expected = self.shape[:cdim] + self.shape[cdim + 1 :]
    if Y.shape != expected:
        raise ArgumentError(
            f"cross_entropy: index targets {Y.shape} must have shape {expected} for logits {self.shape}"
        )
    keep = Y != ignore_index
    weighted = log_probs * w if w is not None else log_probs
    picked = _pick_class(weighted, Y, keep, "cross_entropy", cdim, ignore_index)
    if label_smoothing:  # the smoothing term costs a reduction: built only when it counts
        loss = -((1 - label_smoothing) * picked + label_smoothing * (weighted.sum(-1) / n_classes * keep))
    else:
        loss = -picked
    if reduction != "mean":
        return _reduce_loss("cross_entropy", loss, reduction)
    if w is None:
        return loss.sum() / keep.sum()
    count = _pick_class(w.expand(log_probs.shape), Y, keep, "cross_entropy", cdim, ignore_index).sum()
    return loss.sum() / count


def nll_loss(
    self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None, reduction: str = "mean"
) -> Tensor:
    """Negative log likelihood of log-probabilities (classes on dim 1, or dim 0 for 1-d input) at labels Y."""
    cdim = 0 if self.ndim == 1 else 1
    values = _classes_last(self, cdim)
    expected = self.shape[:cdim] + self.shape[cdim + 1 :]
    if Y.shape != expected:
        raise ArgumentError(f"nll_loss: targets {Y.shape} must have shape {expected} for input {self.shape}")
    keep = Y != ignore_index if ignore_index is not None else Y == Y
    if weight is not None:
        w = weight.reshape(*[1] * (values.ndim - 1), -1).expand(values.shape)
        values = values * w
        count: Tensor | None = _pick_class(w, Y, keep, "nll_loss", cdim, ignore_index).sum()
    else:
        count = keep.sum()
    loss = -_pick_class(values, Y, keep, "nll_loss", cdim, ignore_index)
    return _reduce_loss("nll_loss", loss, reduction, count)


def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    """-(Y log p + (1 - Y) log(1 - p)) of probabilities p = self; each log is clamped at -100 (torch)."""
    loss = -(Y * self.log().maximum(-100.0) + (1 - Y) * (1 - self).log().maximum(-100.0))
    return _reduce_loss("binary_crossentropy", loss, reduction)


def binary_crossentropy_logits(
    self: Tensor, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None
) -> Tensor:
    """Binary cross entropy of logits, through logsigmoid (no overflow at any logit)."""
    pw = 1.0 if pos_weight is None else pos_weight
    loss = -(pw * Y * self.logsigmoid() + (1 - Y) * (-self).logsigmoid())
    return _reduce_loss("binary_crossentropy_logits", loss, reduction)


def scaled_dot_product_attention(
    self: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    enable_gqa: bool = False,
    scale: float | None = None,
) -> Tensor:
    """softmax(q k^T * scale + mask) v with q = self; a bool mask marks positions that attend (True), a float mask
    is added; `is_causal` masks the upper triangle; `enable_gqa` repeats key/value heads to the query's."""
    cls = self._tensor_class()
    if self.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ArgumentError(
            f"scaled_dot_product_attention: query {self.shape}, key {key.shape} and value {value.shape} do not fit "
            "(q and k need the same last dim, k and v the same sequence length)"
        )
    if enable_gqa and self.ndim >= 3 and key.shape[-3] != self.shape[-3]:
        rep = self.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(rep, -3), value.repeat_interleave(rep, -3)
    dt = dtypes.float32 if dtypes.is_float(self.dtype) and self.dtype.itemsize < 4 else self.dtype
    logits = (
        self.cast(dt) @ key.cast(dt).transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(self.shape[-1]))
    )
    if is_causal and attn_mask is not None:
        raise ArgumentError("scaled_dot_product_attention: give attn_mask or is_causal=True, not both (torch)")
    if is_causal:
        L, S = logits.shape[-2:]
        # the comparison itself, not ones().tril() (a select more): cheap enough for the fusion cost model to recompute
        # it in the scores and softmax-gradient kernels, which a stored bool mask would keep from vectorising
        cols, rows = cls.arange(S, device=self.device).reshape(1, S), cls.arange(L, device=self.device).reshape(L, 1)
        attn_mask = cols <= rows
    if attn_mask is not None:
        logits = attn_mask.where(logits, float("-inf")) if attn_mask.dtype is dtypes.bool else logits + attn_mask
    weights = logits.softmax(-1).cast(self.dtype)
    if dropout_p > 0 and cls.training:
        weights = weights.dropout(dropout_p)
    return weights @ value
