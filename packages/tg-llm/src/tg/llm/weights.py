"""Opening a GGUF model: checked header, model config from the metadata, weights copied to the device as stored.

The file is memory-mapped (a DISK tensor); each weight's bytes go straight to the compute device in their file
format (a tqdm bar counts the bytes), so the host never holds a dequantised copy. Token embeddings stay in the file:
the rows of a prompt's tokens are read from the map (`GGUFModelFile.embedding_rows`) and dequantised on the device.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from tg.ir import DType, dtypes
from tg.llm.quant import GGML_TYPES, NATIVE_DTYPES, Weight, check_supported, half_vectors
from tg.tensor import Device, Tensor
from tg.tensor.nn.state import FormatError, GGUFTensorInfo, gguf_index

SUPPORTED_ARCHS = ("llama", "qwen3")


class ModelFormatError(ValueError):
    """The GGUF file is readable but does not describe a model tg-llm can run (architecture, missing tensors)."""


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of a Llama 3 / Qwen 3 model, read from GGUF metadata."""

    arch: str
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    context_length: int
    rope_base: float
    norm_eps: float
    qk_norm: bool  # Qwen 3 normalises every head of q and k (RMSNorm over head_dim)
    rope_interleaved: bool  # llama.cpp's Llama files rotate adjacent pairs; Qwen rotates the two halves (NeoX)


def _int(kv: dict[str, Any], key: str, default: int | None = None) -> int:
    value = kv.get(key, default)
    if isinstance(value, list):  # per-layer values (some files): all layers must agree here
        if not value or any(v != value[0] for v in value):
            raise ModelFormatError(f"{key} differs between layers ({value[:8]}...); not supported")
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelFormatError(f"metadata {key} is {value!r}; a positive integer is needed")
    return value


