"""Known model names and where their GGUF files are downloaded from (cached in tg's cache, with a tqdm bar)."""

from __future__ import annotations

import os

# name -> URL of a GGUF file (instruct models; quantisations tg-llm runs)
MODELS: dict[str, str] = {
    "llama3.2:1b": "https://huggingface.co/bartowski/Llama-3.2-1B-Instruct-GGUF/resolve/main/Llama-3.2-1B-Instruct-Q6_K.gguf",
    "llama3.2:1b-q4": "https://huggingface.co/bartowski/Llama-3.2-1B-Instruct-GGUF/resolve/main/Llama-3.2-1B-Instruct-Q4_K_M.gguf",
    "llama3.2:1b-f16": "https://huggingface.co/bartowski/Llama-3.2-1B-Instruct-GGUF/resolve/main/Llama-3.2-1B-Instruct-f16.gguf",
    "llama3.2:3b": "https://huggingface.co/bartowski/Llama-3.2-3B-Instruct-GGUF/resolve/main/Llama-3.2-3B-Instruct-Q6_K.gguf",
    "llama3.1:8b": "https://huggingface.co/bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/resolve/main/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
    "qwen3:0.6b": "https://huggingface.co/Qwen/Qwen3-0.6B-GGUF/resolve/main/Qwen3-0.6B-Q8_0.gguf",
    "qwen3:1.7b": "https://huggingface.co/Qwen/Qwen3-1.7B-GGUF/resolve/main/Qwen3-1.7B-Q8_0.gguf",
    "qwen3:4b": "https://huggingface.co/Qwen/Qwen3-4B-GGUF/resolve/main/Qwen3-4B-Q4_K_M.gguf",
    "qwen3:8b": "https://huggingface.co/Qwen/Qwen3-8B-GGUF/resolve/main/Qwen3-8B-Q4_K_M.gguf",
}  # fmt: skip


def resolve_model(name_or_path: str) -> str:
    """A local file path for `--model`: an existing path as is (no network), a known name or an http(s) URL
    downloaded once into tg's cache (`$TG_CACHE_DIR/downloads`) with a progress bar."""
    if os.path.exists(name_or_path):
        if not os.path.isfile(name_or_path):
            raise FileNotFoundError(f"{name_or_path!r} is not a file")
        return name_or_path
    url = MODELS.get(name_or_path.lower())
    if url is None and name_or_path.startswith(("http://", "https://")):
        url = name_or_path
    if url is None:
        if name_or_path.endswith(".gguf") or os.sep in name_or_path:
            raise FileNotFoundError(f"model file {name_or_path!r} does not exist")
        raise ValueError(f"unknown model {name_or_path!r}: give a GGUF path, a URL, or one of {', '.join(MODELS)}")
    from tg.tensor import Tensor

    disk = Tensor.from_url(url)
    return disk.device.partition(":")[2]
