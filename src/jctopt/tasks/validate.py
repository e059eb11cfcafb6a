"""`jctopt task=validate validate.runs=RUNS.csv validate.out=OUT.parquet`: predict published
training runs and report the error on step time.

Each row of a CSV with the columns of ``jctopt/data/validation/runs_dev.csv`` becomes a model
configuration. Blank cells ("not stated") take the documented defaults of ``DEFAULTS`` and
the column ``defaults_used`` says which were applied. A row the model cannot place (unknown
GPU or fabric key, a layout that does not divide) gets a null prediction and a ``reason``;
it never stops the run. Rows the model places but judges infeasible (out of memory) keep
their predicted step time, with the model's verdict in ``model_reason``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from ..config import ConfigError
from ..config.resources import why_unwritable
from ..runs import DEFAULTS, FLAG_COLUMNS, run_validate, runs_path, unread_columns
from ..runs.catalog_models import (
    catalog_model,
)
from ._output import output_console, pyplot, save_plot, write_parquet, write_text


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Median, 90th percentile and count of |error| % per source, plus all rows."""
    ok = df[df.abs_pct_error.notna()]
    per = ok.groupby("source").abs_pct_error.agg(median="median", p90=lambda x: x.quantile(0.9), n="count")
    total = pd.DataFrame({"median": [ok.abs_pct_error.median()], "p90": [ok.abs_pct_error.quantile(0.9)],
                          "n": [len(ok)]}, index=["all rows"])
    return pd.concat([per.sort_values("median"), total])


