"""tg.llm: run GGUF language models (Llama 3.x, Qwen 3) with tg: tokenizer, model, generation, CLI and server.

Importing this package does no work: nothing is compiled, no file is opened and no device is touched.
"""

from tg.llm.__about__ import __version__
from tg.llm.chat import ChatFormatError, format_chat
from tg.llm.generate import ContextOverflowError, Generator, SamplingParams, sample
from tg.llm.llm import LLM, Completion
from tg.llm.model import Transformer
from tg.llm.models import MODELS, resolve_model
from tg.llm.quant import UnsupportedWeightType, Weight, dequantize, linear
from tg.llm.tokenizer import StreamDecoder, Tokenizer, TokenizerError
from tg.llm.weights import GGUFModelFile, ModelConfig, ModelFormatError, open_model_file

__all__ = [
    "LLM",
    "MODELS",
    "ChatFormatError",
    "Completion",
    "ContextOverflowError",
    "GGUFModelFile",
    "Generator",
    "ModelConfig",
    "ModelFormatError",
    "SamplingParams",
    "StreamDecoder",
    "Tokenizer",
    "TokenizerError",
    "Transformer",
    "UnsupportedWeightType",
    "Weight",
    "__version__",
    "dequantize",
    "format_chat",
    "linear",
    "open_model_file",
    "resolve_model",
    "sample",
]
