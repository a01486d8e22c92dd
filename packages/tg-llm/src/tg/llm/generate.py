"""Text generation: prefill and decode through two TinyJits over the model's step, sampling on the host.

The position of a step is a bound `Variable` (`start_pos`), so one capture of the decode step (one token) serves
every position, and one capture of the prefill step (a chunk of `chunk` tokens, the tail padded; `last`, another
Variable, picks the position whose logits are returned) serves every prompt length. The KV cache keeps what it
holds between calls: a new prompt that starts with the tokens already cached (the next turn of a chat) only feeds
the new tokens.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from tg.ir import UOp
from tg.llm.model import Transformer
from tg.tensor import Tensor, TinyJit, Variable


class ContextOverflowError(ValueError):
    """A prompt does not fit into the model's context window."""


@dataclass
class SamplingParams:
    """How the next token is picked: `temperature` 0 is greedy (argmax); otherwise softmax(logits / temperature)
    restricted to the `top_k` most likely tokens (0: all) and to the smallest set whose probability reaches `top_p`,
    drawn from a generator seeded with `seed` (None: fresh entropy)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0):
            raise ValueError(f"temperature must be a number >= 0, got {self.temperature!r}")
        if not (isinstance(self.top_k, int) and self.top_k >= 0):
            raise ValueError(f"top_k must be an integer >= 0, got {self.top_k!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")


def sample(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """One token id drawn from `logits` (vocab,) as `params` say."""
    if params.temperature == 0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / params.temperature
    order = np.argsort(-scaled, kind="stable")
    if params.top_k:
        order = order[: params.top_k]
    probs = np.exp(scaled[order] - scaled[order[0]])
    probs /= probs.sum()
    if params.top_p < 1:
        keep = int(np.searchsorted(np.cumsum(probs), params.top_p) + 1)
        order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
    return int(order[rng.choice(len(order), p=probs)])


@dataclass
class GenerationStats:
    """Token counts and wall times of the last `generate` call."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    finish_reason: str = ""
    token_times: list[float] = field(default_factory=list)


class Generator:
    """Runs a Transformer over prompts and sampled tokens, keeping its KV cache between calls."""

    def __init__(self, model: Transformer, jit: bool = True) -> None:
        self.model = model
        self.max_context = model.max_context
        self.chunk = model.chunk
        self.pos = Variable("start_pos", 0, self.max_context - 1)
        self.last = Variable("last", 0, self.chunk - 1)
        self.cached: list[int] = []  # tokens whose keys/values the cache holds, in order
        self.stats = GenerationStats()

        def prefill_step(rows: Tensor, start_pos: UOp, last: UOp) -> Tensor:
            return model(rows, start_pos, last).realize()

        def decode_step(rows: Tensor, start_pos: UOp) -> Tensor:
            return model(rows, start_pos, 0).realize()

        self._prefill = TinyJit(prefill_step) if jit else prefill_step
        self._decode = TinyJit(decode_step) if jit else decode_step

    def reset(self) -> None:
        """Forget the cached tokens (the next prompt is fed from position 0)."""
        self.cached = []

    def _feed(self, tokens: Sequence[int], start: int) -> np.ndarray:
        """Feed `tokens` at positions start.. and return the logits after the last one."""
        logits: np.ndarray | None = None
        pos = start
        while pos < start + len(tokens):
            piece = tokens[pos - start : pos - start + self.chunk]
            if len(piece) == 1:
                out = self._decode(self.model.embedding_input(list(piece)), self.pos.bind(pos))
            else:
                rows = self.model.embedding_input(list(piece), pad_to=self.chunk)
                out = self._prefill(rows, self.pos.bind(pos), self.last.bind(len(piece) - 1))
            logits = out.numpy()
            pos += len(piece)
        assert logits is not None
        return logits

    def prefill(self, tokens: Sequence[int]) -> np.ndarray:
        """Make the cache hold exactly `tokens` (reusing the longest cached prefix) and return the next-token
        logits (vocab,) float32."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise ValueError("the prompt is empty: at least one token is needed")
        if len(tokens) >= self.max_context:
            raise ContextOverflowError(
                f"the prompt has {len(tokens)} tokens; the context holds {self.max_context} (prompt + at least one "
                "generated token)"
            )
        vocab = self.model.config.vocab_size
        bad = [t for t in tokens if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary of {vocab}")
        common = 0
        for a, b in zip(self.cached, tokens, strict=False):
            if a != b:
                break
            common += 1
        common = min(common, len(tokens) - 1)  # the last prompt token is always fed: its logits are needed
        self.stats.cached_tokens = common
        logits = self._feed(tokens[common:], common)
        self.cached = tokens
        return logits

    def generate(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        params: SamplingParams | None = None,
        stop_ids: Sequence[int] = (),
    ) -> Iterator[int]:
        """Yield up to `max_tokens` sampled token ids after `prompt`; stops after a token of `stop_ids` (not
        yielded) or when the context is full. `self.stats` tells counts, times and why it stopped."""
        if not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
        params = params or SamplingParams()
        rng = np.random.default_rng(params.seed)
        stats = self.stats = GenerationStats(prompt_tokens=len(prompt))
        start = time.perf_counter()
        logits = self.prefill(prompt)
        stats.prefill_seconds = time.perf_counter() - start
        stats.finish_reason = "length"
        decode_start = time.perf_counter()
        stops = set(stop_ids)
        for i in range(max_tokens):
            token = sample(logits, params, rng)
            if token in stops:
                stats.finish_reason = "stop"
                break
            stats.generated_tokens += 1
            stats.token_times.append(time.perf_counter() - decode_start)
            yield token
            if i == max_tokens - 1:
                break
            if len(self.cached) >= self.max_context:
                break
            logits = self._feed([token], len(self.cached))
            self.cached.append(token)
        stats.decode_seconds = time.perf_counter() - decode_start
