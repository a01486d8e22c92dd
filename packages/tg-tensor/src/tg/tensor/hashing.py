"""Keccak (SHA-3 / SHAKE) and tinygrad's 16-byte tensor hash as Tensor methods (attached in methods.py).

The Keccak-f[1600] permutation runs on a (batch, 25) uint64 state, one lane per 64-bit word (lane x + 5y, as in
the spec's byte order), with every round built from elementwise uint64 ops and a one-hot lane gather, so rows of
a batch hash in parallel on any device. Rounds are chained by a fusion boundary each (a round reads every lane of
the one before, so fusing two would recompute the first many times over).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tg.ir import Variable, dtypes
from tg.tensor import realize as _realize

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

# name -> (rate in bytes, domain-separation byte); the digest is the capacity's half: (200 - rate) // 2 bytes
KECCAK_CONFIGS: dict[str, tuple[int, int]] = {
    "sha3_224": (144, 0x06),
    "sha3_256": (136, 0x06),
    "sha3_384": (104, 0x06),
    "sha3_512": (72, 0x06),
    "shake_128": (168, 0x1F),
    "shake_256": (136, 0x1F),
    "keccak_256": (136, 0x01),  # the pre-standard padding Ethereum uses
}

# the iota step's round constants
ROUND_CONSTANTS = (
    0x0000000000000001, 0x0000000000008082, 0x800000000000808A, 0x8000000080008000,
    0x000000000000808B, 0x0000000080000001, 0x8000000080008081, 0x8000000000008009,
    0x000000000000008A, 0x0000000000000088, 0x0000000080008009, 0x000000008000000A,
    0x000000008000808B, 0x800000000000008B, 0x8000000000008089, 0x8000000000008003,
    0x8000000000008002, 0x8000000000000080, 0x000000000000800A, 0x800000008000000A,
    0x8000000080008081, 0x8000000000008080, 0x0000000080000001, 0x8000000080008008,
)  # fmt: skip


def _rho_pi() -> tuple[list[int], list[int]]:
    """For each output lane of the rho and pi steps: the input lane it takes and that lane's rotation.

    pi moves lane (x, y) to (y, 2x + 3y); rho rotates it by the triangular numbers along the orbit of (1, 0)."""
    rotation = [0] * 25
    x, y = 1, 0
    for t in range(24):
        rotation[x + 5 * y] = (t + 1) * (t + 2) // 2 % 64
        x, y = y, (2 * x + 3 * y) % 5
    source = [0] * 25
    for x in range(5):
        for y in range(5):
            source[y + 5 * ((2 * x + 3 * y) % 5)] = x + 5 * y
    return source, [rotation[s] for s in source]


RHO_PI_SOURCE, RHO_PI_ROTATION = _rho_pi()


def _rotl(lanes: Tensor, amount: Any) -> Tensor:
    """Rotate uint64 lanes left; `(64 - r) & 63` keeps the right shift defined for r = 0."""
    return (lanes << amount) | (lanes >> ((64 - amount) & 63))


def _keccak_f(state: Tensor, pick: Tensor, rotation: Tensor, *round_constants: Tensor) -> Tensor:
    """The 24 rounds of Keccak-f[1600] on a (batch, 25) uint64 state; `pick[j, i]` says lane j takes lane i in
    rho-pi (a constant one-hot: a static gather without index checks); `round_constants`: one (25,) buffer per
    round (its constant in lane 0), so rounds 2..24 are one kernel, compiled once, rather than 23 kernels that
    differ only in the offset of a row of one (24, 25) table (each a C compiler run on a cold cache)."""
    bs = state.shape[0]
    for rc in range(24):
        # theta: xor every lane with the parities of the two neighbouring columns (one of them rotated by 1)
        grid = state.reshape(bs, 5, 5)  # (y, x)
        parity = grid[:, 0] ^ grid[:, 1] ^ grid[:, 2] ^ grid[:, 3] ^ grid[:, 4]
        mix = parity.roll(1, 1) ^ _rotl(parity.roll(-1, 1), 1)
        state = (grid ^ mix.unsqueeze(1)).reshape(bs, 25)
        # rho and pi: rotate each lane and move it to its new place
        lanes = pick.where(state.unsqueeze(1), 0).sum(-1, dtype=dtypes.uint64)  # one nonzero term per lane: exact
        moved = _rotl(lanes, rotation).reshape(bs, 5, 5)
        # chi: a row-wise nonlinear mix; iota: a round constant into lane 0
        state = (moved ^ (~moved.roll(-1, 2) & moved.roll(-2, 2))).reshape(bs, 25) ^ round_constants[rc]
        state = state.contiguous()
    return state


@functools.cache
def _absorb_function() -> Callable[..., Tensor]:
    from tg.tensor.function import function

    return function(lambda state, block, *consts: _keccak_f(state ^ block, *consts))


def _absorb(state: Tensor, block: Tensor, *consts: Tensor) -> Tensor:
    """The next state after one more block, as a traced @function: the 24 rounds' Python runs once per shape."""
    return _absorb_function()(state, block, *consts)


