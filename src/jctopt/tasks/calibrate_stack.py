"""`jctopt task=calibrate 'calibrate.runs=[my_runs.csv]' calibrate.stack=mine`: your own stack.

Fits the stack-level efficiencies (``fit.stack_fit.STACK_PARAMS``: the kernels' share of the
catalog's efficiencies, and how much compute hides the collectives) to the user's measured
runs, starting from the stack the rows run (their ``stack`` cell, else ``stack=`` of the command
line, else ``generic``: the catalog's values), and writes the stack
``$XDG_CONFIG_HOME/jctopt/stack/<name>.yaml`` (``~/.config/jctopt/...``; never the package),
atomically: that stack's flags with the fitted values, its provenance in comments. From then on
``stack=<name>`` works in every task. GPU efficiencies are not refitted: that is
``calibrate.runs`` without ``calibrate.stack``.

With at least MIN_ERROR_RUNS runs, the stack's own model error is measured too: each run predicted
by the stack fitted without it (its source left out where the runs name three or more), the log
ratios' quantiles written beside the stack (``config.resources.stack_error_file``); the tasks'
intervals for ``stack=<name>`` then carry that error (``job.risk``), otherwise the across-stack one.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from ..config import ConfigError, load_option
from ..config.resources import (
    CONF_DIR,
    stack_error_file,
    user_config_dir,
    why_unwritable,
    write_together,
)
from ..fit import calibrate as Cal
from ..fit.stack_fit import STACK_PARAMS, fit_stack, folds_of, left_out_log_ratios, step_times
from ..job import uncertainty as U
from ..model.types import stack as stack_configs
from ..runs import DEFAULT_STACK, log_rows, place_rows, read_all, runs_path
from ._output import output_console, write_parquet

NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
# Fewer left-out predictions than this make no error distribution worth keeping (its 2.5 % and
# 97.5 % quantiles would be the extremes of a handful): the stack then carries the across-stack error.
MIN_ERROR_RUNS = 10


def stack_name(cfg: DictConfig) -> str:
    """``calibrate.stack``, checked: a new name (not a shipped stack's), lower case."""
    name = str(cfg.calibrate.stack)
    shipped = sorted(p.stem for p in (CONF_DIR / "stack").glob("*.yaml"))
    if not NAME.fullmatch(name):
        raise ConfigError(f"calibrate.stack={name!r} is not allowed: a name of lower-case letters, digits and _, "
                          "starting with a letter (e.g. mine)")
    if name in shipped:
        raise ConfigError(f"calibrate.stack={name!r} is not allowed: a shipped stack's name ({', '.join(shipped)}); "
                          "name your own (e.g. mine)")
    return name


def stack_path(name: str) -> Path:
    """Where the calibrated stack is written: the user's config directory, checked writable."""
    folder = user_config_dir() / "stack"
    problem = why_unwritable(folder)
    if problem:
        raise ConfigError(f"calibrate.stack: cannot write into {folder} ({problem})")
    return folder / f"{name}.yaml"


def user_runs(cfg: DictConfig) -> list[Path]:
    """``calibrate.runs``, which calibrate.stack needs unless it has ``calibrate.logs`` (no
    default: the shipped runs are not yours)."""
    if not cfg.calibrate.runs and not cfg.calibrate.get("logs"):
        raise ConfigError("calibrate.stack needs your runs: calibrate.runs=[PATH.csv, ...] (the columns of "
                          "runs_dev.csv; each row a measured step time) or calibrate.logs=[PATH.log, ...]")
    return [runs_path(r, "calibrate.runs") for r in cfg.calibrate.runs or []]


def placed_runs(cfg: DictConfig, runs: list[Path]):
    """(records, batched configs, measured step times, weights) of the rows with a stated
    configuration and a measured step time; each source weighs the same where rows name one."""
    logs = cfg.calibrate.get("logs")
    tables = ([read_all(runs, "calibrate.runs")] if runs else []) + ([log_rows(logs)] if logs else [])
    rows, index, configs = place_rows(cfg, pd.concat(tables, ignore_index=True))
    records = pd.DataFrame([rows[i] for i in index])
    measured = pd.to_numeric(records.get("measured_iter_time_s"), errors="coerce").to_numpy(float)
    keep = np.flatnonzero(np.isfinite(measured) & (measured > 0) & ~records.chosen_by_speed.to_numpy(bool))
    if keep.size == 0:
        reasons = "; ".join(f"{r['id']}: {r.get('reason')}" for r in rows if r.get("reason"))[:400]
        raise ConfigError(f"calibrate.runs={[str(r) for r in runs]}: no row is placed with a measured step time and "
                          f"a stated configuration" + (f" ({reasons})" if reasons else ""))
    records = records.iloc[keep].reset_index(drop=True)
    return records, stack_configs([configs[k] for k in keep]), measured[keep], Cal.source_weights(run_sources(records))


def run_sources(records: pd.DataFrame) -> list[str]:
    return records.source.fillna("").astype(str).tolist() if "source" in records else [""] * len(records)


def stack_text(name: str, base: str, fit, records: pd.DataFrame, runs: list[str]) -> str:
    """The calibrated stack's YAML: ``base``'s flags, ``stack: name``, the fitted values, and
    where they come from."""
    flags = {k: v for k, v in OmegaConf.to_container(load_option("stack", base)).items() if k != "stack"}
    before, after = records.prior_abs_pct_error.median(), records.fitted_abs_pct_error.median()
    lines = ["# @package training",
             f"# Calibrated by `jctopt task=calibrate calibrate.stack={name}` on {datetime.date.today().isoformat()}",
             f"# from {len(records)} run(s) of {', '.join(runs)}, starting from stack {base}: median |error| on step",
             f"# time {before:.1f} % with {base}'s values, {after:.1f} % fitted (on the runs it was fitted to).",
             *[f"# {p} not fitted, {base}'s value kept: {why}" for p, why in fit.held.items()],
             f"stack: {name}"]
    lines += [f"{k}: {OmegaConf.to_yaml({k: v}).split(': ', 1)[1].strip()}" for k, v in flags.items()
              if k not in STACK_PARAMS]
    lines += [f"{p}: {fit.values[p]:.4g}".ljust(30) + ("# fitted" if p in fit.fitted else f"# {base}'s")
              for p in STACK_PARAMS]
    return "\n".join(lines) + "\n"


def error_text(name: str, ratios: np.ndarray, quantiles: list[float], folds: str) -> str:
    """The stack's own model error as job.risk reads it: ``quantiles`` at ``U.LEVELS`` of the
    left-out log(measured / predicted) step times ``ratios``."""
    lines = ["# The model error of stack " + name + ": log(measured / predicted) step time of its runs, each",
             f"# predicted by the stack fitted without it ({folds}); by `jctopt task=calibrate",
             f"# calibrate.stack={name}` on {datetime.date.today().isoformat()}. Read by the tasks' intervals (job.risk).",
             f"stack: {name}", f"runs: {len(ratios)}", f"folds: {folds}",
             f"median_abs_pct_error: {float(np.median(100.0 * np.abs(np.expm1(-ratios)))):.3g}",
             f"levels: [{', '.join(f'{v:g}' for v in U.LEVELS)}]",
             f"log_quantiles: [{', '.join(f'{v:.5g}' for v in quantiles)}]"]
    return "\n".join(lines) + "\n"


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    console = output_console()
    name = stack_name(cfg)
    runs = user_runs(cfg)
    path = stack_path(name)
    records, batch, measured, weight = placed_runs(cfg, runs)
    bases = sorted(set(records["stack"]))
    if len(bases) > 1:
        raise ConfigError(f"calibrate.stack={name!r}: the runs name several stacks ({', '.join(bases)}); one stack "
                          "is calibrated from its own runs")
    base = bases[0] if bases[0] != "none" else DEFAULT_STACK
    prior = {p: float(np.asarray(getattr(batch.train, p))[0]) for p in STACK_PARAMS}
    fit = fit_stack(batch, measured, weight, prior)
    records["prior_s"] = np.asarray(step_times(prior, batch))
    records["fitted_s"] = np.asarray(step_times(fit.values, batch))
    for kind in ("prior", "fitted"):
        records[f"{kind}_abs_pct_error"] = 100.0 * np.abs(records[f"{kind}_s"] / measured - 1.0)
    files = {path: stack_text(name, base, fit, records, [str(r) for r in [*(cfg.calibrate.runs or []),
                                                                     *(cfg.calibrate.get("logs") or [])]])}
    error_path = stack_error_file(name)
    if len(records) >= MIN_ERROR_RUNS:
        folds, how = folds_of(run_sources(records))
        ratios = left_out_log_ratios(batch, measured, weight, prior, fit.fitted, folds)
        quantiles = U.quantiles_of(ratios, weight)  # each source weighing the same, as fit.calibrate's
        records["left_out_s"] = measured * np.exp(-ratios)
        records["left_out_abs_pct_error"] = 100.0 * np.abs(np.expm1(-ratios))
        files[error_path] = error_text(name, ratios, quantiles, how)
    else:  # a stale error of an earlier calibration of this name goes first: never a stack with another's error
        error_path.unlink(missing_ok=True)
    write_parquet(records, run_dir / "calibrate_stack.parquet")
    write_together(files)
    for p in STACK_PARAMS:
        what = "fitted" if p in fit.fitted else f"kept ({fit.held[p]})"
        console.print(f"{p}: {prior[p]:.4g} -> {fit.values[p]:.4g} {what}")
    console.print(f"wrote {path}; use it with stack={name} in any task", soft_wrap=True)
    if error_path in files:
        lo, hi = U.central(quantiles, 0.8)
        console.print(f"its own error, each run predicted without it: median "
                      f"{records.left_out_abs_pct_error.median():.1f} %, 80 % of runs within "
                      f"[{np.expm1(lo):+.1%}, {np.expm1(hi):+.1%}] of the prediction ({error_path})", soft_wrap=True)
    else:
        console.print(f"{len(records)} run(s) < {MIN_ERROR_RUNS}: too few to measure this stack's own error; its "
                      "intervals carry the across-stack error (error basis: stacks)", soft_wrap=True)
    print(f"median_abs_pct_error prior={records.prior_abs_pct_error.median():.2f} "
          f"fitted={records.fitted_abs_pct_error.median():.2f} n={len(records)}")
    return records
