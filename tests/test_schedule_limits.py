"""Store rules L1 (a kernel over the buffer limit is split by storing intermediates) and D1 (a stored value that is
constant along an axis is stored without it), end to end: kernel counts, buffer sizes and numerics against numpy
on CPU and PYTHON."""

import numpy as np
import pytest

from tg.codegen.schedule import create_schedule
from tg.ir import Context, GlobalCounters, Ops, UOp
from tg.tensor import Tensor

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("limit", [0, 4, 6])
def test_l1_split_kernels_give_the_same_values(device: str, limit: int) -> None:
    xs = [RNG.standard_normal((3, 5)).astype(np.float32) for _ in range(9)]
    with Context(MAX_KERNEL_BUFFERS=limit):
        ts = [Tensor(x, device=device) for x in xs]
        out = ts[0]
        for t in ts[1:]:
            out = out * 0.5 + t.exp()
        linear = create_schedule(UOp(Ops.SINK, src=(out.uop,))).linear
        args = [len(c.src) - 1 for c in linear.src]
        GlobalCounters.reset()
        got = out.numpy()
        ran = GlobalCounters.kernel_count
    ref = xs[0]
    for x in xs[1:]:
        ref = ref * 0.5 + np.exp(x)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    if limit:
        assert max(args) <= limit and ran == len(args) > 1
    else:
        assert args == [10] and ran == 1


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_d1_stores_the_smaller_buffer_and_reads_it_expanded(device: str) -> None:
    cols = [RNG.standard_normal((4, 1)).astype(np.float32) for _ in range(4)]
    ts = [Tensor(c, device=device).realize() for c in cols]
    y = ts[0].expand(4, 8) * ts[1].expand(4, 8) + ts[2].expand(4, 8) * ts[3].expand(4, 8)
    out = y + y.flip(1) * 2
    linear = create_schedule(UOp(Ops.SINK, src=(out.uop,))).linear
    assert len(linear.src) == 2
    inter = linear.src[0].src[1]  # the first kernel's output (a BUFFER, or a view of the memory planner's arena)
    assert (inter.arg if inter.op is Ops.BUFFER else inter.arg[0]) == 4  # 4 values, not 4x8
    ref = np.broadcast_to(cols[0] * cols[1] + cols[2] * cols[3], (4, 8))
    np.testing.assert_allclose(out.numpy(), ref + ref[:, ::-1] * 2, rtol=1e-6)
