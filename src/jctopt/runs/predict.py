"""Every row of a runs file predicted, with its interval and signed error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from ..job.jct import STEP_PARTS, Reason, estimate_batch, unmasked_step
from ..job.risk import check_confidence, error_basis, log_quantiles
from ..job.uncertainty import step_interval
from ..model.compute import dense_peak_tflops
from ..model.types import stack
from .place import place_rows
from .read import read_runs


def run_validate(cfg: DictConfig, runs: Path) -> pd.DataFrame:
    """One row per input row: id, predicted_iter_time_s, predicted_mfu_pct, abs_pct_error,
    reason (null prediction) or model_reason, defaults_used, and the step breakdown."""
    table = read_runs(runs)
    rows, index, configs = place_rows(cfg, table)
    df = pd.DataFrame(rows)
    for col in ("predicted_iter_time_s", "predicted_mfu_pct", "abs_pct_error", *STEP_PARTS, "mem_total_gb"):
        df[col] = np.nan
    df["model_reason"] = None
    df["moe"] = False
    if configs:
        batch = stack(configs)
        df.loc[index, "moe"] = np.asarray(batch.model.n_experts) > 1
        est = estimate_batch(batch)
        comp = {k: np.asarray(getattr(est, k)) for k in STEP_PARTS}
        step = np.asarray(unmasked_step(est))  # OOM rows keep their prediction
        n = np.asarray(batch.layout.n_gpus)
        peak = 1e12 * np.asarray(dense_peak_tflops(batch.gpu, batch.train))
        mfu = 100.0 * np.asarray(est.model_flops_per_step) / (step * n * peak)
        reasons = [Reason(int(r)).name for r in np.asarray(est.reason)]
        for j, i in enumerate(index):
            df.loc[i, "predicted_iter_time_s"] = step[j]
            df.loc[i, "predicted_mfu_pct"] = mfu[j]
            for k in STEP_PARTS:
                df.loc[i, k] = comp[k][j]
            df.loc[i, "mem_total_gb"] = float(np.asarray(est.mem_total)[j]) / 1e9
            if reasons[j] != "OK":
                df.loc[i, "model_reason"] = reasons[j]
    # The central interval at job.confidence of each prediction, from the model's left-out error
    # for what it rests on (job.risk: the GPU type's own rows or its specs, the MoE runs, or the stacks).
    df["predicted_lo_s"] = df["predicted_hi_s"] = np.nan
    # A stack with no runs of its own (generic: a user's file that names none) carries the spread across stacks.
    stacks = df.get("stack", pd.Series("none", index=df.index)).fillna("none").astype(str)
    bases = pd.Series([error_basis(g, m, s) for g, m, s in zip(df.gpu.astype(str), df.moe, stacks)], index=df.index)
    df = df.drop(columns="moe")
    for basis, part in df[df.predicted_iter_time_s.notna()].groupby(bases):
        lo, hi = step_interval(part.predicted_iter_time_s.to_numpy(float), log_quantiles(basis),
                               check_confidence(cfg.job.confidence))
        df.loc[part.index, "predicted_lo_s"], df.loc[part.index, "predicted_hi_s"] = lo, hi
    # A measured time that is not a number is left out of the comparison (its row is still predicted).
    df["measured_iter_time_s"] = pd.to_numeric(df.measured_iter_time_s, errors="coerce")
    # Signed: > 0 where the model is slower than the measurement (pessimistic), < 0 where faster.
    df["pct_error"] = 100.0 * (df.predicted_iter_time_s - df.measured_iter_time_s) / df.measured_iter_time_s
    df["abs_pct_error"] = df.pct_error.abs()
    return df
