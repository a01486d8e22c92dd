"""Training speed of real models: tg (TinyJit and eager) vs PyTorch (1 thread and default) vs tinygrad (TinyJit,
DEV=CPU), measured in the same run on the same initial weights and the same batches.

Models (bench/train_worker.py defines them in each framework): digits MLP 64-128-10 (batch 64), digits CNN
conv8-conv16-linear (64), char GPT 2 layers d=64 4 heads ctx 32 (16), a ResNet-style block (conv-bn-relu x2 + skip,
32x32x16, batch 32) and a 4-layer d=256 transformer (ctx 128, batch 8). Adam lr 1e-3, cross-entropy.
Each (framework, model) trains in its own process for --steps steps (the first 3 are not timed); rounds rotate the
framework order and the table shows the median steps/s of --rounds rounds, the ratios of tg's JIT to the others,
eager/JIT, tg JIT to PyTorch 1 thread and to tinygrad per CPU second (steps / CPU seconds of all the process's
threads: on a loaded machine the steadier measure of work done; it does not credit threads), and the largest loss
difference to PyTorch (1 thread) over all steps (relative to the loss).

torch and tinygrad are found in this Python, else in the interpreters named by TORCH_PYTHON and TINYGRAD_PYTHON
(e.g. a scratch venv with `pip install torch==2.13.0 tinygrad==0.14.0`); the run says which it used and skips a
framework it cannot find. OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are dropped for the other frameworks' processes only.

Run: `hatch run bench:train [--models gpt,cnn] [--steps 50] [--rounds 3] [--frameworks ...] [--json PATH]`.
Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from train_worker import MODELS, VOCAB  # noqa: E402

FRAMEWORKS = ("tg-jit", "tg-eager", "torch-1", "torch", "tinygrad")
MODULE = {"torch-1": "torch", "torch": "torch", "tinygrad": "tinygrad"}
ENV_VAR = {"torch": "TORCH_PYTHON", "tinygrad": "TINYGRAD_PYTHON"}
TITLES = {"mlp": "digits MLP 64-128-10", "cnn": "digits CNN conv8-conv16-linear", "gpt": "char GPT 2L d64 4h ctx32",
          "resnet": "ResNet block 16ch 32x32", "transformer": "transformer 4L d256 ctx128"}  # fmt: skip


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)


def _text_tokens() -> np.ndarray:
    """Characters of a text that ships with Python (its own license and argparse's source), mapped to VOCAB ids."""
    import argparse as ap

    text = Path(ap.__file__).read_text()
    codes = np.frombuffer(text.encode("ascii", "replace"), dtype=np.uint8).astype(np.int32)
    return codes % VOCAB


def init_weights(model: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """PyTorch-style initial weights: uniform(+-1/sqrt(fan_in)) for weights and biases, ones/zeros for norms,
    N(0, 0.02) for embeddings."""
    _, shapes, _ = MODELS[model]
    ret = {}
    for name, shape in shapes.items():
        if name in ("tok", "pos"):
            w = rng.normal(0, 0.02, shape)
        elif name.split(".")[-2].startswith(("ln", "bn")):
            w = np.ones(shape) if name.endswith(".w") else np.zeros(shape)
        else:
            fan_in = int(np.prod(shapes[name[:-2] + ".w"][1:]))
            w = rng.uniform(-1, 1, shape) / np.sqrt(fan_in)
        ret[f"p:{name}"] = w.astype(np.float32)
    return ret


def make_data(model: str, steps: int) -> dict[str, np.ndarray]:
    """Initial weights and `steps` batches for `model` (seeded: every framework gets the same arrays)."""
    rng = np.random.default_rng(0)
    batch, _, layout = MODELS[model]
    data = init_weights(model, rng)
    if model in ("mlp", "cnn"):
        x, y = _digits()
        idx = np.stack([rng.choice(len(x), batch, replace=False) for _ in range(steps)])
        data["x"] = x[idx] if model == "mlp" else x[idx].reshape(steps, batch, 1, 8, 8)
        data["y"] = y[idx]
    elif model == "resnet":
        data["x"] = rng.standard_normal((steps, batch, 16, 32, 32)).astype(np.float32)
        data["y"] = rng.integers(0, 10, (steps, batch)).astype(np.int32)
    else:
        assert layout is not None
        ctx, tokens = layout[3], _text_tokens()
        starts = rng.integers(0, len(tokens) - ctx - 1, (steps, batch))
        data["x"] = np.stack([[tokens[s : s + ctx] for s in row] for row in starts]).astype(np.int32)
        data["y"] = np.stack([[tokens[s + 1 : s + ctx + 1] for s in row] for row in starts]).astype(np.int32)
    return data


def _env(framework: str) -> dict[str, str]:
    env = {**os.environ, "DEV": "CPU"}
    if not framework.startswith("tg"):
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
        env["PYTHONPATH"] = ""
    return env


def find_python(framework: str) -> str | None:
    """The interpreter that runs `framework`: this one for tg; for torch/tinygrad this one if it imports the module,
    else the one named by TORCH_PYTHON / TINYGRAD_PYTHON."""
    if framework.startswith("tg"):
        return sys.executable
    module = MODULE[framework]
    for py in (sys.executable, os.environ.get(ENV_VAR[module])):
        if py and os.path.exists(py):
            probe = subprocess.run([py, "-c", f"import {module}"], capture_output=True, check=False,
                                   env=_env(framework))  # fmt: skip
            if probe.returncode == 0:
                return py
    return None


def run_one(framework: str, model: str, path: str, steps: int, timeout: float) -> dict[str, Any] | None:
    py = find_python(framework)
    if py is None:
        return None
    cmd = [py, str(ROOT / "train_worker.py"), framework, model, path, str(steps)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=_env(framework), timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  {framework} {model}: over {timeout:.0f} s, skipped", flush=True)
        return None
    if res.returncode != 0:
        last = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else str(res.returncode)
        print(f"  {framework} {model}: failed: {last}", flush=True)
        return None
    return dict(json.loads(res.stdout.strip().splitlines()[-1]), python=py)


def _fmt(v: float | None, spec: str = "8.1f") -> str:
    return format(v, spec) if v is not None else "-".rjust(int(spec.split(".")[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--steps", type=int, default=50, help="steps per run (the first 3 are not timed)")
    parser.add_argument("--rounds", type=int, default=1, help="runs per framework and model (median shown)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    parser.add_argument("--json", help="write every run's results here")
    args = parser.parse_args()
    models, frameworks = args.models.split(","), args.frameworks.split(",")
    for f in frameworks:
        if f not in FRAMEWORKS:
            raise SystemExit(f"unknown framework {f!r}; choose from {', '.join(FRAMEWORKS)}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.steps} steps per run, "
          f"{args.rounds} round(s)")  # fmt: skip
    for f in frameworks:
        py = find_python(f)
        print(f"  {f}: {py or 'not found (set ' + ENV_VAR.get(MODULE.get(f, ''), '') + ')'}")
    results: dict[str, dict[str, list[dict[str, Any]]]] = {m: {f: [] for f in frameworks} for m in models}
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            if model not in MODELS:
                raise SystemExit(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
            path = os.path.join(tmp, f"{model}.npz")
            np.savez(path, **make_data(model, args.steps))
            for r in range(args.rounds):
                order = frameworks[r % len(frameworks) :] + frameworks[: r % len(frameworks)]
                for f in order:
                    if (res := run_one(f, model, path, args.steps, args.timeout)) is not None:
                        results[model][f].append(res)
                        print(f"  {model:12s} {f:9s} {res['steps_per_second']:9.2f} steps/s "
                              f"{res['steps_per_cpu_second']:9.2f} steps/CPU-s  ({res['version']})",
                              flush=True)  # fmt: skip
    print_table(results, models, frameworks)
    if args.json:
        Path(args.json).write_text(json.dumps(results))


def print_table(results: dict[str, dict[str, list[dict[str, Any]]]], models: list[str], frameworks: list[str]) -> None:
    def rate(m: str, f: str, key: str = "steps_per_second") -> float | None:
        runs = results[m].get(f, [])
        return statistics.median(r[key] for r in runs) if runs else None

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:6.2f}x" if a is not None and b is not None else "     -"

    print()
    print("| model (batch) | tg JIT | tg eager | PyTorch 1 thr | PyTorch default | tinygrad JIT | JIT/torch-1 | "
          "JIT/tinygrad | eager/JIT | JIT/torch-1 per CPU s | JIT/tinygrad per CPU s | "
          "loss diff vs torch |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in models:
        r = {f: rate(m, f) for f in FRAMEWORKS}
        c = {f: rate(m, f, "steps_per_cpu_second") for f in FRAMEWORKS}
        ref = (results[m].get("torch-1") or results[m].get("torch") or [None])[0]
        diffs = []
        for f in ("tg-jit", "tg-eager"):
            if ref is not None and results[m].get(f):
                mine = results[m][f][0]["losses"]
                diffs.append(max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(mine, ref["losses"], strict=False)))
        diff = f"{max(diffs):.1e}" if diffs else "-"
        print(f"| {TITLES[m]} ({MODELS[m][0]}) | {_fmt(r['tg-jit'])} | {_fmt(r['tg-eager'])} | {_fmt(r['torch-1'])} "
              f"| {_fmt(r['torch'])} | {_fmt(r['tinygrad'])} | {ratio(r['tg-jit'], r['torch-1'])} | "
              f"{ratio(r['tg-jit'], r['tinygrad'])} | {ratio(r['tg-eager'], r['tg-jit'])} | "
              f"{ratio(c['tg-jit'], c['torch-1'])} | {ratio(c['tg-jit'], c['tinygrad'])} | {diff} |")  # fmt: skip


if __name__ == "__main__":
    main()
