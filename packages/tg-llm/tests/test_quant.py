"""Dequantisation on the device: bit-exact against the `gguf` package's reference, fused into the matmul."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tg.ir import dtypes
from tg.ir.helpers import Context
from tg.llm import UnsupportedWeightType, Weight, dequantize, linear, open_model_file
from tg.llm.quant import Activations, check_supported, half_vectors, quantize_blocks
from tg.tensor import Tensor

TYPES = {"Q8_0": (8, 34), "Q4_K": (12, 144), "Q6_K": (14, 210)}


def random_blocks(generator: ModuleType, name: str, n_blocks: int, seed: int = 0) -> np.ndarray:
    import gguf

    rng = np.random.default_rng(seed)
    if name == "Q8_0":
        data = rng.standard_normal((n_blocks, 32)).astype(np.float32)
        return gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0).reshape(n_blocks, 34)
    blocks: np.ndarray = generator.random_k_blocks(rng, n_blocks, name)
    return blocks


@pytest.mark.parametrize("name", list(TYPES))
def test_dequantization_is_bit_exact(generator: ModuleType, name: str) -> None:
    import gguf

    ggml_type, block_bytes = TYPES[name]
    blocks = random_blocks(generator, name, 96)
    if name != "Q8_0":  # also all 256 values of every scale byte, and extreme scales
        blocks[:, 4:16] = np.arange(96 * 12).reshape(96, 12) % 256 if name == "Q4_K" else blocks[:, 4:16]
        blocks[:3, -2:] = np.array([0x7BFF, 0x0001, 0x8400], np.uint16).view(np.uint8).reshape(3, 2)
    reference = gguf.quants.dequantize(blocks.reshape(8, -1), gguf.GGMLQuantizationType[name])
    ours = dequantize(Tensor(blocks.reshape(8, -1, block_bytes)), ggml_type).numpy()
    assert ours.shape == reference.shape
    np.testing.assert_array_equal(ours.view(np.uint32), reference.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("name", [*TYPES, "F16", "F16 words", "BF16"])
def test_fused_linear_matches_numpy(generator: ModuleType, name: str) -> None:
    import gguf

    rng = np.random.default_rng(1)
    rows, cols = 24, 512
    if name in TYPES:
        ggml_type, block_bytes = TYPES[name]
        blocks = random_blocks(generator, name, rows * cols // (32 if name == "Q8_0" else 256))
        raw = blocks.reshape(rows, -1, block_bytes)
        dense = gguf.quants.dequantize(raw.reshape(rows, -1), gguf.GGMLQuantizationType[name])
        weight = Weight(Tensor(raw), ggml_type, rows, cols)
    else:
        values = rng.standard_normal((rows, cols)).astype(np.float32)
        if name.startswith("F16"):  # float16 as stored (CPU with F16C) or the uint32 words of other devices
            dense = values.astype(np.float16).astype(np.float32)
            data = values.astype(np.float16)
            weight = Weight(Tensor(data.view(np.uint32) if name == "F16 words" else data), 1, rows, cols)
            assert weight.data.dtype is (dtypes.uint32 if name == "F16 words" else weight.data.dtype)
        else:
            dense = (values.view(np.uint32) & 0xFFFF0000).view(np.float32)
            weight = Weight(Tensor(dense).cast(dtypes.bfloat16).realize(), 30, rows, cols)
    x = rng.standard_normal((3, cols)).astype(np.float32)
    with Context(LLM_INT8_DOT=0):  # the exact path (float32 inputs); the int8 one is tested below
        out = linear(Tensor(x), weight).numpy()
    np.testing.assert_allclose(out, x @ dense.T, rtol=1e-5, atol=1e-5 * np.abs(x @ dense.T).max())


def numpy_quantize_blocks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """quantize_blocks' int8 values (..., blocks, 32) and float32 scales (..., blocks), in float32 numpy."""
    blocks = x.reshape(*x.shape[:-1], -1, 32)
    d = np.abs(blocks).max(-1) / np.float32(127)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.where(d[..., None] == 0, np.float32(0), np.round(blocks / d[..., None]))
    return q.astype(np.int64), d


