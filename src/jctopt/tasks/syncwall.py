"""`jctopt task=syncwall`: JCT against GPU count, with the best layout at each count, for each
GPU type x fabric of the space, as pure data parallelism and as the best hybrid layout; for a
mixture-of-experts model also its dense twin (``dense_twin``), so that the wall the expert
all-to-all brings shows against a dense model of the same active size.

The sync wall is the GPU count past which adding GPUs makes the job slower (the minimum of
JCT over the counts). Before it, scaling already pays less and less: the marginal efficiency
of going from n1 to n2 GPUs is (T1/T2 - 1) / (n2/n1 - 1) (1 = perfect, 0 = no gain, < 0 =
slower); ``syncwall.min_marginal_eff`` marks the first count below that level.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig
from rich.table import Table

from ..config import ConfigError, to_config
from ..job.risk import with_job_risk
from ..model import flops as Fl
from ..model import hybrid as Hy
from ..search.grid import configured, search
from ..search.space import int_axis
from ._output import output_console, pyplot, save_plot, write_parquet

CURVE = ["family", "gpu", "fabric"]
PURE_DP = dict(space__tp=[1], space__pp=[1], space__cp=[1], space__ep=[1], space__vpp=[1])


def dense_twin(cfg: DictConfig) -> DictConfig:
    """``cfg`` with its MoE model replaced by the dense model of the same active size: the same
    attention (and Mamba-2 mixers), layers and vocabulary, and in every MLP layer (a hybrid's
    ``E`` layers become ``-``) a dense MLP holding the weights a token passes through in the
    average MLP layer (model.compute.mlp_params_per_token: top_k routed and the shared experts, a
    LatentMoE's projections, ffn_hidden in a leading dense layer). Same FLOPs per token but the
    router's; no all-to-all, no expert weights."""
    m = cfg.model
    c = to_config(cfg, layout=False).model
    router = float(Fl.moe_layer_fraction(c)) * float(c.hidden) * float(c.n_experts)
    per_mlp = (float(Fl.mlp_params_per_token(c)) - router) / float(Hy.mlp_share(c))
    width = per_mlp / ((2.0 + float(c.glu)) * float(c.hidden))
    pattern = None if m.layer_pattern is None else m.layer_pattern.replace(Hy.MOE, Hy.DENSE_MLP)
    return configured(cfg, model__name=f"{m.name} dense twin", model__n_experts=1, model__top_k=1,
                      model__n_shared_experts=0, model__n_dense_layers=0, model__moe_ffn_hidden=None,
                      model__moe_latent_size=0, model__layer_pattern=pattern,
                      model__ffn_hidden=int(round(width)), space__ep=[1])


def marginal_efficiency(n: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(T[i-1]/T[i] - 1) / (n[i]/n[i-1] - 1) for each count after the first (NaN for the first)."""
    out = np.full(len(n), np.nan)
    out[1:] = (t[:-1] / t[1:] - 1.0) / (n[1:] / n[:-1] - 1.0)
    return out


def wall(n: np.ndarray, t: np.ndarray, min_marginal_eff: float) -> dict:
    """Sync wall of one curve (counts ascending): the count of minimum JCT when JCT rises after
    it (else None: no wall within the range), and the first count whose marginal efficiency
    falls below ``min_marginal_eff``."""
    i = int(np.argmin(t))
    eff = marginal_efficiency(n, t)
    below = np.flatnonzero(eff < min_marginal_eff)
    return {"wall_n_gpus": int(n[i]) if i < len(n) - 1 else None, "largest_n_gpus": int(n[-1]),
            "fastest_n_gpus": int(n[i]),
            "fastest_jct_s": float(t[i]), "diminishing_n_gpus": int(n[below[0]]) if below.size else None,
            "marginal_eff": eff}


def run_syncwall(cfg: DictConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curve points, one summary row per curve). Points: the fastest configuration at each
    (family, gpu, fabric, n_gpus); counts with no feasible configuration are left out."""
    sw = cfg.syncwall
    if not 0 < sw.min_marginal_eff <= 1:
        raise ConfigError(f"syncwall.min_marginal_eff={sw.min_marginal_eff!r} is not allowed: a fraction in (0, 1]")
    try:  # the counts are syncwall.n_gpus: errors about them name that key, not space.n_gpus
        counts = int_axis("n_gpus", sw.n_gpus).tolist()
        base = configured(cfg, space__n_gpus=counts)
        families = [("hybrid", base), ("pure_dp", configured(base, **PURE_DP))]
        if cfg.model.n_experts > 1:
            families.append(("dense_twin", dense_twin(base)))
        parts = []
        for family, c in families:
            best = search(c, "best_per_group", "jct_s", group_by=("gpu", "fabric", "n_gpus"))
            parts.append(best.assign(family=family))
    except ConfigError as err:
        raise ConfigError(str(err).replace("space.n_gpus", "syncwall.n_gpus")) from None
    points = pd.concat(parts, ignore_index=True)
    points["gpu"], points["fabric"] = points.gpu.astype(str), points.fabric.astype(str)
    points = points.sort_values(CURVE + ["n_gpus"], ignore_index=True)
    if not points.empty:  # each point's interval at job.confidence (job.risk)
        points = with_job_risk(cfg, points)
    points["days"] = points.jct_s / 86400.0
    points["marginal_eff"] = np.nan
    summary = []
    for key, curve in points.groupby(CURVE, sort=False):
        w = wall(curve.n_gpus.to_numpy(float), curve.jct_s.to_numpy(), sw.min_marginal_eff)
        points.loc[curve.index, "marginal_eff"] = w.pop("marginal_eff")
        summary.append(dict(zip(CURVE, key), **w, n_points=len(curve)))
    points["is_wall"] = False
    summary = pd.DataFrame(summary)
    for _, s in summary.iterrows():
        if s.wall_n_gpus is not None and not pd.isna(s.wall_n_gpus):
            sel = (points.family == s.family) & (points.gpu == s.gpu) & (points.fabric == s.fabric) & \
                (points.n_gpus == s.wall_n_gpus)
            points.loc[sel, "is_wall"] = True
    return points, summary


def plot(points: pd.DataFrame, summary: pd.DataFrame, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = {}
    for (family, gpu, fabric), c in points.groupby(CURVE, sort=False):
        color = colors.setdefault((gpu, fabric), f"C{len(colors) % 10}")
        style = {"hybrid": "-", "pure_dp": "--"}.get(family, ":")
        ax.plot(c.n_gpus, c.days, style, marker="o", ms=3, color=color, label=f"{gpu} + {fabric} ({family})")
        if "jct_lo_s" in c:
            ax.fill_between(c.n_gpus, c.jct_lo_s / 86400, c.jct_hi_s / 86400, color=color, alpha=0.12, lw=0)
        wall_pt = c[c.is_wall]
        ax.plot(wall_pt.n_gpus, wall_pt.days, "X", ms=11, color=color, mec="k")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("JCT (days): expected, band = interval at job.confidence")
    ax.set_title("sync wall (X): past it, more GPUs make the job slower")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return save_plot(fig, path)


def _days(seconds: float) -> str:
    return f"{seconds / 86400:.2f} d" if seconds >= 86400 else f"{seconds / 3600:.2f} h"


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    console = output_console()
    points, summary = run_syncwall(cfg)
    if points.empty:
        console.print(f"[red]nothing fits: no configuration of {cfg.model.name} runs at syncwall.n_gpus="
                      f"{int_axis('n_gpus', cfg.syncwall.n_gpus).tolist()} on any GPU and fabric of the space "
                      "(memory or layout); try larger GPU counts[/red]")
    table = Table(title=f"{cfg.model.name}: sync wall per GPU x fabric (marginal efficiency < "
                        f"{cfg.syncwall.min_marginal_eff:g} from the count shown)")
    for col in ("layouts", "gpu", "fabric", "sync wall (GPUs)", "fastest", "diminishing from"):
        table.add_column(col, justify="right")
    for _, s in summary.iterrows():
        wall_txt = (f"{s.wall_n_gpus:.0f}" if pd.notna(s.wall_n_gpus)
                    else f"none up to {s.largest_n_gpus} (largest feasible)")
        dim = f"{s.diminishing_n_gpus:.0f}" if pd.notna(s.diminishing_n_gpus) else "-"
        table.add_row(s.family, s.gpu, s.fabric, wall_txt, f"{_days(s.fastest_jct_s)} on {s.fastest_n_gpus}", dim)
    console.print(table)
    write_parquet(points, run_dir / "syncwall.parquet")
    write_parquet(summary, run_dir / "syncwall_summary.parquet")
    plot(points, summary, run_dir / "syncwall.png")
    console.print(f"wrote {run_dir / 'syncwall.parquet'}, syncwall_summary.parquet, syncwall.png")
    return points
