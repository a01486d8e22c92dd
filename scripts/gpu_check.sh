#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU (CUDA execution is not verified by CI, which has no GPU).
# Runs from the repository with PYTHONPATH and installs nothing: needs python3 (3.11+) with numpy and pytest, the
# NVIDIA driver, and NVRTC from CUDA 12 or 13 (system library, toolkit, or the nvidia-cuda-nvrtc(-cu12) wheel;
# NVRTC=/path/libnvrtc.so overrides). Finishes within 10 minutes:
#   1. device info and one kernel, 2. the op and end-to-end tests on CUDA, 3. matmul/elementwise vs torch.
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