def bias_table(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """Median |error| %, median signed error % (> 0: the model is too slow) and count per value of
    ``key`` (a GPU, a model), most rows first: where the model errs, and in which direction."""
    ok = df[df.abs_pct_error.notna()].assign(**{key: lambda d: d[key].fillna("(blank)").astype(str)})
    per = ok.groupby(key).agg(median=("abs_pct_error", "median"), signed=("pct_error", "median"),
                              n=("pct_error", "count"))
    return per.sort_values(["n", "median"], ascending=[False, True])


def report(df: pd.DataFrame, runs: Path) -> str:
    s = summary(df)
    lines = [f"# Validation against {runs.name}", "",
             f"{int(s.loc['all rows', 'n'])} of {len(df)} rows compared; median |error| on step time "
             f"{s.loc['all rows', 'median']:.1f} %, 90th percentile {s.loc['all rows', 'p90']:.1f} %.", "",
             "| source | median % | p90 % | rows |", "|---|---:|---:|---:|"]
    lines += [f"| {src} | {r['median']:.1f} | {r['p90']:.1f} | {int(r['n'])} |" for src, r in s.iterrows()]
    # A model cell that names a catalog model counts under its key (one family however spelled).
    families = df.assign(family=[catalog_model(m) or m for m in df.get("model", pd.Series(index=df.index))])
    for key, title in (("gpu", "By GPU"), ("family", "By model (catalog key where the row names one)")):
        table = bias_table(families, key)
        lines += ["", f"## {title}", "", "Signed: the median of predicted / measured - 1 (> 0: the model is too slow).",
                  "", f"| {key} | median % | signed % | rows |", "|---|---:|---:|---:|"]
        lines += [f"| {k} | {r['median']:.1f} | {r['signed']:+.1f} | {int(r['n'])} |" for k, r in table.iterrows()]
    skipped = df[df.reason.notna()] if "reason" in df else df.iloc[:0]
    if len(skipped):
        lines += ["", "## Rows not placed", ""] + [f"- `{r.id}`: {r.reason}" for _, r in skipped.iterrows()]
    lines += ["", "## Defaults for blank cells", ""] + [f"- `{k}`: {v} ({why})" for k, (v, why) in DEFAULTS.items()]
    lines += ["- `gpu`: any case, '-' or ' ' for '_', a leading DGX/HGX ignored; `a100_class`, `a100`: a100_80gb "
              "(the 40 GB part has the same peak, slower HBM); `h100`: h100_sxm",
              "- `inter_node=unknown_<X>gbps`: X Gbit/s per node (an NVL72 rack's 4-GPU tray) over one RoCE NIC "
              "per GPU",
              "- `inter_node` in words: InfiniBand, its generation (EDR-XDR), ConnectX-6/7/8 or Quantum name IB; "
              "RoCE, Ethernet, Spectrum-X, EFA, Slingshot price as RoCE; TCP/TCPX as TCP; a kind without a rate "
              "runs at the GPU's reference IB rate or the catalog's; a rate above 800 Gbit/s without a NIC count is "
              "the node's total; NVLink, MNNVL, none: the GPU's reference fabric (as blank)",
              "- MLP gated (SwiGLU) or not: whichever parameter count is nearer `params_b`",
              f"- Software flags ({', '.join(f'`{k}`' for k in FLAG_COLUMNS)}): the row's stack file "
              "(conf/stack/<stack>.yaml) where the row's cell of the flag is blank; a file without a `stack` "
              "column takes `stack=` of the command line, else `generic`. The shipped files state what their "
              "recipes set apart from their stack (scripts/convert_runs.py writes it from their notes)",
              "- `schedule`: 1F1B, interleaved where vpp > 1; `interleaved` with vpp blank: the fastest depth that "
              "fits; `dualpipe`, `zb_h1`, `zb_v` as named",
              "- `recompute_modules` (Megatron's selective recompute): those the recompute cell names "
              "(`selective:mla_up_proj,mlp`, or in prose: RMSNorm, MLA up-projection), else the "
              "`recompute_modules` cell, else Megatron-Core's default, the attention core (`core_attn`)",
              "- `moe_layers_graphed`: CUDA graphs over the MoE layers (a full-iteration graph, or graphs over "
              "token-dropping layers): no host launch time per MoE layer (`moe_host_s` 0)",
              "- Hardware apart from the catalog: `gpu_power_limit_w` (a board limit below TDP), `hbm_gb`, `hbm_tbps`"]
    return "\n".join(lines) + "\n"


def plot(df: pd.DataFrame, path: Path) -> Path:
    plt = pyplot()
    ok = df[df.abs_pct_error.notna()]
    fig, ax = plt.subplots(figsize=(8, 6))
    for src, part in ok.groupby("source"):
        ax.loglog(part.measured_iter_time_s, part.predicted_iter_time_s, "o", ms=4, label=str(src)[:60])
    lo, hi = ok[["measured_iter_time_s", "predicted_iter_time_s"]].min().min(), ok[
        ["measured_iter_time_s", "predicted_iter_time_s"]].max().max()
    xs = np.array([lo / 1.2, hi * 1.2])
    ax.plot(xs, xs, "k-", lw=0.8)
    ax.fill_between(xs, xs / 1.1, xs * 1.1, color="0.85", zorder=0, label="+-10 %")
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title("predicted vs measured")
    ax.legend(fontsize=5, loc="upper left")
    return save_plot(fig, path)


def output_path(cfg: DictConfig, run_dir: Path) -> Path:
    """``validate.out`` (default ``validate.parquet`` in the run directory), checked before any
    row is predicted: a ConfigError naming ``validate.out`` where it is a directory or its
    directory cannot be written."""
    out = Path(cfg.validate.out) if cfg.validate.out else run_dir / "validate.parquet"
    if out.is_dir():
        raise ConfigError(f"validate.out={str(out)!r} is not allowed: it is a directory; name the Parquet file "
                          "to write, e.g. validate.out=out.parquet")
    problem = why_unwritable(out.parent)
    if problem:
        raise ConfigError(f"validate.out={str(out)!r} is not allowed: cannot write into {out.parent} ({problem})")
    return out


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    runs = runs_path(cfg.validate.runs)
    out = output_path(cfg, run_dir)
    df = run_validate(cfg, runs)
    write_parquet(df, out)
    write_text(run_dir / "validate.md", report(df, runs))
    n = int(df.abs_pct_error.notna().sum())
    if n == 0:
        raise ConfigError(f"validate.runs={str(runs)!r}: no row could be compared (none of its {len(df)} rows has "
                          f"both a prediction and a measured step time); each row's reason is in "
                          f"{run_dir / 'validate.md'} (\"Rows not placed\") and the reason column of {out}")
    plot(df, run_dir / "validate.png")
    console = output_console()
    s = summary(df)
    console.print(s.round(1).to_string())
    if unread := unread_columns(runs):
        console.print(f"columns not read (no reader knows them: a misspelling leaves the column it meant blank): {', '.join(unread)}",
                      soft_wrap=True)
    if "reason" in df and (skipped := df[df.reason.notna()]).size:
        first = skipped.iloc[0]
        console.print(f"{len(skipped)} of {len(df)} rows not placed (first: {first.id}: {first.reason}); every "
                      f"reason in {run_dir / 'validate.md'}", soft_wrap=True)
    console.print(f"wrote {out}, {run_dir / 'validate.md'}")
    median = float(df.abs_pct_error.median())
    print(f"median_abs_pct_error={median:.4f} n={n}")
    return df
