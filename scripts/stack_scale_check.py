"""Calibrate each shipped stack on its smallest runs, predict its larger ones.

What a user does with ``calibrate.stack``: fit their stack on the runs they have (a few nodes)
and predict the job they plan (many more). For every stack of the shipped files with runs at
several GPU counts (its dense and its MoE runs apart: the model's MoE error is its own), the
stack's efficiencies (``fit.stack_fit``: kernel_eff, overlap_eta,
zero3_overlap_eta; priors at the stack's values in force) are fitted to its rows at the
smallest counts only (the fewest counts that hold at least a quarter of its rows, and 3), and its
rows at larger counts are predicted. Prints per stack the rows each side, the parameters fitted,
and the larger rows' median |error| and signed median % (< 0: too fast) before and after.

    python scripts/stack_scale_check.py [runs_dev.csv runs_dev2.csv ...]

The GPU efficiencies are the shipped calibration's, fitted to runs_dev.csv and runs_dev2.csv at
every scale: for the stacks of those files this checks the stack fit's transfer across scale,
not a prediction from nothing. Some minutes on two cores (one fit per stack).
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from jctopt.config import ConfigError, compose
from jctopt.fit.calibrate import source_weights
from jctopt.fit.stack_fit import STACK_PARAMS, fit_stack, step_times
from jctopt.model.types import stack as stack_configs
from jctopt.runs import place_rows, read_runs, runs_path

FILES = ("runs_dev.csv", "runs_dev2.csv", "runs_mbridge_dense.csv", "runs_moe_dev.csv", "runs_mbridge_moe.csv")


def placed(files) -> tuple[pd.DataFrame, list]:
    """Every row with a stated configuration and a measured step time, and its config."""
    base = compose(["task=validate"])
    records, configs = [], []
    for name in files:
        rows, index, cfgs = place_rows(base, read_runs(runs_path(name)))
        for i, c in zip(index, cfgs):
            r = rows[i]
            t = pd.to_numeric(r.get("measured_iter_time_s"), errors="coerce")
            if not r.get("chosen_by_speed") and np.isfinite(t) and t > 0:
                kind = f"{r['stack']} (MoE)" if float(c.model.n_experts) > 1 else str(r["stack"])
                records.append({**r, "group": kind, "num_gpus": float(c.layout.n_gpus), "measured_s": float(t)})
                configs.append(c)
    return pd.DataFrame(records), configs


def small_rows(counts: np.ndarray) -> np.ndarray:
    """The rows at the fewest smallest GPU counts holding >= max(3, a quarter) of the rows."""
    need = max(3, int(np.ceil(len(counts) / 4)))
    for n in np.unique(counts):
        small = counts <= n
        if small.sum() >= need:
            return small
    return np.ones(len(counts), bool)


def signed(pred, measured) -> np.ndarray:
    return 100.0 * (np.asarray(pred) / measured - 1.0)


def main(argv: list[str]) -> int:
    records, configs = placed([a for a in argv if not a.startswith("-")] or FILES)
    lines = ["| stack | rows fitted (GPUs) | rows predicted (GPUs) | fitted | before: median \\|error\\| % (signed) "
             "| after: median \\|error\\| % (signed) |", "|---|---:|---:|---|---:|---:|"]
    for name, part in records.groupby("group"):
        counts = part.num_gpus.to_numpy()
        small = small_rows(counts)
        if small.all():
            continue  # one scale only
        idx = part.index.to_numpy()
        batch_small = stack_configs([configs[i] for i in idx[small]])
        batch_large = stack_configs([configs[i] for i in idx[~small]])
        prior = {p: float(np.asarray(getattr(batch_small.train, p))[0]) for p in STACK_PARAMS}
        measured = part.measured_s.to_numpy()
        try:
            fit = fit_stack(batch_small, measured[small], source_weights(part.source.astype(str)[small].tolist()), prior)
        except ConfigError as err:
            lines.append(f"| {name} | {small.sum()} | {(~small).sum()} | refused: {err} | | |")
            continue
        before = signed(step_times(prior, batch_large), measured[~small])
        after = signed(step_times(fit.values, batch_large), measured[~small])
        fitted = ", ".join(f"{p} {fit.values[p]:.3g}" for p in fit.fitted)
        lines.append(f"| {name} | {small.sum()} ({counts[small].min():g}-{counts[small].max():g}) | {(~small).sum()} "
                     f"({counts[~small].min():g}-{counts[~small].max():g}) | {fitted} | "
                     f"{np.median(np.abs(before)):.1f} ({np.median(before):+.1f}) | "
                     f"{np.median(np.abs(after)):.1f} ({np.median(after):+.1f}) |")
        print(lines[-1], flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
