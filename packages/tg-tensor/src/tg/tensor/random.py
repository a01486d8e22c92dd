"""Random numbers from a counter-based generator (Threefry-2x32 via Ops.THREEFRY on uint64).

Element i of the k-th random call is threefry(counter0 + i, key) where the key comes from the seed and
counter0 advances by the element count of every call. A value depends only on (seed, counter), never
on how the graph is split into kernels, so the same seed gives the same numbers whatever gets fused.
"""

from __future__ import annotations

import math
from array import array
from typing import TYPE_CHECKING, Any

from tg.ir import DType, Ops, UOp, dtypes
from tg.tensor.args import canonical_device, dtype_arg
from tg.tensor.creation import DEVICE_INDEX_MIN, device_index
from tg.tensor.errors import ArgumentError
from tg.tensor.realize import from_bytes
from tg.tensor.shapes import int_shape_arg as _shape_arg

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


# while a TinyJit captures, each draw logs its uploaded inputs here: ("counter", buffer uop, first counter, count)
# and ("seed", buffer uop, seed, 1); the jit rewrites them at each replay so replays draw as eager calls would
rng_log: list[tuple[str, UOp, int, int]] | None = None


class _Stream:
    """The default random stream: its seed and the counter of its next draw (`Tensor.manual_seed` sets the seed and
    restarts the counter; TinyJit and @function renew their captured draws from it)."""

    __slots__ = ("counter", "seed")

    def __init__(self) -> None:
        self.seed, self.counter = 0x5EED, 0


rng = _Stream()


def manual_seed(seed: int = 0) -> None:
    """Seed the generator and restart its counter: `Tensor.manual_seed(42)`."""
    rng.seed, rng.counter = int(seed), 0


def _leaf(t: Tensor, requires_grad: bool | None) -> Tensor:
    return t if requires_grad is None else t.requires_grad_(requires_grad)


def _random_bits(cls: type[Tensor], shape: tuple[int, ...], device: str | None) -> Tensor:
    """uint32 random bits of `shape` (one threefry evaluation per element)."""
    dev = canonical_device(device)
    num = math.prod(shape)
    start = rng.counter
    rng.counter += num
    seed = rng.seed & 0xFFFFFFFFFFFFFFFF
    seed_buf = from_bytes(array("Q", [seed]).tobytes(), (1,), dtypes.uint64, dev)
    if num >= DEVICE_INDEX_MIN:  # large draws: the first counter uploaded, the others computed on the device
        counter_buf = from_bytes(array("Q", [start]).tobytes(), (1,), dtypes.uint64, dev)
        counters = cls(counter_buf).expand(num) + device_index(cls, num, dtypes.uint64, dev)
        logged = 1  # a JIT rewrites the first counter only
    else:
        counter_buf = from_bytes(array("Q", range(start, start + num)).tobytes(), (num,), dtypes.uint64, dev)
        counters, logged = cls(counter_buf), num
    if rng_log is not None:
        rng_log.append(("counter", counter_buf.unreshaped, start, logged))
        rng_log.append(("seed", seed_buf.unreshaped, seed, 1))
    key = cls(seed_buf).expand(num) if num != 1 else cls(seed_buf)
    bits = cls(counters.uop.alu(Ops.THREEFRY, key.uop))
    return (bits & 0xFFFFFFFF).cast(dtypes.uint32).reshape(shape)


