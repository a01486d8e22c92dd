"""The layers with parameters, as `Module`s with PyTorch's attribute names, state-dict keys and initialisation:
Linear, convolutions, normalisations, Embedding, LSTMCell."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tg.ir import DType, dtypes
from tg.tensor.autograd import no_grad
from tg.tensor.nn.module import Module
from tg.tensor.tensor import Tensor

PaddingArg = int | Sequence[int] | str


def _is_training(layer: Any) -> bool:
    """A Module's mode (`train()`/`eval()`, else the global `Tensor.training`); a plain object's `training` attribute
    (None: the global flag)."""
    if isinstance(layer, Module):
        return layer.training
    return bool(Tensor.training) if getattr(layer, "training", None) is None else bool(layer.training)


def kaiming_bound(fan_in: int) -> float:
    """The `U(-k, k)` bound of torch's default layer init: `k = 1/sqrt(fan_in)`."""
    return 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def uniform_param(*shape: int, bound: float) -> Tensor:
    """A trainable tensor drawn from `U(-bound, bound)`."""
    return Tensor.uniform(*shape, low=-bound, high=bound).requires_grad_()


def _ones(*shape: int) -> Tensor:
    return Tensor.ones(*shape).contiguous().requires_grad_()


def _zeros(*shape: int) -> Tensor:
    return Tensor.zeros(*shape).contiguous().requires_grad_()


def _buffer(value: Tensor) -> Tensor:
    """A non-trainable state tensor with storage of its own (running statistics, counters)."""
    return value.contiguous().realize()


class Linear(Module):
    """`y = x @ weight.T + bias`; weight (out, in) and bias from `U(-1/sqrt(in), 1/sqrt(in))` (torch)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = kaiming_bound(in_features)
        self.weight = uniform_param(out_features, in_features, bound=bound)
        self.bias = uniform_param(out_features, bound=bound) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != self.weight.shape[1:]:
            raise ValueError(f"Linear: input of shape {x.shape} does not end in in_features={self.weight.shape[1]}")
        out = x @ self.weight.transpose(0, 1)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _conv_weights(
    dims: int,
    in_channels: int,
    out_channels: int,
    kernel_size: int | Sequence[int],
    groups: int,
    bias: bool,
    transposed: bool,
) -> tuple[tuple[int, ...], Tensor, Tensor | None]:
    """(kernel size, weight, bias) of a convolution, as torch makes them: weight (out, in/groups, *k), transposed
    (in, out/groups, *k); weight and bias from U(-b, b) with b = 1/sqrt(fan_in), fan_in = weight dim 1 * prod(k)."""
    if in_channels % groups or out_channels % groups:
        raise ValueError(
            f"in_channels {in_channels} and out_channels {out_channels} must be divisible by groups={groups}"
        )
    kernel = (kernel_size,) * dims if isinstance(kernel_size, int) else tuple(kernel_size)
    first, second = (in_channels, out_channels // groups) if transposed else (out_channels, in_channels // groups)
    bound = kaiming_bound(second * math.prod(kernel))
    weight = uniform_param(first, second, *kernel, bound=bound)
    return kernel, weight, uniform_param(out_channels, bound=bound) if bias else None


def _conv_repr(layer: Any, out_padding: bool) -> str:
    s = f"{layer.in_channels}, {layer.out_channels}, kernel_size={layer.kernel_size}, stride={layer.stride}"
    for name, default in (("padding", 0), ("output_padding", 0), ("dilation", 1), ("groups", 1)):
        if (name != "output_padding" or out_padding) and getattr(layer, name) != default:
            s += f", {name}={getattr(layer, name)}"
    return s + ("" if layer.bias is not None else ", bias=False")


class _ConvNd(Module):
    dims = 2  # spatial dims of the kernel (a subclass sets it)
    transposed = False  # weight layout (in, out/groups, *k) and an output_padding (_ConvTransposeNd)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: PaddingArg = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.weight, self.bias = _conv_weights(
            self.dims, in_channels, out_channels, kernel_size, groups, bias, self.transposed
        )
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    def forward(self, x: Tensor) -> Tensor:
        return x.conv2d(
            self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=self.padding
        )

    def extra_repr(self) -> str:
        return _conv_repr(self, out_padding=self.transposed)


class Conv1d(_ConvNd):
    """1-d convolution over (N, C, L) inputs; weight (out, in/groups, k) (torch init and keys)."""

    dims = 1


class Conv2d(_ConvNd):
    """2-d convolution over (N, C, H, W) inputs; padding int, tuple, 'same' or 'valid' (torch init and keys)."""

    dims = 2


class _ConvTransposeNd(_ConvNd):
    transposed = True
    padding: int | Sequence[int]  # no 'same'/'valid' for a transposed convolution

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
        self.output_padding = output_padding

    def forward(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(
            self.weight,
            self.bias,
            groups=self.groups,
            stride=self.stride,
            dilation=self.dilation,
            padding=self.padding,
            output_padding=self.output_padding,
        )


class ConvTranspose1d(_ConvTransposeNd):
    """1-d transposed convolution; weight (in, out/groups, k) (torch init and keys)."""

    dims = 1


class ConvTranspose2d(_ConvTransposeNd):
    """2-d transposed convolution; weight (in, out/groups, kh, kw) (torch init and keys)."""

    dims = 2


def _normalize(x: Tensor, axes: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(x normalized over `axes` with the biased variance, mean, biased variance); the mean inside the variance is
    detached (its gradient there is zero anyway: a shorter backward graph)."""
    mean = x.mean(axes, keepdim=True)
    var = (x - mean.detach()).square().mean(axes, keepdim=True)
    return (x - mean) * (var + eps).rsqrt(), mean, var


