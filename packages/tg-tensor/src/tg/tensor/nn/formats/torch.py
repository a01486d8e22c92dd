"""PyTorch `.pt`/`.pth` files (zip since torch 1.6, and the older "legacy" stream), read without importing torch.

The pickle inside runs through a restricted unpickler: only an allowlist of globals resolves (to tg stand-ins for
torch's rebuild functions and storage types); anything else raises FormatError. Before unpickling, the opcode stream
is scanned with `pickletools` so that opcodes outside the set torch writes (and memo indices that would make the C
unpickler allocate huge tables) are rejected first. Storages become lazy DISK views of the file.
"""

from __future__ import annotations

import codecs
import io
import pickle
import pickletools
import struct
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from tg.ir import DType, dtypes
from tg.runtime.device import Device
from tg.tensor.nn.formats.errors import FormatError, fail
from tg.tensor.nn.formats.source import FileSource, bytes_to_dtype, checked_numel
from tg.tensor.tensor import Tensor

MAX_PICKLE = 1 << 30
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001

STORAGE_DTYPES: dict[str, DType] = {
    "DoubleStorage": dtypes.float64, "FloatStorage": dtypes.float32, "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
}  # fmt: skip
TORCH_DTYPES: dict[str, DType] = {
    "float64": dtypes.float64, "double": dtypes.float64, "float32": dtypes.float32, "float": dtypes.float32,
    "float16": dtypes.float16, "half": dtypes.float16, "bfloat16": dtypes.bfloat16, "int64": dtypes.int64,
    "long": dtypes.int64, "int32": dtypes.int32, "int": dtypes.int32, "int16": dtypes.int16, "short": dtypes.int16,
    "int8": dtypes.int8, "uint8": dtypes.uint8, "bool": dtypes.bool, "uint16": dtypes.uint16, "uint32": dtypes.uint32,
    "uint64": dtypes.uint64, "float8_e4m3fn": dtypes.fp8e4m3, "float8_e5m2": dtypes.fp8e5m2,
    "float8_e4m3fnuz": dtypes.fp8e4m3fnuz, "float8_e5m2fnuz": dtypes.fp8e5m2fnuz,
}  # fmt: skip
REJECTED = {
    "_rebuild_qtensor": "quantized tensors", "_rebuild_sparse_tensor": "sparse tensors",
    "_rebuild_sparse_csr_tensor": "sparse tensors", "_rebuild_nested_tensor": "nested tensors",
    "ComplexFloatStorage": "complex tensors", "ComplexDoubleStorage": "complex tensors",
    "QInt8Storage": "quantized tensors", "QUInt8Storage": "quantized tensors", "QInt32Storage": "quantized tensors",
    "complex64": "complex tensors", "complex128": "complex tensors",
}  # fmt: skip
# the opcodes torch's writer emits (the set its weights-only unpickler accepts)
ALLOWED_OPCODES = frozenset(
    "PROTO GLOBAL BINPERSID REDUCE BUILD NEWOBJ MARK TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_TUPLE EMPTY_LIST EMPTY_DICT "
    "EMPTY_SET APPEND APPENDS SETITEM SETITEMS ADDITEMS BINPUT LONG_BINPUT BINGET LONG_BINGET BININT BININT1 BININT2 "
    "LONG1 BINFLOAT BINUNICODE SHORT_BINSTRING NONE NEWTRUE NEWFALSE STOP MEMOIZE FRAME".split()
)


class StorageType:
    """Stand-in for `torch.FloatStorage` & co (`dtype` None: `torch.UntypedStorage`, counted in bytes)."""

    def __init__(self, name: str, dtype: DType | None) -> None:
        self.name, self.dtype = name, dtype


class Storage:
    """One storage of the file: `nbytes` bytes at file offset `offset`, elements of `dtype` (None: untyped)."""

    def __init__(self, src: FileSource, offset: int, nbytes: int, dtype: DType | None, byteorder: str) -> None:
        self.src, self.offset, self.nbytes, self.dtype, self.byteorder = src, offset, nbytes, dtype, byteorder


