"""Kernels with the same inline region are built once per schedule (schedule/regions.py): the AST is reused, the
buffers renamed, and a kernel's AST is exactly the one it gets when scheduled alone."""

from tg.codegen.schedule import clear_schedule_cache, create_schedule
from tg.codegen.schedule.regions import MAX_LOADS, KernelMemo, RegionKeys
from tg.ir import Ops, UOp, dtypes


def buf(n: int) -> UOp:
    return UOp.new_buffer("CPU", n, dtypes.float32)


def calls(*outs: UOp) -> list[UOp]:
    return [c for c in create_schedule(UOp(Ops.SINK, src=outs)).linear.src if c.src[0].op is Ops.SINK]


def layer(x: UOp, w: UOp) -> UOp:
    return x.alu(Ops.MUL, w).alu(Ops.EXP2).alu(Ops.ADD, x).contiguous()


def test_repeated_layers_share_one_ast_over_their_own_buffers() -> None:
    ws = [buf(16) for _ in range(6)]
    x = layer(buf(16), ws[0])
    for w in ws[1:]:
        x = layer(x, w)
    cs = calls(x)
    assert len(cs) == 6
    assert all(c.src[0] is cs[1].src[0] for c in cs[1:])  # one AST object for the repeated layers
    for prev, c, w in zip(cs, cs[1:], ws[1:], strict=False):
        out, *inputs = c.src[1:]
        assert set(inputs) == {prev.src[1], w}  # each reads the previous layer's output and its own weight
        assert out is not prev.src[1]


def _f(p: UOp, q: UOp) -> UOp:
    return p.alu(Ops.MUL, UOp.full((16,), 2.0, dtypes.float32, "CPU")).alu(Ops.SUB, q)


def test_equal_shapes_with_other_sharing_are_other_kernels() -> None:
    # f(A,B) + f(B,A) and f(A,B) + f(A,B) unfold to the same tree; the second is ADD(m, m) over one node
    a, b = buf(16), buf(16)
    outs = [
        _f(a, b).alu(Ops.ADD, _f(b, a)).contiguous(),
        _f(a, b).alu(Ops.ADD, _f(a, b)).contiguous(),
        _f(b, a).alu(Ops.ADD, _f(a, b)).contiguous(),
        _f(a, a).alu(Ops.ADD, _f(b, b)).contiguous(),
        _f(a, b).alu(Ops.ADD, _f(a, a)).contiguous(),
    ]
    together = calls(*outs)
    assert len(together) == len(outs)
    for out, c in zip(outs, together, strict=True):
        clear_schedule_cache()
        (alone,) = calls(out)
        assert c.src[0] is alone.src[0]  # the AST it gets when scheduled alone
        assert c.src[2:] == alone.src[2:]  # the same inputs in the same PARAM slots
    assert together[0].src[0] is together[2].src[0] and together[1].src[0] is not together[0].src[0]


def test_region_keys_are_iterative_and_name_the_loads() -> None:
    from tg.codegen.schedule.rangeify import plan_stores

    a = buf(8)
    x = a
    for _ in range(5000):
        x = x.alu(Ops.ADD, a)
    sink = UOp(Ops.SINK, src=(x.contiguous(),))
    plan = plan_stores(sink)
    (root,) = (n for n in plan.order if n in plan.buffers)
    region = RegionKeys(plan).key(root, root.src[0], plan.buffers[root])
    assert region is not None
    loads, first_buffers = region.nodes[:], region.buffers[:2]  # (plain values: a failing assert reprs them)
    assert len(loads) == 1 and loads[0] is a and len(region.buffers) == 2
    assert first_buffers[0] is plan.buffers[root] and first_buffers[1] is a
    memo = KernelMemo()
    assert memo.get(region) is None
    memo.put(region, UOp(Ops.SINK), [plan.buffers[root], a], set(), {a})
    hit = memo.get(region)
    assert hit is not None and hit[1][1] is a and hit[3] == {a}


def test_a_region_with_too_many_loads_is_built_without_a_key() -> None:
    from tg.codegen.schedule.rangeify import plan_stores

    inputs = [buf(8) for _ in range(MAX_LOADS + 1)]
    x = inputs[0]
    for b in inputs[1:]:
        x = x.alu(Ops.ADD, b)
    plan = plan_stores(UOp(Ops.SINK, src=(x.contiguous(),)))
    (root,) = (n for n in plan.order if n in plan.buffers)
    assert RegionKeys(plan).key(root, root.src[0], plan.buffers[root]) is None
    (call,) = calls(x.contiguous())  # and still scheduled
    assert len(call.src) == MAX_LOADS + 3