def rand(
    cls: type[Tensor],
    *shape: Any,
    device: str | None = None,
    dtype: DType | str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """Uniform random numbers in [0, 1): `Tensor.rand(2, 3)`."""

    shp = _shape_arg(shape)
    dt = dtype_arg(dtype) or dtypes.default_float
    if not dtypes.is_float(dt):
        raise ArgumentError(f"rand needs a float dtype, got {dt.name}")
    bits = _random_bits(cls, shp, device)
    # 23 random mantissa bits under exponent 0 give a float32 in [1, 2)
    one_to_two = ((bits >> 9) | 0x3F800000).bitcast(dtypes.float32)
    return _leaf((one_to_two - 1.0).cast(dt), requires_grad)


def uniform(
    cls: type[Tensor],
    *shape: Any,
    low: float = 0.0,
    high: float = 1.0,
    device: str | None = None,
    dtype: DType | str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """Uniform random numbers in [low, high)."""
    dt = dtype_arg(dtype) or dtypes.default_float
    return _leaf((cls.rand(*shape, device=device, dtype=dtypes.float32) * (high - low) + low).cast(dt), requires_grad)


def randn(
    cls: type[Tensor],
    *shape: Any,
    device: str | None = None,
    dtype: DType | str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """Standard normal random numbers (Box-Muller): `Tensor.randn(3, 4)`."""

    shp = _shape_arg(shape)
    dt = dtype_arg(dtype) or dtypes.default_float
    u = cls.rand(2, *shp, device=device, dtype=dtypes.float32)
    radius = ((1.0 - u[0]).log() * -2.0).sqrt()
    return _leaf((radius * (u[1] * (2 * math.pi)).cos()).cast(dt), requires_grad)


def normal(
    cls: type[Tensor],
    *shape: Any,
    mean: float = 0.0,
    std: float = 1.0,
    device: str | None = None,
    dtype: DType | str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """Normal random numbers with `mean` and `std`."""
    dt = dtype_arg(dtype) or dtypes.default_float
    return _leaf((cls.randn(*shape, device=device, dtype=dtypes.float32) * std + mean).cast(dt), requires_grad)


def randint(
    cls: type[Tensor],
    *args: Any,
    low: int | None = None,
    high: int | None = None,
    size: Any = None,
    device: str | None = None,
    dtype: DType | str | None = None,
) -> Tensor:
    """Random integers in [low, high): tinygrad's `randint(*shape, low=0, high=10)` or torch's
    `randint(low, high, size)` / `randint(high, size)` / `randint(..., size=shape)` (recognised when `size=` is given
    or the last positional argument is a sequence)."""
    if size is not None or (len(args) >= 2 and isinstance(args[-1], (tuple, list))):  # a lone tuple: the shape
        bounds = list(args[:-1]) if size is None else list(args)
        shape = args[-1] if size is None else size
        if len(bounds) == 1:
            bounds = [0, *bounds]
        if len(bounds) != 2 or low is not None or high is not None:
            raise TypeError("randint(low, high, size): give one or two bounds and a size")
        lo, hi = int(bounds[0]), int(bounds[1])
        shape_args: tuple[Any, ...] = (shape,)
    else:
        lo, hi, shape_args = 0 if low is None else low, 10 if high is None else high, args
    if hi <= lo:
        raise ArgumentError(f"randint needs low < high, got [{lo}, {hi})")
    dt = dtype_arg(dtype) or dtypes.int32
    if not dtypes.is_int(dt):
        raise TypeError(f"randint needs an integer dtype, got {dt.name}")
    # float64 keeps (high - low) exact for any int32 range
    span = cls.rand(*shape_args, device=device, dtype=dtypes.float64) * (hi - lo)
    return (span.floor().cast(dtypes.int64) + lo).cast(dt)


def randperm(cls: type[Tensor], n: int, device: str | None = None, dtype: DType | str | None = None) -> Tensor:
    """A random permutation of 0..n-1 (argsort of random keys)."""
    if not isinstance(n, int) or n < 0:
        raise ArgumentError(f"randperm: n must be a non-negative int, got {n!r}")
    dt = dtype_arg(dtype) or dtypes.int32
    if n == 0:
        return cls.zeros(0, dtype=dt, device=device)
    return cls.rand(n, device=device).argsort().cast(dt)


def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """Sample category indices (int32) from the weights in the last dim (1-d or 2-d), as torch.multinomial."""
    cls = self._tensor_class()
    if self.ndim not in (1, 2):
        raise ArgumentError(f"multinomial needs a 1-d or 2-d tensor of weights, got shape {self.shape}")
    if num_samples < 1:
        raise ArgumentError(f"multinomial: num_samples must be positive, got {num_samples}")
    if not replacement and num_samples > self.shape[-1]:
        raise ArgumentError(f"multinomial: cannot take {num_samples} samples of {self.shape[-1]} without replacement")
    w = (self if self.ndim == 2 else self.unsqueeze(0)).float()
    if replacement:
        cdf = w.cumsum(1)
        cdf = cdf / cdf[:, -1:]
        u = cls.rand(w.shape[0], num_samples, 1, device=self.device)
        out = (u >= cdf.unsqueeze(1)).sum(2).minimum(w.shape[1] - 1).cast(dtypes.int32)
    else:
        # Gumbel-top-k: the k largest of log(w) + Gumbel noise are a sample without replacement
        g = -(-(cls.rand(*w.shape, device=self.device) + 1e-20).log() + 1e-20).log()
        keys = (w > 0).where(w.log() + g, float("-inf"))
        out = keys.topk(num_samples, 1)[1].cast(dtypes.int32)
    return out if self.ndim == 2 else out.reshape(num_samples)


def _fan_in(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape[1:])) if len(shape) > 1 else int(shape[0]) if shape else 1


def scaled_uniform(
    cls: type[Tensor],
    *shape: Any,
    device: str | None = None,
    dtype: DType | str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """U(-1, 1) / sqrt(numel)."""

    shp = _shape_arg(shape)
    return _leaf(
        cls.uniform(*shp, low=-1.0, high=1.0, device=device, dtype=dtype) * (math.prod(shp) ** -0.5), requires_grad
    )


def glorot_uniform(
    cls: type[Tensor],
    *shape: Any,
    device: str | None = None,
    dtype: DType | str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """U(-b, b) with b = sqrt(6 / (shape[0] + prod(shape[1:]))) (Xavier/Glorot)."""

    shp = _shape_arg(shape)
    bound = math.sqrt(6 / (shp[0] + math.prod(shp[1:]))) if shp else 1.0
    return _leaf(cls.uniform(*shp, low=-bound, high=bound, device=device, dtype=dtype), requires_grad)


def kaiming_uniform(
    cls: type[Tensor],
    *shape: Any,
    a: float = 0.01,
    device: str | None = None,
    dtype: DType | str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """U(-b, b) with b = sqrt(6 / ((1 + a^2) * fan_in)), fan_in = prod(shape[1:]) (He)."""

    shp = _shape_arg(shape)
    bound = math.sqrt(6.0 / ((1 + a * a) * _fan_in(shp)))
    return _leaf(cls.uniform(*shp, low=-bound, high=bound, device=device, dtype=dtype), requires_grad)


def kaiming_normal(
    cls: type[Tensor],
    *shape: Any,
    a: float = 0.01,
    device: str | None = None,
    dtype: DType | str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """N(0, std) with std = sqrt(2 / ((1 + a^2) * fan_in)) (He)."""

    shp = _shape_arg(shape)
    std = math.sqrt(2.0 / ((1 + a * a) * _fan_in(shp)))
    return _leaf(cls.normal(*shp, mean=0.0, std=std, device=device, dtype=dtype), requires_grad)


def threefry(self: Tensor, seed: Tensor | int) -> Tensor:
    """Threefry-2x32 (20 rounds) of each uint64 element, its 32-bit halves keyed by the halves of the uint64 `seed`
    (broadcast): tinygrad's `threefry`, the counter-based generator under `rand`. No gradient (integers)."""
    cls = self._tensor_class()
    if self.dtype != dtypes.uint64:
        raise TypeError(f"threefry: needs a uint64 tensor, got {self.dtype}")
    key = seed if isinstance(seed, cls) else cls(seed, dtype=dtypes.uint64, device=self.device)
    if key.dtype != dtypes.uint64:
        raise TypeError(f"threefry: seed must be uint64, got {key.dtype}")
    x, k = self._operands(key)
    return cls(x.uop.alu(Ops.THREEFRY, k.uop))


def _threefry_pairs(key: Tensor, low: Tensor, high: Tensor) -> Tensor:
    """threefry of the counters `high << 32 | low` under the 2-word key: the low words, then the high words."""
    u64 = dtypes.uint64
    x = threefry((high.cast(u64) << 32) | low.cast(u64), (key[1:2].cast(u64) << 32) | key[0:1].cast(u64))
    return x.cast(dtypes.uint32).cat((x >> 32).cast(dtypes.uint32))


def random_bits(cls: type[Tensor], key: Tensor, counter: Tensor, num: int) -> Tensor:
    """`num` random uint32 words from a 2-word uint32 `key` and 2-word `counter` (tinygrad's `random_bits`, the same
    words for the same inputs): per run of up to 2^32 - 1 words, a key derived from (key, counter + offset), then
    threefry over the counter pairs (j, j + half) giving the first half's words and then the second's. Pure: it
    neither reads nor advances `Tensor.manual_seed`'s stream."""
    for name, t in (("key", key), ("counter", counter)):
        if not isinstance(t, cls) or t.shape != (2,) or not dtypes.is_int(t.dtype):
            got = f"{t.dtype} of shape {t.shape}" if isinstance(t, cls) else type(t).__name__
            raise TypeError(f"random_bits: {name} must be a uint32 tensor of shape (2,), got {got}")
    if not isinstance(num, int) or isinstance(num, bool) or num < 0:
        raise ArgumentError(f"random_bits: num must be a non-negative int, got {num!r}")
    u32 = dtypes.uint32
    key, counter = key.cast(u32), counter.cast(u32)
    low, high = counter[0:1], counter[1:2]
    run_max = 0xFFFFFFFF
    runs = []
    for start in range(0, num, run_max):
        count = min(num - start, run_max)
        run_low = low + (start & 0xFFFFFFFF)
        run_high = high + (start >> 32) + (run_low < low).cast(u32)  # the carry out of the low word
        run_key = _threefry_pairs(key, run_low, run_high)
        half = -(-count // 2)
        first = cls.arange(half, dtype=u32, device=key.device)
        runs.append(_threefry_pairs(run_key, first, first + half)[:count])
    return cls.cat(*runs) if runs else cls.zeros(0, dtype=u32, device=key.device)
