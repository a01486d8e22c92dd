"""tg-llm against Hugging Face transformers loading the same GGUF file (torch CPU; skipped without it).

Llama files carry llama.cpp's `rope_freqs` (Llama 3.1 scaling), which transformers does not read from a GGUF: the
reference gets the same scaling as `rope_parameters`, everything else comes from the file as transformers reads it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tg.ir.helpers import Context
from tg.llm import Generator, Transformer, open_model_file

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
PROMPT = [5, 100, 200, 300, 400, 7, 8, 9, 421, 77, 12, 640]


@cache
def reference(path: Path) -> Any:
    transformers.logging.set_verbosity_error()
    config = transformers.AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    if config.model_type == "llama":
        config.rope_parameters = {"rope_type": "llama3", "rope_theta": config.rope_parameters["rope_theta"],
                                  "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 64}  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, config=config, dtype=torch.float32
    )
    return model.eval()


def reference_logits(path: Path, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return reference(path)(torch.tensor([ids])).logits[0].numpy()  # type: ignore[no-any-return]


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_f32_logits_and_greedy_tokens(tiny_models: dict[tuple[str, str], Path], arch: str) -> None:
    path = tiny_models[(arch, "F32")]
    expected = reference_logits(path, PROMPT)
    model = Transformer(open_model_file(path), max_context=96, chunk=8)
    for pos in range(len(PROMPT)):  # token by token through the cache: every position's logits
        out = model(model.embedding_input(PROMPT[pos : pos + 1]), pos).numpy()
        assert relative_error(out, expected[pos]) < 1e-4, pos
    with torch.no_grad():
        hf = reference(path).generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=32, min_new_tokens=32,
                                      eos_token_id=None, pad_token_id=0)  # fmt: skip
    model = Transformer(open_model_file(path), max_context=96, chunk=8)
    ours = list(Generator(model).generate(PROMPT, 32))  # chunked prefill + JIT decode
    assert ours == hf[0, len(PROMPT) :].tolist()


# every stored type once (all 12 arch x type pairs passed when this was written; each costs a compile)
@pytest.mark.parametrize(
    "arch,wtype", [("llama", "F16"), ("qwen3", "BF16"), ("qwen3", "Q8_0"), ("llama", "Q4_K"), ("qwen3", "Q6_K")]
)
def test_stored_weight_types_match(tiny_models: dict[tuple[str, str], Path], arch: str, wtype: str) -> None:
    path = tiny_models[(arch, wtype)]
    expected = reference_logits(path, PROMPT)
    model = Transformer(open_model_file(path), max_context=64, chunk=16)
    with Context(LLM_INT8_DOT=0):  # Q8_0 with float32 inputs, as transformers computes (int8 inputs: below)
        out = model(model.embedding_input(PROMPT), 0, len(PROMPT) - 1).numpy()  # one prefill chunk
    assert relative_error(out, expected[-1]) < 1e-4


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_q8_0_int8_inputs_stay_close(tiny_models: dict[tuple[str, str], Path], arch: str) -> None:
    """Q8_0 with the default int8 path (each matrix's input rounded to 8 bits per block of 32, as llama.cpp does):
    transformers dequantises the weights and multiplies float32 inputs, so the logits differ by the inputs'
    rounding; within 3% of the largest logit at every position."""
    path = tiny_models[(arch, "Q8_0")]
    expected = reference_logits(path, PROMPT)
    model = Transformer(open_model_file(path), max_context=64, chunk=16)
    with Context(LLM_INT8_DOT=1):
        for pos in range(len(PROMPT)):
            out = model(model.embedding_input(PROMPT[pos : pos + 1]), pos).numpy()
            assert relative_error(out, expected[pos]) < 3e-2, pos