class ClampedReader(io.RawIOBase):
    """A read-only view of `[start, end)` of a file whose `read(n)` never asks for more than the bytes left, so a
    forged length in a pickle cannot make anything allocate it."""

    def __init__(self, src: FileSource, start: int, end: int) -> None:
        self.src, self.pos, self.end = src, start, end

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        n = self.end - self.pos if n is None or n < 0 else min(n, self.end - self.pos)
        data = self.src.read(self.pos, n, "pickle data")
        self.pos += n
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readline(self, size: int | None = -1) -> bytes:
        out = bytearray()
        while self.pos < self.end and (size is None or size < 0 or len(out) < size):
            ch = self.read(1)
            out += ch
            if ch == b"\n":
                break
        return bytes(out)

    def tell(self) -> int:
        return self.pos


def _scan_opcodes(stream: Any, path: str) -> None:
    """Reject opcodes torch never writes and memo indices beyond the entries stored so far."""
    puts = 0
    try:
        for opcode, arg, pos in pickletools.genops(stream):
            if opcode.name not in ALLOWED_OPCODES:
                raise fail(path, f"pickle opcode {opcode.name} is not allowed in a weights file", pos)
            if opcode.name in ("BINPUT", "LONG_BINPUT", "MEMOIZE"):
                if isinstance(arg, int) and arg > puts:
                    raise fail(path, f"pickle memo index {arg} is out of order", pos)
                puts += 1
    except FormatError:
        raise
    except Exception as e:  # pickletools reports truncation/garbage as ValueError and friends
        raise fail(path, f"corrupt pickle: {e}") from None


def _reject_global(module: str, name: str) -> FormatError:
    if name in REJECTED:
        return FormatError(f"{REJECTED[name]} ({module}.{name}) are not supported")
    if module.startswith("torch.nn") or module == "__main__":
        return FormatError(f"the file holds a pickled object {module}.{name}: save `model.state_dict()` instead")
    return FormatError(f"forbidden global {module}.{name} in the pickle")


