"""@function: traced once per signature, values and gradients equal the plain function, assigns and rand inside."""

from __future__ import annotations

import numpy as np
import pytest

from tg.ir.helpers import Context
from tg.tensor import Device, JitError, Tensor, TinyJit, function


def test_reuse_with_new_tensors_traces_once() -> None:
    runs = 0

    @function
    def affine(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        nonlocal runs
        runs += 1
        return (x @ w + b).relu()

    rng = np.random.default_rng(0)
    for _ in range(4):
        x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4, 2), (2,)))
        out = affine(Tensor(x), Tensor(w), Tensor(b))
        np.testing.assert_allclose(out.numpy(), np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)
    assert runs == 1 and affine.trace_count == 1


def test_new_trace_for_new_shape_or_static_value() -> None:
    @function
    def scale(x: Tensor, s: float) -> Tensor:
        return x * s

    assert scale(Tensor([1.0, 2.0]), 2.0).tolist() == [2.0, 4.0]
    assert scale(Tensor([3.0, 4.0]), 2.0).tolist() == [6.0, 8.0]
    assert scale.trace_count == 1
    assert scale(Tensor([1.0, 2.0]), 3.0).tolist() == [3.0, 6.0]
    assert scale(Tensor([1.0, 2.0, 3.0]), 3.0).tolist() == [3.0, 6.0, 9.0]
    assert scale.trace_count == 3
    with pytest.raises(TypeError, match=r"argument args\[1\] \(list\) is not hashable"):
        scale(Tensor([1.0]), [1.0])


def test_multiple_outputs_and_containers() -> None:
    @function
    def stats(d: dict) -> tuple[Tensor, Tensor, None]:
        x = d["x"]
        return x.sum(), x.max(), None

    s, m, none = stats({"x": Tensor([1.0, 5.0, 2.0])})
    assert s.item() == 8.0 and m.item() == 5.0 and none is None


def test_gradients_equal_the_inlined_function() -> None:
    def body(x: Tensor, w: Tensor) -> Tensor:
        return ((x @ w).tanh() * 2).sum()

    fn = function(body)
    rng = np.random.default_rng(1)
    x_np, w_np = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    grads = []
    for f in (body, fn, fn):
        x, w = Tensor(x_np), Tensor(w_np, requires_grad=True)
        f(x, w).backward()
        assert w.grad is not None
        grads.append(w.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)
    np.testing.assert_allclose(grads[2], grads[0], rtol=1e-6)


def test_assigns_inside_write_the_callers_tensor_in_order() -> None:
    @function
    def step(w: Tensor, g: Tensor) -> Tensor:
        before = w * 1
        w.assign(w - g)
        return before

    w = Tensor([10.0, 20.0]).realize()
    view = w[0:1]
    olds = [step(w, Tensor([1.0, 2.0])) for _ in range(3)]
    assert [o.tolist() for o in olds] == [[10.0, 20.0], [9.0, 18.0], [8.0, 16.0]]
    assert w.tolist() == [7.0, 14.0] and view.tolist() == [7.0]
    assert step.trace_count == 1


def test_implicit_inputs_raise_unless_allowed() -> None:
    w = Tensor([2.0, 3.0]).realize()

    @function
    def uses_closure(x: Tensor) -> Tensor:
        return x * w

    with pytest.raises(
        RuntimeError, match=rf"reads 1 tensor\(s\) that are not arguments \(float \(2,\) on {Device.DEFAULT}\)"
    ):
        uses_closure(Tensor([1.0, 1.0]))

    @function(allow_implicit=True)
    def allowed(x: Tensor) -> Tensor:
        return x * w + Tensor([1.0, 1.0])  # a tensor made inside is a constant of the body, not an input

    assert allowed(Tensor([1.0, 1.0])).tolist() == [3.0, 4.0]
    w.assign(Tensor([10.0, 10.0])).realize()
    assert allowed(Tensor([1.0, 1.0])).tolist() == [11.0, 11.0]
    assert allowed.trace_count == 1


def test_random_inside_draws_like_eager() -> None:
    def body(x: Tensor) -> Tensor:
        return x + Tensor.rand(3)

    fn = function(body)
    Tensor.manual_seed(7)
    traced = [fn(Tensor.zeros(3)).numpy() for _ in range(3)]
    Tensor.manual_seed(7)
    eager = [body(Tensor.zeros(3)).numpy() for _ in range(3)]
    np.testing.assert_array_equal(np.array(traced), np.array(eager))
    assert fn.trace_count == 1


def test_reads_and_realize_inside_raise() -> None:
    @function
    def reads(x: Tensor) -> Tensor:
        return x * x.sum().item()

    with pytest.raises(RuntimeError, match="cannot read tensor data inside @function"):
        reads(Tensor([1.0]))

    @function
    def realizes(x: Tensor) -> Tensor:
        return (x * 2).realize()

    with pytest.raises(RuntimeError, match="cannot realize inside @function"):
        realizes(Tensor([1.0]))


