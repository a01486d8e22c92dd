"""Weights as the GGUF file stores them, on the device, and the fused dequantise-matmul that reads them.

A weight matrix stays in its file format in device memory: float32/float16/bfloat16 as is, Q8_0, Q4_K and Q6_K
as their raw blocks (uint8 of shape (rows, blocks per row, block bytes)). `linear(x, w)` builds the dequantisation
of the blocks as tensor operations feeding the matmul's reduction, so the scheduler fuses both into one kernel:
each weight byte is read once per use and no float32 copy of the weights ever exists (a 1B-parameter Q4_K model
takes ~0.6 GB on the device, not 4 GB).

Dequantisation formulas (ggml's reference `dequantize_row_*`, in the same float32 operation order as the `gguf`
package's numpy dequantiser, so the values are bit-identical):

| type | block: elements / bytes | layout | value |
| --- | --- | --- | --- |
| Q8_0 | 32 / 34 | f16 d, 32 int8 q | d * q |
| Q4_K | 256 / 144 | f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 of nibbles | (d*sc) * q - (dmin*mn) per 32 |
| Q6_K | 256 / 210 | 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, f16 d | (d*sc) * (q - 32) per 16 |
"""

from __future__ import annotations

from dataclasses import dataclass

from tg.ir import DType, dtypes
from tg.tensor import Tensor

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
    """A matrix of logical shape (rows, cols) stored as `data`: native values (rows, cols) or raw blocks
    (rows, cols // block elements, block bytes) of `ggml_type`."""

    data: Tensor
    ggml_type: int
    rows: int
    cols: int

    @property
    def nbytes(self) -> int:
        """Bytes the weight occupies on the device (= bytes read by one matrix-vector product)."""
        _, elems, size = GGML_TYPES[self.ggml_type]
        return self.rows * self.cols // elems * size

    def dequantize(self) -> Tensor:
        """The float32 values, lazily (fuses into whatever consumes them)."""
        return dequantize(self.data, self.ggml_type).reshape(self.rows, self.cols)


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


def linear(x: Tensor, w: Weight) -> Tensor:
    """`x @ w.T` in float32 for x of shape (..., cols), reading the weight as stored.

    Native weights are cast inside the matmul. Quantized blocks are split into integer values, a scale and an
    offset per group of 16 or 32 values; the dot product of x with the integers of each group is reduced first and
    scaled once per group (`sum_g scale_g * (x . q_g) - offset_g * sum(x_g)`), so the float16 scales are decoded
    once per group instead of once per weight. The scheduler fuses the whole expression into one kernel."""
    x = x.cast(dtypes.float32)
    if w.ggml_type in NATIVE_DTYPES:
        return x @ w.data.cast(dtypes.float32).T
    check_supported("<weight>", w.ggml_type)
    q, scale, offset = BLOCK_PARTS[w.ggml_type](w.data)  # (N, nb, G, gs), (N, nb, G, 1)
    N, nb, G, gs = q.shape
    lead = x.shape[:-1]
    xg = x.reshape(*lead, 1, nb, G, gs)
    dots = (xg * q).sum(-1)  # (..., N, nb, G)
    out = (dots * scale.reshape(N, nb, G)).sum((-1, -2))
    if offset is not None:
        out = out - (xg.sum(-1) * offset.reshape(N, nb, G)).sum((-1, -2))
    return out