class _Unpickler(pickle.Unpickler):
    """Resolves only allowlisted globals; persistent ids become `Storage` objects via `load_storage`."""

    def __init__(self, stream: Any, load_storage: Callable[[tuple[Any, ...]], Any], rebuild: Callable[..., Any]):
        super().__init__(stream)
        self.load_storage, self.rebuild = load_storage, rebuild

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor_v3"):
            return self.rebuild_v3 if name.endswith("v3") else self.rebuild_v2
        if (module, name) in (
            ("torch._utils", "_rebuild_parameter"),
            ("torch._utils", "_rebuild_parameter_with_state"),
        ):
            return _rebuild_parameter
        if module == "torch" and name in STORAGE_DTYPES:
            return StorageType(name, STORAGE_DTYPES[name])
        if (module, name) in (("torch.storage", "UntypedStorage"), ("torch", "UntypedStorage")):
            return StorageType(name, None)
        if module == "torch" and name in TORCH_DTYPES:
            return TORCH_DTYPES[name]
        if (module, name) == ("torch", "Size"):
            return tuple
        if (module, name) == ("torch", "device"):
            return str
        if (module, name) == ("_codecs", "encode"):
            return codecs.encode
        if (module, name) in (("builtins", "set"), ("__builtin__", "set")):
            return set
        if (module, name) in (("builtins", "bytearray"), ("__builtin__", "bytearray")):
            return bytearray
        raise _reject_global(module, name)

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise FormatError(f"unsupported persistent id {str(pid)[:80]!r}")
        return self.load_storage(pid)

    def rebuild_v2(self, storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> Any:
        return self.rebuild(storage, offset, size, stride, None)

    def rebuild_v3(
        self, storage: Any, offset: Any, size: Any, stride: Any, grad: Any, hooks: Any, dtype: Any, *_: Any
    ) -> Any:
        if not isinstance(dtype, DType):
            raise FormatError(f"_rebuild_tensor_v3 needs a torch dtype, got {dtype!r}")
        return self.rebuild(storage, offset, size, stride, dtype)


def _rebuild_parameter(data: Any, requires_grad: Any = None, *_: Any) -> Any:
    """An `nn.Parameter` loads as its plain tensor: `requires_grad` belongs to the model's tensor it is loaded into."""
    return data


def _int_tuple(value: Any, what: str, path: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise fail(path, f"{what} {str(value)[:80]} is not a tuple of ints")
    return tuple(value)


def build_tensor(storage: Any, offset: Any, size: Any, stride: Any, dtype: DType | None) -> Tensor:
    """The tensor `storage[offset:]` viewed with `size` and `stride` (element units), lazily where the layout allows."""
    if not isinstance(storage, Storage):
        raise FormatError(f"tensor rebuilt from {type(storage).__name__}, not a storage")
    src = storage.src
    dtype = dtype or storage.dtype
    if dtype is None:
        raise fail(src.path, "an untyped storage is used without a dtype")
    shape, strides = _int_tuple(size, "tensor size", src.path), _int_tuple(stride, "tensor stride", src.path)
    if not isinstance(offset, int) or offset < 0:
        raise fail(src.path, f"invalid storage offset {offset!r}")
    if len(shape) != len(strides):
        raise fail(src.path, f"size {list(shape)} and stride {list(strides)} have different lengths")
    numel = checked_numel(shape, src.path, "tensor")
    if any(s < 0 for s in strides):
        raise fail(src.path, f"negative strides {list(strides)} are not supported")
    span = 0 if numel == 0 else offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + 1
    if span * dtype.itemsize > storage.nbytes:
        raise fail(
            src.path,
            f"tensor of size {list(shape)}, stride {list(strides)} at offset {offset} needs {span * dtype.itemsize} "
            f"bytes but its storage holds {storage.nbytes}",
        )
    if numel == 0:
        return Tensor.zeros(*shape, dtype=dtype)
    start = storage.offset + offset * dtype.itemsize
    kept = [i for i, n in enumerate(shape) if n > 1 and strides[i] > 0]
    order = sorted(kept, key=lambda i: -strides[i])
    expected = 1
    for i in reversed(order):
        if strides[i] != expected:
            return _gather_view(storage, start, shape, strides, dtype, span - offset)
        expected *= shape[i]
    base = src.tensor(start, (expected,), dtype, storage.byteorder)
    if order != kept:  # a permuted layout: permute on a compute device (DISK only copies contiguous runs)
        base = base.to(Device.DEFAULT)
    t = base.reshape(tuple(shape[i] for i in order)).permute(tuple(order.index(i) for i in kept))
    full = tuple(shape[i] if i in kept else 1 for i in range(len(shape)))
    return t.reshape(full).expand(shape)


def _gather_view(
    storage: Storage, start: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: DType, span: int
) -> Tensor:
    """A general strided view (overlapping or gapped): the span is read and gathered on the host."""
    import numpy as np

    flat = storage.src.tensor(start, (span,), dtype, storage.byteorder).to(Device.DEFAULT)
    index = np.zeros(shape, dtype=np.int64)
    for dim, (n, s) in enumerate(zip(shape, strides, strict=True)):
        index += (np.arange(n, dtype=np.int64) * s).reshape([-1 if i == dim else 1 for i in range(len(shape))])
    raw = np.frombuffer(bytes(flat.data()), dtype=np.uint8).reshape(span, dtype.itemsize)[index.reshape(-1)]
    return bytes_to_dtype(Tensor(raw.reshape(-1)), dtype).reshape(shape)


class _ZipArchive:
    """The entries of a torch zip file, with data offsets taken from the local headers."""

    def __init__(self, src: FileSource) -> None:
        self.src = src
        try:
            self.zip = zipfile.ZipFile(src.file)
        except (zipfile.BadZipFile, OSError, ValueError, struct.error) as e:
            raise fail(src.path, f"corrupt zip archive: {e}") from None
        infos = self.zip.infolist()
        roots = {info.filename.split("/", 1)[0] for info in infos}
        if len(roots) != 1 or not infos:
            raise fail(src.path, f"expected one root folder in the zip, found {sorted(roots)[:5]}")
        self.root = roots.pop()
        self.infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = info.filename
            if name.startswith("/") or ".." in name.split("/") or "\\" in name:
                raise fail(src.path, f"zip entry name {name!r} is absolute or leaves the archive")
            if name in self.infos:
                raise fail(src.path, f"duplicate zip entry {name!r}")
            self.infos[name] = info

    def has(self, name: str) -> bool:
        return f"{self.root}/{name}" in self.infos

    def data_range(self, name: str) -> tuple[zipfile.ZipInfo, int]:
        """(entry info, file offset of its data) after checking the local header against the central directory."""
        full = f"{self.root}/{name}"
        if full not in self.infos:
            raise fail(self.src.path, f"zip entry {full!r} is missing")
        info = self.infos[full]
        head = self.src.read(info.header_offset, 30, f"local header of {full!r}")
        if head[:4] != b"PK\x03\x04":
            raise fail(self.src.path, f"bad local header signature for {full!r}", info.header_offset)
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        local_name = self.src.read(info.header_offset + 30, name_len, f"local name of {full!r}")
        if local_name.decode("utf-8", "replace") != full:
            raise fail(
                self.src.path, f"local header name {local_name[:80]!r} differs from {full!r}", info.header_offset
            )
        start = info.header_offset + 30 + name_len + extra_len
        if start + info.compress_size > self.src.size:
            raise fail(self.src.path, f"zip entry {full!r} runs past the end of the file", start)
        return info, start

    def read(self, name: str, limit: int) -> bytes:
        """The (inflated) bytes of entry `name`, at most `limit` and at most 1000x its compressed size."""
        info, start = self.data_range(name)
        if info.file_size > limit:
            raise fail(self.src.path, f"zip entry {name!r} declares {info.file_size} bytes, above the limit {limit}")
        raw = self.src.read(start, info.compress_size, f"zip entry {name!r}")
        if info.compress_type == zipfile.ZIP_STORED:
            return raw[: info.file_size]
        if info.compress_type != zipfile.ZIP_DEFLATED:
            raise fail(self.src.path, f"zip entry {name!r} uses unsupported compression {info.compress_type}")
        if info.file_size > 1000 * max(info.compress_size, 1):
            raise fail(self.src.path, f"zip entry {name!r} inflates more than 1000x")
        inflater = zlib.decompressobj(-15)
        try:
            out = inflater.decompress(raw, info.file_size + 1)
        except zlib.error as e:
            raise fail(self.src.path, f"zip entry {name!r} does not inflate: {e}") from None
        if len(out) != info.file_size:
            raise fail(self.src.path, f"zip entry {name!r} inflates to a size other than the declared {info.file_size}")
        return out


def _storage_numel(pid: tuple[Any, ...], path: str) -> tuple[StorageType, str, int]:
    if len(pid) < 5 or not isinstance(pid[1], StorageType) or not isinstance(pid[4], int) or pid[4] < 0:
        raise fail(path, f"malformed storage id {str(pid)[:120]}")
    return pid[1], str(pid[2]), pid[4]


def _load_zip(src: FileSource) -> Any:
    archive = _ZipArchive(src)
    byteorder = "little"
    if archive.has("byteorder"):
        byteorder = archive.read("byteorder", 16).decode("ascii", "replace").strip()
        if byteorder not in ("little", "big"):
            raise fail(src.path, f"unknown byteorder {byteorder!r}")
    storages: dict[str, Storage] = {}

    def load_storage(pid: tuple[Any, ...]) -> Storage:
        stype, key, numel = _storage_numel(pid, src.path)
        if key not in storages:
            info, start = archive.data_range(f"data/{key}")
            itemsize = stype.dtype.itemsize if stype.dtype else 1
            if info.compress_type != zipfile.ZIP_STORED:
                raise fail(src.path, f"storage {key!r} is compressed; torch writes storages uncompressed")
            if numel * itemsize > info.file_size:
                raise fail(src.path, f"storage {key!r} declares {numel} elements but holds {info.file_size} bytes")
            storages[key] = Storage(src, start, numel * itemsize, stype.dtype, byteorder)
        return storages[key]

    pkl_info = archive.infos.get(f"{archive.root}/data.pkl")
    if pkl_info is None:
        raise fail(src.path, "zip archive has no data.pkl: not a torch file")
    data = archive.read("data.pkl", min(MAX_PICKLE, src.size))
    _scan_opcodes(io.BytesIO(data), src.path)
    return _unpickle(io.BytesIO(data), src.path, load_storage)


def _unpickle(stream: Any, path: str, load_storage: Callable[[tuple[Any, ...]], Any]) -> Any:
    try:
        return _Unpickler(stream, load_storage, build_tensor).load()
    except FormatError as e:
        if str(e).startswith(path):
            raise
        raise FormatError(f"{path}: {e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
        raise fail(path, f"corrupt pickle: {type(e).__name__}: {e}") from None


def _load_legacy(src: FileSource) -> Any:
    def plain(reader: ClampedReader, what: str) -> Any:
        start = reader.tell()
        _scan_opcodes(ClampedReader(src, start, src.size), src.path)
        reader.pos = start
        return _unpickle(
            reader, src.path, lambda pid: (_ for _ in ()).throw(FormatError(f"unexpected storage in {what}"))
        )

    reader = ClampedReader(src, 0, src.size)
    if plain(reader, "the magic number") != LEGACY_MAGIC:
        raise fail(src.path, "not a PyTorch file (neither a zip archive nor the legacy magic number)")
    if plain(reader, "the protocol version") != LEGACY_PROTOCOL:
        raise fail(src.path, "unsupported legacy protocol version")
    sys_info = plain(reader, "the system info")
    little = not isinstance(sys_info, dict) or sys_info.get("little_endian", True)
    object_start = reader.tell()
    # pass 1: learn each storage's type and size (offsets are known only after the key list)
    declared: dict[str, tuple[StorageType, int]] = {}

    def record(pid: tuple[Any, ...]) -> None:
        stype, key, numel = _storage_numel(pid, src.path)
        if stype.dtype is None:
            raise fail(src.path, "untyped storages do not occur in legacy files")
        declared.setdefault(key, (stype, numel))

    _scan_opcodes(ClampedReader(src, object_start, src.size), src.path)
    try:
        _Unpickler(reader, record, lambda *a: None).load()
    except FormatError:
        raise
    except Exception as e:
        raise fail(src.path, f"corrupt pickle: {type(e).__name__}: {e}") from None
    keys = plain(reader, "the storage key list")
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
        raise fail(src.path, "the legacy storage key list is malformed")
    storages: dict[str, Storage] = {}
    position = reader.tell()
    for key in keys:
        if key not in declared:
            raise fail(src.path, f"storage {key!r} is listed but never used")
        stype, _ = declared[key]
        assert stype.dtype is not None
        (count,) = src.unpack("<q" if little else ">q", position, f"element count of storage {key!r}")
        nbytes = count * stype.dtype.itemsize
        if count < 0 or position + 8 + nbytes > src.size:
            raise fail(src.path, f"storage {key!r} declares {count} elements, more than the file holds", position)
        storages[key] = Storage(src, position + 8, nbytes, stype.dtype, "little" if little else "big")
        position += 8 + nbytes

    def load_storage(pid: tuple[Any, ...]) -> Storage:
        _, key, _ = _storage_numel(pid, src.path)
        if key not in storages:
            raise fail(src.path, f"storage {key!r} is not in the key list")
        base = storages[key]
        view = pid[5] if len(pid) > 5 else None
        if view is None:
            return base
        if not (isinstance(view, tuple) and len(view) == 3 and all(isinstance(v, int) for v in view[1:])):
            raise fail(src.path, f"malformed storage view {str(view)[:80]}")
        _, view_offset, view_size = view
        assert base.dtype is not None
        if view_offset < 0 or view_size < 0 or (view_offset + view_size) * base.dtype.itemsize > base.nbytes:
            raise fail(src.path, f"storage view {view} runs outside storage {key!r}")
        start = base.offset + view_offset * base.dtype.itemsize
        return Storage(src, start, view_size * base.dtype.itemsize, base.dtype, base.byteorder)

    return _unpickle(ClampedReader(src, object_start, src.size), src.path, load_storage)


def torch_load(fn: Any) -> Any:
    """Load a file written by `torch.save` (zip or legacy format) without torch: what the pickle holds, usually an
    `OrderedDict` of lazy tensors viewing the file on the DISK device (nested dicts and lists are kept)."""
    with FileSource(fn) as src:
        if src.size >= 4 and src.read(0, 4, "the file signature") == b"PK\x03\x04":
            return _load_zip(src)
        if src.size >= 2 and src.read(0, 1, "the file signature") == b"\x80":
            return _load_legacy(src)
        raise fail(src.path, "not a PyTorch file (neither a zip archive nor a pickle stream)", 0)
