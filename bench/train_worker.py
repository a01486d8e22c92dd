"""One training run of bench/bench_train.py in its own process: `python bench/train_worker.py FRAMEWORK MODEL DATA N`.

FRAMEWORK is `tg-jit`, `tg-eager`, `torch-1` (one thread), `torch` (default threads) or `tinygrad` (TinyJit,
DEV=CPU). DATA is the .npz that bench_train.py wrote: the initial weights of MODEL (`p:<name>` arrays), the input
batches (`x`, `y`: one per step) and nothing else, so every framework starts from the same weights and sees the same
batches. Prints one JSON line: steps/s after the warm-up steps, the loss of every step, and the framework's version.

The models (their weights' names and shapes are in `PARAMS`):
- mlp: digits MLP 64-128-10, relu;
- cnn: digits CNN conv(1->8, 3x3, p1)-relu-conv(8->16, 3x3, p1)-relu-maxpool2-linear(256->10);
- gpt: char GPT, 2 pre-norm blocks, d=64, 4 heads, ctx 32, erf GELU MLP (4d), causal attention;
- resnet: conv-bn-relu-conv-bn + skip, relu, 16 channels at 32x32, then global average pool and linear(16->10);
- transformer: the GPT's block at d=256, 4 layers, 4 heads, ctx 128.
tg and tinygrad share one definition (their Tensor APIs agree on everything used here); torch has its own.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

WARMUP = 3  # steps not timed (compilation, JIT capture)
VOCAB = 65


def _block_params(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}ln1.w": (d,), f"{prefix}ln1.b": (d,), f"{prefix}qkv.w": (3 * d, d), f"{prefix}qkv.b": (3 * d,),
            f"{prefix}proj.w": (d, d), f"{prefix}proj.b": (d,), f"{prefix}ln2.w": (d,), f"{prefix}ln2.b": (d,),
            f"{prefix}fc1.w": (4 * d, d), f"{prefix}fc1.b": (4 * d,), f"{prefix}fc2.w": (d, 4 * d),
            f"{prefix}fc2.b": (d,)}  # fmt: skip


def _gpt_params(layers: int, d: int, ctx: int) -> dict[str, tuple[int, ...]]:
    ret: dict[str, tuple[int, ...]] = {"tok": (VOCAB, d), "pos": (ctx, d)}
    for i in range(layers):
        ret.update(_block_params(f"h{i}.", d))
    ret.update({"lnf.w": (d,), "lnf.b": (d,), "head.w": (VOCAB, d), "head.b": (VOCAB,)})
    return ret


# model -> (batch, weight shapes, GPT layout (layers, d, heads, ctx) or None)
# fmt: off
MODELS: dict[str, tuple[int, dict[str, tuple[int, ...]], tuple[int, int, int, int] | None]] = {
    "mlp": (64, {"fc1.w": (128, 64), "fc1.b": (128,), "fc2.w": (10, 128), "fc2.b": (10,)}, None),
    "cnn": (64, {"c1.w": (8, 1, 3, 3), "c1.b": (8,), "c2.w": (16, 8, 3, 3), "c2.b": (16,), "fc.w": (10, 256),
                 "fc.b": (10,)}, None),
    "gpt": (16, _gpt_params(2, 64, 32), (2, 64, 4, 32)),
    "resnet": (32, {"c1.w": (16, 16, 3, 3), "bn1.w": (16,), "bn1.b": (16,), "c2.w": (16, 16, 3, 3), "bn2.w": (16,),
                    "bn2.b": (16,), "fc.w": (10, 16), "fc.b": (10,)}, None),
    "transformer": (8, _gpt_params(4, 256, 128), (4, 256, 4, 128)),
}
# fmt: on


# ---- tg and tinygrad (one definition: the same Tensor methods) ------------------------------------------------------


def _ln(x: Any, w: Any, b: Any) -> Any:
    return x.layernorm() * w + b


def _lin(x: Any, w: Any, b: Any) -> Any:
    return x.linear(w.T, b)


def _gpt_forward(p: dict[str, Any], x: Any, layout: tuple[int, int, int, int], Tensor: Any) -> Any:
    layers, d, heads, ctx = layout
    bsz = x.shape[0]
    h = p["tok"][x] + p["pos"].reshape(1, ctx, d)
    for i in range(layers):
        q = f"h{i}."
        qkv = _lin(_ln(h, p[q + "ln1.w"], p[q + "ln1.b"]), p[q + "qkv.w"], p[q + "qkv.b"])
        qq, kk, vv = (qkv[:, :, j * d:(j + 1) * d].reshape(bsz, ctx, heads, d // heads).transpose(1, 2)
                      for j in range(3))  # fmt: skip
        att = qq.scaled_dot_product_attention(kk, vv, is_causal=True).transpose(1, 2).reshape(bsz, ctx, d)
        h = h + _lin(att, p[q + "proj.w"], p[q + "proj.b"])
        m = _lin(_ln(h, p[q + "ln2.w"], p[q + "ln2.b"]), p[q + "fc1.w"], p[q + "fc1.b"]).gelu(approximate="none")
        h = h + _lin(m, p[q + "fc2.w"], p[q + "fc2.b"])
    return _lin(_ln(h, p["lnf.w"], p["lnf.b"]), p["head.w"], p["head.b"]).reshape(bsz * ctx, VOCAB)


def _bn(x: Any, w: Any, b: Any) -> Any:
    mean = x.mean(axis=(0, 2, 3), keepdim=True)
    var = ((x - mean) * (x - mean)).mean(axis=(0, 2, 3), keepdim=True)
    return (x - mean) * (var + 1e-5).rsqrt() * w.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)


def tensor_forward(model: str, p: dict[str, Any], x: Any, Tensor: Any) -> Any:
    """Logits of `model` for batch `x` in tg or tinygrad."""
    if model == "mlp":
        return _lin(_lin(x, p["fc1.w"], p["fc1.b"]).relu(), p["fc2.w"], p["fc2.b"])
    if model == "cnn":
        h = x.conv2d(p["c1.w"], p["c1.b"], padding=1).relu().conv2d(p["c2.w"], p["c2.b"], padding=1).relu()
        return _lin(h.max_pool2d(2).flatten(1), p["fc.w"], p["fc.b"])
    if model == "resnet":
        h = _bn(x.conv2d(p["c1.w"], padding=1), p["bn1.w"], p["bn1.b"]).relu()
        h = (_bn(h.conv2d(p["c2.w"], padding=1), p["bn2.w"], p["bn2.b"]) + x).relu()
        return _lin(h.mean(axis=(2, 3)), p["fc.w"], p["fc.b"])
    layout = MODELS[model][2]
    assert layout is not None
    return _gpt_forward(p, x, layout, Tensor)


def run_tensor_lib(framework: str, model: str, data: Any, steps: int) -> dict[str, Any]:
    """Train with tg (JIT or eager) or tinygrad (TinyJit)."""
    if framework == "tinygrad":
        from importlib.metadata import version as dist_version

        import tinygrad
        from tinygrad import Tensor, TinyJit
        from tinygrad.nn.optim import Adam

        tg_version = getattr(tinygrad, "__version__", None) or dist_version("tinygrad")
        version = f"tinygrad {tg_version} DEV={os.environ.get('DEV', '')}"

        def train_ctx() -> Any:
            from tinygrad.helpers import Context

            return Context(TRAINING=1)
    else:
        from tg.tensor import Tensor, TinyJit
        from tg.tensor.nn.optim import Adam

        version = "tg"
        train_ctx = Tensor.train
    p = {k[2:]: Tensor(data[k]).realize() for k in data if k.startswith("p:")}
    for t in p.values():
        t.requires_grad = True
    opt = Adam(list(p.values()), lr=1e-3)
    is_tokens = MODELS[model][2] is not None

    def step(x: Any, y: Any) -> Any:
        with train_ctx():
            opt.zero_grad()
            logits = tensor_forward(model, p, x, Tensor)
            loss = logits.sparse_categorical_crossentropy(y.reshape(-1) if is_tokens else y)
            loss.backward()
            opt.step()
        return loss.realize()

    fn: Callable[[Any, Any], Any] = step if framework == "tg-eager" else TinyJit(step)
    return _loop(fn, lambda i: (Tensor(data["x"][i]), Tensor(data["y"][i])), lambda t: float(t.item()), steps, version)


# ---- torch -----------------------------------------------------------------------------------------------------------


def run_torch(framework: str, model: str, data: Any, steps: int) -> dict[str, Any]:
    """Train with PyTorch (eager), one thread or its default thread count."""
    import torch
    import torch.nn.functional as F

    if framework == "torch-1":
        torch.set_num_threads(1)
    p = {k[2:]: torch.tensor(data[k], requires_grad=True) for k in data if k.startswith("p:")}
    opt = torch.optim.Adam(list(p.values()), lr=1e-3)
    layout = MODELS[model][2]

    def ln(x: Any, w: Any, b: Any) -> Any:
        return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

    def bn(x: Any, w: Any, b: Any) -> Any:
        return F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)

    def forward(x: Any) -> Any:
        if model == "mlp":
            return F.linear(F.relu(F.linear(x, p["fc1.w"], p["fc1.b"])), p["fc2.w"], p["fc2.b"])
        if model == "cnn":
            h = F.relu(F.conv2d(F.relu(F.conv2d(x, p["c1.w"], p["c1.b"], padding=1)), p["c2.w"], p["c2.b"], padding=1))
            return F.linear(F.max_pool2d(h, 2).flatten(1), p["fc.w"], p["fc.b"])
        if model == "resnet":
            h = F.relu(bn(F.conv2d(x, p["c1.w"], padding=1), p["bn1.w"], p["bn1.b"]))
            h = F.relu(bn(F.conv2d(h, p["c2.w"], padding=1), p["bn2.w"], p["bn2.b"]) + x)
            return F.linear(h.mean((2, 3)), p["fc.w"], p["fc.b"])
        assert layout is not None
        layers, d, heads, ctx = layout
        bsz = x.shape[0]
        h = F.embedding(x, p["tok"]) + p["pos"].reshape(1, ctx, d)
        for i in range(layers):
            q = f"h{i}."
            qkv = F.linear(ln(h, p[q + "ln1.w"], p[q + "ln1.b"]), p[q + "qkv.w"], p[q + "qkv.b"])
            qq, kk, vv = (qkv[:, :, j * d:(j + 1) * d].reshape(bsz, ctx, heads, d // heads).transpose(1, 2)
                          for j in range(3))  # fmt: skip
            att = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True).transpose(1, 2).reshape(bsz, ctx, d)
            h = h + F.linear(att, p[q + "proj.w"], p[q + "proj.b"])
            m = F.gelu(F.linear(ln(h, p[q + "ln2.w"], p[q + "ln2.b"]), p[q + "fc1.w"], p[q + "fc1.b"]))
            h = h + F.linear(m, p[q + "fc2.w"], p[q + "fc2.b"])
        return F.linear(ln(h, p["lnf.w"], p["lnf.b"]), p["head.w"], p["head.b"]).reshape(bsz * ctx, VOCAB)

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = F.cross_entropy(forward(x), y.reshape(-1).long())
        loss.backward()
        opt.step()
        return loss

    version = f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    return _loop(step, lambda i: (torch.tensor(data["x"][i]), torch.tensor(data["y"][i])),
                 lambda t: float(t.item()), steps, version)  # fmt: skip


def _loop(step: Callable[[Any, Any], Any], batch: Callable[[int], tuple[Any, Any]], value: Callable[[Any], float],
          steps: int, version: str) -> dict[str, Any]:  # fmt: skip
    losses, start = [], time.perf_counter()
    loop_start, cpu_start = start, time.process_time()
    for i in range(steps):
        if i == WARMUP:
            loop_start, cpu_start = time.perf_counter(), time.process_time()
        losses.append(value(step(*batch(i))))
    timed = max(steps - WARMUP, 1)
    # CPU seconds of all this process's threads: on a loaded machine steps per CPU second is the steadier measure
    cpu = max(time.process_time() - cpu_start, 1e-9)
    return {"steps_per_second": timed / (time.perf_counter() - loop_start), "steps_per_cpu_second": timed / cpu,
            "seconds": time.perf_counter() - start, "losses": losses, "version": version}  # fmt: skip


def main() -> None:
    framework, model, path, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with np.load(path) as npz:  # read every array once: NpzFile[key] decompresses the whole array on each access
        data = {k: npz[k] for k in npz.files}
    run = run_torch if framework.startswith("torch") else run_tensor_lib
    result = run(framework, model, data, steps)
    result["nan"] = any(math.isnan(v) for v in result["losses"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
