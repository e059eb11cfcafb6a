"""`jctopt task=calibrate 'calibrate.runs=[my_runs.csv]' calibrate.stack=mine`: your own stack.

Fits the stack-level efficiencies (``fit.stack_fit.STACK_PARAMS``: the kernels' share of the
catalog's efficiencies, and how much compute hides the collectives) to the user's measured
runs, starting from the stack the rows run (their ``stack`` cell, else ``stack=`` of the command
line, else ``generic``: the catalog's values), and writes the stack
``$XDG_CONFIG_HOME/jctopt/stack/<name>.yaml`` (``~/.config/jctopt/...``; never the package),
atomically: that stack's flags with the fitted values, its provenance in comments. From then on
``stack=<name>`` works in every task. GPU efficiencies are not refitted: that is
``calibrate.runs`` without ``calibrate.stack``.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from ..config import ConfigError, load_option
from ..config.resources import CONF_DIR, user_config_dir, why_unwritable
from ..fit import calibrate as Cal
from ..fit.stack_fit import STACK_PARAMS, fit_stack, step_times
from ..model.types import stack as stack_configs
from ..runs import DEFAULT_STACK, log_rows, place_rows, read_all, runs_path
from ._output import output_console, write_parquet, write_text

NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


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
    sources = records.source.fillna("").astype(str).tolist() if "source" in records else [""] * len(records)
    return records, stack_configs([configs[k] for k in keep]), measured[keep], Cal.source_weights(sources)


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
    write_parquet(records, run_dir / "calibrate_stack.parquet")
    write_text(path, stack_text(name, base, fit, records, [str(r) for r in [*(cfg.calibrate.runs or []),
                                                                         *(cfg.calibrate.get("logs") or [])]]))
    for p in STACK_PARAMS:
        what = "fitted" if p in fit.fitted else f"kept ({fit.held[p]})"
        console.print(f"{p}: {prior[p]:.4g} -> {fit.values[p]:.4g} {what}")
    console.print(f"wrote {path}; use it with stack={name} in any task", soft_wrap=True)
    print(f"median_abs_pct_error prior={records.prior_abs_pct_error.median():.2f} "
          f"fitted={records.fitted_abs_pct_error.median():.2f} n={len(records)}")
    return records
