"""Issue 27, items 1 and 3: backward through every way of making a leaf terminates with the right gradients (each
case runs in a subprocess with a timeout, so a hang fails the test instead of the suite), in-place writes to
values a gradient needs, and the second-backward rule."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tg.tensor import Tensor, nn

# (name, code that prints the gradient values, expected printed values); torch gives the same numbers
LEAF_CASES = [
    (
        "contiguous_realize",
        "w = Tensor([2.], requires_grad=True).contiguous().realize()\n"
        "(w * Tensor([3.]).realize()).sum().backward(); print(w.grad.tolist())",
        [3.0],
    ),
    (
        "ones_contiguous_realize_2",
        "w = Tensor.ones(2, requires_grad=True).contiguous().realize()\n"
        "(w * Tensor([3., 4.]).realize()).sum().backward(); print(w.grad.tolist())",
        [3.0, 4.0],
    ),
    (
        "contiguous_realize_twice",
        "w = Tensor([2.], requires_grad=True).contiguous().realize().contiguous().realize()\n"
        "(w * 3).sum().backward(); print(w.grad.tolist())",
        [3.0],
    ),
    (
        "reshape_contiguous_of_kept_leaf",
        "a = Tensor([2., 3.], requires_grad=True); w = a.reshape(2, 1).contiguous().realize()\n"
        "(w * 3).sum().backward(); print(a.grad.tolist())",
        [3.0, 3.0],
    ),
    (
        "realize",
        "w = Tensor([2.], requires_grad=True).realize(); (w * 3).sum().backward(); print(w.grad.tolist())",
        [3.0],
    ),
    (
        "assign_into_leaf",
        "w = Tensor.zeros(2, requires_grad=True); w.assign(Tensor([1., 2.]))\n"
        "(w * w).sum().backward(); print(w.grad.tolist())",
        [2.0, 4.0],
    ),
    (
        "requires_grad_after_assign",
        "w = Tensor.zeros(2).contiguous().realize(); w.assign(Tensor([1., 2.])).realize(); w.requires_grad_()\n"
        "(w * w).sum().backward(); print(w.grad.tolist())",
        [2.0, 4.0],
    ),
    (
        "load_state_dict",
        "from tg.tensor import nn\n"
        "lin = nn.Linear(2, 1)\n"
        "nn.state.load_state_dict(lin, {'weight': Tensor([[1., 2.]]), 'bias': Tensor([0.5])})\n"
        "lin(Tensor([[1., 3.]])).sum().backward(); print(lin.weight.grad.flatten().tolist() + lin.bias.grad.tolist())",
        [1.0, 3.0, 1.0],
    ),
    (
        "sgd_steps_on_contiguous_leaf",
        "from tg.tensor import nn\n"
        "w = Tensor.ones(2, requires_grad=True).contiguous().realize(); opt = nn.optim.SGD([w], lr=0.1)\n"
        "for _ in range(2):\n"
        "    opt.zero_grad(); (w * w).sum().backward(); opt.step()\n"
        "print(w.tolist())",
        [0.64, 0.64],
    ),
]


# Every case runs in one child process (one start-up instead of nine), each in a fresh namespace: a line
# "case NAME" before it, its printed gradient after; the child stops at the first error.
_CHILD = """
import sys
from tg.tensor import Tensor
for name, code in CASES:
    print("case " + name, flush=True)
    exec(code, {"Tensor": Tensor})
    sys.stdout.flush()
