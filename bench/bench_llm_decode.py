"""Where a decode token of a GGUF model goes: the decode TinyJit's kernels run one by one with timing, N times.

    hatch run bench:llm-decode [--types F16,Q8_0] [--replays 5] [--smoke]

For each kernel of the captured decode step the minimum time over the replays is taken and summed: the token's
kernel time without the scheduling noise of a loaded machine (the wall time per replay is printed beside it).
Matrix kernels are those whose largest input is the size of one of the model's weight matrices; their share and
bandwidth are printed, with the bound (weight bytes per token / a numpy copy's bandwidth, read + write, measured in
this process). Numbers only: no asserts.
The models are bench_llm.py's (written there on first use).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

from bench_llm import copy_bandwidth, load_generator


def profile(path: str, replays: int) -> None:
    from tg.llm import LLM
    from tg.runtime.engine import CompiledRunner

    llm = LLM(path, max_context=64)
    gen = llm.generator
    list(llm.stream_tokens([1, 2, 3, 4, 5], 4, stop=False))  # prefill and decode: both JITs capture
    program = gen._decode.captured  # type: ignore[union-attr]
    items = program.instantiate(program.slot_buffers)
    pos0 = len(gen.cached) + 1
    times: list[list[float]] = []
    walls = []
    for r in range(replays):
        start = time.perf_counter()
        times.append([ei.run({"start_pos": pos0 + r}, wait=True, update_stats=False) or 0.0 for ei in items])
        walls.append(time.perf_counter() - start)
    names = [ei.runner.p.name if isinstance(ei.runner, CompiledRunner) else type(ei.runner).__name__ for ei in items]
    largest = [max((b.nbytes for b in ei.bufs[1:]), default=0) for ei in items]
    mins = [min(t[i] for t in times) for i in range(len(items))]
    model = llm.model
    weights = [model.output] + [w for la in model.layers for w in (la.wq, la.wk, la.wv, la.wo, la.w_gate, la.w_up,
                                                                     la.w_down)]  # fmt: skip
    sizes = {w.nbytes for w in weights}
    matrix = [i for i in range(len(items)) if largest[i] in sizes]
    total, mat = sum(mins), sum(mins[i] for i in matrix)
    weight_bytes = model.weights_nbytes()
    bandwidth = copy_bandwidth()
    bound = bandwidth / weight_bytes
    print(f"{path}: {len(items)} launches per decode token, {len(matrix)} matrix kernels; weights "
          f"{weight_bytes / 1e9:.3f} GB")  # fmt: skip
    print(f"  kernel minima over {replays} replays, summed: {total * 1e3:.1f} ms/token ({1 / total:.2f} tok/s); "
          f"matrix kernels {mat * 1e3:.1f} ms ({100 * mat / total:.0f}%, {weight_bytes / mat / 1e9:.2f} GB/s), "
          f"the others {(total - mat) * 1e3:.1f} ms")  # fmt: skip
    medians = [sorted(t[i] for t in times)[replays // 2] for i in range(len(items))]
    print(f"  kernel medians summed: {sum(medians) * 1e3:.1f} ms/token (matrix kernels "
          f"{sum(medians[i] for i in matrix) * 1e3:.1f} ms); wall per replay: min {min(walls) * 1e3:.0f} ms, median "
          f"{sorted(walls)[replays // 2] * 1e3:.0f} ms")  # fmt: skip
    print(f"  numpy copy {bandwidth / 1e9:.2f} GB/s (read + write): bound {bound:.2f} tok/s; the kernel minima are "
          f"{100 / total / bound:.0f}% of it")  # fmt: skip
    by_name: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for name, t in zip(names, mins, strict=True):
        by_name[name][0] += 1
        by_name[name][1] += t
    for name, (count, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:8]:
        print(f"    {name:36s} x{int(count):3d} {t * 1e3:8.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", default="F16,Q8_0")
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="the tests' tiny model instead of the 0.37B one")
    args = parser.parse_args()

    from tg.ir.helpers import cache_dir

    gen = load_generator()
    config = gen.TinyConfig() if args.smoke else gen.bench_config()
    outdir = cache_dir() / ("bench-llm-smoke" if args.smoke else "bench-llm")
    outdir.mkdir(parents=True, exist_ok=True)
    for wtype in args.types.split(","):
        path = outdir / f"llama-{wtype.lower()}.gguf"
        if not path.exists():
            partial = path.with_suffix(".partial")
            gen.write_model(partial, config, wtype, quiet=False)
            partial.rename(path)
        profile(str(path), args.replays)
    return 0


if __name__ == "__main__":
    sys.exit(main())
