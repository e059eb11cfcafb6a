"""`jctopt task=deadline`: the cheapest configuration whose expected JCT (failures included)
meets ``job.deadline_days``, the cheapest that meets it with probability ``job.confidence``
(model error and failures combined, ``job.risk``), and the cost-time Pareto frontier.

The expected-JCT answer is exact over the grid from one pass: the cheapest configuration
under any deadline lies on the (JCT, cost) frontier (whatever dominates it also meets the
deadline and costs no more), so the frontier is computed once and the answer is its cheapest
point left of the deadline. The confident answer is exact over the grid too, per GPU type
(one model-error basis): P(JCT <= D) >= c needs at least c of the equiprobable error
multipliers k_j to leave the failure-free time k_j T_free within D - start-up (no failure law
finishes faster), i.e. T_free <= (D - start-up) / k_(ceil(c n)). The engine keeps the K
cheapest configurations under that bound; in cost order the first with P >= c is the answer
when it is among them (K grows until it is, or fewer than K pass the bound).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from ..config import ConfigError
from ..job import uncertainty as U
from ..job.risk import error_basis, log_quantiles, with_job_risk
from ..search.grid import catalog, configured, search
from ..search.space import int_axis
from ._output import (
    json_row,
    layout_label,
    output_console,
    pyplot,
    save_plot,
    write_parquet,
    write_text,
)


def frontier(cfg: DictConfig) -> pd.DataFrame:
    """The cost-time Pareto frontier of each GPU type of ``cfg.space``, fastest first, with
    ``days``, ``meets_deadline`` (expected JCT), the risk columns of ``job.risk.with_risk`` and
    ``meets_with_confidence``; ``on_frontier`` marks the points no other type's point
    dominates (the frontier of the whole space)."""
    parts = [search(configured(cfg, space__gpu=[gpu]), "pareto", "cost_usd") for gpu in cfg.space.gpu]
    front = pd.concat([p for p in parts if not p.empty] or parts[:1], ignore_index=True)
    front = front.sort_values(["jct_s", "cost_usd", "config_id"], ignore_index=True)
    y = front.cost_usd.to_numpy()
    front["on_frontier"] = y < np.concatenate([[np.inf], np.minimum.accumulate(y)[:-1]])
    days = float(cfg.job.deadline_days)
    front = with_job_risk(cfg, front)
    front["days"] = front.jct_s / 86400.0
    front["meets_deadline"] = front.days <= days
    front["meets_with_confidence"] = front.p_deadline >= cfg.job.confidence
    return front


def confident_cheapest(cfg: DictConfig, first_k: int = 64) -> pd.Series | None:
    """The cheapest configuration of ``cfg.space`` with P(JCT <= deadline) >= job.confidence,
    exact over the grid (module docstring), or None."""
    confidence = cfg.job.confidence
    deadline_s = 86400.0 * float(cfg.job.deadline_days)
    best = []
    for gpu in cfg.space.gpu:
        k = np.sort(U.error_multipliers(log_quantiles(error_basis(gpu, cfg.model.n_experts > 1, cfg.training.stack))))
        k_c = k[min(int(np.ceil(confidence * len(k))), len(k)) - 1]
        bound_days = float((deadline_s - float(cfg.cluster.init_s)) / k_c / 86400.0)
        if bound_days <= 0:
            continue
        top_k = first_k
        while True:
            rows = search(configured(cfg, space__gpu=[gpu]), "top_k", "cost_usd", top_k=top_k, max_free_days=bound_days)
            rows = with_job_risk(cfg, rows) if not rows.empty else rows
            hit = rows[rows.p_deadline >= confidence] if not rows.empty else rows
            if not hit.empty or len(rows) < top_k:
                break
            top_k *= 8
        if not hit.empty:
            best.append(hit.sort_values(["cost_usd", "jct_s", "config_id"]).iloc[0])
    return min(best, key=lambda r: (r.cost_usd, r.jct_s)) if best else None


def cheapest(front: pd.DataFrame) -> pd.Series | None:
    """The cheapest row meeting the deadline in expectation (the per-GPU frontiers hold the
    global one, so this is the grid's answer)."""
    ok = front[front.meets_deadline]
    return None if ok.empty else ok.sort_values(["cost_usd", "jct_s"]).iloc[0]


def scale_up(cfg: DictConfig) -> list[int]:
    """``deadline.scale_up`` checked: integer factors >= 1 on the largest GPU count ([] = none)."""
    factors = list(cfg.deadline.scale_up)
    if not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in factors):
        raise ConfigError(f"deadline.scale_up={factors!r} is not allowed: a list of integers >= 1 (factors on the "
                          "largest space.n_gpus), or [] to try the space's counts only")
    return factors


