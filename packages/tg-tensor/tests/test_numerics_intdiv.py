"""Integer `//`, `%` and `idiv`: floor semantics, and zero / INT_MIN divisors that never trap.

The edge table runs in a subprocess: a SIGFPE there fails the test instead of killing the test run.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes

_SIGNED = ["int8", "int16", "int32", "int64"]
_UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]

_CHILD = r"""
import json, sys
import numpy as np
from tg.tensor import Tensor
dev = sys.argv[1]
for dt in sys.argv[2:]:
    info = np.iinfo(dt)
    vals = sorted(v for v in {0, 1, 2, 3, 7, info.max, info.max - 1, info.min, info.min + 1, -1, -2, -3, -7}
                  if info.min <= v <= info.max)
    a = np.array([x for x in vals for _ in vals], dtype=dt)
    b = np.array([y for _ in vals for y in vals], dtype=dt)
    ta, tb = Tensor(a, device=dev), Tensor(b, device=dev)
    out = {"dt": dt, "a": a.tolist(), "b": b.tolist(), "floordiv": (ta // tb).tolist(), "mod": (ta % tb).tolist(),
           "idiv": ta.idiv(tb).tolist()}
    print(json.dumps(out), flush=True)  # one line per dtype: a signal in a later dtype keeps the earlier lines
"""


def _reference(a: int, b: int, bits: int, signed: bool) -> tuple[int, int, int]:
    """(floordiv, mod, truncating div) with the documented choices: by zero 0, INT_MIN // -1 wraps."""
    if b == 0:
        return 0, 0, 0
    fd, md = a // b, a % b
    td = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)

    def wrap(v: int) -> int:
        v &= (1 << bits) - 1
        return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v

    return wrap(fd), wrap(md), wrap(td)


def test_int_division_edge_table_never_traps(device: str) -> None:
    """Every integer dtype in one child process (one start-up, ~1.5 CPU-s, instead of eight)."""
    dts = _SIGNED + _UNSIGNED
    proc = subprocess.run([sys.executable, "-c", _CHILD, device, *dts], capture_output=True, text=True, timeout=600)
    lines = [json.loads(line) for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    done = [got["dt"] for got in lines]
    failing = dts[len(done) :][:1]
    assert proc.returncode == 0, f"on {device}: exit {proc.returncode} (negative: a signal) in {failing}\n{proc.stderr}"
    assert done == dts
    for got in lines:
        dt = got["dt"]
        info = np.iinfo(dt)
        for i, (a, b) in enumerate(zip(got["a"], got["b"], strict=True)):
            fd, md, td = _reference(a, b, info.bits, info.min < 0)
            assert (got["floordiv"][i], got["mod"][i], got["idiv"][i]) == (fd, md, td), f"{dt}: {a} and {b}"


def test_floor_semantics_match_numpy(device: str, rng: np.random.Generator) -> None:
    a = rng.integers(-1000, 1000, 64).astype(np.int32)
    b = rng.integers(-9, 10, 64).astype(np.int32)
    b[b == 0] = 3
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal((ta // tb).numpy(), a // b)
    np.testing.assert_array_equal((ta % tb).numpy(), a % b)
    np.testing.assert_array_equal((ta // 4).numpy(), a // 4)
    np.testing.assert_array_equal((ta % -3).numpy(), a % -3)
    np.testing.assert_array_equal((7 // tb).numpy(), 7 // b)


def test_zero_divisor_at_run_time_is_zero_like_numpy(device: str) -> None:
    a = np.array([5, -5, 0, 2**31 - 1], np.int32)
    z = np.zeros(4, np.int32)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal((Tensor(a, device=device) // Tensor(z, device=device)).numpy(), a // z)
        np.testing.assert_array_equal((Tensor(a, device=device) % Tensor(z, device=device)).numpy(), a % z)


@pytest.mark.parametrize("op", ["floordiv", "mod", "idiv"])
def test_known_constant_zero_divisor_raises(device: str, op: str) -> None:
    t = Tensor([1, 2, 3], device=device)
    with pytest.raises(ZeroDivisionError, match="by zero"):
        getattr(t, op)(0)
    with pytest.raises(ZeroDivisionError, match="by zero"):
        getattr(t, op)(Tensor.zeros(3, dtype=dtypes.int32, device=device))
    # a float divisor follows IEEE (inf / nan), no error
    assert (Tensor([1.0], device=device) // 0.0).tolist()[0] == float("inf")