"""


@pytest.fixture(scope="module")
def leaf_case_outputs() -> dict[str, list[str] | str]:
    """Each case's printed lines, or the reason it has none (an error, a hang: the child's 300 s timeout)."""
    cases = [(name, code) for name, code, _ in LEAF_CASES]
    prog = f"CASES = {cases!r}\n{_CHILD}"
    failure = None  # why the child stopped early: charged to the case it was running
    try:
        proc = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300)
        stdout = proc.stdout
        if proc.returncode != 0:
            failure = f"the child failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        failure = "backward did not return within 300 s (a hang)"
    outputs: dict[str, list[str] | str] = {}
    lines: list[str] = []
    name = None
    for line in stdout.splitlines():
        if line.startswith("case "):
            name, lines = line[5:], []
            outputs[name] = lines
        else:
            lines.append(line)
    if failure is not None and name is not None:
        outputs[name] = failure
    return outputs


@pytest.mark.parametrize(("name", "code", "expected"), LEAF_CASES, ids=[c[0] for c in LEAF_CASES])
def test_backward_through_leaf_terminates(
    name: str, code: str, expected: list[float], leaf_case_outputs: dict[str, list[str] | str]
) -> None:
    out = leaf_case_outputs.get(name, "not reached: an earlier case failed")
    assert isinstance(out, list) and out, f"{name}: {out}\n{code}"
    np.testing.assert_allclose([float(v) for v in out[-1].strip("[]").split(",")], expected, rtol=1e-6)


def test_contiguous_of_a_buffer_is_the_tensor_itself() -> None:
    a = Tensor([1.0, 2.0]).realize()
    c = a.contiguous()
    assert c is a  # torch returns self; tinygrad the same buffer
    c.assign(Tensor([5.0, 5.0])).realize()
    assert a.tolist() == [5.0, 5.0]


# ---- in-place writes and the values gradients need (torch's numbers) ----------------------------------------------


def test_assign_gradient_into_plain_buffer() -> None:
    w = Tensor([2.0, 3.0], requires_grad=True)
    b = Tensor.zeros(2).contiguous().realize()
    b.assign(b + w * 2).realize()
    (b * b).sum().backward()
    assert w.grad is not None and w.grad.tolist() == [16.0, 24.0]


def test_assign_gradient_needs_the_old_value() -> None:
    w = Tensor([2.0, 3.0], requires_grad=True)
    b = (Tensor.ones(2) * 3).realize()
    b.assign(b * w).realize()  # d(b_new)/dw is the old b: kept in a copy
    b.sum().backward()
    assert b.tolist() == [6.0, 9.0] and w.grad is not None and w.grad.tolist() == [3.0, 3.0]


def test_partial_assign_gradient() -> None:
    w = Tensor([2.0], requires_grad=True)
    b = Tensor.zeros(2).contiguous().realize()
    b[0:1].assign(w * 2)
    (b * b).sum().backward()
    assert w.grad is not None and w.grad.tolist() == [16.0]


def test_assign_into_realized_non_leaf_keeps_its_history() -> None:
    w = Tensor([2.0, 3.0], requires_grad=True)
    h = (w * 2).realize()
    h.assign(h * 3).realize()
    h.sum().backward()
    assert w.grad is not None and w.grad.tolist() == [6.0, 6.0]


def test_value_read_before_a_write_keeps_its_gradient() -> None:
    w = Tensor([2.0, 3.0], requires_grad=True)
    h = (w * w).realize()  # origin w*w, read below after h was overwritten
    y = (h * 1).realize()
    h.assign(Tensor([0.0, 0.0])).realize()
    y.sum().backward()
    assert w.grad is not None and w.grad.tolist() == [4.0, 6.0]


def test_gradient_through_an_overwritten_value_raises() -> None:
    w = Tensor([2.0, 3.0], requires_grad=True)
    b = Tensor([1.0, 1.0]).realize()
    y = (b * w).realize()  # dy/dw reads b
    b.assign(Tensor([7.0, 7.0])).realize()  # b's old value is gone
    with pytest.raises(RuntimeError, match="overwrote it in place"):
        y.sum().backward()


def test_optimizer_updates_keep_the_leaf() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = nn.optim.SGD([w], lr=0.5)
    for _ in range(3):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])


# ---- item 3: a second backward ------------------------------------------------------------------------------------


def test_second_backward_raises() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        loss.backward()
    assert w.grad is not None and w.grad.tolist() == [2.0, 4.0]  # not doubled


def test_retain_graph_allows_a_second_backward() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    assert w.grad is not None and w.grad.tolist() == [4.0, 8.0]
    with pytest.raises(RuntimeError, match="second one"):
        loss.backward()


def test_a_new_loss_each_step_is_fine() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    for _ in range(2):
        (w * w).sum().backward()  # the same graph built twice is two losses (torch too)
    assert w.grad is not None and w.grad.tolist() == [4.0, 8.0]


def test_create_graph_gives_differentiable_gradients() -> None:
    x = Tensor([3.0], requires_grad=True)
    (x * x * x).sum().backward(create_graph=True)
    assert x.grad is not None
    g = x.grad
    x.grad = None
    g.sum().backward()  # d(3x^2)/dx = 6x
    assert x.grad is not None and x.grad.tolist() == [18.0]


@pytest.mark.torch
def test_backward_leaf_cases_match_torch() -> None:
    torch = pytest.importorskip("torch")
    w = torch.tensor([2.0], requires_grad=True).contiguous()
    (w * torch.tensor([3.0])).sum().backward()
    assert w.grad is not None and w.grad.tolist() == LEAF_CASES[0][2]
    b = torch.ones(2) * 3
    wt = torch.tensor([2.0, 3.0], requires_grad=True)
    b.mul_(wt)
    b.sum().backward()
    assert wt.grad is not None and wt.grad.tolist() == [3.0, 3.0]


def test_hang_guard_in_the_gradient_walk() -> None:
    """The walk raises on a cycle instead of looping (tg.tensor.gradient._target_path)."""
    from tg.ir import UOp, dtypes
    from tg.tensor.gradient import compute_gradient

    buf = Tensor([1.0]).realize().uop
    loop = {buf: buf * 2.0}  # an origin reading its own buffer: what used to hang
    with pytest.raises(RuntimeError, match="cycle"):
        compute_gradient(buf * 3.0, UOp.const(dtypes.float32, 1.0, buf.device, (1,)), set(), loop)
