"""safetensors: `u64` header length N, N bytes of JSON, then the tensor bytes (row-major, little-endian).

Every field of the header is checked before any tensor is built (sizes, dtypes, shapes, that the tensors tile the
data section exactly, metadata types), so a hostile header can neither allocate absurd sizes nor read outside
the file. Tensors come back as lazy views of the file on the DISK device.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tg.ir import DType, dtypes
from tg.runtime.device import Device
from tg.tensor.nn.formats.errors import fail
from tg.tensor.nn.formats.source import FileSource, checked_numel, path_of
from tg.tensor.tensor import Tensor

MAX_HEADER = 100_000_000
MAX_JSON_DEPTH = 4
ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
    "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64, "F16": dtypes.float16,
    "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64, "F8_E4M3": dtypes.fp8e4m3,
    "F8_E5M2": dtypes.fp8e5m2, "F8_E4M3FNUZ": dtypes.fp8e4m3fnuz, "F8_E5M2FNUZ": dtypes.fp8e5m2fnuz,
}  # fmt: skip
NAME_OF_DTYPE = {dt: name for name, dt in SAFETENSORS_DTYPES.items()}
UNSUPPORTED = frozenset({"F4", "F6_E2M3", "F6_E3M2", "F8_E8M0", "C64"})


def _json_depth(value: Any) -> int:
    """Nesting depth of parsed JSON, computed without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _no_duplicates(path: str) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise fail(path, f"duplicate name {key!r} in the header")
            out[key] = value
        return out

    return hook


def _read_header(src: FileSource) -> tuple[dict[str, Any], int]:
    (n,) = src.unpack("<Q", 0, "the header length")
    if n > MAX_HEADER:
        raise fail(src.path, f"header length {n} is above the limit of {MAX_HEADER} bytes", 0)
    text = src.read(8, n, "the JSON header")
    if not text.startswith(b"{"):
        raise fail(src.path, "the header is not a JSON object (it must start with '{')", 8)
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates(src.path))
    except UnicodeDecodeError as e:
        raise fail(src.path, f"the header is not UTF-8 ({e.reason})", 8 + e.start) from None
    except json.JSONDecodeError as e:
        raise fail(src.path, f"the header is not valid JSON: {e.msg}", 8 + e.pos) from None
    except RecursionError:
        raise fail(src.path, f"the header JSON is nested deeper than {MAX_JSON_DEPTH}", 8) from None
    if not isinstance(header, dict):
        raise fail(src.path, "the header is not a JSON object", 8)
    if _json_depth(header) > MAX_JSON_DEPTH:
        raise fail(src.path, f"the header JSON is nested deeper than {MAX_JSON_DEPTH}", 8)
    return header, 8 + n


def _check_entry(path: str, name: str, entry: Any, data_size: int) -> tuple[DType, tuple[int, ...], int, int]:
    if not isinstance(entry, dict):
        raise fail(path, f"tensor {name!r}: entry is a {type(entry).__name__}, not an object")
    if set(entry) != ENTRY_KEYS:
        raise fail(path, f"tensor {name!r}: keys {sorted(entry)} differ from {sorted(ENTRY_KEYS)}")
    dtype_name = entry["dtype"]
    if dtype_name in UNSUPPORTED:
        raise fail(path, f"tensor {name!r}: dtype {dtype_name} is not supported by tg")
    if dtype_name not in SAFETENSORS_DTYPES:
        raise fail(path, f"tensor {name!r}: unknown dtype {dtype_name!r}")
    dtype = SAFETENSORS_DTYPES[dtype_name]
    shape = entry["shape"]
    if not isinstance(shape, list):
        raise fail(path, f"tensor {name!r}: shape {shape!r} is not a list")
    numel = checked_numel(tuple(shape), path, name)
    offsets = entry["data_offsets"]
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise fail(path, f"tensor {name!r}: data_offsets {offsets!r} is not a pair of integers")
    begin, end = offsets
    if begin < 0 or end < begin:
        raise fail(path, f"tensor {name!r}: data_offsets {offsets} are negative or reversed")
    if end > data_size:
        raise fail(path, f"tensor {name!r}: data_offsets {offsets} end beyond the data section of {data_size} bytes")
    if end - begin != numel * dtype.itemsize:
        raise fail(
            path,
            f"tensor {name!r}: data_offsets {offsets} hold {end - begin} bytes but shape {shape} of {dtype_name} "
            f"needs {numel * dtype.itemsize}",
        )
    return dtype, tuple(shape), begin, end


