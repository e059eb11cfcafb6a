"""`jctopt task=gradient`: optima and thresholds of one configuration by gradient search, and
which input moves JCT most.

For the configuration of ``task=estimate`` (model, gpu, fabric, cluster, layout, training,
job): the checkpoint interval that minimises expected JCT (against Young and Daly), the NIC
bandwidth at which exposed communication is ``gradient.comm_share`` of the step, the fewest
GPUs that meet ``job.deadline_days`` and the sync wall with this layout (GPU count relaxed to a
real number, then rounded to valid counts and evaluated exactly), and the elasticity of JCT
and cost to every continuous input.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig
from rich.table import Table

from ..config import ConfigError, to_config
from ..job.jct import Reason, estimate
from ..search import gradient as G
from ._output import output_console, pyplot, save_plot, write_parquet, write_text


def run_gradient(cfg: DictConfig) -> tuple[dict, pd.DataFrame]:
    """(thresholds and optima, sensitivity table)."""
    gc = cfg.gradient
    if not 0 < gc.comm_share < 1:
        raise ConfigError(f"gradient.comm_share={gc.comm_share!r} is not allowed: a fraction in (0, 1)")
    config = to_config(cfg)
    replica = cfg.layout.tp * cfg.layout.pp * cfg.layout.cp
    if not (isinstance(gc.n_gpus_max, (int, float)) and math.isfinite(gc.n_gpus_max) and gc.n_gpus_max > replica):
        raise ConfigError(f"gradient.n_gpus_max={gc.n_gpus_max!r} is not allowed: a GPU count above one model "
                          f"replica (tp x pp x cp = {replica})")
    est = estimate(config)
    if not bool(est.feasible):
        raise ConfigError(f"layout: this configuration is infeasible ({Reason(int(est.reason)).name}); "
                          "gradient search needs a feasible starting point (see task=estimate)")
    deadline_s = float(cfg.job.deadline_days) * 86400.0
    out: dict = {"jct_s": float(est.jct_s), "cost_usd": float(est.cost_usd), "comm_share": float(est.comm_share)}
    out["ckpt_interval_opt_s"] = G.optimal_checkpoint_interval(config)
    out["ckpt_interval_daly_s"] = float(est.daly_interval_s)
    out["ckpt_interval_young_s"] = float(est.young_interval_s)
    try:
        out["nic_gbit_for_comm_share"] = G.min_nic_bandwidth(config, float(gc.comm_share))
    except ValueError:  # the share is not reached anywhere between 1 Gbit/s and 100 Tbit/s
        out["nic_gbit_for_comm_share"] = None
    out["comm_share_target"] = float(gc.comm_share)
    wall = G.sync_wall(config, float(gc.n_gpus_max))
    out["sync_wall_gpus_relaxed"] = wall
    out["sync_wall_gpus"] = G.round_gpus(config, wall, "best")
    n_min = G.min_gpus_for_deadline(config, deadline_s, float(gc.n_gpus_max))
    out["min_gpus_for_deadline_relaxed"] = n_min
    n_valid = None if n_min is None else G.round_gpus(config, n_min, "up")
    # Rounded up to a valid count, the exact model may still miss by a hair: step up.
    counts = G.valid_gpu_counts(config)
    while n_valid is not None:
        exact = estimate(G.with_value(config, "layout", "n_gpus", float(n_valid)))
        if bool(exact.feasible) and float(exact.jct_s) <= deadline_s:
            out["deadline_jct_s"], out["deadline_cost_usd"] = float(exact.jct_s), float(exact.cost_usd)
            break
        later = counts[counts > n_valid]
        n_valid = int(later[0]) if later.size else None
    out["min_gpus_for_deadline"] = n_valid
    out["deadline_days"] = float(cfg.job.deadline_days)
    return out, pd.DataFrame(G.sensitivity(config))


def plot(sens: pd.DataFrame, path: Path, top: int = 15) -> Path:
    plt = pyplot()
    s = sens.head(top).iloc[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(s) + 1.2))
    ax.barh(s.input, s.jct_elasticity, color=["tab:red" if v > 0 else "tab:blue" for v in s.jct_elasticity])
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("d ln JCT / d ln input  (% JCT per % input)")
    ax.set_title("what moves JCT most")
    return save_plot(fig, path)


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    console = output_console()
    out, sens = run_gradient(cfg)
    lay = cfg.layout
    console.print(f"[bold]{cfg.model.name}[/bold] on {lay.n_gpus} x {cfg.gpu.name} + {cfg.fabric.name}, TP {lay.tp} "
                  f"PP {lay.pp}: JCT {out['jct_s'] / 86400:.2f} d, ${out['cost_usd']:,.0f}")
    console.print(f"checkpoint interval minimising JCT: {out['ckpt_interval_opt_s']:,.0f} s "
                  f"(Daly {out['ckpt_interval_daly_s']:,.0f} s, Young {out['ckpt_interval_young_s']:,.0f} s)")
    bw = out["nic_gbit_for_comm_share"]
    console.print(f"NIC bandwidth for {out['comm_share_target']:.0%} exposed communication: "
                  + (f"{bw:,.0f} Gbit/s" if bw else "not reached between 1 Gbit/s and 100 Tbit/s")
                  + f" (now {cfg.fabric.nic_gbit:g} Gbit/s, {out['comm_share']:.1%})")
    console.print(f"sync wall with this layout: {out['sync_wall_gpus_relaxed']:,.0f} GPUs relaxed, "
                  f"{out['sync_wall_gpus']} as a valid layout")
    if out["min_gpus_for_deadline"]:
        console.print(f"fewest GPUs meeting {out['deadline_days']:g} days: {out['min_gpus_for_deadline']} "
                      f"({out['deadline_jct_s'] / 86400:.2f} d, ${out['deadline_cost_usd']:,.0f}; relaxed "
                      f"{out['min_gpus_for_deadline_relaxed']:,.0f})")
    else:
        console.print(f"[red]no GPU count meets {out['deadline_days']:g} days with this layout[/red]")
    table = Table(title="sensitivity: % change of JCT / cost per 1 % change of the input")
    for col in ("input", "value", "JCT", "cost"):
        table.add_column(col, justify="right")
    for _, r in sens.head(12).iterrows():
        table.add_row(r.input, f"{r.value:.4g}", f"{r.jct_elasticity:+.3f}", f"{r.cost_elasticity:+.3f}")
    console.print(table)
    write_text(run_dir / "gradient.json", json.dumps(out, indent=2))
    write_parquet(sens, run_dir / "sensitivity.parquet")
    plot(sens, run_dir / "sensitivity.png")
    console.print(f"wrote {run_dir / 'gradient.json'}, sensitivity.parquet, sensitivity.png")
    return sens
