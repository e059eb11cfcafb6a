"""Sweep throughput: configurations evaluated per second by the full model.

    python benchmarks/throughput.py [--runs 3] [--chunk-size N] [--dtype float32]

Evaluates every configuration of a >= 10^7-point design space (GPT-3 175B on 64..16,384
GPUs: every catalog GPU and fabric, Megatron splits, micro-batch, recompute, ZeRO, precision,
checkpoint policy) exactly as ``jctopt task=sweep sweep.keep=top_k`` does: memory
feasibility, communication, bubbles, stragglers, failures and checkpoints, cost; reduced on
the device to the best configurations, whose rows are then re-evaluated in full on the host
side. Parquet writing is left out (it depends on how much is kept, not on the model).

Also timed in the same run: the same model per configuration without vmap (one jitted call
each, the way a scalar tool works), the exhaustive search for the cheapest layout of
GPT-3 175B on exactly 1024 GPUs, the seconds tracing the sweep's chunk kernel takes
(``trace_s``: what a run that loads its exported kernels skips), and the wall time of the
default job (``jctopt`` with no arguments, a new process each time) with an empty cache
(``first_answer_s``) and with the cache it left (``warm_answer_s``, median of 3), the same
for ``jctopt task=estimate`` (``estimate_first_answer_s``, ``estimate_warm_answer_s``), and
``jctopt task=optimize`` on its defaults in a new study: seconds from its start to its first
trial meeting the deadline, to the trial that stays the best, and to its end
(``optimize_first_best_s``, ``optimize_final_best_s``, ``optimize_s``). The last line printed
is one JSON object.
"""

from __future__ import annotations

import argparse
import datetime
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

import jctopt
from jctopt.search.engine import build, decode_batch

# >= 10^7 configurations: GPT-3 175B (Brown et al. 2020), batch 1536 (Narayanan et al. 2021).
SPACE = ["model=gpt3_175b", "space=wide", "space.n_gpus=64:16384:32", "space.zero_stage=[0,1,2,3]"]
# Every layout of GPT-3 175B on 1024 GPUs, accumulation free (global batch = dp x mb x accum).
SEARCH_1024 = ["model=gpt3_175b", "space=wide", "space.n_gpus=[1024]", "space.tp=divisors", "space.cp=[1,2,4,8]",
               "space.vpp=[1,2,3,4,6,8]", "space.micro_batch=[1,2,4,8]", "space.accum=1:16:1",
               "space.ckpt_interval_s=[optimal]"]


def _sweep_rate(engine) -> tuple[float, int]:
    """Seconds and configurations for one pass over the whole space."""
    t0 = time.perf_counter()
    n = 0
    for _, _, counts in engine.run(range(engine.space.n_chunks(engine.chunk_size))):
        n += int(counts.sum())
    return time.perf_counter() - t0, n


def _scalar_rate(engine, n: int = 2000) -> float:
    """Configurations per second, one jitted call per configuration (no vmap)."""
    _, _, rows = engine.chunk_rows(0)
    rows = jax.tree.map(jax.numpy.asarray, rows)
    lanes = jax.numpy.arange(n, dtype=jax.numpy.int32)
    # On one device, as a tool evaluating one configuration at a time would.
    configs = jax.device_put(decode_batch(engine.decoding, lanes, rows, engine.tables, engine.base),
                             jax.devices()[0])
    configs = [jax.tree.map(lambda x, i=i: x[i], configs) for i in range(n)]
    one = jax.jit(jctopt.estimate)
    jax.block_until_ready(one(configs[0]))
    t0 = time.perf_counter()
    for c in configs:
        jax.block_until_ready(one(c).jct_s)
    return n / (time.perf_counter() - t0)


def _answer_times(args: tuple[str, ...] = (), warm_runs: int = 3) -> tuple[float, float]:
    """Wall seconds of ``jctopt *args`` (no arguments: the default job) in a new process: cold
    (empty cache), and the median of ``warm_runs`` runs loading the kernels the first one cached."""
    with tempfile.TemporaryDirectory() as tmp:
        def run(i: int) -> float:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "from jctopt.app import main; main()", *args,
                            f"compile_cache={tmp}/cache", f"hydra.run.dir={tmp}/run{i}"],
                           cwd=tmp, check=True, capture_output=True)
            return time.perf_counter() - t0

        cold = run(0)
        assert any(Path(tmp, "cache").iterdir()), "the first run cached no kernel"
        return cold, statistics.median(run(i) for i in range(1, warm_runs + 1))


