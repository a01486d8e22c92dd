"""tg-llm decode and prefill tokens/s on a random 0.37B-parameter Llama (F16 and Q8_0) beside transformers.

    hatch run bench:llm [--tokens N] [--types F16,Q8_0] [--smoke]

The models are written once by packages/tg-llm/tests/make_tiny_gguf.py into tg's cache dir (~1.1 GB for both).
transformers (torch CPU) loads the same GGUF (dequantised to float32, as it does) in a subprocess of the `torch`
hatch env (torch comes from pip there; this env uses uv), in the same run. The memory-bandwidth bound of decoding is
(weight bytes read per token) / (a numpy copy's bandwidth, read + write, measured here). Numbers only: no asserts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

TRANSFORMERS_SCRIPT = r"""
import json, sys, time
import torch, transformers
transformers.logging.set_verbosity_error()
torch.set_num_threads(int(sys.argv[3]))
path, n = sys.argv[1], int(sys.argv[2])
d, f = path.rsplit("/", 1)
model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
vocab = model.config.vocab_size
prompt = torch.tensor([[(i * 7919 + 13) % vocab for i in range(n)]])
with torch.no_grad():
    model(prompt[:, :4])  # warm-up
    start = time.perf_counter(); out = model(prompt, use_cache=True); prefill = time.perf_counter() - start
    past, token = None, prompt[:, :1]
    out = model(token, use_cache=True); past = out.past_key_values
    start = time.perf_counter()
    for i in range(n):
        token = out.logits[:, -1:].argmax(-1)
        out = model(token, past_key_values=past, use_cache=True); past = out.past_key_values
    decode = time.perf_counter() - start
print(json.dumps({"prefill_tok_s": n / prefill, "decode_tok_s": n / decode}))
"""


def load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_tiny_gguf", ROOT / "packages/tg-llm/tests/make_tiny_gguf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_tiny_gguf", module)
    spec.loader.exec_module(module)
    return module


def copy_bandwidth() -> float:
    """Bytes per second of a numpy copy of 256 MiB (read + write counted), best of 5."""
    src = np.ones(64 << 20, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def torch_python() -> str | None:
    """A Python with torch + transformers: this one, or the `torch` hatch env's (created on demand)."""
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        return sys.executable
    hatch = shutil.which("hatch")
    if hatch is None:
        return None
    try:
        subprocess.run([hatch, "run", "torch:python", "-c", "pass"], cwd=ROOT, check=True, capture_output=True,
                       timeout=1800)  # fmt: skip
        found = subprocess.run([hatch, "env", "find", "torch"], cwd=ROOT, check=True, capture_output=True, text=True)
    except (subprocess.SubprocessError, OSError):
        return None
    python = Path(found.stdout.strip()) / "bin" / "python"
    return str(python) if python.exists() else None


def transformers_rates(python: str, path: Path, n: int) -> dict[str, float] | None:
    try:
        result = subprocess.run([python, "-c", TRANSFORMERS_SCRIPT, str(path), str(n), str(os.cpu_count() or 1)],
                                capture_output=True, text=True, timeout=3600)  # fmt: skip
    except subprocess.SubprocessError as e:
        print(f"transformers run failed: {e}", file=sys.stderr)
        return None
    if result.returncode != 0:
        print(f"transformers run failed:\n{result.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16, help="prompt tokens prefilled and tokens decoded")
    parser.add_argument("--types", default="F16,Q8_0")
    parser.add_argument("--smoke", action="store_true", help="the tests' tiny model instead of the 0.37B one")
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--max-context", type=int, help="KV cache positions (default 4 x tokens + 64)")
    parser.add_argument("--torch-python", help="a Python with torch + transformers (default: this or the torch env)")
    args = parser.parse_args()

    from tg.ir.helpers import cache_dir
    from tg.llm import LLM
    from tg.llm.cli import benchmark

    gen = load_generator()
    config = gen.TinyConfig() if args.smoke else gen.bench_config()
    outdir = cache_dir() / ("bench-llm-smoke" if args.smoke else "bench-llm")
    outdir.mkdir(parents=True, exist_ok=True)
    bandwidth = copy_bandwidth()
    python = None if args.no_transformers else (args.torch_python or torch_python())
    print(f"numpy copy bandwidth: {bandwidth / 1e9:.2f} GB/s (read + write); transformers python: {python}")
    rows = []
    for wtype in args.types.split(","):
        path = outdir / f"llama-{wtype.lower()}.gguf"
        if not path.exists():
            print(f"writing {path} ...", flush=True)
            partial = path.with_suffix(".partial")
            gen.write_model(partial, config, wtype, quiet=False)
            partial.rename(path)  # an interrupted write never looks like a finished file
        start = time.perf_counter()
        llm = LLM(path, max_context=args.max_context or 4 * args.tokens + 64)
        load_s = time.perf_counter() - start
        file_mb = path.stat().st_size / 1e6
        print(
            f"{path.name}: loaded {file_mb:.1f} MB in {load_s:.2f} s ({file_mb / load_s:.1f} MB/s), "
            f"KV cache {llm.max_context} positions",
            flush=True,
        )
        tg = benchmark(llm, args.tokens, sys.stdout)
        params = sum(info.shape[0] * (info.shape[1] if len(info.shape) > 1 else 1) for info in llm.file.infos.values())
        bound = bandwidth / (tg["weight_gb"] * 1e9)
        hf = transformers_rates(python, path, args.tokens) if python else None
        rows.append((wtype, params, tg, hf, bound, load_s))
        del llm
    print()
    print(
        "| weights | params | weight bytes / token | tg prefill tok/s | tg decode tok/s | transformers prefill "
        "tok/s | transformers decode tok/s | tg / transformers decode | bandwidth bound tok/s | tg within 2x of bound |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for wtype, params, tg, hf, bound, _load in rows:
        hf_p = f"{hf['prefill_tok_s']:.2f}" if hf else "n/a"
        hf_d = f"{hf['decode_tok_s']:.2f}" if hf else "n/a"
        ratio = f"{tg['decode_tok_s'] / hf['decode_tok_s']:.3f}x" if hf else "n/a"
        within = "yes" if tg["decode_tok_s"] >= bound / 2 else f"no ({tg['decode_tok_s'] / bound:.4f} of it)"
        print(f"| {wtype} | {params / 1e9:.3f} B | {tg['weight_gb']:.3f} GB | {tg['prefill_tok_s']:.2f} | "
              f"{tg['decode_tok_s']:.3f} | {hf_p} | {hf_d} | {ratio} | {bound:.1f} | {within} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
