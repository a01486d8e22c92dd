"""nn.Module and its habits (issue 27, item 8): registration by attribute, torch's state-dict keys and order,
modes, containers, activation modules, nn.functional; PyTorch model definitions run unchanged apart from their
imports and load torch's state dicts (torch-marked parts skip cleanly without torch)."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes, nn
from tg.tensor.nn import functional as F
from tg.tensor.nn.state import get_parameters, get_state_dict


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.norm = nn.BatchNorm1d(4)
        self.register_buffer("mask", Tensor.ones(4), persistent=False)
        self.scale = nn.Parameter(Tensor.ones(1))
        self.name = "block"

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.fc(x)) * self.mask * self.scale


def test_registration_and_torch_keys() -> None:
    b = Block()
    assert [n for n, _ in b.named_parameters()] == ["scale", "fc.weight", "fc.bias", "norm.weight", "norm.bias"]
    assert list(b.state_dict()) == [
        "scale", "fc.weight", "fc.bias", "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var",
        "norm.num_batches_tracked",
    ]  # fmt: skip
    assert [n for n, _ in b.named_buffers()] == ["mask", "norm.running_mean", "norm.running_var",
                                                  "norm.num_batches_tracked"]  # fmt: skip
    assert [n for n, _ in b.named_children()] == ["fc", "norm"] and len(list(b.modules())) == 3
    assert b.name == "block" and "name" not in b.state_dict()
    assert list(get_state_dict(b)) == list(b.state_dict())  # nn.state sees a Module through its state_dict
    assert b.get_submodule("fc") is b.fc and b.get_parameter("fc.bias") is b.fc.bias
    b.fc = None  # type: ignore[assignment]
    assert "fc.weight" not in b.state_dict()
    del b.scale
    assert [n for n, _ in b.named_parameters()] == ["norm.weight", "norm.bias"]


def test_plain_tensors_are_not_parameters_but_grad_leaves_are() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cache = Tensor.zeros(2)  # a plain attribute (torch: not in the state dict)
            self.w = Tensor.ones(2, requires_grad=True)  # tg's way of making a parameter

    m = M()
    assert list(m.state_dict()) == ["w"] and isinstance(m.cache, Tensor)


def test_tinygrad_style_lists_inside_a_module_and_plain_classes() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = [nn.Linear(2, 2), nn.Linear(2, 1)]  # a plain list (torch would need ModuleList)

        def forward(self, x: Tensor) -> Tensor:
            for layer in self.layers:
                x = layer(x)
            return x

    net = Net()
    assert list(net.state_dict()) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
    assert len(list(net.parameters())) == 4

    class Plain:  # tinygrad style: no base class
        def __init__(self) -> None:
            self.l1 = nn.Linear(2, 3)
            self.blocks = [nn.Linear(3, 3)]

    assert list(get_state_dict(Plain())) == ["l1.weight", "l1.bias", "blocks.0.weight", "blocks.0.bias"]
    assert len(get_parameters(Plain())) == 4


def test_train_eval_follow_the_global_flag_until_switched() -> None:
    b = Block()
    assert b.training is False and b.norm.training is False
    with Tensor.train():
        assert b.norm.training is True
    assert b.train() is b and b.training and b.norm.training
    b.eval()
    assert not b.fc.training
    x = Tensor(np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32))
    b.train()
    b(x).realize()
    assert b.norm.num_batches_tracked.item() == 1  # batch statistics were used and tracked
    b.eval()
    b(x).realize()
    assert b.norm.num_batches_tracked.item() == 1


def test_zero_grad_requires_grad_and_parameters_for_an_optimizer() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    opt = nn.optim.SGD(model.parameters(), lr=0.1)
    x = Tensor([[1.0, 2.0]])
    before = model[2].bias.numpy().copy()
    model(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    opt.step()
    np.testing.assert_allclose(model[2].bias.numpy(), before - 0.1, rtol=1e-6)  # d(sum)/d(bias) = 1
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    model.requires_grad_(False)
    assert all(p.requires_grad is False for p in model.parameters())


def test_load_state_dict_and_keys_report() -> None:
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    result = b.load_state_dict(a.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    with pytest.raises(ValueError, match="missing keys"):
        b.load_state_dict({"weight": Tensor.zeros(2, 2)})
    missing, unexpected = b.load_state_dict({"weight": Tensor.zeros(2, 2), "extra": Tensor([1.0])}, strict=False)
    assert missing == ["bias"] and unexpected == ["extra"] and b.weight.numpy().sum() == 0


def test_containers() -> None:
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[1], nn.ReLU) and isinstance(seq[-1], nn.Linear)
    assert list(seq[1:].state_dict()) == ["2.weight", "2.bias"]  # a slice keeps the names
    named = nn.Sequential(OrderedDict([("enc", nn.Linear(2, 2)), ("act", nn.Tanh())]))
    assert list(named.state_dict()) == ["enc.weight", "enc.bias"]
    ml = nn.ModuleList([nn.Linear(1, 1)])
    ml.append(nn.Linear(1, 2))
    ml.insert(0, nn.Identity())
    assert [type(m).__name__ for m in ml] == ["Identity", "Linear", "Linear"]
    assert list(ml.state_dict()) == ["1.weight", "1.bias", "2.weight", "2.bias"]
    del ml[0]
    assert len(ml) == 2 and next(iter(ml.state_dict())) == "0.weight"
    md = nn.ModuleDict({"a": nn.Linear(1, 1)})
    md["b"] = nn.ReLU()
    assert list(md.keys()) == ["a", "b"] and "a" in md and list(md.state_dict()) == ["a.weight", "a.bias"]
    pl = nn.ParameterList([Tensor.ones(2), Tensor.zeros(3)])
    assert [p.shape for p in pl] == [(2,), (3,)] and all(p.requires_grad for p in pl)
    with pytest.raises(IndexError, match="out of range"):
        seq[5]


def test_repr_is_torch_like() -> None:
    text = repr(nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2)))
    assert text.splitlines()[0] == "Sequential("
    assert "(0): Conv2d(1, 8, kernel_size=(3, 3), stride=1, padding=1)" in text
    assert "(3): Linear(in_features=8, out_features=2, bias=True)" in text


def test_to_dtype_keeps_parameters_trainable() -> None:
    lin = nn.Linear(2, 2)
    lin.half()
    assert lin.weight.dtype is dtypes.float16 and lin.weight.requires_grad and isinstance(lin.weight, nn.Parameter)
    assert lin.float().weight.dtype is dtypes.float32


def test_apply_visits_children_first() -> None:
    seen: list[str] = []
    nn.Sequential(nn.Linear(1, 1), nn.ReLU()).apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["ReLU", "Linear", "Sequential"]


ACTIVATIONS = [
    (nn.ReLU(), lambda x: np.maximum(x, 0)),
    (nn.LeakyReLU(0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    (nn.Tanh(), np.tanh),
    (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (nn.SiLU(), lambda x: x / (1 + np.exp(-x))),
    (nn.GELU(), lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    (nn.ELU(), lambda x: np.where(x > 0, x, np.exp(x) - 1)),
    (nn.Softplus(), lambda x: np.log1p(np.exp(x))),
    (nn.Hardtanh(), lambda x: np.clip(x, -1, 1)),
    (nn.Softmax(dim=-1), lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
    (nn.LogSoftmax(dim=1), lambda x: x - np.log(np.exp(x).sum(1, keepdims=True))),
    (nn.Identity(54, unused=1), lambda x: x),
    (nn.Flatten(), lambda x: x.reshape(x.shape[0], -1)),
    (nn.Dropout(0.5), lambda x: x),  # not training: identity
]


@pytest.mark.parametrize(("module", "ref"), ACTIVATIONS, ids=[type(m).__name__ for m, _ in ACTIVATIONS])
def test_activation_modules_match_numpy(module: nn.Module, ref: object) -> None:
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(module(Tensor(x)).numpy(), ref(x), rtol=1e-5, atol=1e-6)  # type: ignore[operator]


def test_functional_forms() -> None:
    x = np.random.default_rng(4).standard_normal((2, 3, 6, 6)).astype(np.float32)
    t = Tensor(x)
    np.testing.assert_allclose(F.max_pool2d(t, 2).numpy(), x.reshape(2, 3, 3, 2, 3, 2).max((3, 5)))
    np.testing.assert_allclose(F.avg_pool2d(t, 3).numpy(), x.reshape(2, 3, 2, 3, 2, 3).mean((3, 5)), atol=1e-6)
    np.testing.assert_allclose(F.adaptive_avg_pool2d(t, 1).numpy(), x.mean((2, 3), keepdims=True), rtol=1e-5)
    w = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(F.linear(t, Tensor(w)).numpy(), x @ w.T, rtol=1e-4, atol=1e-5)
    assert F.mse_loss(Tensor([1.0, 3.0]), Tensor([0.0, 0.0])).item() == 5.0
    assert F.dropout(t, 0.5, training=False) is t
    dropped = F.dropout(Tensor.ones(1000), 0.5).numpy()  # torch's default: training=True
    assert set(np.unique(dropped)) <= {0.0, 2.0} and 300 < (dropped == 0).sum() < 700


# ---- PyTorch model definitions, run unchanged apart from the imports ----------------------------------------------

MODELS = """
class SmallCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(16 * 2 * 2, 32), nn.ReLU(), nn.Dropout(0.1),
                                  nn.Linear(32, num_classes))

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 1)
        return F.log_softmax(self.head(x), dim=1)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout=0.0):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        self.n_embd = n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                                     .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout=0.0):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class GPTBlock(nn.Module):
    def __init__(self, n_embd=16, n_head=2, block_size=8):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x
