"""einsum and resampling (interpolate) as Tensor methods (attached in tensor.py).

einsum lines every operand up on one set of axes (one per letter), multiplies with broadcasting and sums the
letters that are not in the output: one fused reduce, as matmul. interpolate resamples each dim by contracting
it with a small (n_in, n_out) weight matrix computed on the host, so its gradient is the transposed resampling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tg.ir import DType, dtypes
from tg.tensor.args import dtype_arg
from tg.tensor.errors import ArgumentError

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _parse(formula: str, operands: Sequence[Tensor]) -> tuple[list[str], str]:
    """Per-operand letter strings and the output string, with '...' replaced by private letters."""
    formula = formula.replace(" ", "")
    lhs, arrow, rhs = formula.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        raise ArgumentError(f"einsum: {formula!r} names {len(inputs)} operands, got {len(operands)}")
    n_ell = 0
    for spec, t in zip(inputs, operands, strict=True):
        if "..." in spec:
            n_ell = max(n_ell, t.ndim - len(spec.replace("...", "")))
    ell = "".join(chr(0x3B1 + i) for i in range(n_ell))  # Greek letters stand for the broadcast dims
    specs = []
    for spec, t in zip(inputs, operands, strict=True):
        if "..." in spec:
            k = t.ndim - len(spec.replace("...", ""))
            spec = spec.replace("...", ell[n_ell - k :] if k else "")
        if len(spec) != t.ndim or not all(c.isalpha() for c in spec):
            raise ArgumentError(f"einsum: subscripts {spec!r} do not fit operand of shape {t.shape}")
        specs.append(spec)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {c: "".join(specs).count(c) for c in "".join(specs)}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    for c in out:
        if not any(c in s for s in specs):
            raise ArgumentError(f"einsum: output subscript {c!r} appears in no input of {formula!r}")
    return specs, out


def einsum(formula: str, *operands: Tensor | Sequence[Tensor], dtype: DType | str | None = None) -> Tensor:
    """Einstein summation: `Tensor.einsum("ij,jk->ik", a, b)` (operands may also be given as one list)."""
    ops: list[Tensor] = (
        list(operands[0])
        if len(operands) == 1 and isinstance(operands[0], (list, tuple))
        else list(
            operands  # type: ignore[arg-type]
        )
    )
    specs, out = _parse(formula, ops)
    letters: list[str] = []
    for s in [*specs, out]:
        letters.extend(c for c in s if c not in letters)
    sizes: dict[str, int] = {}
    aligned = []
    for spec, t in zip(specs, ops, strict=True):
        # a letter repeated within one operand takes the diagonal
        while len(set(spec)) != len(spec):
            c = next(c for c in spec if spec.count(c) > 1)
            i, j = spec.index(c), spec.index(c, spec.index(c) + 1)
            t = t.diagonal(0, i, j)
            spec = spec[:i] + spec[i + 1 : j] + spec[j + 1 :] + c
        for c, n in zip(spec, t.shape, strict=True):
            if sizes.setdefault(c, n) != n and n != 1 and sizes[c] != 1:
                raise ArgumentError(f"einsum: subscript {c!r} has sizes {sizes[c]} and {n} in {formula!r}")
            sizes[c] = max(sizes[c], n)
        order = sorted(range(len(spec)), key=lambda k: letters.index(spec[k]))
        t = t.permute(*order) if order else t
        present = [spec[k] for k in order]
        t = t.reshape(*[t.shape[present.index(c)] if c in present else 1 for c in letters])
        aligned.append(t)
    dt = dtype_arg(dtype)
    prod = aligned[0] if dt is None else aligned[0].cast(dt)
    for t in aligned[1:]:
        prod = prod * (t if dt is None else t.cast(dt))
    prod = prod.expand(*[sizes[c] for c in letters]) if prod.shape != tuple(sizes[c] for c in letters) else prod
    summed = [i for i, c in enumerate(letters) if c not in out]
    ret = prod.sum(summed, dtype=dt) if summed else prod
    kept = [c for c in letters if c in out]
    return ret.permute(*[kept.index(c) for c in out]) if kept else ret


def _weights(n_in: int, n_out: int, mode: str, align_corners: bool) -> list[list[float]]:
    """(n_in, n_out) matrix: output j = sum_i x[i] * w[i][j]."""
    w = [[0.0] * n_out for _ in range(n_in)]
    scale = n_in / n_out
    for j in range(n_out):
        if mode == "nearest":
            w[min(math.floor(j * scale), n_in - 1)][j] = 1.0
        elif mode == "nearest-exact":
            w[min(math.floor((j + 0.5) * scale), n_in - 1)][j] = 1.0
        else:
            if align_corners:
                src = j * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
            else:
                src = max((j + 0.5) * scale - 0.5, 0.0)
            lo = min(math.floor(src), n_in - 1)
            hi = min(lo + 1, n_in - 1)
            lam = src - lo
            w[lo][j] += 1 - lam
            w[hi][j] += lam
    return w


def interpolate(
    self: Tensor,
    size: int | Sequence[int] | None = None,
    mode: str = "linear",
    align_corners: bool = False,
    scale_factor: float | Sequence[float] | None = None,
) -> Tensor:
    """Resample the last len(size) dims to `size` (or by `scale_factor`): mode 'linear' (also 'bilinear',
    'trilinear'), 'nearest' or 'nearest-exact', with torch's align_corners semantics."""
    cls = self._tensor_class()
    if mode in ("bilinear", "trilinear"):
        mode = "linear"
    if mode not in ("linear", "nearest", "nearest-exact"):
        raise ArgumentError(f"interpolate: mode must be 'linear', 'nearest' or 'nearest-exact', got {mode!r}")
    if size is None:
        if scale_factor is None:
            raise ArgumentError("interpolate needs size= or scale_factor=")
        factors = [scale_factor] if isinstance(scale_factor, (int, float)) else list(scale_factor)
        n = len(factors) if not isinstance(scale_factor, (int, float)) else max(1, self.ndim - 2)
        factors = factors * n if len(factors) == 1 else factors
        size = [math.floor(s * f) for s, f in zip(self.shape[-n:], factors, strict=True)]
    sizes = [size] if isinstance(size, int) else list(size)
    if len(sizes) > self.ndim or any(s <= 0 for s in sizes):
        raise ArgumentError(f"interpolate: size {sizes} does not fit input {self.shape}")
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    for i, n_out in enumerate(sizes):
        d = self.ndim - len(sizes) + i
        n_in = x.shape[d]
        if n_in == n_out and mode != "linear":
            continue
        w = cls(_weights(n_in, n_out, mode, align_corners), dtype=x.dtype, device=x.device)
        x = (x.transpose(d, -1) @ w).transpose(d, -1)
        if not dtypes.is_float(self.dtype) and mode == "linear":
            x = x.round()  # integer images are rounded after each pass (torch's separable uint8 kernels)
    if not dtypes.is_float(self.dtype):  # integer images keep their dtype (torch): linear values rounded
        return (x.round() if mode == "linear" else x).cast(self.dtype)
    return x if x.dtype is self.dtype else x.cast(self.dtype)