def keccak(self: Tensor, cfg: str | tuple[int, int] = "sha3_256") -> Tensor:
    """Keccak hash of each row of the last dim (its bytes, little-endian for wider dtypes): `(..., n)` ->
    `(..., digest)` uint8, as tinygrad's `keccak`.

    `cfg` names a standard function, 'sha3_224', 'sha3_256' (default), 'sha3_384', 'sha3_512', 'keccak_256'
    (Ethereum's), or 'shake_128' / 'shake_256' (16 / 32 output bytes), or is `(rate_bytes, domain_byte)`; the
    digest has `(200 - rate) // 2` bytes. Equal to hashlib's `sha3_256(row).digest()` etc.; `shake_128` gives
    `hashlib.shake_128(row).digest(16)`. Rows run in parallel; rows of up to rate - 1 bytes stay lazy, longer ones
    are absorbed one block after another, each block realized (a traced @function with the block index a bound
    Variable: one schedule and one set of kernels for every block; lazily inside a @function body; under TinyJit
    capture with int indices). No gradient
    (integer result).
    """
    cls = self._tensor_class()
    if isinstance(cfg, str):
        if cfg not in KECCAK_CONFIGS:
            raise ValueError(f"keccak: unknown cfg {cfg!r}; use one of {sorted(KECCAK_CONFIGS)} or (rate, dsbyte)")
        rate, dsbyte = KECCAK_CONFIGS[cfg]
    else:
        rate, dsbyte = cfg
    if not (0 < rate < 200 and rate % 8 == 0 and 0 < dsbyte < 0x80):
        raise ValueError(f"keccak: rate must be a multiple of 8 in 8..192 and dsbyte in 1..127, got {cfg!r}")
    if self.ndim == 0:
        raise ValueError("keccak: needs at least one dim (the bytes to hash), got a 0-d tensor")
    if self.dtype == dtypes.bool:
        raise ValueError("keccak: hash bytes, not bool (cast to uint8 first)")
    data = self if self.dtype == dtypes.uint8 else self.contiguous().bitcast(dtypes.uint8)
    batch, n = data.shape[:-1], data.shape[-1]
    bs = math.prod(batch)
    if bs == 0:  # no rows: nothing to run
        return cls.zeros(*batch, (200 - rate) // 2, dtype=dtypes.uint8, device=self.device)
    data = data.reshape(bs, n)
    blocks = n // rate + 1  # pad10*1 always adds at least one byte
    # the padding: the domain byte right after the message, 0x80 in the last byte of the last block
    tail = [0] * (blocks * rate - n)
    tail[0] ^= dsbyte
    tail[-1] ^= 0x80
    pad = cls(tail, dtype=dtypes.uint8, device=self.device).reshape(1, -1).expand(bs, len(tail))
    message = cls.cat(data, pad, dim=-1) if n else pad
    words = message.reshape(bs, blocks, rate).pad(((0, 0), (0, 0), (0, 200 - rate))).contiguous()
    # (bs, blocks, 25) uint64, realized once: left lazy, every round-1 kernel re-gathers each lane from 8 bytes
    # (an ~18 KB C kernel per block path, the slowest compiles of a keccak; measured 16-19 s -> 9 s of compiling)
    words = words.bitcast(dtypes.uint64).contiguous()
    pick = cls([[i == s for i in range(25)] for s in RHO_PI_SOURCE], dtype=dtypes.bool, device=self.device)
    rotation = cls(RHO_PI_ROTATION, dtype=dtypes.uint64, device=self.device)
    # one (25,) buffer per round, the constant in lane 0 (see _keccak_f)
    round_constants = [cls([c] + [0] * 24, dtype=dtypes.uint64, device=self.device) for c in ROUND_CONSTANTS]
    state = cls.zeros(bs, 25, dtype=dtypes.uint64, device=self.device)
    if blocks == 1:
        return _digest(_keccak_f(words[:, 0], pick, rotation, *round_constants), rate, batch)
    # one block at a time, realized: the block index is a bound Variable, so every block's graph is the same and
    # its schedule and kernels are made once (a long message is many blocks). Inside a @function body (no realize
    # there) the blocks chain lazily; while a TinyJit captures (one value per Variable) the index is a plain int.
    from tg.runtime import engine

    tracing = bool(_realize.tracing_functions)
    index = None if tracing or engine.capturing else Variable("keccak_block", 0, blocks - 1)
    for b in range(blocks):
        block = words[:, b] if index is None else words[:, (i := index.bind(b)) : i + 1].reshape(bs, 25)
        state = _absorb(state, block, pick, rotation, *round_constants)
        state = state if tracing else state.realize()
    return _digest(state, rate, batch)


def _digest(state: Tensor, rate: int, batch: tuple[int, ...]) -> Tensor:
    digest = (200 - rate) // 2
    return state.bitcast(dtypes.uint8)[:, :digest].reshape(*batch, digest)


HASH_CHUNK = 1 << 20  # the message size of one tree level


def _hash_chunks(rows: Tensor) -> Tensor:
    """(k, 1 MiB) uint8 -> (k, 16): shake_128 of each 4 KiB piece, then shake_128 of those 256 digests."""
    k = rows.shape[0]
    return keccak(keccak(rows.reshape(k * 256, 4096), "shake_128").reshape(k, 4096), "shake_128")


def tensor_hash(self: Tensor) -> Tensor:
    """A 16-byte (uint8) digest of the tensor's bytes, equal to tinygrad's `Tensor.hash`: a tree of shake_128 over
    zero-padded 1 MiB chunks (each chunk: shake_128 of its 256 4-KiB pieces' 16-byte digests), levels of up to
    65536 chunk digests until one chunk is left. Zero padding means tensors whose bytes differ only by trailing
    zeros within a chunk hash alike (as in tinygrad): it identifies contents of a known size, it is no MAC."""
    cls = self._tensor_class()
    if self.dtype == dtypes.bool:
        raise ValueError("hash: hash bytes, not bool (cast to uint8 first)")
    data = self.flatten()
    data = data if data.dtype == dtypes.uint8 else data.contiguous().bitcast(dtypes.uint8)
    while (n := data.shape[0]) > HASH_CHUNK:
        chunks = -(-n // HASH_CHUNK)
        data = _hash_chunks(data.pad(((0, chunks * HASH_CHUNK - n),)).reshape(chunks, HASH_CHUNK)).flatten()
    if data.shape[0] == 0:
        data = cls.zeros(HASH_CHUNK, dtype=dtypes.uint8, device=self.device)
    else:
        data = data.pad(((0, HASH_CHUNK - data.shape[0]),))
    return _hash_chunks(data.reshape(1, HASH_CHUNK)).flatten()
