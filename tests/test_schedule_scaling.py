"""Scheduling cost grows linearly with the graph (counted work, not time), and memory planning of a 20-layer MLP."""

import numpy as np
import pytest

from tg.codegen.schedule import clear_schedule_cache, create_schedule, stats
from tg.ir import Ops, UOp
from tg.tensor import Tensor


def block(x: Tensor, w: Tensor) -> Tensor:
    x = (x - x.max(-1, keepdim=True)).exp()
    x = x / x.sum(-1, keepdim=True) @ w
    m = x.mean(-1, keepdim=True)
    v = ((x - m) * (x - m)).mean(-1, keepdim=True)
    return (x - m) / (v + 1e-5).sqrt()


def steps_for(n: int, hit: bool = False) -> int:
    x, w = Tensor.empty(16, 64, device="NULL"), Tensor.empty(64, 64, device="NULL")
    for _ in range(n):
        x = block(x, w)
    sink = UOp(Ops.SINK, src=(x.uop,))
    clear_schedule_cache()
    if hit:
        create_schedule(sink)
    before = stats.steps
    create_schedule(sink)
    return stats.steps - before


@pytest.mark.slow  # schedules graphs at N, 4N and 16N
def test_scheduling_work_grows_linearly():
    for hit in (False, True):
        w10, w40, w160 = steps_for(10, hit), steps_for(40, hit), steps_for(160, hit)
        assert w40 / w10 <= 4.4 and w160 / w40 <= 4.4, (hit, w10, w40, w160)


def test_cache_hit_does_less_work_than_a_miss():
    assert steps_for(40, hit=True) * 3 < steps_for(40)


def test_mlp_forward_peak_memory_below_the_sum_of_its_intermediates(rng: np.random.Generator):
    ws = [(rng.standard_normal((32, 32)) / 6).astype(np.float32) for _ in range(20)]
    x0 = rng.standard_normal((8, 32)).astype(np.float32)
    x = Tensor(x0, device="CPU")
    for w in ws:
        x = (x @ Tensor(w, device="CPU")).relu()
    s = create_schedule(UOp(Ops.SINK, src=(x.uop,)))
    intermediates = [c.src[1] for c in s.linear.src[:-1] if c.src[0].op is Ops.SINK]
    assert len(intermediates) == 19 and all(b.op is Ops.BUFFER_VIEW for b in intermediates)
    arenas = {b.src[0] for b in intermediates}
    peak = sum(a.arg for a in arenas)
    assert peak < sum(b.arg[0] * 4 for b in intermediates) / 4
    want = x0
    for w in ws:
        want = np.maximum(want @ w, 0)
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-4, atol=1e-5)
