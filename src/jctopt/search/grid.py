"""Exact searches over a design space, in memory, shared by the deadline, procure and
syncwall tasks (and the Optuna checks): one pass of the engine with an on-device reduction."""

from __future__ import annotations

import copy

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from ..config import catalog_names, cluster_with, load_option, node_problem
from .engine import build, reduce_rows


def configured(cfg: DictConfig, **dotted) -> DictConfig:
    """A copy of ``cfg`` with ``{"space.gpu": [...], ...}`` set (keys with dots as ``__``)."""
    out = copy.deepcopy(cfg)
    for key, value in dotted.items():
        OmegaConf.update(out, key.replace("__", "."), value, merge=False)
    return out


def search(cfg: DictConfig, keep: str, objective: str = "cost_usd", top_k: int = 1,
           group_by: tuple[str, ...] = ("gpu",), max_days: float | None = None,
           max_free_days: float | None = None) -> pd.DataFrame:
    """The exact reduction ``keep`` of every configuration in ``cfg.space`` (see ``reduce_rows``)."""
    c = configured(cfg, sweep__keep=keep, sweep__objective=objective, sweep__top_k=top_k,
                   sweep__group_by=list(group_by), sweep__max_days=max_days, sweep__max_free_days=max_free_days)
    space, engine = build(c)
    frames = [rows for _, rows, _ in engine.run(range(space.n_chunks(engine.chunk_size)))]
    return reduce_rows(pd.concat(frames, ignore_index=True), keep, objective, top_k, tuple(group_by))


def catalog(group: str, cfg: DictConfig | None = None) -> list[str]:
    """Every catalog entry of ``group`` (GPUs: those whose nodes the cluster of ``cfg`` holds,
    each resolved for its own GPU, config.cluster_with)."""
    names = catalog_names(group)
    if group == "gpu" and cfg is not None:
        names = [n for n in names if node_problem(g := load_option("gpu", n), cluster_with(cfg, g)) is None]
    return names
