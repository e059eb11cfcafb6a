"""How far off the model is on a software stack it was not fitted to (leave-one-stack-out).

Fits the calibration (``jctopt task=calibrate``'s fit, the same rows, priors and weights) once
on every runs row, and once per stack with that stack's rows left out, predicting them; prints
per stack the rows, the fitted and the left-out median |error| %, the left-out signed median %
(< 0: the model too fast), and how often the central 80 % interval holds the measurement when
the interval comes from the other stacks' left-out errors (the situation of a new stack).

    python scripts/leave_one_stack_out.py [runs_dev.csv runs_dev2.csv ...]   # prints the table
    python scripts/leave_one_stack_out.py --write                             # and writes docs/stacks.md
    python scripts/leave_one_stack_out.py --record                            # and the record's basis

``--record`` stores the left-out errors' quantiles as the calibration record's ``model_error.stacks``
(src/jctopt/conf/calibration.yaml): the interval a prediction on a stack without runs carries
(``stack=generic``; job.risk.error_basis), with its coverage of each stack from the others.

The stacks are the runs files' ``stack`` column (scripts/convert_runs.py). A few minutes on two
cores: one refit per stack.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from jctopt.config import compose
from jctopt.config.resources import CALIBRATION_RECORD
from jctopt.fit import calibrate as Cal
from jctopt.job import uncertainty as U
from jctopt.runs import runs_path
from jctopt.tasks.calibrate import (
    CALIBRATION_RUNS,
    held_out_coverage,
    problem_from_runs,
    read_all,
    spec_values,
)

CONFIDENCE = 0.8


def weighted_median(x, w):
    order = np.argsort(x)
    cum = np.cumsum(w[order]) / w.sum()
    return float(x[order][np.searchsorted(cum, 0.5)])


def main(argv: list[str]) -> pd.DataFrame:
    names = [a for a in argv if not a.startswith("--")]
    runs = [runs_path(n) for n in (names or CALIBRATION_RUNS)]
    cfg = compose(["task=calibrate"])
    problem, records = problem_from_runs(cfg, runs)
    stacks = read_all(runs).set_index("id")["stack"]
    records["stack"] = records.id.map(stacks).to_numpy()
    prior = Cal.prior_from(spec_values(), problem.gpus)
    fitted = Cal.fit(problem, prior)
    records["fitted_s"] = np.asarray(Cal.step_times(jax.tree.map(jnp.asarray, fitted.values), problem))
    records["left_out_s"] = np.nan
    for stack in sorted(set(records["stack"])):
        held = (records["stack"] == stack).to_numpy()
        print(f"refit without {stack} ({held.sum()} rows)", file=sys.stderr, flush=True)
        fit = Cal.fit(Cal.subset(problem, np.flatnonzero(~held)), prior)
        pred = np.asarray(Cal.step_times(jax.tree.map(jnp.asarray, fit.values), problem))
        records.loc[held, "left_out_s"] = pred[held]
    measured = problem.measured_s
    w = np.asarray(problem.weight, float)
    log_ratio = np.log(measured / records.left_out_s.to_numpy(float))
    lines = []
    for stack, part in records.groupby("stack"):
        mine = (records["stack"] == stack).to_numpy()
        others = U.quantiles_of(log_ratio[~mine], w[~mine])
        lo, hi = U.central(others, CONFIDENCE)
        inside = (log_ratio[mine] >= lo) & (log_ratio[mine] <= hi)
        signed = 100.0 * (records.left_out_s[mine] / measured[mine] - 1.0)
        lines.append({"stack": stack, "rows": int(mine.sum()),
                      "fitted_median_abs_pct": float(np.median(100 * np.abs(records.fitted_s[mine] / measured[mine] - 1))),
                      "left_out_median_abs_pct": float(np.median(np.abs(signed))),
                      "left_out_signed_median_pct": float(np.median(signed)),
                      "covered_80_pct": float(100.0 * inside.mean())})
    table = pd.DataFrame(lines)
    signed_all = 100.0 * (records.left_out_s.to_numpy(float) / measured - 1.0)
    by_stack_w = 1.0 / records["stack"].map(records["stack"].value_counts()).to_numpy(float)
    print(table.round(1).to_string(index=False))
    summary = (f"all rows: left-out median |error| {np.median(np.abs(signed_all)):.1f} %, signed {np.median(signed_all):+.1f} %;"
          f" stacks weighing the same: |error| {weighted_median(np.abs(signed_all), by_stack_w):.1f} %,"
          f" signed {weighted_median(signed_all, by_stack_w):+.1f} %; 80 % interval from the other stacks covers"
          f" {np.average([r['covered_80_pct'] for r in lines]):.0f} % of a stack's rows (mean over stacks)")
    print(summary)
    if "--write" in argv:
        write_page(table, summary, [r.name for r in runs])
    if "--record" in argv:
        ok = np.isfinite(log_ratio)
        groups = records["stack"].to_numpy()
        record_basis({"log_quantiles": U.quantiles_of(log_ratio[ok], w[ok]), "rows": int(ok.sum()),
                      "from": "leave-one-stack-out: a stack with no runs of its own (scripts/leave_one_stack_out.py "
                              f"on {', '.join(r.name for r in runs)})",
                      "coverage_lost": held_out_coverage(log_ratio[ok], w[ok], groups[ok])})
    return table


def record_basis(entry: dict) -> None:
    """The calibration record with ``model_error.stacks`` set to ``entry``, the rest as it was."""
    text = CALIBRATION_RECORD.read_text()
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    doc = OmegaConf.to_container(OmegaConf.load(CALIBRATION_RECORD))
    doc["model_error"]["stacks"] = entry
    tmp = CALIBRATION_RECORD.with_suffix(".yaml.tmp")
    tmp.write_text(header + OmegaConf.to_yaml(OmegaConf.create(doc)))
    tmp.replace(CALIBRATION_RECORD)


def write_page(table: pd.DataFrame, summary: str, files: list[str]) -> None:
    head = ["stack", "rows", "fitted median \\|error\\| %", "left-out median \\|error\\| %",
            "left-out signed median %", "in the 80 % interval of the other stacks %"]
    lines = ["# The model on stacks it was not fitted to", "",
             "Generated by `python scripts/leave_one_stack_out.py --write` from "
             f"{', '.join(files)} (their `stack` column, scripts/convert_runs.py): the calibration",
             "refitted once per stack with that stack's rows left out, and those rows predicted. Signed",
             "< 0: the model too fast. The interval: the central 80 % of the other stacks' left-out",
             "errors, the one `stack=generic` carries (the record's `model_error.stacks`).", "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in table.itertuples(index=False):
        lines.append(f"| {r.stack} | {r.rows} | {r.fitted_median_abs_pct:.1f} | {r.left_out_median_abs_pct:.1f} | "
                     f"{r.left_out_signed_median_pct:+.1f} | {r.covered_80_pct:.0f} |")
    lines += ["", summary.replace("|", "\\|") + ".", ""]
    (Path(__file__).resolve().parents[1] / "docs" / "stacks.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
