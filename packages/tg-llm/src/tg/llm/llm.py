"""`LLM`: a GGUF model ready to complete text and chat (tokenizer + model + generator + chat template)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tg.llm.chat import STOP_TOKENS, format_chat
from tg.llm.generate import GenerationStats, Generator, SamplingParams
from tg.llm.model import Transformer
from tg.llm.tokenizer import Tokenizer
from tg.llm.weights import open_model_file


@dataclass
class Completion:
    """The text of a finished request and its token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str


class LLM:
    """A loaded model: `complete(prompt)` and `chat(messages)` stream text pieces; one request at a time (a lock
    serialises callers, since the KV cache is shared)."""

    def __init__(self, path: str | os.PathLike[str], max_context: int | None = None, device: str | None = None,
                 jit: bool = True, name: str | None = None) -> None:  # fmt: skip
        self.file = open_model_file(path)
        self.config = self.file.config
        self.name = name or os.path.splitext(os.path.basename(os.fspath(path)))[0]
        self.tokenizer = Tokenizer.from_gguf(self.file.kv)
        if self.tokenizer.vocab_size != self.config.vocab_size:
            raise ValueError(
                f"the vocabulary has {self.tokenizer.vocab_size} tokens but token_embd.weight has "
                f"{self.config.vocab_size} rows"
            )
        default_context = min(self.config.context_length, 4096)
        self.model = Transformer(self.file, max_context or default_context, device)
        self.generator = Generator(self.model, jit=jit)
        stop = [self.tokenizer.token_id(t) for t in STOP_TOKENS.get(self.config.arch, ())] + [self.tokenizer.eos_id]
        self.stop_ids: list[int] = sorted({i for i in stop if i is not None})
        self.lock = threading.Lock()

    @property
    def max_context(self) -> int:
        """Positions the KV cache holds (prompt + generated tokens)."""
        return self.model.max_context

    @property
    def stats(self) -> GenerationStats:
        """Counts and times of the last request."""
        return self.generator.stats

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of a plain-text prompt (BOS first where the model wants it)."""
        return self.tokenizer.encode(prompt, add_special=True)

    def encode_chat(self, messages: Any) -> list[int]:
        """Token ids of a conversation in the model's chat format, ending with the assistant's header."""
        return self.tokenizer.encode(format_chat(self.config.arch, messages), parse_special=True)

    def stream_tokens(self, prompt_ids: Sequence[int], max_tokens: int, params: SamplingParams | None = None,
                      stop: bool = True) -> Iterator[str]:  # fmt: skip
        """Text pieces of the generated tokens (each piece complete UTF-8)."""
        decoder = self.tokenizer.stream_decoder()
        with self.lock:
            for token in self.generator.generate(prompt_ids, max_tokens, params, self.stop_ids if stop else ()):
                piece = decoder.add(token)
                if piece:
                    yield piece
            tail = decoder.flush()
            if tail:
                yield tail

    def complete(self, prompt: str, max_tokens: int = 128, params: SamplingParams | None = None) -> Iterator[str]:
        """Stream the continuation of a plain-text prompt."""
        return self.stream_tokens(self.encode_prompt(prompt), max_tokens, params)

    def chat(self, messages: Any, max_tokens: int = 512, params: SamplingParams | None = None) -> Iterator[str]:
        """Stream the assistant's reply to a conversation."""
        return self.stream_tokens(self.encode_chat(messages), max_tokens, params)

    def run(self, pieces: Iterator[str], prompt_tokens: int | None = None) -> Completion:
        """Drain a stream into a Completion."""
        text = "".join(pieces)
        stats = self.stats
        return Completion(text, prompt_tokens or stats.prompt_tokens, stats.generated_tokens, stats.finish_reason)
