#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU (CUDA execution is not verified by CI, which has no GPU).
# Runs from the repository with PYTHONPATH and installs nothing: needs python3 (3.11+) with numpy and pytest, the
# NVIDIA driver, and NVRTC from CUDA 12 or 13 (system library, toolkit, or the nvidia-cuda-nvrtc(-cu12) wheel;
# NVRTC=/path/libnvrtc.so overrides). Finishes within 10 minutes:
#   1. device info, one kernel, float4/gated/half/matmul-tile kernels, 2. the op and end-to-end tests on CUDA, 3. matmul/elementwise vs torch.
# Usage: bash scripts/gpu_check.sh [python]     (output also saved to gpu_check.log)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${1:-python3}"
export PYTHONPATH="$(ls -d packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
export DEV=CUDA
export TG_CACHE_DIR="${TG_CACHE_DIR:-$(mktemp -d)}"
exec > >(tee gpu_check.log) 2>&1
date -u; nvidia-smi -L 2>/dev/null || echo "nvidia-smi not found"
"$PY" --version

echo "== 1. device and a first kernel"
timeout 120 "$PY" - <<'PYEOF' || { echo "FAILED: CUDA device does not open or run"; exit 1; }
import numpy as np
from tg.runtime.backends._cuda import nvrtc_version
from tg.runtime.device import Device
from tg.tensor import Tensor
print("NVRTC", nvrtc_version(), "device", Device["CUDA"], "default", Device.DEFAULT)
x = np.arange(1 << 20, dtype=np.float32)
np.testing.assert_array_equal((Tensor(x, device="CUDA") * 2 + 1).numpy(), x * 2 + 1)
print("first kernel ok")
# float4 accesses (16-byte aligned and a view one element off), padded odd sizes, half conversions, a matmul tile
t = Tensor(x, device="CUDA").realize()
np.testing.assert_array_equal((t[1:] * 3).numpy(), x[1:] * 3)
for n in (1000, 1023, 4097):
    np.testing.assert_array_equal((Tensor(x[:n], device="CUDA") + 1).numpy(), x[:n] + 1)
with np.errstate(over="ignore"):
    f = np.array([0.1, 65520, 6e-8, np.inf, np.nan, -0.0], np.float32)
    np.testing.assert_array_equal(Tensor(f, device="CUDA").cast("float16").numpy(), f.astype(np.float16))
a = np.random.default_rng(0).integers(-4, 5, (256, 64)).astype(np.float16)  # sums stay exact in half
np.testing.assert_array_equal((Tensor(a, device="CUDA") @ Tensor(a.T.copy(), device="CUDA")).numpy(), a @ a.T)
print("float4, gating, half and matmul-tile kernels ok")
PYEOF

echo "== 2. op and end-to-end tests on CUDA"
if "$PY" -c "import pytest" 2>/dev/null; then
  timeout 420 "$PY" -m pytest -q -p no:cacheprovider -p no:randomly -m "not slow and not torch" packages/tg-tensor/tests tests
  echo "pytest exit code: $? (124: stopped after 7 minutes)"
else
  echo "pytest is not installed for $PY: skipping the test suite"
fi

echo "== 3. benchmarks (tg vs torch on the same GPU)"
timeout 150 "$PY" scripts/gpu_bench.py || echo "benchmark failed or timed out (exit $?)"
date -u
