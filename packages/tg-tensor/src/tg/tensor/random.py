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
from tg.tensor.args import dtype_arg

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


# while a TinyJit captures, each draw logs its uploaded inputs here: ("counter", buffer uop, first counter, count)
# and ("seed", buffer uop, seed, 1); the jit rewrites them at each replay so replays draw as eager calls would
rng_log: list[tuple[str, UOp, int, int]] | None = None


def manual_seed(seed: int = 0) -> None:
    """Seed the generator and restart its counter: `Tensor.manual_seed(42)`."""
    from tg.tensor.tensor import Tensor

    Tensor._seed, Tensor._rng_counter = int(seed), 0


def _leaf(t: Tensor, requires_grad: bool | None) -> Tensor:
    return t if requires_grad is None else t.requires_grad_(requires_grad)


def _random_bits(shape: tuple[int, ...], device: str | None) -> Tensor:
    """uint32 random bits of `shape` (one threefry evaluation per element)."""
    from tg.tensor.tensor import Tensor, _from_bytes, canonical_device

    dev = canonical_device(device)
    num = math.prod(shape)
    start = Tensor._rng_counter
    Tensor._rng_counter += num
    counter_buf = _from_bytes(array("Q", range(start, start + num)).tobytes(), (num,), dtypes.uint64, dev)
    seed = Tensor._seed & 0xFFFFFFFFFFFFFFFF
    seed_buf = _from_bytes(array("Q", [seed]).tobytes(), (1,), dtypes.uint64, dev)
    if rng_log is not None:
        rng_log.append(("counter", _base(counter_buf), start, num))
        rng_log.append(("seed", _base(seed_buf), seed, 1))
    counters = Tensor(counter_buf)
    key = Tensor(seed_buf).expand(num) if num != 1 else Tensor(seed_buf)
    bits = Tensor(counters.uop.alu(Ops.THREEFRY, key.uop))
    return (bits & 0xFFFFFFFF).cast(dtypes.uint32).reshape(shape)


def _base(u: UOp) -> UOp:
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u


def rand(
    *shape: Any, device: str | None = None, dtype: DType | str | None = None, requires_grad: bool | None = None
) -> Tensor:
    """Uniform random numbers in [0, 1): `Tensor.rand(2, 3)`."""
    from tg.tensor.shapes import shape_arg as _shape_arg

    shp = _shape_arg(shape)
    dt = dtype_arg(dtype) or dtypes.default_float
    if not dtypes.is_float(dt):
        raise ValueError(f"rand needs a float dtype, got {dt.name}")
    bits = _random_bits(shp, device)
    # 23 random mantissa bits under exponent 0 give a float32 in [1, 2)
    one_to_two = ((bits >> 9) | 0x3F800000).bitcast(dtypes.float32)
    return _leaf((one_to_two - 1.0).cast(dt), requires_grad)


def uniform(
    *shape: Any,
    low: float = 0.0,
    high: float = 1.0,
    device: str | None = None,
    dtype: DType | str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """Uniform random numbers in [low, high)."""
    dt = dtype_arg(dtype) or dtypes.default_float
    return _leaf((rand(*shape, device=device, dtype=dtypes.float32) * (high - low) + low).cast(dt), requires_grad)


def randn(
    *shape: Any, device: str | None = None, dtype: DType | str | None = None, requires_grad: bool | None = None
) -> Tensor:
    """Standard normal random numbers (Box-Muller): `Tensor.randn(3, 4)`."""
    from tg.tensor.shapes import shape_arg as _shape_arg

    shp = _shape_arg(shape)
    dt = dtype_arg(dtype) or dtypes.default_float
    u = rand(2, *shp, device=device, dtype=dtypes.float32)
    radius = ((1.0 - u[0]).log() * -2.0).sqrt()
    return _leaf((radius * (u[1] * (2 * math.pi)).cos()).cast(dt), requires_grad)


def normal(
    *shape: Any,
    mean: float = 0.0,
    std: float = 1.0,
    device: str | None = None,
    dtype: DType | str | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """Normal random numbers with `mean` and `std`."""
    dt = dtype_arg(dtype) or dtypes.default_float
    return _leaf((randn(*shape, device=device, dtype=dtypes.float32) * std + mean).cast(dt), requires_grad)


def randint(
    *shape: Any, low: int = 0, high: int = 10, device: str | None = None, dtype: DType | str | None = None
) -> Tensor:
    """Random integers in [low, high)."""
    if high <= low:
        raise ValueError(f"randint needs low < high, got [{low}, {high})")
    dt = dtype_arg(dtype) or dtypes.int32
    return (rand(*shape, device=device, dtype=dtypes.float32) * (high - low)).cast(dtypes.int32).cast(dt) + low
