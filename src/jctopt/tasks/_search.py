"""Exact searches over a design space, in memory, shared by the deadline, procure and
syncwall tasks: one pass of the sweep engine with an on-device reduction."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from .._config import CONF_DIR, load_option
from .._engine import reduce_rows
from .sweep import build

LAYOUT_COLUMNS = ["gpu", "fabric", "n_gpus", "tp", "pp", "cp", "ep", "vpp", "dp", "micro_batch", "n_micro",
                  "global_batch", "recompute", "zero_stage", "precision", "ckpt_policy"]


def configured(cfg: DictConfig, **dotted) -> DictConfig:
    """A copy of ``cfg`` with ``{"space.gpu": [...], ...}`` set (keys with dots as ``__``)."""
    out = copy.deepcopy(cfg)
    for key, value in dotted.items():
        OmegaConf.update(out, key.replace("__", "."), value, merge=False)
    return out


def search(cfg: DictConfig, keep: str, objective: str = "cost_usd", top_k: int = 1,
           group_by: tuple[str, ...] = ("gpu",), max_days: float | None = None) -> pd.DataFrame:
    """The exact reduction ``keep`` of every configuration in ``cfg.space`` (see ``reduce_rows``)."""
    c = configured(cfg, sweep__keep=keep, sweep__objective=objective, sweep__top_k=top_k,
                   sweep__group_by=list(group_by), sweep__max_days=max_days)
    space, engine = build(c)
    frames = [rows for _, rows, _ in engine.run(range(space.n_chunks(engine.chunk_size)))]
    return reduce_rows(pd.concat(frames, ignore_index=True), keep, objective, top_k, tuple(group_by))


def catalog(group: str, gpus_per_node: int | None = None) -> list[str]:
    """Every catalog entry of ``group`` (GPUs: those whose NVLink domain fits the node size)."""
    names = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    if group == "gpu" and gpus_per_node:
        names = [n for n in names if load_option("gpu", n).nvlink_domain % gpus_per_node == 0]
    return names


def layout_label(r) -> str:
    return (f"TP{r.tp} PP{r.pp}" + (f" CP{r.cp}" if r.cp > 1 else "") + (f" EP{r.ep}" if r.ep > 1 else "")
            + f" DP{r.dp}" + (f" v{r.vpp}" if r.vpp > 1 else "") + f", mb {r.micro_batch} x {r.n_micro}")


def json_row(r: pd.Series) -> dict:
    """One result row as JSON-ready values (inf and NaN as null)."""
    out = {}
    for k, v in r.items():
        if isinstance(v, (np.floating, float)):
            out[k] = float(v) if np.isfinite(v) else None
        elif isinstance(v, (np.integer, np.bool_)):
            out[k] = v.item()
        else:
            out[k] = v if isinstance(v, (int, bool, type(None))) else str(v)
    return out


def save_plot(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
