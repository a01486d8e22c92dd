"""Random chains of movement ops (and an optional reduction) against numpy: they all become index math in one kernel."""

import random

import numpy as np
import pytest

from tg.tensor import GlobalCounters, Tensor


def _factor_shape(rs: random.Random, n: int) -> tuple[int, ...]:
    dims = []
    while n > 1:
        d = rs.choice([d for d in range(2, n + 1) if n % d == 0])
        dims.append(d)
        n //= d
    rs.shuffle(dims)
    for _ in range(rs.randint(0, 2)):
        dims.insert(rs.randint(0, len(dims)), 1)
    return tuple(dims) or (1,)


def _random_step(rs: random.Random, x: np.ndarray, t: Tensor) -> tuple[np.ndarray, Tensor]:
    kind = rs.choice(["reshape", "permute", "flip", "shrink", "pad", "expand", "slice"])
    if kind == "reshape":
        shape = _factor_shape(rs, x.size)
        return x.reshape(shape), t.reshape(shape)
    if kind == "permute":
        order = list(range(x.ndim))
        rs.shuffle(order)
        return x.transpose(order), t.permute(order)
    if kind == "flip":
        axis = rs.randrange(x.ndim)
        return np.flip(x, axis), t.flip(axis)
    if kind == "shrink":
        bounds = []
        for s in x.shape:
            b = rs.randint(0, s - 1)
            bounds.append((b, rs.randint(b + 1, s)))
        return x[tuple(slice(b, e) for b, e in bounds)], t.shrink(bounds)
    if kind == "pad":
        pads = [(rs.randint(0, 2), rs.randint(0, 2)) for _ in x.shape]
        return np.pad(x, pads), t.pad(pads)
    if kind == "expand" and 1 in x.shape:
        shape = tuple(rs.randint(1, 3) if s == 1 else s for s in x.shape)
        return np.broadcast_to(x, shape), t.expand(shape)
    starts, stops, steps = [None, 0, 1, -1], [None, -1, 2], [None, 1, 2, -1, -2, 3]
    index = tuple(slice(rs.choice(starts), rs.choice(stops), rs.choice(steps)) for _ in x.shape)
    return x[index], t[index]


@pytest.mark.parametrize("seed", range(4))
def test_random_movement_chains(seed, device):
    rs = random.Random(seed)
    for _ in range(6):
        shape = _factor_shape(rs, rs.choice([6, 8, 12, 24, 30]))
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        t = Tensor(x, device=device).realize()
        for _ in range(rs.randint(1, 6)):
            x, t = _random_step(rs, x, t)
            if x.size == 0:
                break
        if x.size and rs.random() < 0.4:
            axis = rs.randrange(x.ndim)
            x, t = x.sum(axis), t.sum(axis)
        before = GlobalCounters.kernel_count
        got = t.numpy()
        assert GlobalCounters.kernel_count - before <= 1
        assert got.shape == x.shape
        np.testing.assert_array_equal(got, x)
