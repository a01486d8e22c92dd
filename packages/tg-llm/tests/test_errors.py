"""Bad model files: truncated or corrupt GGUF, unsupported architecture or quantisation; clear errors."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tg.llm import ModelFormatError, UnsupportedWeightType, format_chat, open_model_file, resolve_model
from tg.llm.chat import ChatFormatError
from tg.tensor.nn.state import FormatError


def test_truncated_and_corrupt_files(tiny_models: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    data = tiny_models[("llama", "Q8_0")].read_bytes()
    for cut in (3, 20, 1000, len(data) // 2, len(data) - 1):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(FormatError):
            open_model_file(path)
    bad = tmp_path / "magic.gguf"
    bad.write_bytes(b"GGUX" + data[4:])
    with pytest.raises(FormatError, match="magic"):
        open_model_file(bad)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_model_file(tmp_path / "missing.gguf")


def test_unsupported_architecture_and_quantisation(generator: ModuleType, tmp_path: Path) -> None:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(tmp_path / "gpt2.gguf"), "gpt2")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(ModelFormatError, match="architecture 'gpt2' is not supported"):
        open_model_file(tmp_path / "gpt2.gguf")

    cfg = generator.TinyConfig(dim=256, n_layers=1, n_merges=10)
    path = generator.write_model(tmp_path / "q.gguf", cfg, "F32")
    w = gguf.GGUFWriter(str(tmp_path / "q5.gguf"), "llama")
    reader = gguf.GGUFReader(str(path))
    for field in reader.fields.values():  # copy the metadata, make one tensor Q5_K
        if field.name.startswith(("GGUF.", "general.architecture")):
            continue
        value = field.contents()
        w.add_key_value(field.name, value, field.types[0], field.types[-1] if len(field.types) > 1 else None)
    for t in reader.tensors:
        if t.name == "blk.0.attn_q.weight":
            blocks = np.zeros((t.shape[1], t.shape[0] // 256 * 176), np.uint8)
            w.add_tensor(t.name, blocks, raw_dtype=gguf.GGMLQuantizationType.Q5_K)
        else:
            w.add_tensor(t.name, np.asarray(t.data).reshape([int(d) for d in reversed(t.shape)]))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises((UnsupportedWeightType, FormatError), match="Q5_K"):
        open_model_file(tmp_path / "q5.gguf")


def test_unknown_model_name_and_bad_messages() -> None:
    with pytest.raises(ValueError, match=r"unknown model 'nope'.*llama3\.2:1b"):
        resolve_model("nope")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model("/no/such/model.gguf")
    with pytest.raises(ChatFormatError, match="non-empty list"):
        format_chat("llama", [])
    with pytest.raises(ChatFormatError, match=r"messages\[0\].role"):
        format_chat("llama", [{"role": "robot", "content": "x"}])
    with pytest.raises(ChatFormatError, match="must be a string"):
        format_chat("qwen3", [{"role": "user", "content": 5}])
    assert format_chat("llama", [{"role": "user", "content": " hi "}]) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
