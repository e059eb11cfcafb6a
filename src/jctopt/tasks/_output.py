"""How the tasks present their answers: layout labels, JSON rows and plots, and every output
file written whole or not at all (``atomic``: an interrupted task leaves no partial file)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

LAYOUT_COLUMNS = ["gpu", "fabric", "n_gpus", "tp", "pp", "cp", "ep", "etp", "vpp", "schedule", "dp", "micro_batch",
                  "n_micro", "global_batch", "recompute", "zero_stage", "precision", "ckpt_policy"]


def count(x) -> str:
    """A count as people write it: 128, not 128.0 (a float column of whole numbers)."""
    return str(int(x)) if float(x).is_integer() else f"{float(x):g}"


def layout_label(r) -> str:
    return (f"TP{count(r.tp)} PP{count(r.pp)}" + (f" CP{count(r.cp)}" if r.cp > 1 else "")
            + (f" EP{count(r.ep)}" if r.ep > 1 else "") + f" DP{count(r.dp)}" + (f" v{count(r.vpp)}" if r.vpp > 1 else "")
            + (f" {r.schedule}" if getattr(r, "schedule", "1f1b") != "1f1b" else "")
            + f", mb {count(r.micro_batch)} x {count(r.n_micro)}")


# Piped or redirected output is not cut to a terminal's width: tables and lines print whole.
PIPED_WIDTH = 1000


def output_console() -> Console:
    """The console a task prints its answer on: the terminal's width on a terminal; piped or
    redirected (no terminal to fit), whole lines (rich would cut them at 80 columns)."""
    return Console() if sys.stdout.isatty() else Console(width=PIPED_WIDTH, soft_wrap=True)


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


@contextlib.contextmanager
def atomic(path: Path):
    """A temporary path beside ``path`` (same directory) to write the file to: renamed onto
    ``path`` (``os.replace``) when the block ends, removed when it raises (an interruption
    included). ``path`` is either the old file or the whole new one, never a partial one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> Path:
    """``text`` into ``path``, atomically (``atomic``)."""
    with atomic(path) as tmp:
        tmp.write_text(text)
    return path


def write_parquet(df: pd.DataFrame, path: Path) -> Path:
    """``df`` (without its index) as Parquet into ``path``, atomically (``atomic``)."""
    with atomic(path) as tmp:
        df.to_parquet(tmp, index=False)
    return path


def save_plot(fig, path: Path) -> Path:
    fig.tight_layout()
    with atomic(path) as tmp:
        fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
