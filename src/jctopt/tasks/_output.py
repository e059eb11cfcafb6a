"""How the search tasks present their answers: layout labels, JSON rows and plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

LAYOUT_COLUMNS = ["gpu", "fabric", "n_gpus", "tp", "pp", "cp", "ep", "etp", "vpp", "schedule", "dp", "micro_batch",
                  "n_micro", "global_batch", "recompute", "zero_stage", "precision", "ckpt_policy"]


def layout_label(r) -> str:
    return (f"TP{r.tp} PP{r.pp}" + (f" CP{r.cp}" if r.cp > 1 else "") + (f" EP{r.ep}" if r.ep > 1 else "")
            + f" DP{r.dp}" + (f" v{r.vpp}" if r.vpp > 1 else "")
            + (f" {r.schedule}" if getattr(r, "schedule", "1f1b") != "1f1b" else "")
            + f", mb {r.micro_batch} x {r.n_micro}")


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