def safe_load_metadata(fn: Any) -> tuple[Tensor, int, dict[str, Any]]:
    """`(file as a uint8 DISK tensor, byte offset of the data section, checked JSON header)` of a safetensors file."""
    with FileSource(fn) as src:
        header, data_start = _read_header(src)
        _checked_entries(src, header, data_start)
        return src.raw(), data_start, header


def _checked_entries(
    src: FileSource, header: dict[str, Any], data_start: int
) -> dict[str, tuple[DType, tuple[int, ...], int, int]]:
    data_size = src.size - data_start
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise fail(src.path, "__metadata__ must map strings to strings")
    entries = {
        name: _check_entry(src.path, name, entry, data_size) for name, entry in header.items() if name != "__metadata__"
    }
    position = 0
    for name, (_, _, begin, end) in sorted(entries.items(), key=lambda item: (item[1][2], item[1][3])):
        if begin != position:
            kind = "overlaps the previous tensor" if begin < position else f"leaves a hole after byte {position}"
            raise fail(src.path, f"tensor {name!r} at data_offsets [{begin}, {end}] {kind}")
        position = end
    if position != data_size:
        raise fail(src.path, f"the tensors cover {position} bytes but the data section holds {data_size} bytes")
    return entries


def safe_load(fn: Any) -> dict[str, Tensor]:
    """Load a safetensors file as `{name: lazy Tensor}` views of the file on the DISK device.

    Nothing is read but the header: a tensor's bytes are copied when it is used on a compute device
    (`.to("CPU")`, `load_state_dict`). `fn` is a path or a DISK tensor. Raises FormatError for a bad file.
    """
    with FileSource(fn) as src:
        header, data_start = _read_header(src)
        entries = _checked_entries(src, header, data_start)
        return {
            name: src.tensor(data_start + begin, shape, dtype) for name, (dtype, shape, begin, _) in entries.items()
        }


def safe_metadata(fn: Any) -> dict[str, str]:
    """The `__metadata__` strings of a safetensors file (empty when it has none)."""
    _, _, header = safe_load_metadata(fn)
    return dict(header.get("__metadata__", {}))


def safe_save(tensors: dict[str, Tensor], fn: Any, metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to a safetensors file at `fn` (names in insertion order), with optional string metadata.

    Tensors are realized and written one at a time (peak memory: one tensor), to `fn + ".tmp"`, which is then
    renamed over `fn`: a crash never leaves a half-written file under the final name.
    """
    path = path_of(fn)
    if not isinstance(tensors, dict):
        raise TypeError(f"safe_save needs a dict of name -> Tensor, got {type(tensors).__name__}")
    header: dict[str, Any] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("safe_save metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, t in tensors.items():
        if not isinstance(name, str) or not isinstance(t, Tensor):
            raise TypeError(f"safe_save needs str names and Tensor values, got {name!r}: {type(t).__name__}")
        if t.dtype not in NAME_OF_DTYPE:
            raise TypeError(f"tensor {name!r}: dtype {t.dtype.name} cannot be stored in safetensors")
        header[name] = {
            "dtype": NAME_OF_DTYPE[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for t in tensors.values():
            if t.nbytes:
                f.write(bytes(t.to(Device.DEFAULT).contiguous().data()))
    os.replace(tmp, path)