def _optimize_times() -> tuple[float, float, float]:
    """``jctopt task=optimize`` on its defaults, a new study in a new process: seconds from its
    start to the first trial meeting the deadline, to the final best trial, and to its end."""
    import optuna

    from jctopt.tasks.optimize import best_feasible, storage, trials_frame

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/optuna.db"
        start, t0 = datetime.datetime.now(), time.perf_counter()
        subprocess.run([sys.executable, "-c", "from jctopt.app import main; main()", "task=optimize",
                        f"optimize.storage={url}", "optimize.study_name=bench", "optimize.progress=false",
                        f"compile_cache={tmp}/cache", f"hydra.run.dir={tmp}/run"], cwd=tmp, check=True,
                       capture_output=True)
        total = time.perf_counter() - t0
        study = optuna.load_study(study_name="bench", storage=storage(url))
        deadline_s = 86400.0 * float(jctopt.compose(["task=optimize"]).job.deadline_days)
        ok = best_feasible(trials_frame(study), deadline_s)
        done = {t.number: (t.datetime_complete - start).total_seconds() for t in study.trials}
        first = min(done[n] for n in ok.number) if len(ok) else float("nan")
        final = done[ok.number.iloc[0]] if len(ok) else float("nan")
        return first, final, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chunk-size", type=int, default=None, help="default: sweep.chunk_size's (sized to the devices)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = ap.parse_args()
    common = [f"sweep.dtype={args.dtype}", "sweep.keep=top_k", "sweep.top_k=10"]
    if args.chunk_size is not None:
        common.append(f"sweep.chunk_size={args.chunk_size}")

    first_answer_s, warm_answer_s = _answer_times()
    print(f"default job: {first_answer_s:.1f} s cold, {warm_answer_s:.1f} s with its kernels cached", file=sys.stderr)
    estimate_first_s, estimate_warm_s = _answer_times(("task=estimate",))
    print(f"estimate: {estimate_first_s:.1f} s cold, {estimate_warm_s:.1f} s with its kernels cached", file=sys.stderr)
    optimize_first_s, optimize_final_s, optimize_s = _optimize_times()
    print(f"optimize (defaults, a new study): first trial meeting the deadline at {optimize_first_s:.1f} s, "
          f"the final best at {optimize_final_s:.1f} s, done in {optimize_s:.1f} s", file=sys.stderr)

    t0 = time.perf_counter()
    space, engine = build(jctopt.compose(SPACE + common))
    t1 = time.perf_counter()
    engine.trace(0)
    trace_s = time.perf_counter() - t1
    list(engine.run([0]))  # compile both kernels
    compile_s = time.perf_counter() - t0
    assert space.size >= 10**7, space.size
    print(space.describe(), file=sys.stderr)
    rates, n_configs = [], 0
    for run in range(args.runs):
        seconds, n_configs = _sweep_rate(engine)
        rates.append(n_configs / seconds)
        print(f"run {run}: {n_configs:,} configurations in {seconds:.2f} s = {rates[-1]:,.0f}/s", file=sys.stderr)
    scalar = _scalar_rate(engine)

    space_1024, engine_1024 = build(jctopt.compose(SEARCH_1024 + common))
    t0 = time.perf_counter()
    best = None
    for _, rows, _ in engine_1024.run(range(space_1024.n_chunks(engine_1024.chunk_size))):
        if len(rows) and (best is None or rows.cost_usd.iloc[0] < best.cost_usd):
            best = rows.iloc[0]
    search_s = time.perf_counter() - t0  # compilation included
    print(f"GPT-3 175B on 1024 GPUs: {space_1024.size:,} candidates searched in {search_s:.1f} s; cheapest: "
          f"{best.gpu} + {best.fabric}, TP {best.tp} PP {best.pp} CP {best.cp} DP {best.dp} vpp {best.vpp} "
          f"{best.schedule}, "
          f"mb {best.micro_batch} x {best.n_micro}, {best.jct_s / 86400:.1f} days, ${best.cost_usd:,.0f}",
          file=sys.stderr)

    device = jax.devices()[0]
    median = statistics.median(rates)
    print(json.dumps({
        "configs_per_s": round(median),
        "n_configs": n_configs,
        "device": f"{device.platform}:{device.device_kind}",
        "n_devices": len(engine.devices),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "compile_s": round(compile_s, 2),
        "runs_configs_per_s": [round(r) for r in rates],
        "dtype": args.dtype,
        "chunk_size": engine.chunk_size,
        "scalar_configs_per_s": round(scalar),
        "speedup_vs_scalar": round(median / scalar),
        "search_1024_gpus_candidates": space_1024.size,
        "search_1024_gpus_s": round(search_s, 2),
        "trace_s": round(trace_s, 2),
        "first_answer_s": round(first_answer_s, 2),
        "warm_answer_s": round(warm_answer_s, 2),
        "estimate_first_answer_s": round(estimate_first_s, 2),
        "estimate_warm_answer_s": round(estimate_warm_s, 2),
        "optimize_first_best_s": round(optimize_first_s, 2),
        "optimize_final_best_s": round(optimize_final_s, 2),
        "optimize_s": round(optimize_s, 2),
        "jax": jax.__version__,
        "numpy": np.__version__,
    }))


if __name__ == "__main__":
    main()
