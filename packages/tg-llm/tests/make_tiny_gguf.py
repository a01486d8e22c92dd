"""Write tiny random Llama 3 and Qwen 3 GGUF files for tg-llm's tests and benchmark (needs the `gguf` package).

    python packages/tg-llm/tests/make_tiny_gguf.py OUTDIR            # every arch x weight type of the tests
    python packages/tg-llm/tests/make_tiny_gguf.py OUTDIR --bench    # a random 0.37B Llama in F16 and Q8_0

The vocabulary is a real byte-level BPE: the 256 byte symbols, merges learned here from a small multilingual
corpus with the family's pre-tokenizer, then the family's special tokens (control type), so `transformers` and tg
both build a working tokenizer from the file. Weights are random: F32/F16/BF16 written as they are, Q8_0
quantized by `gguf.quants`, Q4_K/Q6_K random blocks with finite, small float16 scales (`gguf` has no quantizer
for them; its dequantizer is the reference). Llama files carry `rope_freqs.weight` (llama.cpp's form of Llama 3.1's
RoPE scaling) and an untied `output.weight`; Qwen 3 files tie the output to the embedding and have q/k norms.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CORPUS = (
    """
The quick brown fox jumps over the lazy dog. It's a test, isn't it? We'll see what they've done.
Hello, world! Language models read tokens: numbers like 12345, 3.14159 and 2026 are split into digits.
def forward(self, x):\n    return self.linear(x) + 1\n\nfor i in range(10):\n    print(i, i ** 2)
Der schnelle braune Fuchs springt über den faulen Hund. Grüße aus München! Straße, Mädchen, Übung.
Le renard brun rapide saute par-dessus le chien paresseux. Où est la bibliothèque ? Très bien, merci.
Быстрая коричневая лиса перепрыгивает через ленивую собаку. Привет, мир! Как дела?
敏捷的棕色狐狸跳过了懒狗。你好，世界！今天天气很好。我们一起学习机器学习。
素早い茶色の狐がのろまな犬を飛び越える。こんにちは世界！東京は晴れです。
الثعلب البني السريع يقفز فوق الكلب الكسول. مرحبا بالعالم!
Emoji: 🙂 😀 🚀 🦊 👍🏽 ❤️ 🇩🇪 and symbols — “quotes”, ‘single’, … © ® ™ € £ ¥.
Tabs\tand  double  spaces,\r\nwindows line endings, and trailing spaces   \n
"""
    * 3
)

LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
LLAMA_SPECIALS += [f"<|reserved_special_token_{i}|>" for i in range(3)]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

LLAMA_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
QWEN_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def learn_bpe(text: str, n_merges: int, pre: str) -> tuple[list[str], list[str]]:
    """(tokens, merges): the 256 byte symbols then one token per merge, learned greedily (most frequent pair,
    ties broken by the pair itself) over the pre-tokens of `text`."""
    from tg.llm.tokenizer import byte_alphabet, merge_pair, pre_tokenize

    alphabet = byte_alphabet()
    words = collections.Counter(tuple(alphabet[b] for b in piece.encode()) for piece in pre_tokenize(text, pre))
    tokens = [alphabet[b] for b in range(256)]
    merges: list[str] = []
    for _ in range(n_merges):
        pairs: collections.Counter[tuple[str, str]] = collections.Counter()
        for word, count in words.items():
            for pair in itertools.pairwise(word):
                pairs[pair] += count
        if not pairs:
            break
        (left, right), _count = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        merges.append(f"{left} {right}")
        tokens.append(left + right)
        new_words: collections.Counter[tuple[str, ...]] = collections.Counter()
        for word, count in words.items():
            new_words[tuple(merge_pair(word, left, right))] += count
        words = new_words
    return tokens, merges


@dataclass
class TinyConfig:
    """Shape of a random model (defaults: the tests' tiny Llama)."""

    arch: str = "llama"
    dim: int = 256
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 64
    ffn: int = 512
    n_merges: int = 600
    context: int = 512
    rope_base: float = 500000.0
    eps: float = 1e-5
    rope_scaling: dict[str, float] = field(
        default_factory=lambda: {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original": 64}
    )


def qwen_config(**kw: object) -> TinyConfig:
    """The tests' tiny Qwen 3 (head_dim 128: transformers reads no head size from a qwen3 GGUF and assumes 128)."""
    base = dict(arch="qwen3", head_dim=128, rope_base=1000000.0, eps=1e-6, rope_scaling={})
    base.update(kw)
    return TinyConfig(**base)  # type: ignore[arg-type]


def llama3_rope_factors(head_dim: int, base: float, scaling: dict[str, float]) -> np.ndarray:
    """llama.cpp's `rope_freqs`: per frequency, the divisor Llama 3.1's scaling applies to it."""
    factor, low, high, orig = (
        scaling["factor"],
        scaling["low_freq_factor"],
        scaling["high_freq_factor"],
        scaling["original"],
    )
    freqs = base ** -(np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def random_k_blocks(rng: np.random.Generator, n_blocks: int, qtype: str) -> np.ndarray:
    """Random Q4_K / Q6_K blocks whose float16 scales keep the weights within about +-0.05, centred on 0."""
    if qtype == "Q4_K":
        # every sub-block's min equals its scale and dmin = 7.5 d: values (d q - dmin) sc centred on 0
        blocks = rng.integers(0, 256, size=(n_blocks, 144), dtype=np.uint8)
        blocks[:, 8:12] = blocks[:, 4:8]
        nibble = rng.integers(0, 16, size=(n_blocks, 4), dtype=np.uint8)
        blocks[:, 12:16] = nibble | (nibble << 4)
        d = rng.uniform(0.0005, 0.001, n_blocks).astype(np.float16)
        dmin = (d.astype(np.float32) * 7.5).astype(np.float16)
        blocks[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
        blocks[:, 2:4] = dmin.view(np.uint8).reshape(-1, 2)
        return blocks
    blocks = rng.integers(0, 256, size=(n_blocks, 210), dtype=np.uint8)
    blocks[:, 192:208] = rng.integers(-40, 41, size=(n_blocks, 16), dtype=np.int8).view(np.uint8)
    d = rng.uniform(0.00002, 0.00005, n_blocks).astype(np.float16)
    blocks[:, 208:210] = d.view(np.uint8).reshape(-1, 2)
    return blocks


def write_model(
    path: Path,
    cfg: TinyConfig,
    wtype: str,
    seed: int = 0,
    vocab: tuple[list[str], list[str]] | None = None,
    quiet: bool = True,
) -> Path:
    """Write one random model to `path` with every weight matrix in `wtype` (norms stay F32)."""
    import gguf

    rng = np.random.default_rng(seed)
    llama = cfg.arch == "llama"
    pre = "llama-bpe" if llama else "qwen2"
    tokens, merges = vocab if vocab is not None else learn_bpe(CORPUS, cfg.n_merges, pre)
    specials = LLAMA_SPECIALS if llama else QWEN_SPECIALS
    tokens = tokens + specials
    types = [1] * (len(tokens) - len(specials)) + [3] * len(specials)
    vocab_size = len(tokens)

    w = gguf.GGUFWriter(str(path), cfg.arch)
    w.add_name(f"tiny-random-{cfg.arch}")
    w.add_context_length(cfg.context)
    w.add_embedding_length(cfg.dim)
    w.add_block_count(cfg.n_layers)
    w.add_feed_forward_length(cfg.ffn)
    w.add_head_count(cfg.n_heads)
    w.add_head_count_kv(cfg.n_kv_heads)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_layer_norm_rms_eps(cfg.eps)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    if llama:
        w.add_rope_dimension_count(cfg.head_dim)
    w.add_vocab_size(vocab_size)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if llama:
        w.add_bos_token_id(tokens.index("<|begin_of_text|>"))
        w.add_eos_token_id(tokens.index("<|eot_id|>"))
        w.add_add_bos_token(True)
        w.add_chat_template(LLAMA_TEMPLATE)
    else:
        w.add_bos_token_id(tokens.index("<|endoftext|>"))
        w.add_eos_token_id(tokens.index("<|im_end|>"))
        w.add_pad_token_id(tokens.index("<|endoftext|>"))
        w.add_add_bos_token(False)
        w.add_chat_template(QWEN_TEMPLATE)

    qt = gguf.GGMLQuantizationType

    def matrix(name: str, rows: int, cols: int, scale: float) -> None:
        if wtype in ("Q4_K", "Q6_K"):
            blocks = random_k_blocks(rng, rows * cols // 256, wtype)
            w.add_tensor(name, blocks.reshape(rows, -1), raw_dtype=qt[wtype])
            return
        data = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        if wtype == "F32":
            w.add_tensor(name, data)
        elif wtype == "F16":
            w.add_tensor(name, data.astype(np.float16))
        else:
            q = gguf.quants.quantize(data, qt[wtype])
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt[wtype])

    def vector(name: str, n: int) -> None:
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    matrix("token_embd.weight", vocab_size, cfg.dim, 0.02)
    if llama and cfg.rope_scaling:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(cfg.head_dim, cfg.rope_base, cfg.rope_scaling))
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        vector(p + "attn_norm.weight", cfg.dim)
        matrix(p + "attn_q.weight", q_dim, cfg.dim, cfg.dim**-0.5)
        matrix(p + "attn_k.weight", kv_dim, cfg.dim, cfg.dim**-0.5)
        matrix(p + "attn_v.weight", kv_dim, cfg.dim, cfg.dim**-0.5)
        if not llama:
            vector(p + "attn_q_norm.weight", cfg.head_dim)
            vector(p + "attn_k_norm.weight", cfg.head_dim)
        matrix(p + "attn_output.weight", cfg.dim, q_dim, q_dim**-0.5)
        vector(p + "ffn_norm.weight", cfg.dim)
        matrix(p + "ffn_gate.weight", cfg.ffn, cfg.dim, cfg.dim**-0.5)
        matrix(p + "ffn_up.weight", cfg.ffn, cfg.dim, cfg.dim**-0.5)
        matrix(p + "ffn_down.weight", cfg.dim, cfg.ffn, cfg.ffn**-0.5)
    vector("output_norm.weight", cfg.dim)
    if llama:
        matrix("output.weight", vocab_size, cfg.dim, cfg.dim**-0.5)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=not quiet)
    w.close()
    return path


WEIGHT_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_K", "Q6_K")


def write_all(outdir: Path) -> dict[tuple[str, str], Path]:
    """Every (arch, weight type) the tests use: `{(arch, wtype): path}`."""
    outdir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for arch, cfg in (("llama", TinyConfig()), ("qwen3", qwen_config())):
        vocab = learn_bpe(CORPUS, cfg.n_merges, "llama-bpe" if arch == "llama" else "qwen2")
        for wtype in WEIGHT_TYPES:
            paths[(arch, wtype)] = write_model(outdir / f"tiny-{arch}-{wtype.lower()}.gguf", cfg, wtype, vocab=vocab)
    return paths


def bench_config() -> TinyConfig:
    """A random Llama of 0.37B parameters: Qwen2.5-0.5B's layer shapes in Llama layout, with the tests' small vocabulary
    (its 0.5B count includes a 136M-parameter embedding this file does not have)."""
    return TinyConfig(dim=1024, n_layers=24, n_heads=16, n_kv_heads=4, head_dim=64, ffn=4096, n_merges=2000,
                      context=2048)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--bench", action="store_true", help="write the benchmark's ~0.5B Llama (F16 and Q8_0)")
    args = parser.parse_args(argv)
    if args.bench:
        args.outdir.mkdir(parents=True, exist_ok=True)
        for wtype in ("F16", "Q8_0"):
            print(write_model(args.outdir / f"bench-llama-{wtype.lower()}.gguf", bench_config(), wtype, quiet=False))
    else:
        for path in write_all(args.outdir).values():
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
