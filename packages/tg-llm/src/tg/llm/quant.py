"""Weights as the GGUF file stores them, on the device, and the fused dequantise-matmul that reads them.

A weight matrix stays quantized in device memory, in the layout its kernel reads (the "Kernel layouts" table below:
F32 as is, F16 as float16 where the CPU converts float16 vectors (F16C; `half_vectors`), F16 elsewhere, BF16 and
Q4_K as the file's bytes typed uint32, Q8_0 and Q6_K repacked once at load into uint32 words plus float32 scales).
`linear(x, w)` builds the dequantisation as tensor operations feeding the matmul's reduction, so the scheduler fuses
both into one kernel: each weight byte is read once per use and no float32 copy of the weights ever exists (a
1B-parameter Q4_K model takes ~0.6 GB on the device, not 4 GB). `dequantize` (raw blocks) and `Weight.dequantize`
(any layout) give the float32 values.

Dequantisation formulas (ggml's reference `dequantize_row_*`, in the same float32 operation order as the `gguf`
package's numpy dequantiser, so the values are bit-identical):

| type | block: elements / bytes | layout | value |
| --- | --- | --- | --- |
| Q8_0 | 32 / 34 | f16 d, 32 int8 q | d * q |
| Q4_K | 256 / 144 | f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 of nibbles | (d*sc) * q - (dmin*mn) per 32 |
| Q6_K | 256 / 210 | 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, f16 d | (d*sc) * (q - 32) per 16 |
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tg.ir import DType, dtypes
from tg.ir.helpers import ContextVar
from tg.tensor import Device, Tensor

# 1: a Q8_0 matrix-vector product quantises its input to int8 per block of 32 (`quantize_blocks`, as llama.cpp
# does) and multiplies integers (`_q8_0_int8_linear`); 0: the input stays float32 (exact: `linear`'s float path)
LLM_INT8_DOT = ContextVar("LLM_INT8_DOT", 1)

# ggml type id -> (name, elements per block, bytes per block); native types have block size 1
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    30: ("BF16", 1, 2),
    8: ("Q8_0", 32, 34),
    12: ("Q4_K", 256, 144),
    14: ("Q6_K", 256, 210),
}
NATIVE_DTYPES: dict[int, DType] = {0: dtypes.float32, 1: dtypes.float16, 30: dtypes.bfloat16}


class UnsupportedWeightType(ValueError):
    """A tensor of the model uses a ggml type tg-llm cannot compute with."""


def type_name(ggml_type: int) -> str:
    """ggml's name of a type id (`Q4_K`), or `type N` for one tg does not know."""
    known = {2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 10: "Q2_K", 11: "Q3_K", 13: "Q5_K", 16: "IQ2_XXS"}
    return GGML_TYPES[ggml_type][0] if ggml_type in GGML_TYPES else known.get(ggml_type, f"type {ggml_type}")


def check_supported(name: str, ggml_type: int) -> None:
    """Raise UnsupportedWeightType naming the tensor and the type when `ggml_type` is not one tg-llm runs."""
    if ggml_type not in GGML_TYPES:
        supported = ", ".join(v[0] for v in GGML_TYPES.values())
        raise UnsupportedWeightType(f"tensor {name!r} is stored as {type_name(ggml_type)}; tg-llm supports {supported}")


