"""GGUF (v2, v3, little-endian): key/value metadata, tensor infos, then an aligned data section.

The header is read with bounded reads: every count is checked against what the remaining bytes could hold before
any list is built, strings against the bytes left, nesting of arrays is limited to 2. Native tensors are lazy DISK
views; quantized ones (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) are dequantized lazily on the default device.
"""

from __future__ import annotations

import re
import struct
from typing import Any, NamedTuple

from tg.ir import DType, dtypes
from tg.runtime.device import Device
from tg.tensor.nn.formats.errors import fail
from tg.tensor.nn.formats.ggml_quants import QUANTIZED
from tg.tensor.nn.formats.source import FileSource, checked_numel
from tg.tensor.tensor import Tensor

MAX_KEY = 65535
MAX_ARRAY_NESTING = 2
# value type -> (struct format, size); 8 = string and 9 = array are variable-sized
SCALAR_TYPES = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
NATIVE_TYPES: dict[int, DType] = {
    0: dtypes.float32, 1: dtypes.float16, 24: dtypes.int8, 25: dtypes.int16, 26: dtypes.int32, 27: dtypes.int64,
    28: dtypes.float64, 30: dtypes.bfloat16,
}  # fmt: skip
KNOWN_UNSUPPORTED = {
    6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 13: "Q5_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS",
    18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 29: "IQ1_M", 39: "MXFP4",
}  # fmt: skip


class _Cursor:
    """Sequential checked reads through the header of a GGUF file."""

    def __init__(self, src: FileSource) -> None:
        self.src, self.pos = src, 0

    def remaining(self) -> int:
        return self.src.size - self.pos

    def take(self, n: int, what: str) -> bytes:
        data = self.src.read(self.pos, n, what)
        self.pos += n
        return data

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str, limit: int | None = None) -> str:
        start = self.pos
        n = self.scalar("<Q", f"length of {what}")
        if limit is not None and n > limit:
            raise fail(self.src.path, f"{what} is {n} bytes long, above the limit of {limit}", start)
        if n > self.remaining():
            raise fail(self.src.path, f"{what} claims {n} bytes but only {self.remaining()} remain", start)
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(self.src.path, f"{what} is not UTF-8", start) from None

    def count(self, fmt: str, min_item_bytes: int, what: str) -> int:
        start = self.pos
        n = self.scalar(fmt, what)
        if n * min_item_bytes > self.remaining():
            raise fail(self.src.path, f"{what} {n} cannot fit in the {self.remaining()} bytes left", start)
        return int(n)

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in SCALAR_TYPES:
            return self.scalar(SCALAR_TYPES[vtype], what)
        if vtype == 8:
            return self.string(what)
        if vtype != 9:
            raise fail(self.src.path, f"{what} has unknown value type {vtype}", self.pos - 4)
        if depth >= MAX_ARRAY_NESTING:
            raise fail(self.src.path, f"{what}: arrays nested deeper than {MAX_ARRAY_NESTING}", self.pos)
        item_type = self.scalar("<I", f"item type of {what}")
        if item_type in SCALAR_TYPES:
            fmt = SCALAR_TYPES[item_type]
            n = self.count("<Q", struct.calcsize(fmt), f"item count of {what}")
            return list(struct.unpack(f"<{n}{fmt[1]}", self.take(n * struct.calcsize(fmt), what)))
        n = self.count("<Q", 8 if item_type == 8 else 12, f"item count of {what}")
        return [self.value(item_type, f"{what}[{i}]", depth + 1) for i in range(n)]


