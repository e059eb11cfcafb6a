"""`calibrate`'s fit of the host's launch time per MoE layer (``training.moe_host_s``,
``model.host``) to the MoE runs, the one MoE term fitted (the efficiencies stay those of the dense
runs): the value on a grid with the least source-weighted mean |log(predicted / measured)|,
and the error it leaves on sources and on model families kept out of its fit."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from ..runs import read_runs, run_validate

GRID_S = tuple(round(0.0005 * i, 4) for i in range(31))  # 0 to 15 ms per MoE layer and micro-batch
# Model families for leave-one-family-out, matched in the runs' `model` column; any other
# model is its own family (its name's first word).
FAMILIES = {"deepseek": r"deepseek", "qwen": r"qwen", "mixtral": r"mixtral", "llama": r"llama",
            "gpt-oss": r"gpt.?oss", "kimi": r"kimi"}


def family_of(model) -> str:
    name = str(model).lower()
    return next((f for f, pattern in FAMILIES.items() if re.search(pattern, name)),
                (re.findall(r"[a-z]+", name) or ["unknown"])[0])


def predictions(cfg: DictConfig, runs: list[Path]) -> pd.DataFrame:
    """validate's predictions of the runs at every grid value (rows with a prediction and a
    measured step time), with each row's source and model family."""
    models = pd.concat([read_runs(r) for r in runs]).set_index("id")["model"]
    frames = []
    for value in GRID_S:
        at = copy.deepcopy(cfg)
        at.training.moe_host_s = value
        frames.append(pd.concat([run_validate(at, r) for r in runs], ignore_index=True).assign(moe_host_s=value))
    table = pd.concat(frames, ignore_index=True)
    table = table[(table.predicted_iter_time_s > 0) & (table.measured_iter_time_s > 0)].copy()
    table["log_error"] = np.abs(np.log(table.predicted_iter_time_s / table.measured_iter_time_s))
    table["family"] = table.id.map(models).map(family_of)
    return table


def _loss(rows: pd.DataFrame) -> float:
    """Mean |log error| with every source weighing the same."""
    weight = 1.0 / rows.source.map(rows.source.value_counts())
    return float((weight * rows.log_error).sum() / weight.sum())


def best_value(table: pd.DataFrame) -> float:
    """The grid value of least loss (the smallest of equals)."""
    return min(GRID_S, key=lambda v: (_loss(table[table.moe_host_s == v]), v))


def held_out_error(table: pd.DataFrame, by: str) -> float:
    """Median |error| (%) of every row, each predicted at the value fitted without its group."""
    errors = [table[(table[by] == k) & (table.moe_host_s == best_value(table[table[by] != k]))].abs_pct_error
              for k in table[by].unique()]
    return float(pd.concat(errors).median())


def fit_moe_host(cfg: DictConfig, runs: list[Path]) -> dict:
    """The fitted ``moe_host_s`` and the MoE runs' median |error| (%): without the floor,
    fitted, leave-one-source-out and leave-one-family-out."""
    table = predictions(cfg, runs)
    best = best_value(table)

    def median_at(value):
        return float(table[table.moe_host_s == value].abs_pct_error.median())

    return {"moe_host_s": best, "grid_s": [GRID_S[0], GRID_S[-1], GRID_S[1] - GRID_S[0]],
            "rows": int((table.moe_host_s == best).sum()), "from": ", ".join(r.name for r in runs),
            "abs_pct_error": {"without": median_at(0.0), "fitted": median_at(best),
                              "loso": held_out_error(table, "source"), "lofo": held_out_error(table, "family")}}