@dataclass
class Weight:
    """A matrix of logical shape (rows, cols) whose `data` is in the layout `linear` reads (see `pack`).

    Constructed from the stored format (native values (rows, cols) or raw blocks (rows, cols // block elements,
    block bytes) of `ggml_type`); `__post_init__` brings it into the kernel layout once (`pack`)."""

    data: Tensor
    ggml_type: int
    rows: int
    cols: int

    def __post_init__(self) -> None:
        self.data = pack(self.data, self.ggml_type, self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        """Bytes the weight occupies on the device (= bytes read by one matrix-vector product)."""
        return int(self.data.nbytes)

    def dequantize(self) -> Tensor:
        """The float32 values (rows, cols), lazily (fuses into whatever consumes them)."""
        if _is_words(self.data, self.ggml_type) and self.ggml_type == 14:
            words, scales = _q6_k_words(self.data, self.rows, self.cols)
            parts = (_q6_k_values(words, h, k, i) for h in range(2) for k in range(4) for i in range(4))
            q = Tensor.stack(*parts, dim=-1).reshape(self.rows, -1, 8, 2, 4, 4)  # (rows, blocks, u, h, k, i)
            q = q.permute(0, 1, 3, 4, 2, 5).reshape(self.rows, -1, 2, 4, 2, 16)  # value 128h + 32k + 4u + i
            values = scales.reshape(self.rows, -1, 2, 4, 2, 1) * q.cast(dtypes.float32)
            return values.reshape(self.rows, self.cols)
        if _is_words(self.data, self.ggml_type) and self.ggml_type == 12:
            words, scales, offsets = _q4_k_words(self.data, self.rows, self.cols)
            down = Tensor([[1, 1 << 8, 1 << 16, 1 << 24], [1 << 4, 1 << 12, 1 << 20, 1 << 28]], dtype=dtypes.uint32,
                          device=words.device).reshape(2, 1, 4)  # fmt: skip
            nibbles = (words.reshape(self.rows, -1, 4, 1, 8, 1) // down) & 15  # (rows, blocks, c, h, u, i)
            group = (self.rows, -1, 4, 2, 1, 1)  # sub-block 2c + h holds the values 64c + 32h + 4u + i
            values = scales.reshape(group) * nibbles.cast(dtypes.float32) - offsets.reshape(group)
            return values.reshape(self.rows, self.cols)
        if _is_words(self.data, self.ggml_type):  # shifts by a small tensor of powers of two, not a cat (adds 0.0)
            if self.ggml_type == 8:
                words, scales = _q8_0_words(self.data, self.rows, self.cols)
                up = Tensor([1 << 24, 1 << 16, 1 << 8, 1], dtype=dtypes.uint32, device=words.device).reshape(4, 1)
                values = ((words.unsqueeze(-2) * up).bitcast(dtypes.int32) >> 24).cast(dtypes.float32)
                return (scales.reshape(self.rows, -1, 1, 1) * values).reshape(self.rows, self.cols)
            down = Tensor([1, 1 << 16], dtype=dtypes.uint32, device=self.data.device)
            halves = (self.data.unsqueeze(-1) // down) & 0xFFFF  # (rows, cols // 2, 2)
            values = (halves << 16).bitcast(dtypes.float32) if self.ggml_type == 30 else _f16_bits_to_float(halves)
            return values.reshape(self.rows, self.cols)
        return dequantize(self.data, self.ggml_type).reshape(self.rows, self.cols)


# Kernel layouts (`pack`): the CPU code generator vectorises only 32/64-bit loads and arithmetic, so the matrices
# the decode step streams are read as uint32 words and decoded with 32-bit integer operations, which it turns into
# SIMD code (8 weights per AVX2 instruction) instead of one scalar uint8/float16 load and conversion per weight:
# - F16/BF16: the file's bytes as is, typed uint32 (rows, cols // 2): word j holds the values 2j (low half) and
#   2j + 1 (high half); float16 is widened exactly with integer operations (`_f16_bits_to_float`);
# - Q8_0: repacked once at load into one uint32 buffer: the int8 values, (rows, blocks, 8) words whose byte i of
#   word w is the value 8i + w of the block (so the 8 words of a block line up with 8 consecutive inputs for each
#   i), followed by the block scales as float32 (rows, blocks): 36 bytes per 32 weights instead of 34;
# - Q4_K: repacked once at load into one uint32 buffer: the 128 bytes of nibbles of each block as (rows, blocks, 32)
#   words, word 8c + u (c < 4, u < 8) byte i: low nibble = value 64c + 4u + i, high = 64c + 32 + 4u + i (the file's
#   words 4-35), followed by the 8 sub-block scales d * scale and the 8 offsets dmin * min as float32 (rows,
#   blocks, 16): 192 bytes per 256 weights instead of 144 (the 6-bit scales decoded once, not by 16 small kernels
#   per matrix and token); the input is permuted once to the nibbles' order, so the 8 words u meet 8 consecutive
#   inputs;
# - Q6_K (210-byte blocks are not word-aligned): repacked once at load into one uint32 buffer: the 192 bytes of low
#   nibbles and high bits as (rows, blocks, 48) words, followed by the 16 group scales d * scale as float32 (rows,
#   blocks, 16): 256 bytes per 256 weights instead of 210; the input is permuted once into the words' order;
# - F16 where `half_vectors` says so (x86 with F16C): float16 as stored, read by `x @ W.T` (one vcvtph2ps per 8
#   weights instead of ~12 integer ops);
# - F32: as stored.


def _is_words(data: Tensor, ggml_type: int) -> bool:
    """Whether `data` is already in its kernel layout (Q4_K: the packed buffer, not the file's blocks as words)."""
    if ggml_type == 12:
        return data.dtype == dtypes.uint32 and data.ndim == 1
    return data.dtype == dtypes.uint32 and ggml_type in (1, 30, 8, 14)


@functools.cache
def half_vectors(device: str) -> bool:
    """Whether F16 matrices stay float16 on `device`, read by a plain `x @ W.T` whose kernel loads float16 vectors
    and widens them with one conversion: where the C renderer makes float16 vector loads (`half_vector_loads`)
    and the compiler's target converts them in one instruction (`has_half_conversions`: F16C's vcvtph2ps on
    x86). Elsewhere (no F16C, e.g. CPU:CLANG:x86-64-v2; CPU:LLVM; GPUs, untried) F16 is read as uint32 words."""
    dev = Device[device]
    if not getattr(dev.renderer, "half_vector_loads", False):
        return False
    return bool(getattr(dev.compiler, "has_half_conversions", False))


def pack(data: Tensor, ggml_type: int, rows: int, cols: int) -> Tensor:
    """`data` (stored format, or already packed) in the layout `linear` reads (see the table above), realized."""
    check_supported("<weight>", ggml_type)
    if _is_words(data, ggml_type):
        return data
    if ggml_type == 1 and data.dtype == dtypes.float16 and half_vectors(data.device):
        return data.reshape(rows, cols).realize()
    if ggml_type in (1, 30) and cols % 2 == 0:
        return _pair_words(data.reshape(rows, cols))
    if ggml_type == 8:
        blocks = data.reshape(rows, cols // 32, 34)
        q = blocks[..., 2:34].cast(dtypes.uint32).reshape(rows, cols // 32, 4, 8)  # value 8i + w
        words = q[:, :, 0] | (q[:, :, 1] << 8) | (q[:, :, 2] << 16) | (q[:, :, 3] << 24)
        scales = _f16_at(blocks, 0).bitcast(dtypes.uint32)
        return Tensor.cat(words.reshape(-1), scales.reshape(-1)).contiguous().realize()
    if ggml_type == 14:
        blocks = data.reshape(rows, cols // 256, 210)
        b = blocks[..., :192].reshape(rows, cols // 256, 48, 4).cast(dtypes.uint32)
        words = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)
        scales = (_f16_at(blocks, 208) * blocks[..., 192:208].bitcast(dtypes.int8).cast(dtypes.float32)).bitcast(
            dtypes.uint32
        )
        return Tensor.cat(words.reshape(-1), scales.reshape(-1)).contiguous().realize()
    if ggml_type == 12:
        if data.dtype == dtypes.uint32:  # the file's blocks as words (rows, blocks, 36)
            words = data.reshape(rows, cols // 256, 36)
        else:
            b = data.reshape(rows, cols // 256, 36, 4).cast(dtypes.uint32)
            words = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)
        factors = Tensor.cat(*_q4_k_scales(words), dim=-1).bitcast(dtypes.uint32)  # (rows, blocks, 16)
        return Tensor.cat(words[..., 4:].reshape(-1), factors.reshape(-1)).contiguous().realize()
    return data


def _pair_words(values: Tensor) -> Tensor:
    """A (rows, cols) float16/bfloat16 tensor as uint32 words (rows, cols // 2) of the same bytes."""
    bits = values.bitcast(dtypes.uint16).cast(dtypes.uint32)
    rows, cols = values.shape
    pairs = bits.reshape(rows, cols // 2, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 16)).contiguous().realize()


def _f16_bits_to_float(h: Tensor) -> Tensor:
    """uint32 holding float16 bits (< 2**16) -> the float32 of the same value, exactly, in 32-bit integer ops:
    the exponent and mantissa shifted into float32's places and scaled by 2**112 (the bias difference; float16
    subnormals land on float32 subnormals, so the product is exact), infinities and NaNs kept, the sign or'ed in."""
    magnitude = (h & 0x7FFF) << 13
    value = magnitude.bitcast(dtypes.float32) * float(2.0**112)
    value = ((h & 0x7C00) == 0x7C00).where((magnitude | 0x7F800000).bitcast(dtypes.float32), value)
    return (value.bitcast(dtypes.uint32) | ((h & 0x8000) << 16)).bitcast(dtypes.float32)


def _half_words_to_float(words: Tensor, ggml_type: int) -> tuple[Tensor, Tensor]:
    """float32 of the low and high halves of uint32 words holding float16 (type 1) or bfloat16 (type 30) pairs."""
    if ggml_type == 30:
        return (words << 16).bitcast(dtypes.float32), (words & 0xFFFF0000).bitcast(dtypes.float32)
    return _f16_bits_to_float(words & 0xFFFF), _f16_bits_to_float(words >> 16)


def _q8_0_words(data: Tensor, rows: int, cols: int) -> tuple[Tensor, Tensor]:
    """A packed Q8_0 buffer as (words (rows, blocks, 8) uint32, scales (rows, blocks) float32)."""
    nb = cols // 32
    n = rows * nb * 8
    return data[:n].reshape(rows, nb, 8), data[n:].bitcast(dtypes.float32).reshape(rows, nb)


def _q6_k_words(data: Tensor, rows: int, cols: int) -> tuple[Tensor, Tensor]:
    """A packed Q6_K buffer as (words (rows, blocks, 48) uint32, group scales (rows, blocks, 16) float32)."""
    nb = cols // 256
    n = rows * nb * 48
    return data[:n].reshape(rows, nb, 48), data[n:].bitcast(dtypes.float32).reshape(rows, nb, 16)


def _q6_k_values(words: Tensor, h: int, k: int, i: int) -> Tensor:
    """The signed 6-bit values 128h + 32k + 4u + i (u < 8, the last axis) of Q6_K words, int32 (rows, blocks, 8):
    a nibble of the low-bits words (low for k < 2, high after) joined with 2 bits of the high-bits words."""
    low = words[..., 16 * h + 8 * (k % 2) : 16 * h + 8 * (k % 2) + 8]
    high = words[..., 32 + 8 * h : 40 + 8 * h]
    q = ((low >> (8 * i + 4 * (k // 2))) & 15) | (((high >> (8 * i + 2 * k)) & 3) << 4)
    return q.bitcast(dtypes.int32) - 32


def _q6_k_linear(x: Tensor, w: Weight) -> Tensor:
    """x @ w.T for packed Q6_K (see the layout table): one reduction over (block, word u) of the 8 (h, k) groups of
    32 values' `scale * sum_i x * q`; a word's 4 values share one of two scales (u < 4 or not), picked per lane."""
    words, scales = _q6_k_words(w.data, w.rows, w.cols)
    nb = w.cols // 256
    lead = x.shape[:-1]
    L = len(lead)
    # inputs in the words' order: (block, h, k, byte i, word u) from value 128h + 32k + 4u + i
    xp = x.reshape(*lead, nb, 2, 4, 8, 4).permute(*range(L), L, L + 1, L + 2, L + 4, L + 3).contiguous().unsqueeze(L)
    upper = Tensor.arange(8, device=words.device) >= 4  # lanes u of the second 16 values of a group of 32
    total: Tensor | None = None
    for h in range(2):
        for k in range(4):
            j = 8 * h + 2 * k
            dot: Tensor | None = None
            for i in range(4):
                term = xp[..., h, k, i, :] * _q6_k_values(words, h, k, i).cast(dtypes.float32)
                dot = term if dot is None else dot + term
            assert dot is not None
            scale = upper.where(scales[..., j + 1 : j + 2], scales[..., j : j + 1])
            total = scale * dot if total is None else total + scale * dot
    assert total is not None
    return total.sum((-2, -1)).contiguous()


def _q4_k_scales(words: Tensor) -> tuple[Tensor, Tensor]:
    """The 8 sub-block scales d * scale and offsets dmin * min (float32 (rows, blocks, 8) each) of Q4_K blocks given
    as the file's words (rows, blocks, 36): d and dmin in word 0, the 12 bytes of 6-bit scales and mins in 1-3."""
    d, dmin = _f16_bits_to_float(words[..., 0:1] & 0xFFFF), _f16_bits_to_float(words[..., 0:1] >> 16)

    def byte(k: int) -> Tensor:  # byte k of the 12 scale bytes, (rows, blocks, 1)
        return (words[..., 1 + k // 4 : 2 + k // 4] >> (8 * (k % 4))) & 255

    scales, mins = [], []
    for j in range(8):
        if j < 4:
            scales.append(byte(j) & 63)
            mins.append(byte(j + 4) & 63)
        else:
            scales.append((byte(j + 4) & 15) | ((byte(j - 4) >> 6) << 4))
            mins.append((byte(j + 4) >> 4) | ((byte(j) >> 6) << 4))
    sc, mn = Tensor.cat(*scales, dim=-1).cast(dtypes.float32), Tensor.cat(*mins, dim=-1).cast(dtypes.float32)
    return d * sc, dmin * mn


def _q4_k_words(data: Tensor, rows: int, cols: int) -> tuple[Tensor, Tensor, Tensor]:
    """A packed Q4_K buffer as (nibble words (rows, blocks, 32) uint32, scales and offsets (rows, blocks, 8))."""
    nb = cols // 256
    n = rows * nb * 32
    factors = data[n:].bitcast(dtypes.float32).reshape(rows, nb, 16)
    return data[:n].reshape(rows, nb, 32), factors[..., :8], factors[..., 8:]


def _q4_k_linear(x: Tensor, w: Weight) -> Tensor:
    """x @ w.T for packed Q4_K (see the layout table): one reduction over (block, word u) of the 8 sub-blocks'
    `scale_j * sum_i x * nibble - offset_j * sum_i x`."""
    words, scales, offsets = _q4_k_words(w.data, w.rows, w.cols)
    nb = w.cols // 256
    lead = x.shape[:-1]
    L = len(lead)
    # inputs in the words' order: (block, chunk c, half h, byte i, word u) from value 64c + 32h + 4u + i
    xp = x.reshape(*lead, nb, 4, 2, 8, 4).permute(*range(L), L, L + 1, L + 2, L + 4, L + 3).contiguous().unsqueeze(L)
    total: Tensor | None = None
    for j in range(8):
        c, h = divmod(j, 2)
        qs = words[..., 8 * c : 8 * c + 8]  # (rows, blocks, 8)
        dot: Tensor | None = None
        xsum: Tensor | None = None
        for i in range(4):
            xi = xp[..., c, h, i, :]
            nibble = ((qs >> (8 * i + 4 * h)) & 15).cast(dtypes.float32)
            dot, xsum = (xi * nibble, xi) if dot is None or xsum is None else (dot + xi * nibble, xsum + xi)
        assert dot is not None and xsum is not None
        term = scales[..., j : j + 1] * dot - offsets[..., j : j + 1] * xsum
        total = term if total is None else total + term
    assert total is not None
    return total.sum((-2, -1)).contiguous()


def quantize_blocks(x: Tensor) -> tuple[Tensor, Tensor]:
    """x (..., cols) float32 -> (q, d): int8 values q (..., cols // 32, 4, 8) held as int32, value 32b + 8i + w at
    [b, i, w] (the lanes of packed Q8_0 words), and one float32 scale d (..., cols // 32) per block of 32, with
    x ~ d * q: d = max|x| / 127 over the block, q = x / d rounded to the nearest integer, halves to even (ggml's
    `quantize_row_q8_0` multiplies by 1 / d instead and keeps d as float16); an all-zero block gets d = 0, q = 0."""
    lead = x.shape[:-1]
    blocks = x.reshape(*lead, x.shape[-1] // 32, 32)
    d = (blocks.abs().max(-1) / 127.0).contiguous().unsqueeze(-1)  # stored, so q is one elementwise kernel
    q = (d == 0).where(0.0, blocks / d).round().cast(dtypes.int32)
    return q.reshape(*lead, x.shape[-1] // 32, 4, 8).contiguous(), d.squeeze(-1)


class Activations:
    """An input x (..., cols) that several matrices read (q, k and v; gate and up): `linear(Activations(x), w)`
    quantises it for the int8 path once (`int8_blocks`) instead of once per matrix (2 kernels each)."""

    def __init__(self, x: Tensor) -> None:
        self.x = x.cast(dtypes.float32)
        self._int8: tuple[Tensor, Tensor] | None = None

    def int8_blocks(self) -> tuple[Tensor, Tensor]:
        """`quantize_blocks(x)`, built on the first call and shared by the later ones."""
        if self._int8 is None:
            self._int8 = quantize_blocks(self.x)
        return self._int8


def _q8_0_int8_linear(x: Activations, w: Weight) -> Tensor:
    """x @ w.T for packed Q8_0 with x quantised to int8 per block (`quantize_blocks`): per (block, word) the 4
    products of int8 weights and int8 inputs summed in int32 (exact), converted to float once and scaled by the
    weight's and the input's block scales. Integer multiplies and adds instead of one int->float conversion and
    one FMA per weight: a third fewer vector instructions per 8 words than the float path."""
    words, scales = _q8_0_words(w.data, w.rows, w.cols)
    q, d = x.int8_blocks()
    q = q.unsqueeze(-4)  # (..., 1, nb, 4, 8): broadcast over the rows
    dots = q[..., 0, :] * _int8_lane_int(words, 0)
    for i in range(1, 4):
        dots = dots + q[..., i, :] * _int8_lane_int(words, i)
    block_scales = scales * d.unsqueeze(-2)  # (..., rows, nb)
    return (dots.cast(dtypes.float32) * block_scales.unsqueeze(-1)).sum((-2, -1)).contiguous()


def _int8_lane_int(words: Tensor, i: int) -> Tensor:
    """Byte i of each uint32 word as a signed int32 (shifted to the top, arithmetic shift down)."""
    top = words << (24 - 8 * i) if i < 3 else words
    return top.bitcast(dtypes.int32) >> 24


def _int8_lane(words: Tensor, i: int) -> Tensor:
    """Byte i of each uint32 word as a signed value in float32."""
    return _int8_lane_int(words, i).cast(dtypes.float32)


def _f16_at(blocks: Tensor, offset: int) -> Tensor:
    """The little-endian float16 at byte `offset` of every block, as float32 of shape (..., 1)."""
    lo = blocks[..., offset : offset + 1].cast(dtypes.uint16)
    hi = blocks[..., offset + 1 : offset + 2].cast(dtypes.uint16)
    return (lo | (hi << 8)).bitcast(dtypes.float16).cast(dtypes.float32)


def _q8_0_parts(blocks: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """Q8_0 as (integer values (..., 1, 32), scale (..., 1, 1), no offset)."""
    q = blocks[..., 2:34].bitcast(dtypes.int8).cast(dtypes.float32)
    return q.unsqueeze(-2), _f16_at(blocks, 0).unsqueeze(-1), None


def _q4_k_parts(blocks: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """Q4_K as (nibbles (..., 8, 32), d*scale (..., 8, 1), dmin*min (..., 8, 1)): value = scale * q - offset."""
    lead = blocks.shape[:-1]
    d, dmin = _f16_at(blocks, 0), _f16_at(blocks, 2)
    s_lo, s_mid, s_hi = blocks[..., 4:8], blocks[..., 8:12], blocks[..., 12:16]
    scales = Tensor.cat(s_lo & 63, (s_hi & 15) | ((s_lo >> 6) << 4), dim=-1).cast(dtypes.float32)
    mins = Tensor.cat(s_mid & 63, (s_hi >> 4) | ((s_mid >> 6) << 4), dim=-1).cast(dtypes.float32)
    qs = blocks[..., 16:144].reshape(*lead, 4, 1, 32)
    q = Tensor.cat(qs & 15, qs >> 4, dim=-2).reshape(*lead, 8, 32).cast(dtypes.float32)
    return q, (d * scales).reshape(*lead, 8, 1), (dmin * mins).reshape(*lead, 8, 1)


def _q6_k_parts(blocks: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """Q6_K as (6-bit values - 32 (..., 16, 16), d*scale (..., 16, 1), no offset)."""
    lead = blocks.shape[:-1]
    d = _f16_at(blocks, 208)
    scale = (d * blocks[..., 192:208].bitcast(dtypes.int8).cast(dtypes.float32)).reshape(*lead, 16, 1)
    halves = []
    for h in range(2):  # each half: 64 bytes of low nibbles and 32 bytes of high bits give 128 values
        ql = blocks[..., 64 * h : 64 * h + 64].reshape(*lead, 1, 2, 32)
        low = Tensor.cat(ql & 15, ql >> 4, dim=-3).reshape(*lead, 4, 32)  # outputs 32k + l, k = 0..3
        qh = blocks[..., 128 + 32 * h : 160 + 32 * h].reshape(*lead, 1, 32)
        high = Tensor.cat(qh & 3, (qh >> 2) & 3, (qh >> 4) & 3, (qh >> 6) & 3, dim=-2)
        halves.append(low | (high << 4))
    q = Tensor.cat(*halves, dim=-2).cast(dtypes.int8) - 32  # (..., 8, 32)
    return q.reshape(*lead, 16, 16).cast(dtypes.float32), scale, None


# ggml type -> its blocks split into (integer values per group, group scale, group offset or None)
BLOCK_PARTS = {8: _q8_0_parts, 12: _q4_k_parts, 14: _q6_k_parts}


def _dequantize_blocks(blocks: Tensor, ggml_type: int) -> Tensor:
    q, scale, offset = BLOCK_PARTS[ggml_type](blocks)
    values = scale * q if offset is None else scale * q - offset
    return values.reshape(*blocks.shape[:-1], q.shape[-2] * q.shape[-1])


def dequant_q8_0(blocks: Tensor) -> Tensor:
    """(..., 34) uint8 Q8_0 blocks -> (..., 32) float32."""
    return _dequantize_blocks(blocks, 8)


def dequant_q4_k(blocks: Tensor) -> Tensor:
    """(..., 144) uint8 Q4_K blocks -> (..., 256) float32."""
    return _dequantize_blocks(blocks, 12)


def dequant_q6_k(blocks: Tensor) -> Tensor:
    """(..., 210) uint8 Q6_K blocks -> (..., 256) float32."""
    return _dequantize_blocks(blocks, 14)


DEQUANTIZERS = {8: dequant_q8_0, 12: dequant_q4_k, 14: dequant_q6_k}


def dequantize(data: Tensor, ggml_type: int) -> Tensor:
    """float32 values of native data (any shape) or of raw blocks (..., blocks, block bytes) -> (..., elements)."""
    if ggml_type in NATIVE_DTYPES:
        return data.cast(dtypes.float32)
    check_supported("<data>", ggml_type)
    values = DEQUANTIZERS[ggml_type](data)
    return values.reshape(*values.shape[:-2], values.shape[-2] * values.shape[-1])


def linear(x: Tensor | Activations, w: Weight) -> Tensor:
    """`x @ w.T` in float32 for x of shape (..., cols), reading the weight in its kernel layout (`pack`).

    F16/BF16 words: the inputs split into even and odd positions (two small kernels, shared by every matrix that
    reads the same x), then one reduction over the words of `x_even * low + x_odd * high`. Q8_0 words: one
    reduction over (block, word) of `scale * sum_i x_i * int8_i` (the four inputs of a word are 8 apart, so the
    8 words of a block meet 8 consecutive inputs); with `LLM_INT8_DOT=1` (the default) x is first quantised to
    int8 per block and the sum over i is in integers (`_q8_0_int8_linear`; pass `Activations(x)` to share that
    quantisation between matrices). Other quantized blocks are split into integer values, a scale
    and an offset per group of 16 or 32 values; the dot product of x with the integers of each group is reduced
    first and scaled once per group (`sum_g scale_g * (x . q_g) - offset_g * sum(x_g)`). The scheduler fuses each
    expression into one kernel; the product is stored (`contiguous`), so what consumes it (SiLU, the gate's
    product with the up projection, the residual add) is a small kernel of its own instead of a second reduction
    or a uint8 embedding load in the matrix kernel, either of which keeps the optimiser from vectorising it."""
    shared = x if isinstance(x, Activations) else Activations(x)
    x = shared.x
    lead = x.shape[:-1]
    if _is_words(w.data, w.ggml_type):
        if w.ggml_type == 12:
            return _q4_k_linear(x, w)
        if w.ggml_type == 14:
            return _q6_k_linear(x, w)
        if w.ggml_type == 8 and LLM_INT8_DOT.value:
            return _q8_0_int8_linear(shared, w)
        if w.ggml_type == 8:
            words, scales = _q8_0_words(w.data, w.rows, w.cols)
            nb = w.cols // 32
            xb = x.reshape(*lead, 1, nb, 4, 8)
            dots = xb[..., 0, :] * _int8_lane(words, 0)
            for i in range(1, 4):
                dots = dots + xb[..., i, :] * _int8_lane(words, i)
            return (dots * scales.reshape(w.rows, nb, 1)).sum((-2, -1)).contiguous()
        pairs = x.reshape(*lead, w.cols // 2, 2)
        even, odd = pairs[..., 0].contiguous().unsqueeze(-2), pairs[..., 1].contiguous().unsqueeze(-2)
        lo, hi = _half_words_to_float(w.data, w.ggml_type)
        return (even * lo + odd * hi).sum(-1).contiguous()
    if w.ggml_type in NATIVE_DTYPES:
        return (x @ w.data.cast(dtypes.float32).T).contiguous()
    q, scale, offset = BLOCK_PARTS[w.ggml_type](w.data)  # (N, nb, G, gs), (N, nb, G, 1)
    N, nb, G, gs = q.shape
    xg = x.reshape(*lead, 1, nb, G, gs)
    dots = (xg * q).sum(-1)  # (..., N, nb, G)
    out = (dots * scale.reshape(N, nb, G)).sum((-1, -2))
    if offset is not None:
        out = out - (xg.sum(-1) * offset.reshape(N, nb, G)).sum((-1, -2))
    return out.contiguous()
