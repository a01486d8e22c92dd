"""The byte-level BPE tokenizer: pre-tokenizer splits, merges, special tokens, streaming decode."""

from __future__ import annotations

from pathlib import Path

import pytest

from tg.llm import Tokenizer, TokenizerError
from tg.llm.tokenizer import byte_alphabet, pre_tokenize
from tg.tensor.nn.state import gguf_index

MULTILINGUAL = (
    "Hello, world! It's 2026: 12345 tokens.\n\nGrüße aus München — straße. Привет, мир! 你好，世界。"
    "こんにちは 🙂🚀👍🏽 ❤️ 🇩🇪  double  spaces\tand tabs\r\nمرحبا I'LL SEE, we'd've 3.14159"
)


def test_llama3_pre_tokenizer_splits() -> None:
    assert pre_tokenize("Hello world's 12345!!\n\n  x", "llama-bpe") == [
        "Hello",
        " world",
        "'s",
        " ",
        "123",
        "45",
        "!!\n\n",
        " ",
        " x",
    ]
    assert pre_tokenize("I'LL go", "llama-bpe") == ["I", "'LL", " go"]


def test_qwen_pre_tokenizer_splits_digits_one_by_one() -> None:
    assert pre_tokenize("x 2026", "qwen2") == ["x", " ", "2", "0", "2", "6"]


def test_pre_tokenize_covers_the_text() -> None:
    for pre in ("llama-bpe", "qwen2"):
        assert "".join(pre_tokenize(MULTILINGUAL, pre)) == MULTILINGUAL


def toy_tokenizer() -> Tokenizer:
    alphabet = byte_alphabet()
    tokens = [alphabet[b] for b in range(256)] + ["he", "ll", "hell", "hello", "Ġw", "<|eot|>"]
    merges = ["h e", "l l", "he ll", "hell o", "Ġ w"]
    types = [1] * (len(tokens) - 1) + [3]
    return Tokenizer(tokens, merges, types, bos_id=None, eos_id=len(tokens) - 1)


def test_merges_apply_by_rank_and_round_trip() -> None:
    tok = toy_tokenizer()
    ids = tok.encode("hello world")
    assert tok.tokens[ids[0]] == "hello" and tok.tokens[ids[1]] == "Ġw"
    assert tok.decode(ids) == "hello world"
    assert tok.decode(tok.encode(MULTILINGUAL)) == MULTILINGUAL


def test_special_tokens_are_matched_whole() -> None:
    tok = toy_tokenizer()
    ids = tok.encode("hello<|eot|>hello")
    assert ids[1] == tok.eos_id and len(ids) == 3
    assert tok.encode("<|eot|>", parse_special=False) != [tok.eos_id]
    assert tok.decode(ids) == "hello<|eot|>hello" and tok.decode(ids, skip_special=True) == "hellohello"


def test_stream_decoder_waits_for_whole_characters() -> None:
    tok = toy_tokenizer()
    ids = tok.encode("a🙂b")  # the emoji is 4 byte tokens
    decoder = tok.stream_decoder()
    pieces = [decoder.add(i) for i in ids]
    assert pieces == ["a", "", "", "", "🙂", "b"] and decoder.flush() == ""
    decoder = tok.stream_decoder()
    assert decoder.add(ids[1]) == "" and decoder.flush() == "\ufffd"  # a dangling lead byte


def test_bad_vocabularies_raise() -> None:
    with pytest.raises(TokenizerError, match=r"tokenizer\.ggml\.model"):
        Tokenizer.from_gguf({"tokenizer.ggml.model": "llama"})
    with pytest.raises(TokenizerError, match="pre-tokenizer"):
        Tokenizer.from_gguf({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a"],
                             "tokenizer.ggml.merges": [], "tokenizer.ggml.pre": "gpt-9"})  # fmt: skip
    with pytest.raises(TokenizerError, match="merge 0"):
        Tokenizer(["a"], ["ab"])
    with pytest.raises(TypeError, match="str"):
        toy_tokenizer().encode(b"bytes")  # type: ignore[arg-type]


def test_gguf_vocabulary_round_trips(tiny_models: dict[tuple[str, str], Path]) -> None:
    for arch in ("llama", "qwen3"):
        kv, _ = gguf_index(tiny_models[(arch, "F16")])
        tok = Tokenizer.from_gguf(kv)
        ids = tok.encode(MULTILINGUAL, add_special=True)
        assert (ids[0] == tok.bos_id) == (arch == "llama")
        assert tok.decode(ids, skip_special=True) == MULTILINGUAL
        assert len(ids) < len(MULTILINGUAL.encode())  # merges learned from the corpus apply


@pytest.mark.torch
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_ids_equal_transformers_tokenizer(tiny_models: dict[tuple[str, str], Path], arch: str) -> None:
    transformers = pytest.importorskip("transformers")
    path = tiny_models[(arch, "F32")]
    reference = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    kv, _ = gguf_index(path)
    tok = Tokenizer.from_gguf(kv)
    text = MULTILINGUAL + (" <|im_end|> tail" if arch == "qwen3" else " <|eot_id|> tail")
    assert tok.encode(text) == reference.encode(text, add_special_tokens=False)
    assert tok.encode(text, add_special=True) == reference.encode(text, add_special_tokens=True)
    for piece in MULTILINGUAL.split(" "):
        assert tok.encode(piece) == reference.encode(piece, add_special_tokens=False), piece