"""
TG_IMPORTS = "import math\nfrom tg.tensor import Tensor as torch, nn\nfrom tg.tensor.nn import functional as F\n"
TORCH_IMPORTS = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
CNN_KEYS = [
    "conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
    "bn1.num_batches_tracked", "conv2.weight", "conv2.bias", "head.1.weight", "head.1.bias", "head.4.weight",
    "head.4.bias",
]  # fmt: skip
GPT_KEYS = [
    "ln_1.weight", "ln_1.bias", "attn.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
    "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
    "mlp.c_proj.bias",
]  # fmt: skip


def _models(imports: str) -> dict:
    namespace: dict = {}
    exec(compile(imports + MODELS, "<models>", "exec"), namespace)
    return namespace


# slow (~15 CPU-s: a CNN and a GPT block traced, run and trained once); by default the torch stage runs both models'
# forward passes against PyTorch (test_pytorch_models_load_torch_state_dicts_and_agree) and the nn/optim suites
# cover the layers and AdamW
@pytest.mark.slow
def test_pytorch_model_definitions_run_on_tg() -> None:
    ns = _models(TG_IMPORTS)
    cnn, gpt = ns["SmallCNN"](), ns["GPTBlock"]()
    assert sorted(cnn.state_dict()) == sorted(CNN_KEYS) and sorted(gpt.state_dict()) == sorted(GPT_KEYS)
    rng = np.random.default_rng(0)
    out = cnn.eval()(Tensor(rng.standard_normal((2, 1, 8, 8)).astype(np.float32))).numpy()
    assert out.shape == (2, 10) and np.allclose(np.exp(out).sum(1), 1, rtol=1e-5)
    y = gpt(Tensor(rng.standard_normal((2, 5, 16)).astype(np.float32)))
    assert y.shape == (2, 5, 16) and np.isfinite(y.numpy()).all()
    opt = nn.optim.AdamW(cnn.train().parameters(), lr=1e-2)
    loss = F.nll_loss(cnn(Tensor(rng.standard_normal((4, 1, 8, 8)).astype(np.float32))), Tensor([1, 2, 3, 4]))
    loss.backward()
    opt.step()
    assert math.isfinite(loss.item())


@pytest.mark.torch
@pytest.mark.parametrize("name", ["SmallCNN", "GPTBlock"])
def test_pytorch_models_load_torch_state_dicts_and_agree(name: str) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    ref_model = _models(TORCH_IMPORTS)[name]().eval()
    model = _models(TG_IMPORTS)[name]().eval()
    ref_sd = ref_model.state_dict()
    assert list(model.state_dict()) == list(ref_sd)  # the same keys, in the same order
    model.load_state_dict({k: Tensor(v.numpy()) for k, v in ref_sd.items()})
    shape = (2, 1, 8, 8) if name == "SmallCNN" else (2, 5, 16)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        expected = ref_model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(Tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)
