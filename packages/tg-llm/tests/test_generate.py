"""Generation: sampling rules, the JIT'd prefill/decode against eager steps, the KV cache reused across turns."""

from __future__ import annotations

import numpy as np
import pytest

from tg.llm import LLM, ContextOverflowError, Generator, SamplingParams, Transformer, open_model_file, sample


def test_sampling_rules() -> None:
    logits = np.array([0.0, 3.0, 1.0, 2.9, -5.0], np.float32)
    rng = np.random.default_rng(0)
    assert sample(logits, SamplingParams(), rng) == 1  # greedy
    assert all(sample(logits, SamplingParams(temperature=5.0, top_k=1), rng) == 1 for _ in range(20))
    picks = {sample(logits, SamplingParams(temperature=1.0, top_k=2), rng) for _ in range(200)}
    assert picks == {1, 3}
    picks = {sample(logits, SamplingParams(temperature=1.0, top_p=0.4), rng) for _ in range(200)}
    assert picks == {1}  # token 1 alone holds 48% of the mass
    picks = {sample(logits, SamplingParams(temperature=1.0, top_p=0.5), rng) for _ in range(200)}
    assert picks == {1, 3}
    draws = [sample(logits, SamplingParams(temperature=1.0), np.random.default_rng(7)) for _ in range(3)]
    assert len(set(draws)) == 1  # same seed, same token
    many = [sample(logits, SamplingParams(temperature=1.0), rng) for _ in range(2000)]
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(np.bincount(many, minlength=5) / 2000, p, atol=0.04)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"temperature": -1}, "temperature"),
        ({"top_k": -2}, "top_k"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_bad_sampling_params(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_jit_steps_equal_eager_steps_and_cache_reuse(tiny_llm: LLM) -> None:
    # the shared tiny model's file and shapes: the kernels come from the compile cache
    path, ctx = tiny_llm.file.path, tiny_llm.max_context
    prompt = [(i * 37 + 5) % 800 for i in range(45)]
    eager = Generator(Transformer(open_model_file(path), max_context=ctx), jit=False)
    jitted = Generator(Transformer(open_model_file(path), max_context=ctx))
    first = list(eager.generate(prompt, 6))
    assert list(jitted.generate(prompt, 6)) == first  # a chunk of 32, a padded chunk of 13, then single tokens
    # a second turn extends the cached tokens: only the new ones are fed, the result equals a fresh run
    turn2 = [*prompt, *first, 42, 43]
    cont = list(jitted.generate(turn2, 5))
    assert jitted.stats.cached_tokens == len(prompt) + len(first) - 1  # the last generated token was never fed
    eager.reset()
    assert cont == list(eager.generate(turn2, 5))
    # sampling with a seed is reproducible
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=123)
    jitted.reset()
    a = list(jitted.generate(prompt, 5, params))
    jitted.reset()
    assert list(jitted.generate(prompt, 5, params)) == a


def test_context_limits(tiny_llm: LLM) -> None:
    gen = tiny_llm.generator
    with pytest.raises(ContextOverflowError, match="160"):
        list(gen.generate(list(range(1, 200)), 1))
    with pytest.raises(ValueError, match="empty"):
        list(gen.generate([], 1))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        list(gen.generate([10**6], 1))
    out = list(gen.generate(list(range(1, 150)), 50))  # stops when the cache is full
    assert len(out) <= 160 - 149 + 1 and gen.stats.finish_reason in ("length", "stop")


def test_chat_streams_text_and_stops(tiny_llm: LLM) -> None:
    messages = [{"role": "user", "content": "Hi 🙂"}]
    ids = tiny_llm.encode_chat(messages)
    tok = tiny_llm.tokenizer
    assert tok.decode(ids).startswith("<|im_start|>user\nHi 🙂<|im_end|>\n<|im_start|>assistant\n")
    pieces = list(tiny_llm.chat(messages, max_tokens=8))
    assert tiny_llm.stats.generated_tokens <= 8 and all(isinstance(p, str) for p in pieces)
    assert "".join(pieces) == tok.decode(tok.encode("".join(pieces)))
