"""How many Optuna trials reach within 1 % of the exact grid optimum (cost under deadline).

    python benchmarks/optuna_convergence.py [--seeds 5] [--max-trials 3000] [overrides ...]

The exact optimum comes from one exhaustive pass of the sweep engine over the same space
(`jctopt task=deadline`); each seed runs TPE (`jctopt task=optimize`, in-memory storage)
until its best feasible trial is within 1 % of it. The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jctopt
from jctopt.search.grid import search
from jctopt.tasks import optimize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--max-trials", type=int, default=3000)
    ap.add_argument("overrides", nargs="*", default=[])
    args = ap.parse_args()
    base = ["task=optimize", "optimize.storage=memory", "optimize.progress=false", *args.overrides]
    cfg = jctopt.compose(base + [f"optimize.n_trials={args.max_trials}"])
    deadline_s = float(cfg.job.deadline_days) * 86400
    exact = search(cfg, "top_k", "cost_usd", top_k=1, max_days=float(cfg.job.deadline_days)).iloc[0]
    n_grid = jctopt.build_space(cfg.space, cfg.model, cfg.training.global_batch).size
    print(f"exact optimum over {n_grid:,} grid points: ${exact.cost_usd:,.0f}", file=sys.stderr)
    needed = []
    for seed in range(args.seeds):
        t0 = time.perf_counter()
        _, df = optimize.run_optimize(jctopt.compose(base + [f"optimize.n_trials={args.max_trials}",
                                                             f"optimize.seed={seed}"]))
        ok = (df.reason == "OK") & (df.jct_s <= deadline_s)
        best = df.cost_usd.where(ok).cummin()
        hit = df.number[best <= 1.01 * exact.cost_usd]
        needed.append(int(hit.iloc[0]) + 1 if len(hit) else None)
        print(f"seed {seed}: {needed[-1]} trials ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    reached = [n for n in needed if n is not None]
    print(json.dumps({"grid_points": n_grid, "axes": list(optimize.search_axes(cfg)), "exact_cost_usd": round(float(exact.cost_usd)),
                      "trials_to_1pct": needed, "median_trials_to_1pct": statistics.median(reached) if reached else None,
                      "seeds_reaching": len(reached), "seeds": args.seeds, "max_trials": args.max_trials}))


if __name__ == "__main__":
    main()
