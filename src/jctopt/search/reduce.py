"""The exact answer of a reduction (top-k, Pareto front, best per group) over a sweep's rows:
on the device per shard (``pareto_mask``), and on the host over the union of the shards'
candidates (``reduce_rows``), so that the answer does not depend on the device count."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd


def pareto_mask(x, y):
    """Points not dominated in (x, y), both minimised: sort by x (then y), keep a point when
    its y is below every y before it. Ties in both keep the first."""
    order = jnp.lexsort((y, x))
    ys = y[order]
    before = jnp.concatenate([jnp.full((1,), jnp.inf, ys.dtype), jax.lax.cummin(ys)[:-1]])
    return jnp.zeros(x.shape, bool).at[order].set(ys < before)


def reduce_rows(df: pd.DataFrame, keep: str, objective: str, top_k: int, group_by: tuple[str, ...]) -> pd.DataFrame:
    """The exact answer of a reduction over candidate rows (idempotent, order independent)."""
    if df.empty or keep in ("all", "feasible"):
        return df.sort_values("config_id", ignore_index=True)
    if keep == "top_k":
        return df.sort_values([objective, "config_id"]).head(top_k).reset_index(drop=True)
    if keep == "pareto":
        df = df.sort_values(["jct_s", objective, "config_id"])
        y = df[objective].to_numpy()
        before = np.concatenate([[np.inf], np.minimum.accumulate(y)[:-1]])
        return df[y < before].reset_index(drop=True)
    df = df.sort_values([objective, "config_id"])
    return df.drop_duplicates(list(group_by)).sort_values(list(group_by), ignore_index=True)
