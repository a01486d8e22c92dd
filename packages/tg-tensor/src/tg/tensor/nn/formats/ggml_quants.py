"""Dequantization of ggml's block formats as tensor programs (a few fused kernels per tensor).

Each function takes the raw blocks as a uint8 tensor of shape (blocks, block_bytes) on a compute device and
returns float32 values of shape (blocks, block_elements), in the order ggml stores them. Layouts and formulas
are the ones in specs/tensor-api.md 5.4 (from ggml's reference `dequantize_row_*`).
"""

from __future__ import annotations

from collections.abc import Callable

from tg.ir import dtypes
from tg.tensor.tensor import Tensor


def _f16(blocks: Tensor, offset: int) -> Tensor:
    """The little-endian float16 at byte `offset` of every block, as float32 of shape (blocks, 1)."""
    lo = blocks[:, offset : offset + 1].cast(dtypes.uint16)
    hi = blocks[:, offset + 1 : offset + 2].cast(dtypes.uint16)
    return (lo | (hi << 8)).bitcast(dtypes.float16).cast(dtypes.float32)


def _nibbles(qs: Tensor) -> Tensor:
    """Low nibbles of all bytes, then high nibbles (as float32): ggml's order for Q4_0/Q4_1."""
    return Tensor.cat(qs & 15, qs >> 4, dim=1).cast(dtypes.float32)


def q4_0(blocks: Tensor) -> Tensor:
    """Q4_0: 32 values = (4-bit q - 8) * d."""
    return (_nibbles(blocks[:, 2:18]) - 8) * _f16(blocks, 0)


def q4_1(blocks: Tensor) -> Tensor:
    """Q4_1: 32 values = 4-bit q * d + m."""
    return _nibbles(blocks[:, 4:20]) * _f16(blocks, 0) + _f16(blocks, 2)


def q8_0(blocks: Tensor) -> Tensor:
    """Q8_0: 32 values = int8 q * d."""
    return blocks[:, 2:34].bitcast(dtypes.int8).cast(dtypes.float32) * _f16(blocks, 0)


def q4_k(blocks: Tensor) -> Tensor:
    """Q4_K: 8 sub-blocks of 32 values = d * scale * q - dmin * min, 6-bit scales and mins packed in 12 bytes."""
    n = blocks.shape[0]
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)
    s0, s1, s2 = blocks[:, 4:8], blocks[:, 8:12], blocks[:, 12:16]
    scales = Tensor.cat(s0 & 63, (s2 & 15) | ((s0 >> 6) << 4), dim=1).cast(dtypes.float32)
    mins = Tensor.cat(s1 & 63, (s2 >> 4) | ((s1 >> 6) << 4), dim=1).cast(dtypes.float32)
    qs = blocks[:, 16:144].reshape(n, 4, 1, 32)
    q = Tensor.cat(qs & 15, qs >> 4, dim=2).reshape(n, 8, 32).cast(dtypes.float32)
    values = d.reshape(n, 1, 1) * scales.reshape(n, 8, 1) * q - dmin.reshape(n, 1, 1) * mins.reshape(n, 8, 1)
    return values.reshape(n, 256)


def q6_k(blocks: Tensor) -> Tensor:
    """Q6_K: 256 values = d * int8 scale * (6-bit q - 32); q's low 4 bits in `ql`, high 2 bits in `qh`."""
    n = blocks.shape[0]
    d = _f16(blocks, 208).reshape(n, 1, 1)
    halves = []
    for h in range(2):
        ql = blocks[:, 64 * h : 64 * h + 64]
        qh = blocks[:, 128 + 32 * h : 160 + 32 * h]
        a, b = ql[:, :32], ql[:, 32:]
        q = Tensor.stack(
            (a & 15) | ((qh & 3) << 4),
            (b & 15) | (((qh >> 2) & 3) << 4),
            (a >> 4) | (((qh >> 4) & 3) << 4),
            (b >> 4) | (((qh >> 6) & 3) << 4),
            dim=1,
        ).cast(dtypes.float32)  # (n, 4, 32): outputs 32k + l
        sc = blocks[:, 192 + 8 * h : 200 + 8 * h].bitcast(dtypes.int8).cast(dtypes.float32)
        sc = sc.reshape(n, 4, 2, 1).expand(n, 4, 2, 16).reshape(n, 4, 32)  # scale of output 32k + l: sc[2k + l//16]
        halves.append((d * sc * (q - 32)).reshape(n, 128))
    return Tensor.cat(*halves, dim=1)


# ggml type id -> (name, elements per block, bytes per block, dequantizer)
QUANTIZED: dict[int, tuple[str, int, int, Callable[[Tensor], Tensor]]] = {
    2: ("Q4_0", 32, 18, q4_0),
    3: ("Q4_1", 32, 20, q4_1),
    8: ("Q8_0", 32, 34, q8_0),
    12: ("Q4_K", 256, 144, q4_k),
    14: ("Q6_K", 256, 210, q6_k),
}