def _read_header(src: FileSource) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int, int]], int]:
    cur = _Cursor(src)
    if cur.take(4, "the magic") != b"GGUF":
        raise fail(src.path, "not a GGUF file (bad magic)", 0)
    version = cur.scalar("<I", "the version")
    if version == 0x03000000 or version == 0x02000000:
        raise fail(src.path, "big-endian GGUF files are not supported", 4)
    if version not in (2, 3):
        raise fail(src.path, f"unsupported GGUF version {version} (2 and 3 are)", 4)
    n_tensors = cur.count("<Q", 24, "tensor count")
    n_kv = cur.count("<Q", 13, "key/value count")
    kv: dict[str, Any] = {}
    for i in range(n_kv):
        start = cur.pos
        key = cur.string(f"key {i}", MAX_KEY)
        if key in kv:
            raise fail(src.path, f"duplicate key {key!r}", start)
        kv[key] = cur.value(cur.scalar("<I", f"value type of {key!r}"), repr(key))
    infos: list[tuple[str, tuple[int, ...], int, int]] = []
    names: set[str] = set()
    for i in range(n_tensors):
        start = cur.pos
        name = cur.string(f"name of tensor {i}", MAX_KEY)
        if name in names:
            raise fail(src.path, f"duplicate tensor name {name!r}", start)
        names.add(name)
        n_dims = cur.scalar("<I", f"rank of tensor {name!r}")
        if n_dims > 4:
            raise fail(src.path, f"tensor {name!r} has rank {n_dims}, more than 4", start)
        dims = struct.unpack(f"<{n_dims}Q", cur.take(8 * n_dims, f"dims of tensor {name!r}"))
        ggml_type = cur.scalar("<I", f"type of tensor {name!r}")
        offset = cur.scalar("<Q", f"offset of tensor {name!r}")
        infos.append((name, tuple(reversed(dims)), ggml_type, offset))
    alignment = kv.get("general.alignment", 32)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or not 1 <= alignment <= 65536:
        raise fail(src.path, f"general.alignment {alignment!r} is not in [1, 65536]")
    if alignment & (alignment - 1):
        raise fail(src.path, f"general.alignment {alignment} is not a power of two")
    data_start = -(-cur.pos // alignment) * alignment
    return kv, infos, data_start


def _tensor_bytes(path: str, name: str, shape: tuple[int, ...], ggml_type: int) -> tuple[int, int]:
    """(element count, byte size) of a tensor of `ggml_type`, after checking the type and block divisibility."""
    numel = checked_numel(shape, path, name, max_rank=4)
    if ggml_type in NATIVE_TYPES:
        return numel, numel * NATIVE_TYPES[ggml_type].itemsize
    if ggml_type not in QUANTIZED:
        kind = KNOWN_UNSUPPORTED.get(ggml_type, f"unknown ggml type {ggml_type}")
        raise fail(path, f"tensor {name!r} has type {kind}, which tg cannot dequantize")
    type_name, block_elems, block_bytes, _ = QUANTIZED[ggml_type]
    if shape and shape[-1] % block_elems:
        raise fail(
            path, f"tensor {name!r}: {type_name} needs the row length {shape[-1]} to be a multiple of {block_elems}"
        )
    return numel, numel // block_elems * block_bytes


def gguf_load(fn: Any, dtype: DType = dtypes.float32) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Load a GGUF file: `(metadata key/values, {name: lazy Tensor})`. Quantized tensors are dequantized lazily to
    `dtype` (float32, or float16); native ones keep their dtype. Multi-part files (`name-00001-of-0000N.gguf`) are
    merged when the first part is given. Raises FormatError for a bad file."""
    kv, tensors = _load_one(fn, dtype)
    count = kv.get("split.count", 1)
    match = re.search(r"-(\d{5})-of-(\d{5})\.gguf$", str(fn))
    if isinstance(count, int) and count > 1 and match:
        for part in range(2, count + 1):
            part_fn = str(fn)[: match.start()] + f"-{part:05d}-of-{match.group(2)}.gguf"
            part_kv, part_tensors = _load_one(part_fn, dtype)
            duplicates = set(tensors) & set(part_tensors)
            if duplicates:
                raise fail(part_fn, f"tensors {sorted(duplicates)[:5]} are also in an earlier part")
            tensors.update(part_tensors)
            kv.update({k: v for k, v in part_kv.items() if not k.startswith("split.")})
    return kv, tensors


class GGUFTensorInfo(NamedTuple):
    """Where one tensor of a GGUF file lives: `offset` is absolute in the file, `nbytes` its checked byte size."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int


def gguf_index(fn: Any) -> tuple[dict[str, Any], list[GGUFTensorInfo]]:
    """Read and check a GGUF file's header without touching its data: `(metadata key/values, tensor infos)`.

    Every tensor's type is known, its range lies inside the file, ranges do not overlap. Raises FormatError."""
    with FileSource(fn) as src:
        return _index(src)


def _index(src: FileSource) -> tuple[dict[str, Any], list[GGUFTensorInfo]]:
    kv, infos, data_start = _read_header(src)
    alignment = kv.get("general.alignment", 32)
    out, ranges = [], []
    for name, shape, ggml_type, offset in infos:
        _numel, nbytes = _tensor_bytes(src.path, name, shape, ggml_type)
        if offset % alignment:
            raise fail(src.path, f"tensor {name!r} offset {offset} is not a multiple of the alignment {alignment}")
        if data_start + offset + nbytes > src.size:
            raise fail(
                src.path,
                f"tensor {name!r} [{offset}, {offset + nbytes}] ends beyond the data section of "
                f"{max(src.size - data_start, 0)} bytes",
            )
        ranges.append((offset, offset + nbytes, name))
        out.append(GGUFTensorInfo(name, shape, ggml_type, data_start + offset, nbytes))
    previous_end, previous = 0, ""
    for begin, end, name in sorted(ranges):
        if begin < previous_end:
            raise fail(src.path, f"tensor {name!r} at [{begin}, {end}] overlaps tensor {previous!r}")
        if end > begin:
            previous_end, previous = end, name
    return kv, out


def _load_one(fn: Any, dtype: DType) -> tuple[dict[str, Any], dict[str, Tensor]]:
    with FileSource(fn) as src:
        kv, infos = _index(src)
        tensors = {}
        for name, shape, ggml_type, start, nbytes in infos:
            if ggml_type in NATIVE_TYPES:
                tensors[name] = src.tensor(start, shape, NATIVE_TYPES[ggml_type])
                continue
            _, _, block_bytes, dequantize = QUANTIZED[ggml_type]
            if nbytes == 0:
                tensors[name] = Tensor.zeros(*shape, dtype=dtype)
                continue
            blocks = src.raw()[start : start + nbytes].to(Device.DEFAULT).reshape(nbytes // block_bytes, block_bytes)
            tensors[name] = dequantize(blocks).reshape(shape).cast(dtype)
        return kv, tensors
