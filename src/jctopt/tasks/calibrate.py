"""`jctopt task=calibrate`: fit the efficiency parameters to published runs, and say how well
the fit does on sources it was not fitted to.

Reads the CSVs of ``calibrate.runs`` (default: CALIBRATION_RUNS),
with ``validate``'s row mapping, fits on every placed row with a step
time (``jctopt.fit.calibrate``), starting from the spec values (``spec_values``), then refits
once per source with that source left out and predicts it (leave-one-source-out), and once
per GPU die with all of its rows left out (leave-one-die-out: what to expect of a GPU type
known only from its specs). Writes, in the run directory, ``calibration.yaml``
(per-GPU values and eta, with the data file, its SHA-256, the date, the rows and the errors)
and ``calibrate.parquet`` (each row: measured, catalog, fitted and left-out predictions).
GPU types without rows get their spec values moved by the fit's shared offsets, and by their
die's deviations where another GPU type on the same die has rows (``fit.calibrate.transfer``).
When the runs are the shipped files, the host's launch time per MoE layer
(``training.moe_host_s``) is then fitted to the shipped MoE runs on a grid, with its
leave-one-source-out and leave-one-family-out error (``fit.launch_fit``); a user's own runs
leave it as it is.

``calibrate.apply=true`` writes the values into the user's config directory
(``resources.user_config_dir``: ``$XDG_CONFIG_HOME/jctopt/gpu/<name>.yaml``,
``training/<preset>.yaml``, ``calibration.yaml``), all files or none (``resources.write_together``),
never into the package; later runs find them there ahead of the shipped catalog
(``config.catalog``). ``calibrate.target=package`` rewrites the shipped catalog instead (refitting
jctopt's own calibration in a clone), refused for an installed or read-only package.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.progress import track

from ..config import ConfigError, catalog_names, load_option
from ..config.catalog import values_in_force
from ..config.resources import (
    CALIBRATION_RECORD,  # noqa: F401 (the record in force; tests read it)
    CONF_DIR,
    VALIDATION_DIR,
    calibration_record,
)
from ..fit import calibrate as Cal
from ..fit.catalogs import TRAINING_PRESETS, apply, carry_over, record_text, set_values, target_dir
from ..fit.launch_fit import fit_moe_host
from ..job import uncertainty as U
from ..model.types import stack
from ..runs import (
    REQUIRED_COLUMNS,
    check_unique_ids,
    log_rows,
    place_rows,
    read_all,
    run_validate,
    runs_path,
)
from . import calibrate_stack
from ._output import output_console, write_parquet, write_text

# Errors reported: catalog (as shipped), fitted, leave-one-source-out, leave-one-die-out.
KINDS = ("catalog", "fitted", "loso", "lodo")


# The runs `calibrate` fits by default: those of the shipped calibration, the dense runs of
# both files (runs_dev2.csv brings the 2024-2025 stacks and the Blackwell rows).
CALIBRATION_RUNS = ("runs_dev.csv", "runs_dev2.csv")
# A fit weighs every source the same, so each row must name its source.
CALIBRATION_COLUMNS = (*REQUIRED_COLUMNS, "source")


def calibration_runs(cfg: DictConfig) -> list[Path]:
    """``calibrate.runs`` resolved (paths or shipped names), CALIBRATION_RUNS where unset; an
    empty list is a ConfigError (it would otherwise mean the shipped runs)."""
    runs = cfg.calibrate.runs
    if runs is None and cfg.calibrate.get("logs"):
        return []  # the logs' runs only
    if runs is not None and len(runs) == 0:
        raise ConfigError("calibrate.runs=[] is not allowed: name at least one runs CSV (a path or a shipped "
                          f"file's name), or leave calibrate.runs unset for {', '.join(CALIBRATION_RUNS)}")
    return [runs_path(r, "calibrate.runs") for r in (runs or CALIBRATION_RUNS)]


def shipped_runs(runs: list[Path]) -> bool:
    """Whether every runs file is one shipped with the package (the shipped calibration's data)."""
    return bool(runs) and all(r.resolve().parent == VALIDATION_DIR.resolve() for r in runs)


def read_calibration_runs(runs: Path | list[Path], logs: list[str] | None = None) -> pd.DataFrame:
    """The rows of every runs file and log (``runs.read_all``, ``runs.logs``: with a ``source``
    column), one table; row ids must not repeat, within or across the files, and every row names
    its source."""
    runs = [runs] if isinstance(runs, Path) else list(runs)
    tables = ([read_all(runs, "calibrate.runs", CALIBRATION_COLUMNS)] if runs else []) + ([log_rows(logs)] if logs else [])
    table = pd.concat(tables, ignore_index=True)
    check_unique_ids(table, "calibrate.runs and calibrate.logs are not allowed")
    blank = table.id[table.source.isna() | (table.source.astype(str).str.strip() == "")].tolist()
    if blank:
        raise ConfigError(f"calibrate.runs: rows {blank[:5]} have a blank source (each source weighs the same in "
                          "the fit: name every row's)")
    return table


def problem_from_runs(cfg: DictConfig, runs: Path | list[Path], logs: list[str] | None = None
                      ) -> tuple[Cal.Problem, pd.DataFrame]:
    """The rows to fit (placed, with a measured step time) and their records.

    A row that left part of its configuration to the model's fastest choice (``chosen_by_speed``:
    a split, an interleaving depth, offloading) is not fitted: its reading depends on the values
    being fitted, always in the fast direction, and a fit to it would slow every other row to
    make up for a configuration the run may not have had. ``validate`` still predicts it."""
    rows, index, configs = place_rows(cfg, read_calibration_runs(runs, logs))
    if not index:
        reasons = "; ".join(f"{r['id']}: {r.get('reason')}" for r in rows[:3])
        raise ConfigError(f"calibrate.runs={[str(r) for r in np.atleast_1d(runs)]}: no row can be placed ({reasons})")
    records = pd.DataFrame([rows[i] for i in index])
    measured = pd.to_numeric(records.measured_iter_time_s, errors="coerce").to_numpy()
    stated = ~records.get("chosen_by_speed", pd.Series(False, index=records.index)).to_numpy(bool)
    keep = np.flatnonzero(np.isfinite(measured) & (measured > 0) & stated)
    if keep.size == 0:
        raise ConfigError(f"calibrate.runs={[str(r) for r in np.atleast_1d(runs)]}: no row can be placed "
                          "with a measured step time and a stated configuration")
    records = records.iloc[keep].reset_index(drop=True)
    gpus = tuple(sorted(set(records.gpu)))
    batch = stack([configs[k] for k in keep])
    # One configuration measured by several sources (DGXC tables repeated across container
    # releases) counts once; the key is every number the model sees.
    same = [tuple(float(x) for x in jax.tree.leaves(configs[k])) for k in keep]
    problem = Cal.Problem(batch, np.array([gpus.index(g) for g in records.gpu]), gpus, measured[keep],
                          Cal.source_weights(records.source.tolist(), same), tuple(die_of(g) for g in gpus))
    return problem, records


def _pct(pred, measured) -> np.ndarray:
    return 100.0 * np.abs(np.asarray(pred) / measured - 1.0)


def catalog_gpus() -> list[str]:
    return catalog_names("gpu")


def die_of(gpu: str) -> str:
    """The compute die of a catalog GPU type (``die``; its own name where none is given)."""
    return load_option("gpu", gpu).die or gpu


def spec_values() -> dict:
    """The spec values every calibration starts from, is pulled towards and moves GPUs without
    rows from: those the calibration record keeps, else the catalogs' own (not yet calibrated).
    Never the calibrated catalog values, so that a recalibration does not compound the last
    one and a left-out source is not predicted from values fitted to it."""
    record_path = calibration_record()
    if record_path.is_file():
        record = OmegaConf.load(record_path)
        if "spec" in record:
            return OmegaConf.to_container(record.spec)
    gpu = {name: {p: float(load_option("gpu", name)[p]) for p in Cal.GPU_PARAMS} for name in catalog_gpus()}
    preset = load_option("training", TRAINING_PRESETS[0])
    return {"gpu": gpu, "training": {p: float(preset[p]) for p in Cal.TRAINING_PARAMS}}


def run_calibrate(cfg: DictConfig, runs: Path | list[Path], loso: bool = True) -> tuple[dict, pd.DataFrame]:
    """(fitted values for every catalog GPU, per-row table with catalog (as shipped), fitted
    and leave-one-source-out errors)."""
    problem, records = problem_from_runs(cfg, runs, cfg.calibrate.get("logs"))
    spec = spec_values()
    missing = sorted(set(catalog_gpus()) - set(spec["gpu"]))
    if missing:
        raise ConfigError(f"{calibration_record()}: spec has no values for gpu {missing}")
    prior = Cal.prior_from(spec, problem.gpus)
    result = Cal.fit(problem, prior)
    records["catalog_s"] = np.asarray(Cal.step_times(jax.tree.map(jnp.asarray, Cal.catalog_values(problem)), problem))
    records["fitted_s"] = np.asarray(Cal.step_times(jax.tree.map(jnp.asarray, result.values), problem))
    records["weight"] = problem.weight
    records["loso_s"] = records["lodo_s"] = np.nan
    if loso:
        # Leave one source out; then leave one die out, all its rows: the error of a GPU
        # type predicted from specs and the other dies' fit, as for B200 or MI300X. One refit
        # each, tens of minutes in all on two cores: shown as a progress bar on stderr.
        groups = {"loso": records.source.to_numpy(), "lodo": np.asarray(problem.dies)[problem.gpu_index]}
        refits = [(kind, label) for kind, labels in groups.items() if len(set(labels)) > 1
                  for label in np.unique(labels)]
        for kind, label in track(refits, description="leave-one-out refits", console=Console(stderr=True),
                                 transient=True):
            held = groups[kind] == label
            left_out = Cal.fit(Cal.subset(problem, np.flatnonzero(~held)), prior)
            pred = np.asarray(Cal.step_times(jax.tree.map(jnp.asarray, left_out.values), problem))
            records.loc[held, f"{kind}_s"] = pred[held]
    for kind in KINDS:
        records[f"{kind}_abs_pct_error"] = _pct(records[f"{kind}_s"], records.measured_iter_time_s.to_numpy(float))
    gpu = {}
    for name in catalog_gpus():
        own = spec["gpu"][name]
        if name in problem.gpus:
            k = problem.gpus.index(name)
            values = {p: float(result.values["gpu"][p][k]) for p in Cal.GPU_PARAMS}
            if own["fp8_matmul_eff"] <= 0:  # no fp8 tensor cores: nothing to fit
                values["fp8_matmul_eff"] = 0.0
            gpu[name] = {"from": "rows", **values}
        else:  # offsets_for: the shared offsets, plus the die's deviations where it has rows
            die = die_of(name)
            origin = f"die {die} rows, own memory spec" if die in result.die_deviations else "specs"
            gpu[name] = {"from": origin, **Cal.transfer(result.offsets_for(die), own)}
    out = {"gpu": gpu, "training": {p: float(v) for p, v in result.values["training"].items()},
           "shared_offsets": result.shared, "die_deviations": result.die_deviations, "loss": result.loss, "spec": spec}
    return out, records


# What a prediction rests on -> the left-out predictions that measure its error.
ERROR_BASES = {"rows": ("loso_s", "leave-one-source-out: a GPU type with measured rows, a source not fitted"),
               "specs": ("lodo_s", "leave-one-die-out: a GPU type known from its specs (and its die's rows, if any)")}
COVERAGE_LEVELS = (0.5, 0.8, 0.9)


def model_error(records: pd.DataFrame) -> dict:
    """The model's step-time error on runs it was not fitted to, per basis: weighted quantiles
    of log(measured / predicted) at ``job.uncertainty.LEVELS`` (sources weigh the same, as in the
    fit), and checks of their coverage on groups they were not taken from (``held_out_coverage``).
    ``coverage_loso``: each source's runs against the quantiles of every other source, the
    situation of a new source (the shipped quantiles come from all but it); ``coverage_two_fold``:
    half the sources (alternate names) against the other half, a stricter check with half the
    data; for ``specs`` also ``coverage_lodo``, each die against the other dies."""
    out = {"levels": list(U.LEVELS)}
    sources = np.asarray(sorted(set(records.source)))
    dies = records.gpu.map({g: die_of(g) for g in set(records.gpu)}).to_numpy() if "gpu" in records else None
    for basis, (column, what) in ERROR_BASES.items():
        ratio = np.log(records.measured_iter_time_s.to_numpy(float) / records[column].to_numpy(float))
        w = records.weight.to_numpy(float)
        if not np.isfinite(ratio).any():
            continue  # calibrate without left-out fits (one source or one die)
        entry = {"log_quantiles": U.quantiles_of(ratio, w), "rows": int(np.isfinite(ratio).sum()), "from": what,
                 "coverage_loso": held_out_coverage(ratio, w, records.source.to_numpy()),
                 "coverage_two_fold": held_out_coverage(ratio, w, np.isin(records.source, sources[::2]))}
        if basis == "specs" and dies is not None:
            entry["coverage_lodo"] = held_out_coverage(ratio, w, dies)
        out[basis] = entry
    return out


def held_out_coverage(log_ratios: np.ndarray, weights: np.ndarray, groups: np.ndarray) -> dict[float, float]:
    """Mean over ``groups`` (each the same) of the weighted share of a group's log ratios inside
    the central interval at each of ``COVERAGE_LEVELS`` of the quantiles of all other groups;
    groups with no finite ratio, or whose complement has fewer than two, are skipped."""
    finite = np.isfinite(log_ratios)
    held = [g for g in np.unique(groups) if finite[groups == g].any() and (finite & (groups != g)).sum() >= 2]
    cover = {}
    for c in COVERAGE_LEVELS:
        shares = [U.coverage(log_ratios[groups == g], U.quantiles_of(log_ratios[groups != g], weights[groups != g]),
                             c, weights[groups == g]) for g in held]
        cover[c] = float(np.mean(shares)) if shares else float("nan")
    return cover


MOE_RUNS = ("runs_moe_dev.csv",)


def moe_error(cfg: DictConfig) -> dict:
    """The model's step-time error for mixture-of-experts models: validate's predictions of the
    MoE runs, to which no efficiency is fitted (they are not calibration runs; only the launch
    floor ``moe_host_s`` is, by ``fit.launch_fit``), with the catalogs as they stand when it runs;
    quantiles at ``job.uncertainty.LEVELS`` with every source weighing the same, and their coverage
    of each source from the others' (``held_out_coverage``)."""
    df = pd.concat([run_validate(cfg, runs_path(f)) for f in MOE_RUNS], ignore_index=True)
    df = df[(df.predicted_iter_time_s > 0) & (df.measured_iter_time_s > 0)]
    ratio = np.log(df.measured_iter_time_s.to_numpy(float) / df.predicted_iter_time_s.to_numpy(float))
    sources = df.source.to_numpy()
    weight = 1.0 / df.source.map(df.source.value_counts()).to_numpy(float)
    return {"log_quantiles": U.quantiles_of(ratio, weight), "rows": int(len(df)),
            "from": f"{', '.join(MOE_RUNS)}: MoE runs, no efficiency fitted to them (only moe_host_s)",
            "coverage_loso": held_out_coverage(ratio, weight, sources)}


def errors_by_source(records: pd.DataFrame) -> pd.DataFrame:
    cols = [f"{k}_abs_pct_error" for k in KINDS if f"{k}_abs_pct_error" in records]
    per = records.groupby("source")[cols].median()
    per.loc["all rows (median)"] = records[cols].median()
    per.loc["all rows (p90)"] = records[cols].quantile(0.9)
    per["rows"] = records.groupby("source").size().reindex(per.index)
    return per


def _set_values(path: Path, values: dict, note: str, spec: dict) -> None:
    """``set_values`` on the file ``path``, in place."""
    write_text(path, set_values(path.read_text(), values, note, spec, path))


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    if cfg.calibrate.get("stack") is not None:
        return calibrate_stack.main(cfg, run_dir)
    console = output_console()
    runs = calibration_runs(cfg)
    target = target_dir(cfg)
    fitted, records = run_calibrate(cfg, runs)
    table = errors_by_source(records)
    console.print(table.round(1).to_string())
    errors = {k: {"median": float(records[f"{k}_abs_pct_error"].median()),
                  "p90": float(records[f"{k}_abs_pct_error"].quantile(0.9))} for k in KINDS}
    data = [*runs, *(Path(p) for p in cfg.calibrate.get("logs") or [])]
    meta = {"data": [r.name for r in data], "sha256": [hashlib.sha256(r.read_bytes()).hexdigest() for r in data],
            "date": datetime.date.today().isoformat(), "rows": int(len(records)), "abs_pct_error": errors}
    doc = {"calibration": meta, **fitted, "model_error": model_error(records)}
    if shipped_runs(runs):
        # The MoE runs under the training values just fitted and the GPU values in force: the
        # new ones where they are to be applied. First the launch floor, then the error at it.
        moe_cfg = copy.deepcopy(cfg)
        for key, value in doc["training"].items():
            moe_cfg.training[key] = value
        new_gpus = {name: {k: v for k, v in values.items() if k != "from"} for name, values in doc["gpu"].items()}
        with values_in_force({"gpu": new_gpus} if target is not None else {}):
            doc["moe_host"] = {**fit_moe_host(moe_cfg, [runs_path(f) for f in MOE_RUNS]), "fitted_now": True}
            moe_cfg.training.moe_host_s = doc["moe_host"]["moe_host_s"]
            doc["model_error"]["moe"] = moe_error(moe_cfg)
    else:
        console.print(f"the MoE launch floor (training.moe_host_s) is not refitted: it is fitted to the shipped MoE "
                      f"runs ({', '.join(MOE_RUNS)}) only when calibrate.runs are the shipped files")
        carry_over(doc)
    write_text(run_dir / "calibration.yaml", record_text(doc, header=False))
    write_parquet(records, run_dir / "calibrate.parquet")
    console.print(f"wrote {run_dir / 'calibration.yaml'}, calibrate.parquet")
    if target is not None:
        written = apply(doc, target)
        console.print("applied (read ahead of the shipped catalog by later runs):" if target != CONF_DIR
                      else "applied to the shipped catalog:")
        for path in written:
            console.print(f"  {path}", soft_wrap=True)
    m = {k: v["median"] for k, v in errors.items()}
    groups = {"source": set(records.source), "die": {die_of(g) for g in records.gpu}}
    for kind, what in (("loso", "source"), ("lodo", "die")):
        if not np.isfinite(m[kind]):  # nan below: no row was predicted with its group left out
            console.print(f"no leave-one-{what}-out error (nan below): the runs span {len(groups[what])} {what}(s), "
                          "and leaving one out needs two or more", soft_wrap=True)
    print(f"median_abs_pct_error catalog={m['catalog']:.2f} fitted={m['fitted']:.2f} "
          f"leave_one_source_out={m['loso']:.2f} leave_one_die_out={m['lodo']:.2f} n={len(records)}")
    host = doc.get("moe_host")
    if host and "kept_from" not in host:
        e = host["abs_pct_error"]
        print(f"moe_host_s={host['moe_host_s']:g} MoE median_abs_pct_error without={e['without']:.2f} "
              f"fitted={e['fitted']:.2f} leave_one_source_out={e['loso']:.2f} leave_one_family_out={e['lofo']:.2f} "
              f"n={host['rows']}")
    return records
