"""tinygrad's raw generator (threefry, random_bits) against a numpy Threefry-2x32 model and values tinygrad 0.14
printed for the same inputs, and the graph-level helpers const, ufix, usum, uprod (values, dtypes, gradients)."""

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes

M32 = 0xFFFFFFFF


def threefry_model(x: int, key: int) -> int:
    """Threefry-2x32, 20 rounds (Random123), on the halves of a uint64 counter keyed by the halves of a uint64."""

    def rotl(v, r):
        return ((v << r) | (v >> (32 - r))) & M32

    k = [key & M32, key >> 32]
    k.append(k[0] ^ k[1] ^ 0x1BD11BDA)
    x0, x1 = (x & M32) + k[0] & M32, (x >> 32) + k[1] & M32
    for i in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
            x0 = (x0 + x1) & M32
            x1 = rotl(x1, r) ^ x0
        x0 = (x0 + k[(i + 1) % 3]) & M32
        x1 = (x1 + k[(i + 2) % 3] + i + 1) & M32
    return x1 << 32 | x0


def random_bits_model(key: list[int], counter: list[int], num: int) -> list[int]:
    def pairs(k, lows, highs):
        kk = k[1] << 32 | k[0]
        out = [threefry_model(h << 32 | lo, kk) for lo, h in zip(lows, highs, strict=True)]
        return [v & M32 for v in out] + [v >> 32 for v in out]

    run_key = pairs(key, [counter[0]], [counter[1]])
    half = -(-num // 2)
    return pairs(run_key, list(range(half)), [j + half for j in range(half)])[:num]


def test_threefry_matches_the_model_and_tinygrad():
    xs = [0, 1, 2**40 + 3, 2**64 - 1]
    seed = 0x0123456789ABCDEF
    out = Tensor(xs, dtype=dtypes.uint64).threefry(Tensor([seed], dtype=dtypes.uint64))
    assert out.dtype == dtypes.uint64
    # printed by tinygrad 0.14 for the same call
    tinygrad = [7725297290937948297, 15266505729992108295, 12947383797191990264, 12463928418108273812]
    assert out.tolist() == tinygrad == [threefry_model(x, seed) for x in xs]
    assert Tensor(xs, dtype=dtypes.uint64).threefry(seed).tolist() == tinygrad  # a Python int seed
    with pytest.raises(TypeError, match=r"threefry: needs a uint64 tensor, got dtypes\.int32"):
        Tensor([1, 2]).threefry(3)
    with pytest.raises(TypeError, match=r"seed must be uint64, got dtypes\.uint32"):
        Tensor([1], dtype=dtypes.uint64).threefry(Tensor([3], dtype=dtypes.uint32))


def test_random_bits_matches_the_model_and_tinygrad():
    key = Tensor([0x12345678, 0x9ABCDEF0], dtype=dtypes.uint32)
    bits = Tensor.random_bits(key, Tensor([5, 7], dtype=dtypes.uint32), 7)
    assert bits.dtype == dtypes.uint32 and bits.shape == (7,)
    tinygrad = [957473685, 477682890, 1713486668, 2176412523, 597903786, 517225119, 580427513]
    assert bits.tolist() == tinygrad == random_bits_model([0x12345678, 0x9ABCDEF0], [5, 7], 7)
    wrap = Tensor.random_bits(key, Tensor([M32, 3], dtype=dtypes.uint32), 4).tolist()
    assert wrap == [371512714, 2075480475, 1258987858, 3662377611]
    big = Tensor.random_bits(key, Tensor([1, 2], dtype=dtypes.uint32), 1001).numpy()
    assert big.tolist() == random_bits_model([0x12345678, 0x9ABCDEF0], [1, 2], 1001)
    assert len(np.unique(big)) > 990  # no repeats to speak of
    assert Tensor.random_bits(key, Tensor([1, 2], dtype=dtypes.uint32), 0).shape == (0,)
    bad_key = r"key must be a uint32 tensor of shape \(2,\), got dtypes\.uint32 of shape \(3,\)"
    with pytest.raises(TypeError, match=bad_key):
        Tensor.random_bits(Tensor([1, 2, 3], dtype=dtypes.uint32), key, 4)
    with pytest.raises(TypeError, match="counter must be a uint32 tensor of shape"):
        Tensor.random_bits(key, Tensor([1.0, 2.0]), 4)
    with pytest.raises(ValueError, match="num must be a non-negative int, got -1"):
        Tensor.random_bits(key, key, -1)


def test_const_and_ufix():
    c = Tensor.const(3)
    assert c.shape == () and c.dtype == dtypes.int32 and c.item() == 3
    assert Tensor.const(2.5, dtypes.float16).dtype == dtypes.float16
    assert Tensor.const(True).dtype == dtypes.bool
    assert Tensor.const((1, 2, 3), dtypes.uint64).tolist() == [1, 2, 3]
    with pytest.raises(TypeError, match="const: needs a bool, int, float or a tuple of them, got str"):
        Tensor.const("3")
    half = Tensor([1.0, 2.0], dtype=dtypes.float16)
    assert half.ufix(2).dtype == dtypes.float16 and half.ufix(2).shape == () and half.ufix(2).item() == 2
    assert Tensor([1, 2]).ufix(0.5).dtype == dtypes.default_float
    assert Tensor([1, 2], dtype=dtypes.int8).ufix(3).dtype == dtypes.int8
    assert half.ufix(half) is half
    with pytest.raises(TypeError, match="ufix: needs a Tensor or a bool/int/float, got list"):
        half.ufix([1])


def test_usum_uprod_values_bool_and_gradients():
    a = Tensor([1.0, 2.0], requires_grad=True)
    b = Tensor([3.0, 4.0], requires_grad=True)
    s, p = a.usum(b, 1), a.uprod([b, 2])
    assert s.tolist() == [5.0, 7.0] and p.tolist() == [6.0, 16.0]
    (s.sum() + p.sum()).backward()
    np.testing.assert_allclose(a.grad.numpy(), 1 + 2 * np.array([3.0, 4.0]))
    np.testing.assert_allclose(b.grad.numpy(), 1 + 2 * np.array([1.0, 2.0]))
    assert a.usum() is a and a.uprod([]) is a
    t, f = Tensor([True, False, False]), Tensor([False, False, True])
    assert t.usum(f).tolist() == [True, False, True] and t.uprod(f).tolist() == [False, False, False]


def test_alu_applies_ir_ops_with_gradients():
    from tg.ir import Ops

    x = np.array([0.5, -1.5, 2.0], np.float32)
    y = np.array([2.0, 3.0, -4.0], np.float32)
    a, b = Tensor(x, requires_grad=True), Tensor(y, requires_grad=True)
    np.testing.assert_allclose(a.alu(Ops.ADD, b).numpy(), x + y)
    np.testing.assert_allclose(a.alu(Ops.MAX, b).numpy(), np.maximum(x, y))
    np.testing.assert_allclose(a.alu(Ops.SQRT).numpy()[2], np.sqrt(2.0), rtol=1e-6)
    np.testing.assert_allclose((a > 0).alu(Ops.WHERE, a, b).numpy(), np.where(x > 0, x, y))
    a.alu(Ops.MUL, b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), y)
    np.testing.assert_allclose(b.grad.numpy(), x)
    assert Tensor([6, 7]).alu(Ops.XOR, Tensor([3, 1])).tolist() == [5, 6]
    with pytest.raises(ValueError, match=r"alu: Ops\.ADD takes 2 operands, got 1"):
        a.alu(Ops.ADD)
    with pytest.raises(ValueError, match=r"operands differ: \(3,\) on (\w+) vs \(1,\) on \1"):
        a.alu(Ops.ADD, Tensor([1.0]))
    with pytest.raises(TypeError, match=r"operands need one dtype, got dtypes\.float32, dtypes\.int32"):
        a.alu(Ops.ADD, Tensor([1, 2, 3]))
    with pytest.raises(TypeError, match=r"WHERE needs a bool condition"):
        a.alu(Ops.WHERE, a, b)
    with pytest.raises(TypeError, match=r"Ops\.SQRT needs a float operand"):
        Tensor([4]).alu(Ops.SQRT)
    with pytest.raises(ValueError, match="not an elementwise ALU op"):
        a.alu(Ops.CAST)
    with pytest.raises(TypeError, match="operands must be Tensors, got int"):
        a.alu(Ops.ADD, 1)