def _channel_affine(out: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
    """`out * weight + bias` with per-channel (dim 1) parameters broadcast through `shape`; unchanged without them."""
    if weight is not None and bias is not None:
        out = out * weight.reshape(shape) + bias.reshape(shape)
    return out


class _RunningStatsNorm(Module):
    """What BatchNorm and InstanceNorm share: a per-channel affine (`weight`, `bias`, when `affine`) and, with
    `track_running_stats`, the `running_mean`/`running_var`/`num_batches_tracked` buffers that eval mode uses."""

    def __init__(
        self, num_features: int, eps: float, momentum: float | None, affine: bool, track_running_stats: bool
    ) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = _ones(num_features) if affine else None
        self.bias = _zeros(num_features) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", _buffer(Tensor.zeros(num_features)))
            self.register_buffer("running_var", _buffer(Tensor.ones(num_features)))
            self.register_buffer("num_batches_tracked", _buffer(Tensor.zeros(dtype=dtypes.int64)))

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}"
        )

    def _normalize_running(self, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        """`x` normalised with the running statistics (eval mode)."""
        return (x - self.running_mean.reshape(shape)) * (self.running_var.reshape(shape) + self.eps).rsqrt()

    def _update_running_stats(self, mean: Tensor, unbiased_var: Tensor) -> None:
        """Move the running statistics towards this batch's per-channel `mean` and `unbiased_var` (detached);
        `momentum=None` is a cumulative average."""
        count = self.num_batches_tracked + 1
        m: Tensor | float = self.momentum if self.momentum is not None else 1 / count.cast(dtypes.float32)
        with no_grad():
            self.running_mean.assign((self.running_mean * (1 - m) + mean * m).cast(self.running_mean.dtype))
            self.running_var.assign((self.running_var * (1 - m) + unbiased_var * m).cast(self.running_var.dtype))
            self.num_batches_tracked.assign(count)


class BatchNorm(_RunningStatsNorm):
    """Batch normalisation over all axes but 1 (torch semantics: biased batch variance to normalise, unbiased in
    `running_var`; `momentum=None` is a cumulative average). `BatchNorm1d/2d/3d` are the same class."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        affine: bool = True,
        track_running_stats: bool = True,
        momentum: float | None = 0.1,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2:
            raise ValueError(f"BatchNorm needs an input with a channel dim 1, got shape {x.shape}")
        channels = x.shape[1]
        shape = (1, channels) + (1,) * (x.ndim - 2)
        axes = tuple(i for i in range(x.ndim) if i != 1)
        if _is_training(self) or not self.track_running_stats:
            n = x.numel() // channels
            if n <= 1 and _is_training(self):
                raise ValueError(f"Expected more than 1 value per channel when training, got input of shape {x.shape}")
            out, mean, var = _normalize(x, axes, self.eps)
            if _is_training(self) and self.track_running_stats:
                unbiased = var.reshape(channels).detach() * (n / max(n - 1, 1))
                self._update_running_stats(mean.reshape(channels).detach(), unbiased)
        else:
            out = self._normalize_running(x, shape)
        return _channel_affine(out, self.weight, self.bias, shape)


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


class LayerNorm(Module):
    """Normalise over the trailing `normalized_shape` dims (biased variance), then `* weight + bias`."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = _ones(*self.normalized_shape) if elementwise_affine else None
        self.bias = _zeros(*self.normalized_shape) if elementwise_affine and bias else None

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"

    def forward(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if x.shape[-n:] != self.normalized_shape:
            raise ValueError(f"LayerNorm{self.normalized_shape}: input of shape {x.shape} does not end in it")
        out, _, _ = _normalize(x, tuple(range(x.ndim - n, x.ndim)), self.eps)
        if self.weight is not None:
            out = out * self.weight
        return out if self.bias is None else out + self.bias


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channel dim 1 of (N, C, H, W) inputs."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class GroupNorm(Module):
    """Normalise each of `num_groups` channel groups over (channels in group, spatial), then per-channel affine."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        if num_channels % num_groups:
            raise ValueError(f"num_channels {num_channels} must be divisible by num_groups {num_groups}")
        super().__init__()
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight = _ones(num_channels) if affine else None
        self.bias = _zeros(num_channels) if affine else None

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}"

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm: input of shape {x.shape} does not have {self.num_channels} channels")
        grouped = x.reshape(x.shape[0], self.num_groups, -1)
        out = _normalize(grouped, (2,), self.eps)[0].reshape(x.shape)
        return _channel_affine(out, self.weight, self.bias, (1, self.num_channels) + (1,) * (x.ndim - 2))


class InstanceNorm(_RunningStatsNorm):
    """Normalise each (sample, channel) over its spatial dims; torch defaults (`affine=False`, no running stats).
    With `track_running_stats=True` training updates running averages of the instance statistics and eval uses
    them. `InstanceNorm1d/2d/3d` are the same class."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 3 or x.shape[1] != self.num_features:
            raise ValueError(f"InstanceNorm: input of shape {x.shape} is not (N, {self.num_features}, ...)")
        shape = (1, self.num_features) + (1,) * (x.ndim - 2)
        axes = tuple(range(2, x.ndim))
        if self.track_running_stats and not _is_training(self):
            out = self._normalize_running(x, shape)
        else:
            out, mean, var = _normalize(x, axes, self.eps)
            if self.track_running_stats:
                n = math.prod(x.shape[2:])
                unbiased = (var * (n / max(n - 1, 1))).detach().mean(0).reshape(self.num_features)
                self._update_running_stats(mean.detach().mean(0).reshape(self.num_features), unbiased)
        return _channel_affine(out, self.weight, self.bias, shape)


InstanceNorm1d = InstanceNorm2d = InstanceNorm3d = InstanceNorm


def _machine_epsilon(dtype: DType) -> float:
    """torch.finfo(dtype).eps: 2**-(mantissa bits)."""
    return 2.0 ** -dtypes.finfo(dtype)[1]


class RMSNorm(Module):
    """`x / sqrt(mean(x², -1) + eps) * weight`, computed in float32 and cast back; `eps=None` uses the dtype's
    machine epsilon (torch)."""

    def __init__(self, dim: int, eps: float | None = 1e-6, elementwise_affine: bool = True) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = _ones(dim) if elementwise_affine else None

    def extra_repr(self) -> str:
        return f"({self.dim},), eps={self.eps}"

    def forward(self, x: Tensor) -> Tensor:
        eps = self.eps if self.eps is not None else _machine_epsilon(x.dtype)
        xf = x.cast(dtypes.float32) if x.dtype != dtypes.float64 else x
        out = (xf * (xf.square().mean(-1, keepdim=True) + eps).rsqrt()).cast(x.dtype)
        return out if self.weight is None else out * self.weight


class Embedding(Module):
    """Lookup table: `weight[idx]` rows for integer `idx`; weight (vocab, embed) from `N(0, 1)` (torch); rows of
    `padding_idx` start at zero."""

    def __init__(self, vocab_size: int, embed_size: int, padding_idx: int | None = None) -> None:
        super().__init__()
        self.vocab_size, self.embed_size, self.padding_idx = vocab_size, embed_size, padding_idx
        weight = Tensor.randn(vocab_size, embed_size)
        if padding_idx is not None:
            if not -vocab_size <= padding_idx < vocab_size:
                raise ValueError(f"padding_idx {padding_idx} is out of range for vocab_size {vocab_size}")
            keep = Tensor.arange(vocab_size).reshape(vocab_size, 1) != padding_idx % vocab_size
            weight = keep.where(weight, 0)
        self.weight = weight.contiguous().requires_grad_()

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.vocab_size}, {self.embed_size}{pad}"

    def forward(self, idx: Tensor) -> Tensor:
        if not dtypes.is_int(idx.dtype):
            raise TypeError(f"Embedding indices must be integers, got {idx.dtype.name}")
        return self.weight[idx]


class LSTMCell(Module):
    """One LSTM step: `(h, c) = cell(x, (h, c))`; gates i, f, g, o; all weights from `U(-1/sqrt(h), 1/sqrt(h))`."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        super().__init__()
        bound = kaiming_bound(hidden_size)
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = uniform_param(4 * hidden_size, input_size, bound=bound)
        self.weight_hh = uniform_param(4 * hidden_size, hidden_size, bound=bound)
        self.bias_ih = uniform_param(4 * hidden_size, bound=bound) if bias else None
        self.bias_hh = uniform_param(4 * hidden_size, bound=bound) if bias else None

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}"

    def forward(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if hc is None:
            zeros = Tensor.zeros(*x.shape[:-1], self.hidden_size, dtype=x.dtype, device=x.device)
            hc = (zeros, zeros)
        h, c = hc
        gates = x @ self.weight_ih.transpose(0, 1) + h @ self.weight_hh.transpose(0, 1)
        if self.bias_ih is not None and self.bias_hh is not None:
            gates = gates + self.bias_ih + self.bias_hh
        size = self.hidden_size
        i, f, g, o = (gates[..., k * size : (k + 1) * size] for k in range(4))
        c_new = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h_new = o.sigmoid() * c_new.tanh()
        return h_new, c_new