def test_nesting_with_functions_and_jits() -> None:
    @function
    def inner(x: Tensor) -> Tensor:
        return x + 1

    @function
    def outer(x: Tensor) -> Tensor:
        return inner(x) * 2

    assert outer(Tensor([1.0])).tolist() == [4.0]

    @TinyJit
    def jitted(x: Tensor) -> Tensor:
        return outer(x).realize()

    for i in range(4):
        assert jitted(Tensor([float(i)]).realize()).tolist() == [2.0 * (i + 1)]

    jit_inside = TinyJit(lambda x: (x * 2).realize())

    @function
    def bad(x: Tensor) -> Tensor:
        return jit_inside(x)

    with pytest.raises(JitError, match="cannot run inside @function"):
        bad(Tensor([1.0]))


def test_graph_affecting_settings_are_part_of_the_signature() -> None:
    @function
    def f(x: Tensor) -> Tensor:
        return x + 1

    f(Tensor([1.0]))
    with Context(TRAINING=1):
        f(Tensor([1.0]))
    assert f.trace_count == 2


def test_a_call_is_one_node_over_the_traced_body_reused_by_every_call() -> None:
    from tg.codegen.schedule import cache_stats
    from tg.ir import Ops
    from tg.runtime.engine import method_cache
    from tg.tensor import plans

    # 10 ops: the body's reuse is what this checks (with 50 the three calls fused into one 216 KB kernel, ~20 s of
    # lowering and compiling); long chains through @function: test_deep_graphs.py (1,000 calls, a 1,000-op body)
    @function
    def chain(x: Tensor, w: Tensor) -> Tensor:
        for _ in range(10):
            x = (x * w + 1).tanh()
        return x

    rng = np.random.default_rng(2)
    outs, inputs = [], []
    for _ in range(3):
        x, w = Tensor(rng.standard_normal(8).astype(np.float32)), Tensor(rng.standard_normal(8).astype(np.float32))
        inputs.append((x, w))
        outs.append(chain(x, w))
    calls = [o.uop.src[0] for o in outs]
    assert all(o.uop.op is Ops.GETTUPLE for o in outs) and all(c.op is Ops.FUNCTION for c in calls)
    assert calls[0].src[0] is calls[1].src[0] is calls[2].src[0]  # one body object for every call
    for call, (x, w) in zip(calls, inputs, strict=True):
        assert call.src[1:] == (x.uop, w.uop)  # the call node holds this call's arguments, not a copy of the body
    outs[0].realize()
    # a repeated structure hits the schedule cache, or the realize plans in front of it (tg.tensor.plans)
    compiled, hits = len(method_cache), cache_stats["hits"] + plans.stats["hits"]
    for o, (x, w) in zip(outs[1:], inputs[1:], strict=True):
        ref = x.numpy()
        for _ in range(10):
            ref = np.tanh(ref * w.numpy() + 1)
        np.testing.assert_allclose(o.numpy(), ref, rtol=1e-5, atol=1e-6)
    assert len(method_cache) == compiled  # same kernels
    assert cache_stats["hits"] + plans.stats["hits"] >= hits + 2  # same schedule


def test_gradients_through_several_outputs_and_nested_calls_equal_the_plain_function() -> None:
    def inner(x: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        h = (x @ w).relu()
        return h.sum(1), (h * h).mean()

    def outer(x: Tensor, w: Tensor, v: Tensor) -> Tensor:
        a, b = inner_fn(x, w)
        return (a * v).sum() + b

    inner_fn = function(inner)
    outer_fn = function(outer)
    rng = np.random.default_rng(3)
    data = [rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 5), (4,))]

    def grads(f: object, use_second_only: bool = False) -> list[np.ndarray]:
        x, w, v = (Tensor(d, requires_grad=True) for d in data)
        if use_second_only:
            inner_fn(x, w)[1].backward()  # the first output gets no gradient
            return [x.grad.numpy(), w.grad.numpy()]  # type: ignore[union-attr]
        f(x, w, v).backward()  # type: ignore[operator]
        return [t.grad.numpy() for t in (x, w, v)]  # type: ignore[union-attr]

    def plain(x: Tensor, w: Tensor, v: Tensor) -> Tensor:
        a, b = inner(x, w)
        return (a * v).sum() + b

    expected = grads(plain)
    for _ in range(2):
        for got, want in zip(grads(outer_fn), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    x, w = (Tensor(d, requires_grad=True) for d in data[:2])
    inner(x, w)[1].backward()
    for got, want in zip(grads(None, use_second_only=True), [x.grad.numpy(), w.grad.numpy()], strict=True):  # type: ignore[union-attr]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # the backward of each call is a call too, over one backward body per set of outputs with gradients
    (trace,) = inner_fn.cache.values()
    assert set(trace.body.__dict__["_tg_backward"]) == {(0, 1), (1,)}


def test_a_call_without_grad_inputs_does_not_require_grad() -> None:
    @function
    def f(x: Tensor) -> Tensor:
        return x * 2

    assert f(Tensor([1.0], requires_grad=True)).requires_grad
    assert not f(Tensor([1.0])).requires_grad