def config_from_gguf(kv: dict[str, Any], infos: dict[str, GGUFTensorInfo]) -> ModelConfig:
    """The model config a GGUF file's metadata and tensor shapes describe; ModelFormatError when unsupported."""
    arch = kv.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ModelFormatError(f"architecture {arch!r} is not supported (tg-llm runs {', '.join(SUPPORTED_ARCHS)})")
    dim = _int(kv, f"{arch}.embedding_length")
    n_heads = _int(kv, f"{arch}.attention.head_count")
    n_kv_heads = _int(kv, f"{arch}.attention.head_count_kv", n_heads)
    head_dim = _int(kv, f"{arch}.attention.key_length", dim // n_heads)
    if n_heads % n_kv_heads:
        raise ModelFormatError(f"{n_heads} attention heads are not a multiple of {n_kv_heads} key/value heads")
    if "token_embd.weight" not in infos:
        raise ModelFormatError("the file has no token_embd.weight tensor")
    vocab = infos["token_embd.weight"].shape[0]
    return ModelConfig(
        arch=arch,
        dim=dim,
        n_layers=_int(kv, f"{arch}.block_count"),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        ffn_dim=_int(kv, f"{arch}.feed_forward_length"),
        vocab_size=vocab,
        context_length=_int(kv, f"{arch}.context_length", 2048),
        rope_base=float(kv.get(f"{arch}.rope.freq_base", 10000.0)),
        norm_eps=float(kv.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        qk_norm=arch == "qwen3",
        rope_interleaved=arch == "llama",
    )


class GGUFModelFile:
    """A GGUF model file opened for reading: metadata, tensor infos, config, and a memory map of the data."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"model file {self.path!r} does not exist")
        self.kv, infos = gguf_index(self.path)
        self.infos = {info.name: info for info in infos}
        self.config = config_from_gguf(self.kv, self.infos)
        for info in infos:
            check_supported(info.name, info.ggml_type)
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._disk_tensors: dict[DType, Tensor] = {}

    def _disk(self, dtype: DType = dtypes.uint8) -> Tensor:
        """The file as a lazy 1-D DISK tensor of `dtype` (memory-mapped by the DISK device; a trailing partial
        element is left out)."""
        if (t := self._disk_tensors.get(dtype)) is None:
            size = os.path.getsize(self.path) // dtype.itemsize
            t = self._disk_tensors[dtype] = Tensor.empty(size, dtype=dtype, device=f"disk:{self.path}")
        return t

    def has(self, name: str) -> bool:
        """True when the file holds tensor `name`."""
        return name in self.infos

    def _info(self, name: str) -> GGUFTensorInfo:
        if name not in self.infos:
            raise ModelFormatError(f"{os.path.basename(self.path)} has no tensor {name!r}")
        return self.infos[name]

    def _check_shape(self, info: GGUFTensorInfo, shape: tuple[int, ...]) -> None:
        if tuple(info.shape) != shape:
            raise ModelFormatError(f"tensor {info.name!r} has shape {list(info.shape)}, expected {list(shape)}")

    def vector(self, name: str, size: int, device: str) -> Tensor:
        """A float32 vector (norm weights, rope factors) on `device`."""
        info = self._info(name)
        self._check_shape(info, (size,))
        if info.ggml_type not in NATIVE_DTYPES:
            raise ModelFormatError(f"tensor {name!r} is quantized; vectors must be F32, F16 or BF16")
        raw = Tensor(np.array(self._map[info.offset : info.offset + info.nbytes]), device=device)
        return raw.bitcast(NATIVE_DTYPES[info.ggml_type]).cast(dtypes.float32).realize()

    def matrix(self, name: str, rows: int, cols: int, device: str, progress: Any = None) -> Weight:
        """Weight `name` of logical shape (rows, cols) copied to `device` in its stored format."""
        info = self._info(name)
        self._check_shape(info, (rows, cols))
        _, block_elems, block_bytes = GGML_TYPES[info.ggml_type]
        # one copy of the file region, no kernel: F16/BF16/F32 are read through a DISK tensor of their own dtype
        # (GGUF aligns tensor data), quantised blocks as bytes; the reshape is a view
        native = NATIVE_DTYPES.get(info.ggml_type)
        keep_half = info.ggml_type == 1 and half_vectors(device)  # F16 read as float16 vectors (quant.half_vectors)
        if native is not None and native.itemsize == 2 and cols % 2 == 0 and info.offset % 4 == 0 and not keep_half:
            # F16/BF16 pairs as uint32 words, the layout tg.llm.quant.linear reads (the same bytes)
            start = info.offset // 4
            data = self._disk(dtypes.uint32)[start : start + rows * cols // 2].to(device).realize()
            data = data.reshape(rows, cols // 2)
        elif info.ggml_type == 12 and info.offset % 4 == 0:
            # Q4_K blocks (144 bytes) as uint32 words, which Weight repacks on the device (tg.llm.quant.pack)
            start = info.offset // 4
            data = self._disk(dtypes.uint32)[start : start + info.nbytes // 4].to(device).realize()
            data = data.reshape(rows, cols // block_elems, block_bytes // 4)
        elif native is not None and info.offset % native.itemsize == 0:
            start = info.offset // native.itemsize
            data = self._disk(native)[start : start + rows * cols].to(device).realize().reshape(rows, cols)
        else:
            data = self._disk()[info.offset : info.offset + info.nbytes].to(device).realize()
            if native is not None:
                data = data.bitcast(native).realize().reshape(rows, cols)
            else:
                data = data.reshape(rows, cols // block_elems, block_bytes)
        if progress is not None:
            progress.update(info.nbytes)
        return Weight(data, info.ggml_type, rows, cols)

    def embedding_rows(self, name: str, token_ids: list[int]) -> tuple[np.ndarray, int]:
        """The stored bytes of rows `token_ids` of matrix `name` read from the memory map: (uint8 (n, row bytes),
        ggml type). Dequantised on the device by the model."""
        info = self._info(name)
        rows = info.shape[0]
        row_bytes = info.nbytes // rows
        ids = np.asarray(token_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= rows):
            raise ValueError(f"token id {int(ids.max() if ids.max() >= rows else ids.min())} outside [0, {rows})")
        table = self._map[info.offset : info.offset + info.nbytes].reshape(rows, row_bytes)
        return np.ascontiguousarray(table[ids]), info.ggml_type

    def weight_bytes(self) -> int:
        """Bytes of all tensors in the file."""
        return sum(info.nbytes for info in self.infos.values())


def open_model_file(path: str | os.PathLike[str]) -> GGUFModelFile:
    """Open and check a GGUF model file (FormatError for a corrupt file, ModelFormatError for an unsupported model,
    UnsupportedWeightType for an unsupported quantisation)."""
    try:
        return GGUFModelFile(path)
    except FormatError:
        raise
    except (KeyError, IndexError, TypeError) as e:  # metadata of the wrong kind
        raise ModelFormatError(f"{path}: malformed model metadata ({e})") from e


def default_device() -> str:
    """The device models load to: Device.DEFAULT."""
    return str(Device.DEFAULT)


def rope_tables(config: ModelConfig, max_positions: int, factors: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of position * frequency, (max_positions, head_dim / 2) float32; `factors` divide the
    frequencies (llama.cpp's `rope_freqs`, Llama 3.1's long-context scaling)."""
    half = config.head_dim // 2
    freqs = 1.0 / (config.rope_base ** (np.arange(0, half, dtype=np.float64) * 2 / config.head_dim))
    if factors is not None:
        freqs = freqs / factors.astype(np.float64)
    angles = np.arange(max_positions, dtype=np.float64)[:, None] * freqs[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def bytes_per_token(config: ModelConfig, file: GGUFModelFile) -> int:
    """Weight bytes one decode step reads: every matrix once (the embedding row is negligible)."""
    total = 0
    for name, info in file.infos.items():
        if name == "token_embd.weight" and file.has("output.weight"):
            continue
        total += info.nbytes
    return total
