#!/usr/bin/env bash
# Packaging check for every workspace member (directory name == distribution name).
#  1. `hatch build --all` -> sdist + wheel of every member into ./dist
#  2. no wheel may ship tg/__init__.py (PEP 420 namespace)
#  3. per member: fresh venv, third-party deps from the index, then ITS wheel from ./dist only
#     (--no-index: siblings come from dist/, never from PyPI), import it and run its smoke test
#     (scripts/smoke.py: the main path once through the public API, against the wheel) -> catches undeclared
#     sibling deps, files missing from a wheel, broken entry points and bad inter-package version constraints.
#     The suites themselves run once, from the source tree, in `hatch test`.
#  4. the README's user install command (requirements.txt) into a fresh venv
# Usage: bash scripts/check_dists.sh [member-dir-name ...]   (default: all members)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"

rm -rf dist
hatch -q build --all

python3 - <<'PY'
import glob, sys, zipfile
wheels = glob.glob("dist/*.whl")
bad = [w for w in wheels if "tg/__init__.py" in zipfile.ZipFile(w).namelist()]
if bad:
    sys.exit(f"ERROR: wheel(s) ship tg/__init__.py (breaks the PEP 420 namespace): {bad}")
print(f"{len(wheels)} wheels built")
PY

# uv caches built wheels by name+version; our wheels keep their version while their contents change, so
# they are always installed through an empty private cache (third-party deps come from the shared one).

# Third-party requirements of the members and their tests (never a tg-* name: those come from dist/).
THIRD_PARTY=("numpy>=1.24" "libusb1>=3.1" "tqdm>=4.60")

declare -A TOOL_DIST=([amdflash]=amdflash [pci-server]=tg-pci-server)

work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
members=("$@")
if [ ${#members[@]} -eq 0 ]; then
  for d in packages/*/ tools/*/; do members+=("$(basename "$d")"); done
fi
for name in "${members[@]}"; do
  # packages/tg-X holds dist tg-X, module tg.X; tools/NAME holds the dist and module named in TOOL_DIST.
  if [ -d "packages/$name" ]; then
    module="tg.${name#tg-}"
  else
    name="${TOOL_DIST[$name]}"; module="${name//-/_}"
  fi
  venv="$work/$name"
  uv venv -q -p python3 "$venv"
  VIRTUAL_ENV="$venv" uv pip install -q "${THIRD_PARTY[@]}"
  VIRTUAL_ENV="$venv" UV_CACHE_DIR="$work/uv-cache" uv pip install -q --no-index --find-links dist "$name"
  (cd "$work" && "$venv/bin/python" -c "import $module; print('import ok:', '$name', $module.__version__)")
  (cd "$work" && "$venv/bin/python" "$root/scripts/smoke.py" "$name")
done

# 4. The user's install command (README "Install into your own environment"): from the clone, into a fresh venv,
#    `pip install -r requirements.txt` (run here through uv's pip interface: the same requirements, faster); then a
#    tensor op, an nn.Module and tinygrad's `tg.nn` habit must work from the installed packages alone.
if [ "$#" -eq 0 ]; then
  start=$SECONDS
  venv="$work/_user"
  uv venv -q -p python3 "$venv"
  VIRTUAL_ENV="$venv" uv pip install -q "numpy>=1.24" "tqdm>=4.60"
  VIRTUAL_ENV="$venv" UV_CACHE_DIR="$work/uv-cache-user" uv pip install -q -r requirements.txt
  (cd "$work" && "$venv/bin/python" -c "
import tg.tensor as tg
from tg.tensor import Tensor, nn
assert (Tensor([1.0, 2.0]) * 2).tolist() == [2.0, 4.0]
model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
model(Tensor([[1.0, 2.0]])).sum().backward()
assert all(p.grad is not None for p in model.parameters()) and tg.nn.Linear is nn.Linear
print('user install ok:', tg.__file__)
")
  echo "user install check: $((SECONDS - start)) s"
fi
