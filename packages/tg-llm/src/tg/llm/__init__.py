"""tg.llm: run GGUF language models (Llama 3.x, Qwen 3) with tg: tokenizer, model, generation, CLI and server.

Importing this package does no work: nothing is compiled, no file is opened and no device is touched.
"""

from tg.llm.__about__ import __version__
from tg.llm.tokenizer import StreamDecoder, Tokenizer, TokenizerError

__all__ = ["StreamDecoder", "Tokenizer", "TokenizerError", "__version__"]