def test_activation_quantization_matches_numpy() -> None:
    """x quantised to int8 per block of 32 for Q8_0's integer path: the scales' bits and the integers equal a
    float32 numpy computation of the same formula, for values that round half to even, an all-zero block, and
    blocks whose largest value is negative."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 256)).astype(np.float32) * np.float32(3)
    x[0, :32] = 0.0  # an all-zero block
    x[1, 32:64] = np.arange(-16, 16, dtype=np.float32) + np.float32(0.5)  # x / d = k + 0.5 once d = 1
    x[1, 63] = -127  # the largest magnitude is negative: d = 127 / 127
    q, d = quantize_blocks(Tensor(x))
    q_ref, d_ref = numpy_quantize_blocks(x)
    np.testing.assert_array_equal(d.numpy().view(np.uint32), d_ref.view(np.uint32))
    assert q.shape == (3, 8, 4, 8) and q.dtype == dtypes.int32
    np.testing.assert_array_equal(q.numpy().reshape(3, 8, 32), q_ref)
    assert np.abs(q_ref).max() == 127 and (q_ref[0, 0] == 0).all()
    assert q_ref[1, 1, 14:18].tolist() == [-2, 0, 0, 2]  # -1.5, -0.5, 0.5, 1.5: halves to even


def exact_q8_0(rng: np.random.Generator, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q8_0 blocks (rows, cols // 32, 34) with one power-of-two scale per row, their int8 values and the scales: a
    matrix-vector product with inputs whose block scales are powers of two too is exact in float32."""
    q = rng.integers(-128, 128, (rows, cols // 32, 32)).astype(np.int8)
    scales = np.float16(2.0) ** -rng.integers(4, 9, (rows, 1, 1)).astype(np.float16)
    blocks = np.concatenate([np.broadcast_to(scales, (rows, cols // 32, 1)).view(np.uint8), q.view(np.uint8)], -1)
    return blocks, q, scales.astype(np.float32).reshape(rows, 1)


def test_int8_linear_is_the_integer_dot_product() -> None:
    """Q8_0's integer path equals numpy's integer arithmetic of the same quantised values bit for bit: per block
    the int8 weights times the int8 inputs summed exactly, scaled by both block scales (inputs and scales chosen so
    that every float32 operation of the reference is exact, whatever order the kernel adds in)."""
    rng = np.random.default_rng(6)
    rows, cols = 40, 512
    blocks, q_w, w_scales = exact_q8_0(rng, rows, cols)
    q_x = rng.integers(-127, 128, (2, cols // 32, 32))
    q_x[..., 0] = np.where(rng.random((2, cols // 32)) < 0.5, 127, -127)  # so every block's scale is 2^-e exactly
    x_scales = (2.0 ** -rng.integers(0, 6, (2, cols // 32))).astype(np.float32)
    x = (q_x * x_scales[..., None]).astype(np.float32).reshape(2, cols)
    q_ref, d_ref = numpy_quantize_blocks(x)
    assert (q_ref == q_x).all() and (d_ref == x_scales).all()
    dots = np.einsum("rbk,tbk->trb", q_w.astype(np.int64), q_x)  # exact integers per (token, row, block)
    expected = (dots * (w_scales[None] * x_scales[:, None, :])).sum(-1).astype(np.float32)
    weight = Weight(Tensor(blocks), 8, rows, cols)
    with Context(LLM_INT8_DOT=1):
        out = linear(Tensor(x), weight).numpy()
        shared = Activations(Tensor(x))  # one quantisation read by two matrices
        both = [linear(shared, weight).numpy(), linear(shared, weight).numpy()]
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(both[0], expected)
    np.testing.assert_array_equal(both[1], expected)


def test_int8_linear_is_close_to_the_float_product(generator: ModuleType) -> None:
    """On Gaussian inputs the integer path (inputs rounded to 8 bits per block of 32) stays within 3% of the
    largest output of the exact float32 product (measured 0.25-1% for three seeds: the inputs' rounding error is
    up to 1/254 of a block's largest value), and the exact path is still there."""
    import gguf

    rng = np.random.default_rng(7)
    rows, cols = 64, 1024
    raw = random_blocks(generator, "Q8_0", rows * cols // 32).reshape(rows, -1, 34)
    dense = gguf.quants.dequantize(raw.reshape(rows, -1), gguf.GGMLQuantizationType.Q8_0)
    weight = Weight(Tensor(raw), 8, rows, cols)
    x = rng.standard_normal((1, cols)).astype(np.float32)
    expected = x @ dense.T
    with Context(LLM_INT8_DOT=1):
        approx = linear(Tensor(x), weight).numpy()
    with Context(LLM_INT8_DOT=0):
        exact = linear(Tensor(x), weight).numpy()
    scale = np.abs(expected).max()
    np.testing.assert_allclose(exact, expected, rtol=1e-5, atol=1e-5 * scale)
    error = np.abs(approx - expected).max() / scale
    assert 0 < error < 3e-2, error


def test_quantized_weights_stay_in_file_format_on_the_device(tiny_models: dict[tuple[str, str], Path]) -> None:
    """A loaded Q4_K matrix keeps the file's nibbles as they are (no float32 copy), followed by the decoded float32
    sub-block scales and offsets: 192 bytes per 256 weights."""
    import gguf

    file = open_model_file(tiny_models[("llama", "Q4_K")])
    info = file.infos["blk.0.ffn_down.weight"]
    weight = file.matrix("blk.0.ffn_down.weight", 256, 512, "CPU")
    assert weight.data.dtype is dtypes.uint32 and weight.nbytes == info.nbytes // 144 * 192
    raw = np.fromfile(file.path, np.uint8, count=info.nbytes, offset=info.offset).reshape(256, 2, 144)
    nibbles = weight.data.numpy()[: 256 * 2 * 32].view(np.uint8).reshape(256, 2, 128)
    np.testing.assert_array_equal(nibbles, raw[..., 16:])
    dense = gguf.quants.dequantize(raw.reshape(256, -1), gguf.GGMLQuantizationType.Q4_K)
    np.testing.assert_array_equal(weight.dequantize().numpy().view(np.uint32), dense.view(np.uint32))


@pytest.mark.parametrize("wtype", ["F32", "F16", "BF16"])
def test_float_weights_are_the_file_bytes(tiny_models: dict[tuple[str, str], Path], wtype: str) -> None:
    """F32/F16/BF16 matrices come from the file as stored (F32 as float32, F16 as float16 where the CPU converts
    float16 vectors, else F16/BF16 pairs as uint32 words)."""
    file = open_model_file(tiny_models[("llama", wtype)])
    for name in ("blk.0.ffn_down.weight", "blk.1.attn_q.weight"):
        info = file.infos[name]
        rows, cols = int(info.shape[0]), int(info.shape[1])
        weight = file.matrix(name, rows, cols, "CPU")
        stored = wtype == "F32" or (wtype == "F16" and half_vectors("CPU"))  # F16C: float16 read as vectors
        shape = (rows, cols) if stored else (rows, cols // 2)
        assert weight.data.dtype is ({"F32": dtypes.float32, "F16": dtypes.float16}[wtype] if stored else dtypes.uint32)
        assert weight.data.shape == shape and weight.nbytes == info.nbytes
        raw = np.fromfile(file.path, np.uint8, count=info.nbytes, offset=info.offset)
        np.testing.assert_array_equal(weight.data.numpy().view(np.uint8).reshape(-1), raw)


@pytest.mark.parametrize("name", ["Q8_0", "Q4_K", "Q6_K", "F16", "BF16"])
def test_packed_weights_dequantize_bit_exact(generator: ModuleType, name: str) -> None:
    """The uint32-word layouts linear() reads (Q8_0, Q4_K and Q6_K repacked, F16/BF16 as words) give the reference
    values exactly, float16 subnormals, infinities, NaN and signed zeros included."""
    import gguf

    rows, cols = 6, 64
    if name in ("Q4_K", "Q6_K"):
        cols = 512
        ggml_type, block_bytes = TYPES[name]
        blocks = random_blocks(generator, name, rows * cols // 256).reshape(rows, -1, block_bytes)
        dense = gguf.quants.dequantize(blocks.reshape(rows, -1), gguf.GGMLQuantizationType[name])
        weight = Weight(Tensor(blocks), ggml_type, rows, cols)
        assert weight.data.dtype is dtypes.uint32
        assert weight.nbytes == rows * cols // 256 * (192 if name == "Q4_K" else 256)  # bytes per block
    elif name == "Q8_0":
        blocks = random_blocks(generator, name, rows * cols // 32).reshape(rows, -1, 34)
        blocks[0, 0, :2] = np.array([0x0001], np.uint16).view(np.uint8)  # a subnormal scale
        dense = gguf.quants.dequantize(blocks.reshape(rows, -1), gguf.GGMLQuantizationType.Q8_0)
        weight = Weight(Tensor(blocks), 8, rows, cols)
        assert weight.data.dtype is dtypes.uint32 and weight.nbytes == rows * cols // 32 * 36
    else:
        bits = np.random.default_rng(2).integers(0, 1 << 16, (rows, cols), dtype=np.uint16)
        bits[0, :8] = [0x0001, 0x83FF, 0x7C00, 0xFC00, 0x7E00, 0x8000, 0x0000, 0x7BFF]
        if name == "F16":
            dense = bits.view(np.float16).astype(np.float32)
        else:
            dense = (bits.astype(np.uint32) << 16).view(np.float32)
        if name == "F16":  # float16 as stored (the vector-conversion layout) gives the same values
            halves = Weight(Tensor(bits).bitcast(dtypes.float16), 1, rows, cols).dequantize().numpy()
            np.testing.assert_array_equal(halves.view(np.uint32), dense.view(np.uint32))
        weight = Weight(Tensor(bits.view(np.uint32)) if name == "F16" else Tensor(bits).bitcast(dtypes.bfloat16),
                        1 if name == "F16" else 30, rows, cols)  # fmt: skip
        assert weight.data.dtype is dtypes.uint32 and weight.data.shape == (rows, cols // 2)
    ours = weight.dequantize().numpy()
    np.testing.assert_array_equal(ours.view(np.uint32), dense.astype(np.float32).view(np.uint32))


def test_unsupported_types_are_named() -> None:
    with pytest.raises(UnsupportedWeightType, match=r"'blk.0.attn_q.weight' is stored as Q5_K"):
        check_supported("blk.0.attn_q.weight", 13)
    with pytest.raises(UnsupportedWeightType, match="type 99"):
        check_supported("w", 99)


def test_decode_matvec_kernels_read_the_weights_as_vectors(generator: ModuleType) -> None:
    """A decode step's x @ W.T kernel (one row of x) reads the weight as whole vectors: F16 stored as float16 and
    widened by vector conversions where the CPU has them (F16C), else F16 as uint32 words; Q8_0 words as contiguous
    uint32 vectors, not gathered lane by lane from several rows."""
    from tg.runtime import Device, engine

    compiler = Device["CPU"].compiler
    assert half_vectors("CPU") == bool(getattr(compiler, "has_half_conversions", False))
    if not Device["CPU"].renderer.vector_bytes >= 32:
        pytest.skip("needs 8-lane float32 vectors")
    rows, cols = 512, 1024
    rng = np.random.default_rng(3)
    blocks = random_blocks(generator, "Q8_0", rows * cols // 32).reshape(rows, -1, 34)
    f16 = Weight(Tensor(rng.standard_normal((rows, cols)).astype(np.float16)), 1, rows, cols)
    q8 = Weight(Tensor(blocks), 8, rows, cols)
    x = Tensor(rng.standard_normal((1, cols)).astype(np.float32)).realize()

    class Recorder:
        def __init__(self) -> None:
            self.sources: list[str] = []

        def add(self, item: engine.ExecItem) -> None:
            assert isinstance(item.runner, engine.CompiledRunner)
            self.sources.append(item.runner.p.src)

    cases = [(f16, 0, ["tg_h2f_tg_f32x8(" if half_vectors("CPU") else "tg_u32x8 val"]), (q8, 0, ["tg_u32x8 val"]),
             (q8, 1, ["tg_u32x8 val", "tg_i32x8 val"])]  # fmt: skip
    for weight, int8_dot, wanted in cases:  # with LLM_INT8_DOT=1 the int8 inputs are loaded as int32 vectors too
        recorder = Recorder()
        engine.capturing.append(recorder)
        try:
            with Context(LLM_INT8_DOT=int8_dot):
                linear(x, weight).realize()
        finally:
            engine.capturing.remove(recorder)
        assert any(all(w in src for w in wanted) for src in recorder.sources), recorder.sources[-1]
