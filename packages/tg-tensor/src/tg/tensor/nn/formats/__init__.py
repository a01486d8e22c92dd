"""Readers and writers of weight files (safetensors, PyTorch, GGUF); the public entry points are in nn.state."""

from tg.tensor.nn.formats.errors import FormatError

__all__ = ["FormatError"]
