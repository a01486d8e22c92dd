"""The Llama 3 / Qwen 3 decoder: RMSNorm, grouped-query attention with RoPE and a KV cache, SwiGLU feed-forward.

One forward step takes a chunk of token embeddings' stored bytes and the position of its first token
(`start_pos`), writes the chunk's keys and values into the cache at that position, attends causally over the
cache up to it, and returns the logits of one position of the chunk (`last`). `start_pos` and `last` may be bound
`Variable`s: then a `TinyJit` of the step serves every position with one capture (see `tg.llm.generate`).
Everything is computed in float32 from weights kept in their file format (`tg.llm.quant`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from tg.ir import UOp, dtypes
from tg.llm.quant import GGML_TYPES, NATIVE_DTYPES, Activations, Weight, dequantize, linear
from tg.llm.weights import GGUFModelFile, default_device, rope_tables
from tg.tensor import Tensor, Variable


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (float32)."""
    return x * (x.square().mean(-1, keepdim=True) + eps).rsqrt() * weight


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    """Rotate pairs of x (T, heads, head_dim) by the angles of cos/sin (T, head_dim/2): adjacent pairs
    (x[2i], x[2i+1]) when `interleaved` (ggml's normal mode, Llama files), else the halves (x[i], x[i + d/2])."""
    T, heads, hd = x.shape
    cos, sin = cos.reshape(T, 1, hd // 2, 1), sin.reshape(T, 1, hd // 2, 1)
    if interleaved:
        pairs = x.reshape(T, heads, hd // 2, 2)
        a, b = pairs[..., 0:1], pairs[..., 1:2]
        return Tensor.cat(a * cos - b * sin, a * sin + b * cos, dim=-1).reshape(T, heads, hd)
    halves = x.reshape(T, heads, 2, hd // 2, 1)
    a, b = halves[:, :, 0], halves[:, :, 1]
    return Tensor.cat(a * cos - b * sin, a * sin + b * cos, dim=-2).reshape(T, heads, hd)


@dataclass
class Layer:
    """One decoder block's weights and its KV cache (2, kv heads, positions, head_dim)."""

    attn_norm: Tensor
    wq: Weight
    wk: Weight
    wv: Weight
    wo: Weight
    q_norm: Tensor | None
    k_norm: Tensor | None
    ffn_norm: Tensor
    w_gate: Weight
    w_up: Weight
    w_down: Weight
    cache: Tensor


class Transformer:
    """A GGUF Llama 3 / Qwen 3 model on a device, with a KV cache of `max_context` positions."""

    def __init__(
        self, file: GGUFModelFile, max_context: int | None = None, device: str | None = None, chunk: int = 32
    ) -> None:
        cfg = file.config
        self.file, self.config = file, cfg
        self.device = device or default_device()
        self.max_context = min(max_context or cfg.context_length, cfg.context_length)
        if self.max_context < 2:
            raise ValueError(f"max_context must be at least 2, got {self.max_context}")
        self.chunk = chunk
        dev = self.device
        q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        total = file.weight_bytes()
        with tqdm(total=total, unit="B", unit_scale=True, desc="loading weights", disable=total < 2**26) as bar:
            self.layers = []
            for i in range(cfg.n_layers):
                p = f"blk.{i}."
                self.layers.append(
                    Layer(
                        attn_norm=file.vector(p + "attn_norm.weight", cfg.dim, dev),
                        wq=file.matrix(p + "attn_q.weight", q_dim, cfg.dim, dev, bar),
                        wk=file.matrix(p + "attn_k.weight", kv_dim, cfg.dim, dev, bar),
                        wv=file.matrix(p + "attn_v.weight", kv_dim, cfg.dim, dev, bar),
                        wo=file.matrix(p + "attn_output.weight", cfg.dim, q_dim, dev, bar),
                        q_norm=file.vector(p + "attn_q_norm.weight", cfg.head_dim, dev) if cfg.qk_norm else None,
                        k_norm=file.vector(p + "attn_k_norm.weight", cfg.head_dim, dev) if cfg.qk_norm else None,
                        ffn_norm=file.vector(p + "ffn_norm.weight", cfg.dim, dev),
                        w_gate=file.matrix(p + "ffn_gate.weight", cfg.ffn_dim, cfg.dim, dev, bar),
                        w_up=file.matrix(p + "ffn_up.weight", cfg.ffn_dim, cfg.dim, dev, bar),
                        w_down=file.matrix(p + "ffn_down.weight", cfg.dim, cfg.ffn_dim, dev, bar),
                        cache=Tensor.zeros(2, cfg.n_kv_heads, self.max_context + chunk, cfg.head_dim, device=dev)
                        .contiguous()
                        .realize(),
                    )
                )
            self.output_norm = file.vector("output_norm.weight", cfg.dim, dev)
            out_name = "output.weight" if file.has("output.weight") else "token_embd.weight"
            self.output = file.matrix(out_name, cfg.vocab_size, cfg.dim, dev, bar)
        factors = None
        if file.has("rope_freqs.weight"):
            factors = file.vector("rope_freqs.weight", cfg.head_dim // 2, "CPU").numpy()
        cos, sin = rope_tables(cfg, self.max_context + chunk, factors)
        self.cos, self.sin = Tensor(cos, device=dev).realize(), Tensor(sin, device=dev).realize()
        self.embedding_type = file.infos["token_embd.weight"].ggml_type

    def embedding_input(self, token_ids: list[int], pad_to: int | None = None) -> Tensor:
        """The stored bytes of the tokens' embedding rows as a uint8 tensor on the device (rows past the tokens,
        up to `pad_to`, repeat the last token)."""
        ids = list(token_ids)
        if pad_to is not None and len(ids) < pad_to:
            ids += [ids[-1]] * (pad_to - len(ids))
        rows, _ = self.file.embedding_rows("token_embd.weight", ids)
        return Tensor(rows, device=self.device)

    def embed(self, rows: Tensor) -> Tensor:
        """Dequantise stored embedding rows (T, row bytes) to float32 (T, dim)."""
        T = rows.shape[0]
        if self.embedding_type in NATIVE_DTYPES:
            return rows.bitcast(NATIVE_DTYPES[self.embedding_type]).cast(dtypes.float32).reshape(T, self.config.dim)
        _, elems, size = GGML_TYPES[self.embedding_type]
        return dequantize(rows.reshape(T, self.config.dim // elems, size), self.embedding_type)

    def attention(self, layer: Layer, x: Tensor, start_pos: Any, T: int) -> Tensor:
        cfg = self.config
        H, KV, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        shared = Activations(x)  # quantised once for the three matrices (Q8_0's int8 path)
        q = linear(shared, layer.wq).reshape(T, H, hd)
        k = linear(shared, layer.wk).reshape(T, KV, hd)
        v = linear(shared, layer.wv).reshape(T, KV, hd)
        if layer.q_norm is not None and layer.k_norm is not None:
            q, k = rms_norm(q, layer.q_norm, cfg.norm_eps), rms_norm(k, layer.k_norm, cfg.norm_eps)
        cos, sin = self.cos[start_pos : start_pos + T], self.sin[start_pos : start_pos + T]
        q, k = apply_rope(q, cos, sin, cfg.rope_interleaved), apply_rope(k, cos, sin, cfg.rope_interleaved)
        # the chunk's keys/values are stored first, then copied into the cache: the scheduler's slice-assign kernel
        # writes only these T positions (tg-codegen's W1 rule), whatever max_context is
        new = Tensor.stack(k, v).permute(0, 2, 1, 3).contiguous()  # (2, KV, T, hd)
        layer.cache[:, :, start_pos : start_pos + T].assign(new)
        S = start_pos + T
        keys, values = layer.cache[0, :, :S], layer.cache[1, :, :S]  # (KV, S, hd)
        rep = H // KV
        qg = q.reshape(T, KV, rep, hd).permute(1, 2, 0, 3)  # (KV, rep, T, hd): query head h uses kv head h // rep
        scores = (qg @ keys.reshape(KV, 1, S, hd).transpose(-1, -2)) * (1.0 / float(np.sqrt(hd)))
        key_pos = Tensor.arange(S).reshape(1, S)
        query_pos = (Tensor.arange(T) + start_pos).reshape(T, 1)
        scores = (key_pos <= query_pos).where(scores, float("-inf"))
        out = scores.softmax(-1) @ values.reshape(KV, 1, S, hd)  # (KV, rep, T, hd)
        return linear(out.permute(2, 0, 1, 3).reshape(T, H * hd), layer.wo)

    def __call__(self, rows: Tensor, start_pos: Any, last: Any = 0) -> Tensor:
        """Logits (vocab,) of position `last` of the chunk whose embedding bytes are `rows` (T, row bytes), the
        chunk starting at `start_pos`. The chunk's keys/values go into the cache."""
        cfg = self.config
        T = rows.shape[0]
        x = self.embed(rows)
        for layer in self.layers:
            x = x + self.attention(layer, rms_norm(x, layer.attn_norm, cfg.norm_eps), start_pos, T)
            h = Activations(rms_norm(x, layer.ffn_norm, cfg.norm_eps))
            x = x + linear(linear(h, layer.w_gate).silu() * linear(h, layer.w_up), layer.w_down)
        x = rms_norm(x[last : last + 1], self.output_norm, cfg.norm_eps)
        return linear(x, self.output).reshape(cfg.vocab_size)

    def weights_nbytes(self) -> int:
        """Bytes of weights on the device (what one decode step reads)."""
        ws: list[Weight] = [self.output]
        for layer in self.layers:
            ws += [layer.wq, layer.wk, layer.wv, layer.wo, layer.w_gate, layer.w_up, layer.w_down]
        return sum(w.nbytes for w in ws)


def position_variable(max_context: int) -> UOp:
    """The symbolic position of a chunk's first token."""
    return Variable("start_pos", 0, max_context - 1)
