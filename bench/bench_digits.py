"""The digits CNN recipe (examples/digits_cnn.py) in tg, torch and tinygrad 0.14, measured in the same run.

Every framework trains the same model (Conv2d(1,16,3,p=1) -> relu -> Conv2d(16,32,3,p=1) -> relu -> max_pool2d(2)
-> Linear(512,10)) with Adam lr 2e-3 on the same batches (batch 64, fixed order), tg and tinygrad with TinyJit,
torch eagerly. Columns: steps/s after the first 3 steps, wall seconds in all (incl. compilation), process CPU
seconds, test accuracy. torch and tinygrad run in subprocesses (a Python that imports them: TORCH_PYTHON /
TINYGRAD_PYTHON, this interpreter, or /work/scratch/bin/python); a missing one is skipped with a note.

Run: `hatch run bench:digits [--steps N]` (needs scikit-learn for the data). Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).parent.parent

# trains on the batches in the .npz given as argv[1] for argv[2] steps; prints one JSON line
TORCH_SCRIPT = r"""
import json, sys, time
import numpy as np, torch
torch.manual_seed(0); torch.set_num_threads(2)
d = np.load(sys.argv[1]); steps = int(sys.argv[2])
nn = torch.nn
model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
start = time.perf_counter()
for i in range(steps):
    if i == 3: loop = time.perf_counter()
    x, y = torch.tensor(d["x"][d["idx"][i]]), torch.tensor(d["y"][d["idx"][i]]).long()
    opt.zero_grad(); loss = torch.nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step(); loss.item()
rate = (steps - 3) / (time.perf_counter() - loop)
with torch.no_grad(): acc = (model(torch.tensor(d["xt"])).argmax(1).numpy() == d["yt"]).mean()
print(json.dumps({"steps_per_second": rate, "seconds": time.perf_counter() - start, "cpu": time.process_time(),
                  "accuracy": float(acc)}))
"""

TINYGRAD_SCRIPT = r"""
import json, sys, time
import numpy as np
from tinygrad import Tensor, TinyJit, nn
from tinygrad.nn.optim import Adam
from tinygrad.nn.state import get_parameters
from tinygrad.helpers import Context
Tensor.manual_seed(0)
d = np.load(sys.argv[1]); steps = int(sys.argv[2])
class Net:
    def __init__(self):
        self.c1, self.c2, self.fc = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1), nn.Linear(512, 10)
    def __call__(self, x):
        return self.fc(self.c2(self.c1(x).relu()).relu().max_pool2d(2).flatten(1))
model = Net(); opt = Adam(get_parameters(model), lr=2e-3)
@TinyJit
def step(x, y):
    with Context(TRAINING=1):
        opt.zero_grad(); loss = model(x).sparse_categorical_crossentropy(y).backward(); opt.step()
    return loss.realize()
start = time.perf_counter()
for i in range(steps):
    if i == 3: loop = time.perf_counter()
    step(Tensor(d["x"][d["idx"][i]]), Tensor(d["y"][d["idx"][i]])).item()
rate = (steps - 3) / (time.perf_counter() - loop)
acc = (model(Tensor(d["xt"])).argmax(1).numpy() == d["yt"]).mean()
print(json.dumps({"steps_per_second": rate, "seconds": time.perf_counter() - start, "cpu": time.process_time(),
                  "accuracy": float(acc)}))
"""


def find_python(module: str, env_var: str) -> str | None:
    """A Python interpreter that can import `module`."""
    for py in (os.environ.get(env_var), sys.executable, "/work/scratch/bin/python", shutil.which("python3")):
        if py and os.path.exists(py):
            probe = subprocess.run([py, "-c", f"import {module}"], capture_output=True, check=False, env=_clean_env())
            if probe.returncode == 0:
                return py
    return None


def _clean_env() -> dict[str, str]:
    return {**os.environ, "DEV": "CPU", "PYTHONPATH": ""}


def run_other(name: str, module: str, env_var: str, script: str, data: str, steps: int) -> dict[str, Any] | None:
    py = find_python(module, env_var)
    if py is None:
        print(f"{name}: not installed (set {env_var} to a Python with {module}); skipped")
        return None
    res = subprocess.run([py, "-c", script, data, str(steps)], capture_output=True, text=True, check=False,
                         env=_clean_env(), timeout=1800)  # fmt: skip
    if res.returncode != 0:
        print(f"{name}: failed: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}")
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_tg(data: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
    from tg.tensor import Tensor, TinyJit
    from tg.tensor.nn.optim import Adam
    from tg.tensor.nn.state import get_parameters

    example = runpy.run_path(str(ROOT / "examples" / "digits_cnn.py"))
    Tensor.manual_seed(0)
    model = example["DigitsCNN"]()
    opt = Adam(get_parameters(model), lr=2e-3)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        with Tensor.train():
            loss = model(x).sparse_categorical_crossentropy(y)
        loss.backward()
        opt.step(loss)
        return loss

    cpu0, start = time.process_time(), time.perf_counter()
    loop = start
    for i in range(steps):
        if i == 3:
            loop = time.perf_counter()
        idx = data["idx"][i]
        step(Tensor(data["x"][idx]).realize(), Tensor(data["y"][idx]).realize()).item()
    rate = (steps - 3) / (time.perf_counter() - loop)
    accuracy = float((model(Tensor(data["xt"])).argmax(-1).numpy() == data["yt"]).mean())
    return {"steps_per_second": rate, "seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu0,
            "accuracy": accuracy}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    example = runpy.run_path(str(ROOT / "examples" / "digits_cnn.py"))
    x, y, xt, yt = example["load_data"]()
    rng = np.random.default_rng(0)
    idx = np.stack([rng.choice(len(x), 64, replace=False) for _ in range(args.steps)])
    data = {"x": x, "y": y, "xt": xt, "yt": yt, "idx": idx}
    print(f"load average {os.getloadavg()[0]:.1f}; {args.steps} steps of batch 64; 2-core machine")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "digits.npz")
        np.savez(path, **data)
        results = {
            "tg": run_tg(data, args.steps),
            "torch": run_other("torch", "torch", "TORCH_PYTHON", TORCH_SCRIPT, path, args.steps),
            "tinygrad": run_other("tinygrad", "tinygrad", "TINYGRAD_PYTHON", TINYGRAD_SCRIPT, path, args.steps),
        }
    print(f"{'framework':<10} {'steps/s':>8} {'wall s':>8} {'cpu s':>8} {'accuracy':>9} {'tg steps/s ratio':>17}")
    tg_rate = results["tg"]["steps_per_second"]
    for name, r in results.items():
        if r is None:
            continue
        ratio = tg_rate / r["steps_per_second"]
        print(f"{name:<10} {r['steps_per_second']:8.1f} {r['seconds']:8.1f} {r['cpu']:8.1f} {r['accuracy']:9.2%} "
              f"{ratio:16.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
