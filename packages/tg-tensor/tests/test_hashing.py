"""Tensor.keccak against hashlib's SHA-3 / SHAKE (and a pycryptodome-free Keccak-256 vector), Tensor.hash against
a hashlib model of tinygrad's shake_128 tree: empty rows, one byte, block boundaries, several blocks, batches,
wide dtypes and errors."""

import hashlib

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes

RNG = np.random.default_rng(5)
MESSAGE = bytes(RNG.integers(0, 256, 700, dtype=np.uint8))

HASHLIB = {
    "sha3_224": lambda b: hashlib.sha3_224(b).digest(),
    "sha3_256": lambda b: hashlib.sha3_256(b).digest(),
    "sha3_384": lambda b: hashlib.sha3_384(b).digest(),
    "sha3_512": lambda b: hashlib.sha3_512(b).digest(),
    "shake_128": lambda b: hashlib.shake_128(b).digest(16),
    "shake_256": lambda b: hashlib.shake_256(b).digest(32),
}
RATE = {"sha3_224": 144, "sha3_256": 136, "sha3_384": 104, "sha3_512": 72, "shake_128": 168, "shake_256": 136}


def digest_of(data: bytes, cfg: str) -> bytes:
    row = np.frombuffer(data, np.uint8).reshape(1, len(data))
    return bytes(Tensor(row).keccak(cfg).numpy()[0])


# by default every length around the block boundaries for a fixed-length digest and an extendable output just below
# and above one block (each length compiles its own kernels: ~4 CPU-s each); every length and configuration when slow
@pytest.mark.parametrize(
    "cfg,lengths",
    [
        ("sha3_256", "all"),
        ("shake_128", "short"),
        *[pytest.param(c, "all", marks=pytest.mark.slow) for c in sorted(HASHLIB) if c != "sha3_256"],
    ],
)
def test_keccak_matches_hashlib_around_block_boundaries(cfg, lengths):
    rate = RATE[cfg]
    ns = (0, 1, rate - 1, rate, rate + 1, 2 * rate + 5) if lengths == "all" else (rate - 1, rate + 1)
    for n in ns:
        assert digest_of(MESSAGE[:n], cfg) == HASHLIB[cfg](MESSAGE[:n]), (cfg, n)


def test_keccak_default_batched_rows_and_shapes():
    rows = RNG.integers(0, 256, (2, 3, 150), dtype=np.uint8)
    out = Tensor(rows).keccak()  # sha3_256 by default, over the last dim
    assert out.shape == (2, 3, 32) and out.dtype == dtypes.uint8
    for idx in np.ndindex(2, 3):
        assert bytes(out.numpy()[idx]) == hashlib.sha3_256(rows[idx].tobytes()).digest()
    assert bytes(Tensor(b"abc").keccak("sha3_256").numpy()) == hashlib.sha3_256(b"abc").digest()  # 1-d: one row


def test_keccak_wide_dtypes_hash_their_bytes_and_custom_cfg():
    x = RNG.standard_normal((2, 9)).astype(np.float32)
    out = Tensor(x).keccak("sha3_512").numpy()
    assert out.shape == (2, 64)
    assert [bytes(r) for r in out] == [hashlib.sha3_512(r.tobytes()).digest() for r in x]
    # Keccak-256 as Ethereum uses it (domain byte 0x01): the well-known digest of the empty string
    empty = Tensor(np.zeros((1, 0), np.uint8))
    expected = "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
    assert bytes(empty.keccak("keccak_256").numpy()[0]).hex() == expected
    assert bytes(empty.keccak((136, 0x01)).numpy()[0]).hex() == expected


def test_keccak_errors():
    with pytest.raises(ValueError, match="unknown cfg 'md5'"):
        Tensor(b"a").keccak("md5")
    with pytest.raises(ValueError, match="rate must be a multiple of 8"):
        Tensor(b"a").keccak((100, 6))
    with pytest.raises(ValueError, match="0-d tensor"):
        Tensor(3, dtype=dtypes.uint8).keccak()
    with pytest.raises(ValueError, match="not bool"):
        Tensor([True, False]).keccak()


def hash_model(data: bytes) -> bytes:
    """tinygrad's Tensor.hash: shake_128 tree over zero-padded 1 MiB chunks of 4 KiB pieces."""
    chunk = 1 << 20

    def level(b: bytes) -> bytes:
        k = max(1, -(-len(b) // chunk))
        b = b.ljust(k * chunk, b"\0")
        out = b""
        for i in range(k):
            piece = b[i * chunk : (i + 1) * chunk]
            leaves = b"".join(hashlib.shake_128(piece[j : j + 4096]).digest(16) for j in range(0, chunk, 4096))
            out += hashlib.shake_128(leaves).digest(16)
        return out

    while len(data) > chunk:
        data = level(data)
    return level(data)


@pytest.mark.slow  # 1 MiB chunks; keccak itself is checked against hashlib by default
def test_hash_matches_the_shake128_tree():
    x = np.arange(1000, dtype=np.float32)
    h = Tensor(x).hash()
    assert h.shape == (16,) and h.dtype == dtypes.uint8
    assert bytes(h.numpy()) == hash_model(x.tobytes())
    assert bytes(Tensor(x + 1).hash().numpy()) != bytes(h.numpy())
    assert bytes(Tensor(np.zeros(0, np.uint8)).hash().numpy()) == hash_model(b"")


@pytest.mark.slow  # more than 1 MiB of keccak
def test_hash_over_one_chunk_uses_a_second_level():
    data = RNG.integers(0, 256, (1 << 20) + 3, dtype=np.uint8)
    assert bytes(Tensor(data).hash().numpy()) == hash_model(data.tobytes())


def test_keccak_inside_a_function_body_chains_blocks_lazily():
    from tg.tensor import function

    rows = RNG.integers(0, 256, (2, 150), dtype=np.uint8)  # two sha3_256 blocks per row
    out = function(lambda t: t.keccak())(Tensor(rows)).numpy()
    assert [bytes(r) for r in out] == [hashlib.sha3_256(r.tobytes()).digest() for r in rows]


def test_keccak_under_tinyjit_replays_with_new_data():
    from tg.tensor import TinyJit

    jitted = TinyJit(lambda t: t.keccak().realize())
    for _ in range(3):  # capture, then replays
        rows = RNG.integers(0, 256, (2, 150), dtype=np.uint8)  # two blocks per row
        out = jitted(Tensor(rows)).numpy()
        assert [bytes(r) for r in out] == [hashlib.sha3_256(r.tobytes()).digest() for r in rows]


def test_keccak_of_no_rows_is_empty():
    assert Tensor(np.zeros((0, 500), np.uint8)).keccak().numpy().shape == (0, 32)  # several blocks, no rows
    assert Tensor(np.zeros((2, 0, 5), np.uint8)).keccak("shake_128").numpy().shape == (2, 0, 16)
