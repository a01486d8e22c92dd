"""Byte-level BPE tokenizer built from a GGUF vocabulary (`tokenizer.ggml.*`), as Llama 3 and Qwen use it.

Text is split into special tokens and ordinary text; ordinary text is cut into pre-tokens by the family's regular
expression (`tokenizer.ggml.pre`: `llama-bpe` splits digits in runs of up to 3, `qwen2` one by one), each
pre-token's UTF-8 bytes are spelled in GPT-2's byte alphabet and merged pair by pair, lowest merge rank first.
Python's `re` has no `\\p{L}`: the letter, number and whitespace classes are built once from `unicodedata`.
"""

from __future__ import annotations

import codecs
import functools
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

# GGUF token types (llama.cpp's llama_token_type)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

# Unicode White_Space (Python's str.isspace also counts \x1c-\x1f, which the reference tokenizers do not)
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
CONTRACTIONS = "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"


@functools.cache
def _category_class(prefix: str) -> str:
    """A regex character-class body (no brackets) of every code point whose Unicode category starts with `prefix`."""
    ranges: list[tuple[int, int]] = []
    for cp in range(sys.maxunicode + 1):
        if unicodedata.category(chr(cp)).startswith(prefix):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


@functools.cache
def split_pattern(pre: str) -> re.Pattern[str]:
    """The pre-tokenizer regex of a GGUF `tokenizer.ggml.pre` name (Llama 3's unless it is a Qwen one)."""
    letters, numbers, space = _category_class("L"), _category_class("N"), WHITESPACE
    digits = "{1}" if pre in QWEN_PRE_TOKENIZERS else "{1,3}"
    pattern = (
        f"{CONTRACTIONS}|[^\\r\\n{letters}{numbers}]?[{letters}]+|[{numbers}]{digits}"
        f"| ?[^{space}{letters}{numbers}]+[\\r\\n]*|[{space}]*[\\r\\n]+|[{space}]+(?![^{space}])|[{space}]+"
    )
    return re.compile(pattern)


LLAMA_PRE_TOKENIZERS = {"llama-bpe", "llama3", "llama-v3", "default", "smaug-bpe", "dbrx"}
QWEN_PRE_TOKENIZERS = {"qwen2", "deepseek-r1-qwen", "qwen35"}


def pre_tokenize(text: str, pre: str = "llama-bpe") -> list[str]:
    """Cut ordinary text (no special tokens) into the pieces BPE merges within."""
    return split_pattern(pre).findall(text)


def merge_pair(word: Sequence[str], left: str, right: str) -> list[str]:
    """`word` (a sequence of BPE symbols) with every occurrence of the pair (`left`, `right`) merged into one
    symbol, left to right (one BPE merge step)."""
    merged: list[str] = []
    i = 0
    while i < len(word):
        if i < len(word) - 1 and word[i] == left and word[i + 1] == right:
            merged.append(left + right)
            i += 2
        else:
            merged.append(word[i])
            i += 1
    return merged


@functools.cache
def byte_alphabet() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used to spell byte-level BPE tokens."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


class TokenizerError(ValueError):
    """The GGUF vocabulary cannot be used (missing keys, unsupported tokenizer model)."""


