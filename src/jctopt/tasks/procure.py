"""`jctopt task=procure` (the default job): which GPU type is the better buy for one job.

For each type in ``procure.gpus``, the cheapest configuration of the design space that meets
``job.deadline_days`` (exact over the grid), its days, cost, GPU count and energy; and the
price at which the answer flips. Within one GPU type the cost is GPU-hours x price, so the
cheapest configuration of a type does not depend on its price, and the flip is exact: type
``o`` matches the winner ``w`` when ``price_o = cost_w / gpu_hours_o``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from rich.table import Table

from ..config import PRECISION, ConfigError, as_dict, load_option, runs_precision
from ..job.risk import p_cheaper, prewarm, with_job_risk
from ..search.grid import configured, search
from ._output import (
    LAYOUT_COLUMNS,
    count,
    json_row,
    layout_label,
    output_console,
    pyplot,
    save_plot,
    write_parquet,
    write_text,
)

OUTPUT_COLUMNS = ["jct_s", "days", "cost_usd", "gpu_hours", "price_per_gpu_hour", "energy_kwh", "energy_usd",
                  "mfu", "efficiency", "n_failures"]
RISK_COLUMNS = ["jct_lo_s", "jct_hi_s", "p_deadline", "error_basis"]


def check_overrides(overrides: list[str], gpus: list[str]) -> None:
    """A ConfigError where the command line sets ``space.gpu``, which procure replaces by
    ``procure.gpus`` (the types it compares): said, not silently dropped."""
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key == "space.gpu":
            raise ConfigError(f"space.gpu={value} is not read by task=procure: it compares the GPU types of "
                              f"procure.gpus (now {gpus}); name them there, e.g. procure.gpus={value}")


def run_procure(cfg: DictConfig) -> pd.DataFrame:
    """One row per GPU type: its cheapest configuration meeting the deadline (or, where none
    does, its fastest, with ``meets_deadline`` False), and the break-even price."""
    gpus = list(cfg.procure.gpus)
    if len(gpus) < 1 or len(set(gpus)) != len(gpus):
        raise ConfigError(f"procure.gpus={gpus!r} is not allowed: one or more distinct catalog GPU names")
    prices = as_dict(cfg.procure.prices)
    if not all(isinstance(v, (int, float)) and v > 0 for v in prices.values()):
        raise ConfigError(f"procure.prices={prices!r} is not allowed: USD per GPU-hour > 0 for each GPU name")
    unknown = set(prices) - set(gpus)
    if unknown:
        raise ConfigError(f"procure.prices has {sorted(unknown)} which are not in procure.gpus={gpus}")
    overrides = as_dict(cfg.space.gpu_overrides)
    for name, price in prices.items():
        overrides.setdefault(name, {})["price_per_gpu_hour"] = float(price)
    c = configured(cfg, space__gpu=gpus, space__gpu_overrides=overrides)
    deadline = float(cfg.job.deadline_days)
    cheapest = search(c, "best_per_group", "cost_usd", group_by=("gpu",), max_days=deadline)
    fastest = search(c, "best_per_group", "jct_s", group_by=("gpu",))
    rows = []
    for gpu in gpus:
        hit = cheapest[cheapest.gpu == gpu]
        meets = not hit.empty
        pick = hit if meets else fastest[fastest.gpu == gpu]
        if pick.empty:
            spec = load_option("gpu", gpu)
            price = overrides.get(gpu, {}).get("price_per_gpu_hour", spec.price_per_gpu_hour)
            rows.append({"gpu": gpu, "meets_deadline": False, "price_per_gpu_hour": price,
                         "why_none": unsupported_precisions(cfg, spec)})
            continue
        r = pick.iloc[0].to_dict()
        r.update(meets_deadline=meets, days=r["jct_s"] / 86400.0,
                 price_per_gpu_hour=r["cost_usd"] / r["gpu_hours"])
        rows.append(r)
    df = pd.DataFrame(rows)
    for col in ["n_gpus", "days"] + OUTPUT_COLUMNS:  # absent when no GPU type has a configuration that runs
        if col not in df:
            df[col] = np.nan
    df["gpu"] = df["gpu"].astype(str)
    for col in ("fabric", "recompute", "precision", "ckpt_policy", "reason"):
        if col in df:
            df[col] = df[col].astype(str)
    ok = df[df.meets_deadline]
    df["winner"] = False
    df["break_even_price_per_gpu_hour"] = np.nan
    if not ok.empty:
        w = ok.cost_usd.idxmin()
        df.loc[w, "winner"] = True
        others = ok.drop(index=w)
        # The winner keeps winning while its price stays below the runner-up's cost / its hours.
        if not others.empty:
            df.loc[w, "break_even_price_per_gpu_hour"] = others.cost_usd.min() / df.loc[w, "gpu_hours"]
        for i in others.index:
            df.loc[i, "break_even_price_per_gpu_hour"] = df.loc[w, "cost_usd"] / df.loc[i, "gpu_hours"]
    df["price_ratio_flip"] = df.break_even_price_per_gpu_hour / df.price_per_gpu_hour
    # How sure: each row's intervals, and P(the winner is really the cheaper) against each
    # other type that meets the deadline (the smallest is kept).
    if "step_s" in df:
        df = with_job_risk(cfg, df)
    df["p_winner_cheaper"] = np.nan
    if not ok.empty and len(ok) > 1:
        w = df[df.winner].iloc[0]
        moe = cfg.model.n_experts > 1
        df.loc[df.winner, "p_winner_cheaper"] = min(p_cheaper(w.cost_usd, w.gpu, o.cost_usd, o.gpu, moe, cfg.training.stack)
                                                    for _, o in df[df.meets_deadline & ~df.winner].iterrows())
    keep = ["gpu", "meets_deadline", "winner"] + [c for c in LAYOUT_COLUMNS if c in df and c != "gpu"] + \
        [c for c in OUTPUT_COLUMNS + RISK_COLUMNS if c in df] + ["break_even_price_per_gpu_hour", "price_ratio_flip",
                                                                "p_winner_cheaper"] + \
        (["why_none"] if "why_none" in df else [])
    df = df[keep]
    df.attrs["confidence"] = float(cfg.job.confidence)
    return df


def unsupported_precisions(cfg: DictConfig, spec) -> str | None:
    """Why a GPU type runs nothing of the space where that is its precision: none of the space's
    precisions is one its tensor cores run (config.choices.runs_precision); else None."""
    asked = list(cfg.space.get("precision") or [cfg.training.precision])
    if any(runs_precision(spec, p) for p in asked if p in PRECISION):
        return None
    runs = " | ".join(p for p in PRECISION if runs_precision(spec, p))
    return f"it cannot run {' or '.join(map(str, asked))} (its tensor cores run {runs})"


def verdict(df: pd.DataFrame, deadline_days: float) -> str:
    ok = df[df.meets_deadline]
    if not np.isfinite(df.days.to_numpy(float)).any():
        why = [f"{o.gpu}: {o.why_none}" for _, o in df.iterrows() if isinstance(o.get("why_none"), str)]
        if len(why) == len(df):
            return "nothing in the space runs: " + "; ".join(why) + " (space.precision)"
        return (f"nothing in the space runs this model on {', '.join(df.gpu)}: every configuration is masked "
                "(it does not fit in memory, or no layout divides); widen space.n_gpus or the layout axes, or see "
                "`jctopt task=sweep` for each configuration's reason")
    if ok.empty:
        return (f"no GPU type meets the {deadline_days:g}-day deadline within the space; see "
                "`jctopt task=deadline` for what it would take")
    w = df[df.winner].iloc[0]
    text = f"{w.gpu} is the cheaper buy: ${w.cost_usd:,.0f} in {w.days:.1f} days on {count(w.n_gpus)} GPUs."
    for _, o in ok[~ok.winner].iterrows():
        text += (f" {o.gpu} (${o.cost_usd:,.0f}, {o.days:.1f} days) would win at a price below "
                 f"${o.break_even_price_per_gpu_hour:.2f}/GPU-h (now ${o.price_per_gpu_hour:.2f}, "
                 f"{o.price_ratio_flip:.0%} of its price).")
    p = w.get("p_winner_cheaper", np.nan)
    if np.isfinite(p):
        confidence = df.attrs["confidence"]  # run_procure's job.confidence
        sure = (f"{w.gpu} is cheaper with {p:.0%} probability" if p >= confidence else
                f"too close to call within the model's error: {w.gpu} is cheaper with {p:.0%} probability, "
                f"below the {confidence:.0%} asked (job.confidence)")
        text += f" Across the model's step-time error (calibrate's left-out runs, per GPU type): {sure}."
    for _, o in df[~df.meets_deadline].iterrows():
        if isinstance(o.get("why_none"), str):
            text += f" {o.gpu}: {o.why_none}."
            continue
        text += f" {o.gpu} cannot meet the deadline within the space"
        text += f" (fastest {o.days:.1f} days)." if "days" in o and np.isfinite(o.days) else "."
    return text


def plot(df: pd.DataFrame, deadline_days: float, path: Path) -> Path:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    has = df[np.isfinite(df.get("cost_usd", pd.Series(dtype=float)))] if "cost_usd" in df else df.iloc[:0]
    colors = ["tab:green" if m else "tab:gray" for m in has.meets_deadline]
    ax1.bar(has.gpu, has.cost_usd / 1e6, color=colors)
    for i, (_, r) in enumerate(has.iterrows()):
        ax1.annotate(f"{r.days:.1f} d\n{count(r.n_gpus)} GPUs", (i, r.cost_usd / 1e6), ha="center", va="bottom", fontsize=8)
    ax1.set_ylabel("cost (M$)")
    ax1.margins(y=0.25)
    ax1.set_title(f"cheapest configuration meeting {deadline_days:g} days\n(grey: misses it; fastest shown)")
    ok = df[df.meets_deadline]
    if len(ok) > 1:
        w = ok[ok.winner].iloc[0]
        scale = np.linspace(0.0, 2.0, 101)
        ax2.axhline(w.cost_usd / 1e6, color="tab:green", label=f"{w.gpu} at its price")
        for _, o in ok[~ok.winner].iterrows():
            ax2.plot(scale, o.cost_usd * scale / 1e6, label=f"{o.gpu}")
            ax2.axvline(o.price_ratio_flip, ls="--", color="tab:red")
            ax2.annotate(f"flip at {o.price_ratio_flip:.0%}", (o.price_ratio_flip, w.cost_usd / 1e6),
                         textcoords="offset points", xytext=(4, 6), fontsize=8)
        ax2.axvline(1.0, ls=":", color="k", label="today's prices")
        ax2.set_xlabel("price of the other type, relative to today")
        ax2.set_ylabel("cost (M$)")
        ax2.set_title("where the answer flips")
        ax2.legend(fontsize=8)
    else:
        ax2.axis("off")
    return save_plot(fig, path)


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    console = output_console()
    if HydraConfig.initialized():
        check_overrides(list(HydraConfig.get().overrides.task), list(cfg.procure.gpus))
    prewarm(len(cfg.procure.gpus))
    df = run_procure(cfg)
    deadline = float(cfg.job.deadline_days)
    console.print(f"[bold]{cfg.model.name}[/bold], {cfg.job.tokens:.3g} tokens, deadline {deadline:g} days, "
                  f"space '{cfg.space.name}' ({', '.join(map(str, cfg.procure.gpus))})")
    table = Table(title="cheapest configuration per GPU type (* = the better buy)")
    for col in ("gpu", "meets", "GPUs", "layout", "days", "cost $", "$/GPU-h", "energy MWh ($)", "MFU"):
        table.add_column(col, justify="right")
    for _, r in df.iterrows():
        if not np.isfinite(r.get("days", np.nan)):
            table.add_row(r.gpu, "no", *["-"] * 7)
            continue
        table.add_row(r.gpu + (" *" if r.winner else ""), "yes" if r.meets_deadline else "no", count(r.n_gpus),
                      f"{r.fabric} {layout_label(r)}", f"{r.days:.1f}", f"{r.cost_usd:,.0f}",
                      f"{r.price_per_gpu_hour:.2f}", f"{r.energy_kwh / 1e3:,.0f} ({r.energy_usd:,.0f})", f"{r.mfu:.0%}")
    console.print(table)
    console.print(verdict(df, deadline))
    write_parquet(df, run_dir / "procure.parquet")
    plot(df, deadline, run_dir / "procure.png")
    write_text(run_dir / "procure.json", json.dumps([json_row(r) for _, r in df.iterrows()], indent=2))
    console.print(f"wrote {run_dir / 'procure.parquet'}, procure.png")
    return df
