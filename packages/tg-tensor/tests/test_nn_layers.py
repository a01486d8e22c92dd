"""nn layers: forward against numpy references, initialisation, training-mode behaviour, and (where torch is
installed) forward and backward against torch.nn with weights copied through load_state_dict."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tg.ir import dtypes
from tg.tensor import Tensor, nn
from tg.tensor.nn.state import get_state_dict, load_state_dict

RNG = np.random.default_rng(0)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def conv_reference(x: np.ndarray, w: np.ndarray, stride: int, padding: int, dilation: int, groups: int) -> np.ndarray:
    """Direct N-d cross-correlation in float64 loops over output positions."""
    n = w.ndim - 2
    x = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(padding, padding)] * n)
    batch = x.shape[0]
    cout, cg = w.shape[:2]
    kernel = w.shape[2:]
    out_sizes = [(s - dilation * (k - 1) - 1) // stride + 1 for s, k in zip(x.shape[2:], kernel, strict=True)]
    out = np.zeros((batch, cout, *out_sizes))
    per_group = cout // groups
    for pos in itertools.product(*(range(o) for o in out_sizes)):
        window = tuple(
            slice(p * stride, p * stride + dilation * (k - 1) + 1, dilation) for p, k in zip(pos, kernel, strict=True)
        )
        patch = x[(slice(None), slice(None), *window)]  # (N, Cin, *K)
        for g in range(groups):
            wg = w[g * per_group : (g + 1) * per_group]
            pg = patch[:, g * cg : (g + 1) * cg]
            out[(slice(None), slice(g * per_group, (g + 1) * per_group), *pos)] = np.tensordot(
                pg, wg, axes=(list(range(1, n + 2)), list(range(1, n + 2)))
            )
    return out


def conv_transpose_reference(
    x: np.ndarray, w: np.ndarray, stride: int, padding: int, output_padding: int, dilation: int, groups: int
) -> np.ndarray:
    """Transposed convolution by its definition: every input element scatters `x * w` into the output."""
    batch, cin, *spatial = x.shape
    cg = w.shape[1]
    kernel = w.shape[2:]
    full = [(s - 1) * stride + dilation * (k - 1) + 1 + output_padding for s, k in zip(spatial, kernel, strict=True)]
    out = np.zeros((batch, cg * groups, *full))
    per_group = cin // groups
    for pos in itertools.product(*(range(s) for s in spatial)):
        for koff in itertools.product(*(range(k) for k in kernel)):
            target = tuple(p * stride + k * dilation for p, k in zip(pos, koff, strict=True))
            for g in range(groups):
                xs = x[(slice(None), slice(g * per_group, (g + 1) * per_group), *pos)]  # (N, Cin/g)
                ws = w[(slice(g * per_group, (g + 1) * per_group), slice(None), *koff)]  # (Cin/g, Cout/g)
                out[(slice(None), slice(g * cg, (g + 1) * cg), *target)] += xs @ ws
    crop = tuple(slice(padding, f - padding) for f in full)
    return out[(slice(None), slice(None), *crop)]


def test_linear_matches_numpy_and_init_bounds() -> None:
    layer = nn.Linear(64, 5)
    x = randn(3, 64)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-5)
    assert w.shape == (5, 64) and np.abs(w).max() <= 1 / 8 and np.abs(b).max() <= 1 / 8
    assert layer.weight.requires_grad and nn.Linear(3, 2, bias=False).bias is None
    with pytest.raises(ValueError, match="in_features=64"):
        layer(Tensor(randn(3, 63)))


def test_init_distributions() -> None:
    big = nn.Linear(400, 250).weight.numpy()  # U(-k, k): std k/sqrt(3)
    k = 1 / np.sqrt(400)
    assert abs(big.std() - k / np.sqrt(3)) < 3 * k / np.sqrt(3) / np.sqrt(big.size) * 2 + 1e-4
    conv = nn.Conv2d(8, 6, 3, groups=2).weight.numpy()  # torch: fan_in = in/groups * k*k = 36
    assert conv.shape == (6, 4, 3, 3) and np.abs(conv).max() <= 1 / 6
    convt = nn.ConvTranspose2d(8, 6, 3, groups=2).weight.numpy()  # fan_in of dim 1: out/groups * 9 = 27
    assert convt.shape == (8, 3, 3, 3) and np.abs(convt).max() <= 1 / np.sqrt(27) and np.abs(convt).max() > 1 / 6
    emb = nn.Embedding(300, 100).weight.numpy()  # N(0, 1)
    assert abs(emb.mean()) < 0.03 and abs(emb.std() - 1) < 0.03


@pytest.mark.parametrize(
    ("dims", "stride", "padding", "dilation", "groups"),
    [(2, 1, 1, 1, 1), (2, 2, 0, 1, 1), (2, 1, 2, 2, 1), (2, 2, 1, 1, 3), (1, 1, 0, 1, 1), (1, 3, 2, 2, 3)],
)
def test_conv_matches_reference(dims: int, stride: int, padding: int, dilation: int, groups: int) -> None:
    layer_cls = nn.Conv2d if dims == 2 else nn.Conv1d
    layer = layer_cls(6, 9, 3, stride=stride, padding=padding, dilation=dilation, groups=groups)
    x = randn(2, 6, *([7] * dims))
    want = conv_reference(x, layer.weight.numpy(), stride, padding, dilation, groups)
    want += layer.bias.numpy().reshape(1, -1, *([1] * dims))
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_conv_same_padding_and_errors() -> None:
    layer = nn.Conv2d(2, 3, (3, 4), padding="same", bias=False)
    x = randn(1, 2, 5, 6)
    assert layer(Tensor(x)).shape == (1, 3, 5, 6)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 2)])
    np.testing.assert_allclose(
        layer(Tensor(x)).numpy(), conv_reference(padded, layer.weight.numpy(), 1, 0, 1, 1), rtol=1e-4, atol=1e-5
    )
    with pytest.raises(ValueError, match="channels"):
        layer(Tensor(randn(1, 3, 5, 6)))
    with pytest.raises(ValueError, match="groups"):
        nn.Conv2d(3, 4, 3, groups=2)


@pytest.mark.parametrize(
    ("dims", "stride", "padding", "output_padding", "dilation", "groups"),
    [(2, 1, 0, 0, 1, 1), (2, 2, 1, 1, 1, 1), (2, 3, 1, 0, 2, 2), (1, 2, 0, 1, 1, 1)],
)
def test_conv_transpose_matches_reference(
    dims: int, stride: int, padding: int, output_padding: int, dilation: int, groups: int
) -> None:
    layer_cls = nn.ConvTranspose2d if dims == 2 else nn.ConvTranspose1d
    layer = layer_cls(
        4, 6, 3, stride=stride, padding=padding, output_padding=output_padding, dilation=dilation, groups=groups
    )
    x = randn(2, 4, *([4] * dims))
    want = conv_transpose_reference(x, layer.weight.numpy(), stride, padding, output_padding, dilation, groups)
    want += layer.bias.numpy().reshape(1, -1, *([1] * dims))
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_conv_gradient_matches_central_differences() -> None:
    x = RNG.standard_normal((1, 2, 5, 5))
    w = RNG.standard_normal((4, 1, 3, 3))
    r = RNG.standard_normal((1, 4, 3, 3))

    def loss(wv: np.ndarray) -> float:
        return float((conv_reference(x, wv, 2, 1, 1, 2) * r).sum())

    wt = Tensor(w, requires_grad=True)
    out = nn.Conv2d(2, 4, 3, stride=2, padding=1, groups=2, bias=False)
    out.weight = wt
    out = out(Tensor(x))
    (grad,) = (out * Tensor(r)).sum().gradient(wt)
    numeric = np.zeros_like(w)
    for idx in np.ndindex(*w.shape):
        step = np.zeros_like(w)
        step[idx] = 1e-6
        numeric[idx] = (loss(w + step) - loss(w - step)) / 2e-6
    np.testing.assert_allclose(grad.numpy(), numeric, rtol=1e-5, atol=1e-6)


def test_batchnorm_training_updates_running_stats_like_torch() -> None:
    bn = nn.BatchNorm2d(3)
    x = randn(4, 3, 2, 5) * 2 + 1
    with Tensor.train():
        out = bn(Tensor(x)).numpy()
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
    want = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    Tensor.realize(bn.running_mean, bn.running_var, bn.num_batches_tracked)
    n = 4 * 2 * 5
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var * n / (n - 1), rtol=1e-5)
    assert bn.num_batches_tracked.item() == 1 and bn.num_batches_tracked.dtype is dtypes.int64
    evaluated = bn(Tensor(x)).numpy()  # eval (not training): running statistics
    rm, rv = bn.running_mean.numpy().reshape(1, 3, 1, 1), bn.running_var.numpy().reshape(1, 3, 1, 1)
    np.testing.assert_allclose(evaluated, (x - rm) / np.sqrt(rv + 1e-5), rtol=1e-4, atol=1e-5)
    with Tensor.train(), pytest.raises(ValueError, match="more than 1 value"):
        bn(Tensor(randn(1, 3)))


def test_batchnorm_cumulative_momentum_and_layer_mode() -> None:
    bn = nn.BatchNorm1d(2, momentum=None)
    batches = [randn(5, 2), randn(5, 2) + 3]
    nn.train(bn)
    for b in batches:
        bn(Tensor(b))
        bn.running_mean.realize()
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean([b.mean(0) for b in batches], 0), rtol=1e-5)
    assert bn.num_batches_tracked.item() == 2
    nn.eval(bn)
    before = bn.running_mean.numpy()
    bn(Tensor(randn(5, 2))).realize()
    np.testing.assert_array_equal(bn.running_mean.numpy(), before)


def test_norms_match_numpy() -> None:
    x = randn(2, 6, 3, 4)
    ln = nn.LayerNorm((3, 4))
    want = (x - x.mean((2, 3), keepdims=True)) / np.sqrt(x.var((2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    gn = nn.GroupNorm(3, 6)
    g = x.reshape(2, 3, -1)
    want = ((g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(gn(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    inorm = nn.InstanceNorm2d(6)
    want = (x - x.mean((2, 3), keepdims=True)) / np.sqrt(x.var((2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(inorm(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    assert inorm.weight is None
    rms = nn.RMSNorm(4)
    want = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(rms(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    ln2 = nn.LayerNorm2d(6)
    xp = x.transpose(0, 2, 3, 1)
    want = ((xp - xp.mean(-1, keepdims=True)) / np.sqrt(xp.var(-1, keepdims=True) + 1e-5)).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(ln2(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_embedding_and_lstm_cell() -> None:
    emb = nn.Embedding(10, 4, padding_idx=2)
    idx = np.array([[1, 2, 9], [0, 0, 3]], dtype=np.int32)
    weight = emb.weight.numpy()
    np.testing.assert_allclose(emb(Tensor(idx)).numpy(), weight[idx], rtol=1e-6)
    assert not weight[2].any()
    cell = nn.LSTMCell(3, 5)
    x, h, c = randn(2, 3), randn(2, 5), randn(2, 5)
    h2, c2 = cell(Tensor(x), (Tensor(h), Tensor(c)))
    gates = x @ cell.weight_ih.numpy().T + cell.bias_ih.numpy() + h @ cell.weight_hh.numpy().T + cell.bias_hh.numpy()
    i, f, g, o = np.split(gates, 4, axis=1)
    sig = lambda v: 1 / (1 + np.exp(-v))
    c_want = sig(f) * c + sig(i) * np.tanh(g)
    np.testing.assert_allclose(c2.numpy(), c_want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h2.numpy(), sig(o) * np.tanh(c_want), rtol=1e-4, atol=1e-5)
    assert cell(Tensor(x))[0].shape == (2, 5)


def test_dropout_honours_training_mode() -> None:
    layer = nn.Dropout(0.25)
    x = Tensor.ones(200, 100)
    np.testing.assert_array_equal(layer(x).numpy(), np.ones((200, 100)))
    with Tensor.train():
        out = layer(x).numpy()
    zeros = (out == 0).mean()
    assert abs(zeros - 0.25) < 0.02 and np.allclose(out[out != 0], 1 / 0.75)
    nn.train(layer)
    assert (layer(x).numpy() == 0).any()
    with pytest.raises(ValueError, match="probability"):
        nn.Dropout(1.5)


def test_state_dict_keys_match_torch_names() -> None:
    class Net:
        def __init__(self) -> None:
            self.conv = nn.Conv2d(1, 2, 3)
            self.bn = nn.BatchNorm2d(2)
            self.cell = nn.LSTMCell(2, 2)

    keys = list(get_state_dict(Net()))
    bn_keys = ["bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    cell_keys = ["cell.weight_ih", "cell.weight_hh", "cell.bias_ih", "cell.bias_hh"]
    assert keys == ["conv.weight", "conv.bias", *bn_keys, *cell_keys]


# ---- against torch ---------------------------------------------------------------------------------------------

TORCH_CASES = [
    ("Linear", (7, 5), {}, (3, 7)),
    ("Conv1d", (4, 6, 3), {"stride": 2, "padding": 1, "groups": 2}, (2, 4, 9)),
    ("Conv2d", (4, 6, 3), {"padding": 1, "dilation": 2}, (2, 4, 7, 7)),
    ("ConvTranspose1d", (4, 6, 3), {"stride": 2, "output_padding": 1}, (2, 4, 5)),
    ("ConvTranspose2d", (4, 6, 3), {"stride": 2, "padding": 1, "groups": 2}, (2, 4, 4, 4)),
    ("LayerNorm", ((5,),), {}, (3, 4, 5)),
    ("GroupNorm", (2, 6), {}, (3, 6, 4)),
    ("InstanceNorm2d", (3,), {"affine": True}, (2, 3, 4, 4)),
    ("RMSNorm", (6,), {"eps": 1e-6}, (3, 6)),
    ("BatchNorm2d", (3,), {}, (4, 3, 2, 2)),
]


@pytest.mark.torch
@pytest.mark.parametrize(("name", "args", "kwargs", "shape"), TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_layer_forward_backward_vs_torch(name: str, args: tuple, kwargs: dict, shape: tuple) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    ours = getattr(nn, name)(*args, **kwargs)
    load_state_dict(ours, {k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    x = randn(*shape)
    tx = torch.tensor(x, requires_grad=True)
    ox = Tensor(x, requires_grad=True)
    training = name.startswith("BatchNorm")
    theirs.train(training)
    with Tensor.train(training):
        out = ours(ox)
    tout = theirs(tx)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    r = randn(*tout.shape)
    tout.backward(torch.tensor(r))
    params = [(k, t) for k, t in get_state_dict(ours).items() if t.requires_grad]
    grads = (out * Tensor(r)).sum().gradient(ox, *(t for _, t in params))
    np.testing.assert_allclose(grads[0].numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    torch_params = dict(theirs.named_parameters())
    for (key, _), grad in zip(params, grads[1:], strict=True):
        np.testing.assert_allclose(grad.numpy(), torch_params[key].grad.numpy(), rtol=1e-4, atol=1e-4, err_msg=key)
    if training:
        Tensor.realize(ours.running_mean, ours.running_var)
        np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-5)
        np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.torch
def test_instancenorm_running_stats_vs_torch() -> None:
    torch = pytest.importorskip("torch")
    theirs = torch.nn.InstanceNorm1d(3, affine=True, track_running_stats=True)
    ours = nn.InstanceNorm1d(3, affine=True, track_running_stats=True)
    load_state_dict(ours, {k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    x = randn(4, 3, 7) * 2 + 1
    theirs.train()
    with Tensor.train():
        np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), atol=1e-5)
    Tensor.realize(ours.running_mean, ours.running_var)
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-5)
    theirs.eval()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), atol=1e-5)