class Tokenizer:
    """Encode text to token ids and back with a GGUF file's byte-level BPE vocabulary."""

    def __init__(
        self,
        tokens: Sequence[str],
        merges: Sequence[str],
        token_types: Sequence[int] | None = None,
        pre: str = "llama-bpe",
        bos_id: int | None = None,
        eos_id: int | None = None,
        add_bos: bool = False,
    ) -> None:
        self.tokens = list(tokens)
        self.vocab = {tok: i for i, tok in enumerate(self.tokens)}
        self.ranks = {}
        for rank, merge in enumerate(merges):
            left, sep, right = merge.partition(" ")
            if not sep:
                raise TokenizerError(f"merge {rank} {merge!r} is not two tokens separated by a space")
            self.ranks[(left, right)] = rank
        types = list(token_types) if token_types is not None else [TOKEN_NORMAL] * len(self.tokens)
        if len(types) != len(self.tokens):
            raise TokenizerError(f"{len(types)} token types for {len(self.tokens)} tokens")
        self.token_types = types
        self.pre = pre
        self.bos_id, self.eos_id, self.add_bos = bos_id, eos_id, add_bos
        # control and user-defined tokens are matched whole in the text, longest first
        self.special = {tok: i for i, tok in enumerate(self.tokens) if types[i] in (TOKEN_CONTROL, TOKEN_USER_DEFINED)}
        specials = sorted(self.special, key=len, reverse=True)
        self._special_re = re.compile("|".join(re.escape(s) for s in specials)) if specials else None
        self._byte_of = {ch: b for b, ch in byte_alphabet().items()}
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_gguf(cls, kv: dict[str, Any]) -> Tokenizer:
        """Build the tokenizer a GGUF file's metadata describes (`tokenizer.ggml.model` must be `gpt2`)."""
        model = kv.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise TokenizerError(
                f"tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2': Llama 3, Qwen) is supported"
            )
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            if not isinstance(kv.get(key), list):
                raise TokenizerError(f"the GGUF file has no {key} list")
        pre = kv.get("tokenizer.ggml.pre", "default")
        if pre not in LLAMA_PRE_TOKENIZERS | QWEN_PRE_TOKENIZERS:
            raise TokenizerError(f"unsupported pre-tokenizer {pre!r} (supported: Llama 3's and Qwen's)")
        return cls(
            kv["tokenizer.ggml.tokens"],
            kv["tokenizer.ggml.merges"],
            kv.get("tokenizer.ggml.token_type"),
            pre=pre,
            bos_id=kv.get("tokenizer.ggml.bos_token_id"),
            eos_id=kv.get("tokenizer.ggml.eos_token_id"),
            add_bos=bool(kv.get("tokenizer.ggml.add_bos_token", False)),
        )

    @property
    def vocab_size(self) -> int:
        """Number of tokens in the vocabulary."""
        return len(self.tokens)

    def token_id(self, token: str) -> int | None:
        """The id of a token spelled as in the vocabulary (special tokens as written), or None."""
        return self.vocab.get(token)

    def _bpe(self, piece: str) -> list[int]:
        if piece in self._cache:
            return self._cache[piece]
        alphabet = byte_alphabet()
        word = [alphabet[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            best, best_rank = -1, None
            for i in range(len(word) - 1):
                rank = self.ranks.get((word[i], word[i + 1]))
                if rank is not None and (best_rank is None or rank < best_rank):
                    best, best_rank = i, rank
            if best_rank is None:
                break
            word = merge_pair(word, word[best], word[best + 1])
        ids = []
        for sym in word:
            if sym not in self.vocab:
                raise TokenizerError(f"symbol {sym!r} of {piece!r} is not in the vocabulary (incomplete byte alphabet)")
            ids.append(self.vocab[sym])
        if len(self._cache) < 100_000:
            self._cache[piece] = ids
        return ids

    def encode(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Token ids of `text`; `add_special` prepends BOS where the model wants it; `parse_special` turns special
        token spellings in the text (`<|eot_id|>`) into their ids instead of encoding their characters."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}")
        ids: list[int] = [self.bos_id] if add_special and self.add_bos and self.bos_id is not None else []
        pos = 0
        for match in self._special_re.finditer(text) if parse_special and self._special_re else ():
            ids += self._encode_ordinary(text[pos : match.start()])
            ids.append(self.special[match.group()])
            pos = match.end()
        ids += self._encode_ordinary(text[pos:])
        return ids

    def _encode_ordinary(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in pre_tokenize(text, self.pre):
            ids += self._bpe(piece)
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token `token_id` stands for (a special token's own spelling in UTF-8)."""
        if not 0 <= token_id < len(self.tokens):
            raise ValueError(f"token id {token_id} is out of range for a vocabulary of {len(self.tokens)}")
        tok = self.tokens[token_id]
        if self.token_types[token_id] in (TOKEN_CONTROL, TOKEN_USER_DEFINED):
            return tok.encode("utf-8")
        try:
            return bytes(self._byte_of[ch] for ch in tok)
        except KeyError:  # a token outside the byte alphabet: take it as written
            return tok.encode("utf-8")

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of a whole token sequence (invalid UTF-8 becomes U+FFFD)."""
        data = b"".join(self.token_bytes(i) for i in ids if not (skip_special and self.is_special(i)))
        return data.decode("utf-8", errors="replace")

    def is_special(self, token_id: int) -> bool:
        """True for control tokens (`<|eot_id|>`, `<|im_start|>`)."""
        return 0 <= token_id < len(self.tokens) and self.token_types[token_id] == TOKEN_CONTROL

    def stream_decoder(self, skip_special: bool = True) -> StreamDecoder:
        """A decoder fed one token at a time that returns only complete UTF-8 characters."""
        return StreamDecoder(self, skip_special)


class StreamDecoder:
    """Incremental detokenizer: a character split over several tokens is emitted once all its bytes arrived."""

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = True) -> None:
        self.tokenizer, self.skip_special = tokenizer, skip_special
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token_id: int) -> str:
        """Text completed by this token ('' while a multi-byte character is still partial)."""
        if self.skip_special and self.tokenizer.is_special(token_id):
            return ""
        return str(self._decoder.decode(self.tokenizer.token_bytes(token_id)))

    def flush(self) -> str:
        """Whatever is left (an incomplete character becomes U+FFFD)."""
        return str(self._decoder.decode(b"", final=True))