def what_it_would_take(cfg: DictConfig) -> pd.Series | None:
    """The cheapest configuration meeting the deadline when the space grows: every catalog
    GPU type and fabric, and up to ``max(deadline.scale_up)`` x the largest GPU count."""
    counts = int_axis("n_gpus", cfg.space.n_gpus)
    bigger = sorted(set(counts.tolist()) | {int(counts.max()) * k for k in scale_up(cfg)})
    wide = configured(cfg, space__gpu=catalog("gpu", cfg), space__fabric=catalog("fabric"),
                      space__n_gpus=bigger)
    best = search(wide, "top_k", "cost_usd", top_k=1, max_days=float(cfg.job.deadline_days))
    return None if best.empty else with_job_risk(cfg, best).iloc[0]



def run_deadline(cfg: DictConfig) -> tuple[pd.DataFrame, dict]:
    """(frontier, answer): ``answer["best"]`` is the cheapest configuration meeting the deadline,
    or None with ``answer["fastest"]`` and ``answer["would_take"]`` when nothing does."""
    scale_up(cfg)  # a bad value is named before any search
    front = frontier(cfg)
    best = cheapest(front)
    confident = confident_cheapest(cfg)
    answer = {"deadline_days": float(cfg.job.deadline_days), "best": None if best is None else json_row(best),
              "confidence": float(cfg.job.confidence),
              "best_with_confidence": None if confident is None else json_row(confident)}
    if best is None:
        answer["fastest"] = json_row(front.iloc[0]) if not front.empty else None
        alt = what_it_would_take(cfg)
        answer["would_take"] = None if alt is None else json_row(alt)
    return front, answer


def describe(r: dict) -> str:
    row = pd.Series(r)
    return (f"{r['n_gpus']} x {r['gpu']} + {r['fabric']}, {layout_label(row)}, {r['recompute']} recompute, "
            f"ZeRO {r['zero_stage']}, {r['precision']}: {r['jct_s'] / 86400:.1f} days "
            f"({r['jct_lo_s'] / 86400:.1f}-{r['jct_hi_s'] / 86400:.1f}), P(meet) {r['p_deadline']:.0%}, "
            f"${r['cost_usd']:,.0f}")


def plot(front: pd.DataFrame, answer: dict, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for gpu, part in front.groupby("gpu", observed=True):
        days = part.days.to_numpy()
        band = np.vstack([days - part.jct_lo_s / 86400, part.jct_hi_s / 86400 - days])
        ax.errorbar(days, part.cost_usd / 1e6, xerr=np.where(np.isfinite(band), band, 0.0), fmt="o", ms=4,
                    elinewidth=0.6, capsize=1.5, label=str(gpu))
    glob = front[front.on_frontier]
    ax.step(glob.days, glob.cost_usd / 1e6, where="post", color="0.6", lw=0.8, zorder=0)
    ax.axvline(answer["deadline_days"], color="tab:red", ls="--", label=f"deadline {answer['deadline_days']:g} d")
    for key, marker, text in (("best", "*", "cheapest, expected JCT"),
                              ("best_with_confidence", "D", f"cheapest at {answer['confidence']:.0%} confidence")):
        if answer.get(key):
            b = answer[key]
            ax.plot([b["jct_s"] / 86400], [b["cost_usd"] / 1e6], marker, ms=12, color="gold", mec="k",
                    label=f"{text}: {b['n_gpus']} x {b['gpu']}")
    ax.set_xlabel(f"JCT, failures included (days): expected, bars {answer['confidence']:.0%} interval")
    ax.set_ylabel("cost (M$)")
    ax.set_title("cost-time frontier")
    ax.legend(fontsize=8)
    return save_plot(fig, path)


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    console = output_console()
    front, answer = run_deadline(cfg)
    d = answer["deadline_days"]
    console.print(f"[bold]{cfg.model.name}[/bold], {cfg.job.tokens:.3g} tokens, deadline {d:g} days, "
                  f"space '{cfg.space.name}': {len(front)} configurations on the cost-time frontier")
    if answer["best_with_confidence"]:
        console.print(f"cheapest meeting it with {answer['confidence']:.0%} confidence (model error and failures; "
                      f"days: expected, {answer['confidence']:.0%} interval): "
                      f"{describe(answer['best_with_confidence'])}")
    else:
        console.print(f"[red]nothing on the frontier meets {d:g} days with {answer['confidence']:.0%} confidence[/red]")
    if answer["best"]:
        console.print(f"cheapest whose expected JCT meets the deadline: {describe(answer['best'])}")
    else:
        console.print(f"[red]nothing in the space meets {d:g} days[/red]")
        if answer.get("fastest"):
            console.print(f"fastest in the space: {describe(answer['fastest'])}")
        larger = max(scale_up(cfg), default=1) > 1
        counts = f"up to {max(scale_up(cfg))}x the GPUs" if larger else "the space's GPU counts (deadline.scale_up adds none)"
        if answer.get("would_take"):
            console.print(f"what it would take (every GPU type and fabric, {counts}): {describe(answer['would_take'])}")
        else:
            console.print(f"even every catalog GPU type and fabric, at {counts}, does not meet it")
    write_parquet(front, run_dir / "frontier.parquet")
    write_text(run_dir / "best.json", json.dumps(answer, indent=2))
    plot(front, answer, run_dir / "frontier.png")
    console.print(f"wrote {run_dir / 'frontier.parquet'}, best.json, frontier.png")
    return front
