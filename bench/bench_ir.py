"""Benchmark of tg.ir: UOp creation rate and graph_rewrite speed with the symbolic matcher.

Workloads (fixed recipes, fresh variable names per repetition so nothing is cached between runs):
  1. index expressions: ~1000 small kernel-style index expressions (strided sums of loop variables, div/mod
     splits, gates), simplified with graph_rewrite(symbolic): input nodes processed per second;
  2. random DAG: a random integer expression DAG (~10k nodes, long shared chains): UOp creation per second, and
     graph_rewrite(symbolic) input nodes per second.
When tinygrad is importable (`tinygrad.uop.ops`), the same recipe is run through tinygrad in the same process and
the ratios are printed. Run: `hatch run bench:ir`, or `/tmp/ref/bin/python bench/bench_ir.py` to include tinygrad.
This is a benchmark, not a test: it prints numbers and asserts nothing.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

try:
    import tg.ir  # noqa: F401
except ImportError:  # running from a venv without tg-ir installed: use the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "packages", "tg-ir", "src"))

Recipe = list[tuple[str, int, Any]]


def make_recipe(n_nodes: int, n_vars: int, seed: int) -> tuple[list[int], Recipe]:
    """A library-independent list of instructions building an index-expression DAG."""
    rng = random.Random(seed)
    var_hi = [rng.randint(1, 1000) for _ in range(n_vars)]
    recipe: Recipe = []
    pool = n_vars
    ops = ["add", "mul", "addc", "mulc", "idiv", "mod", "max", "sub", "where"]
    weights = [4, 1, 3, 2, 2, 2, 1, 1, 1]
    while len(recipe) < n_nodes:
        op = rng.choices(ops, weights)[0]
        a = pool - 1 - min(int(rng.expovariate(0.05)), pool - 1)  # favour recent nodes: deep expressions
        b = rng.randrange(pool)
        c = rng.choice([1, 2, 3, 4, 8, 16, 5, 7])
        recipe.append((op, a, b if op in ("add", "mul", "max", "sub", "where") else c))
        pool += 1
    return var_hi, recipe


def build(recipe: Recipe, var_hi: list[int], variable: Callable[[str, int, int], Any], tag: str) -> list[Any]:
    nodes = [variable(f"v{i}_{tag}", 0, hi) for i, hi in enumerate(var_hi)]
    for op, a, b in recipe:
        x = nodes[a]
        if op == "add":
            r = x + nodes[b]
        elif op == "mul":
            r = x * nodes[b] if len(nodes) % 7 == 0 else x * 3  # keep products rare: bounded degree
        elif op == "addc":
            r = x + b
        elif op == "mulc":
            r = x * b
        elif op == "idiv":
            r = x // b
        elif op == "mod":
            r = x % b
        elif op == "max":
            r = x.maximum(nodes[b])
        elif op == "sub":
            r = x - nodes[b]
        else:
            r = (x < nodes[b]).where(x, nodes[b] + 1)
        nodes.append(r)
    return nodes


def make_index_recipe(n_exprs: int, seed: int) -> list[tuple[int, ...]]:
    """Many small kernel-style index expressions: strided sums of loop variables, div/mod splits and gates."""
    rng = random.Random(seed)
    out: list[tuple[int, ...]] = []
    for _ in range(n_exprs):
        v0, v1, v2 = rng.sample(range(6), 3)
        s1 = rng.choice([1, 2, 4, 8, 16])
        s0 = s1 * rng.choice([4, 8, 16, 32])
        off = rng.choice([0, 1, 3, 4, 7])
        d = rng.choice([2, 4, 8, 16])
        m = rng.choice([2, 3, 4, 8])
        out.append((v0, v1, v2, s0, s1, off, d, m, rng.randint(16, 600)))
    return out


def build_index(recipe: list[tuple[int, ...]], variable: Callable[[str, int, int], Any], tag: str) -> list[Any]:
    vs = [variable(f"i{k}_{tag}", 0, hi) for k, hi in enumerate((3, 15, 31, 7, 63, 1))]
    nodes = []
    for v0, v1, v2, s0, s1, off, d, m, bound in recipe:
        idx = vs[v0] * s0 + vs[v1] * s1 + vs[v2] + off
        nodes.append((idx < bound).where((idx // d) % m + (idx % d) * m, 0))
        nodes.append(((idx // s1) % (s0 // s1)) * s1 + idx % s1)
    return nodes


def bench_lib(name: str, mod: dict[str, Any], var_hi: list[int], recipe: Recipe, reps: int,
              index_recipe: list[tuple[int, ...]]) -> dict[str, float]:  # fmt: skip
    UOp, graph_rewrite, symbolic = mod["UOp"], mod["graph_rewrite"], mod["symbolic"]
    variable = mod["variable"]
    counter = itertools.count()
    ret: dict[str, float] = {}
    times = []
    for _ in range(reps):
        nodes = build_index(index_recipe, variable, f"{next(counter)}")
        sink = UOp.sink(*nodes)
        n_index = len(sink.toposort())
        st = time.perf_counter()
        out = graph_rewrite(sink, symbolic)
        times.append(time.perf_counter() - st)
        n_index_out = len(out.toposort())
        del nodes, sink, out
    t = statistics.median(times)
    ret["index"] = n_index / t
    print(
        f"{name:9s} index exprs: graph_rewrite(symbolic) {n_index / t:9.0f} nodes/s ({t * 1e3:7.1f} ms for "
        f"{n_index} nodes, {len(index_recipe)} expressions -> {n_index_out} nodes)"
    )
    create, rewrite = [], []
    n_created = n_visited = 0
    for _ in range(reps):
        tag = f"{next(counter)}"
        st = time.perf_counter()
        nodes = build(recipe, var_hi, variable, tag)
        sink = UOp.sink(*nodes)
        create.append(time.perf_counter() - st)
        n_created = len(sink.toposort())
        st = time.perf_counter()
        out = graph_rewrite(sink, symbolic)
        rewrite.append(time.perf_counter() - st)
        n_visited, n_out = n_created, len(out.toposort())
        del nodes, sink, out
        if rewrite[0] > 20:  # pathologically slow: one repetition is enough
            break
    c, r = statistics.median(create), statistics.median(rewrite)
    print(
        f"{name:9s} random DAG: create {n_created / c:9.0f} UOps/s ({c * 1e3:7.1f} ms for {n_created} nodes), "
        f"graph_rewrite(symbolic) {n_visited / r:8.0f} nodes/s ({r * 1e3:8.1f} ms, -> {n_out} nodes)"
    )
    ret.update(create=n_created / c, rewrite=n_visited / r)
    return ret


def load_tg() -> dict[str, Any]:
    from tg.ir import UOp, graph_rewrite, symbolic

    return {"UOp": UOp, "graph_rewrite": graph_rewrite, "symbolic": symbolic, "variable": UOp.variable}


def load_tinygrad() -> dict[str, Any] | None:
    try:
        from tinygrad.uop.ops import UOp, graph_rewrite
        from tinygrad.uop.symbolic import symbolic
    except ImportError:
        return None
    return {"UOp": UOp, "graph_rewrite": graph_rewrite, "symbolic": symbolic, "variable": UOp.variable}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000, help="recipe instructions (about the DAG size)")
    ap.add_argument("--index-exprs", type=int, default=1000, help="small index expressions in the first workload")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sys.setrecursionlimit(100_000)
    var_hi, recipe = make_recipe(args.nodes, 16, args.seed)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus"
    py = platform.python_version()
    print(f"bench_ir: {when}, {machine}, Python {py}, {args.nodes} instructions, seed {args.seed}")
    index_recipe = make_index_recipe(args.index_exprs, args.seed)
    ours = bench_lib("tg.ir", load_tg(), var_hi, recipe, args.reps, index_recipe)
    tiny = load_tinygrad()
    if tiny is None:
        print("tinygrad not importable: no comparison (run with /tmp/ref/bin/python to compare)")
        return
    theirs = bench_lib("tinygrad", tiny, var_hi, recipe, args.reps, index_recipe)
    idx, cre, rew = (ours[k] / theirs[k] for k in ("index", "create", "rewrite"))
    print(
        f"ratio tg.ir / tinygrad (higher is better): index-expression rewrite {idx:.2f}x, "
        f"random DAG create {cre:.2f}x, random DAG rewrite {rew:.2f}x"
    )


if __name__ == "__main__":
    main()
