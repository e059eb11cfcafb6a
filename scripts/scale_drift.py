"""Does the model's error drift with scale? Per shipped source spanning 4 or more GPU counts.

For every source (of every shipped runs file) whose predicted rows span at least 4 distinct GPU
counts, the signed median error (%, < 0: the model is too fast) of its rows at the smallest and
at the largest count, and the drift between them. Issue target: |drift| <= 5 points.

    python scripts/scale_drift.py [runs_dev.csv ...] [--out drift.csv]

About a minute on two cores (one validate pass per file).
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from jctopt.config import compose
from jctopt.runs import read_runs, runs_path
from jctopt.runs.predict import run_validate

FILES = ("runs_dev.csv", "runs_dev2.csv", "runs_mbridge_dense.csv", "runs_moe_dev.csv", "runs_mbridge_moe.csv")
MIN_SCALES = 4


def predicted(files) -> pd.DataFrame:
    cfg = compose(["task=validate"])
    parts = []
    for name in files:
        df = run_validate(cfg, runs_path(name))[["id", "pct_error"]]
        table = read_runs(runs_path(name))[["id", "source", "num_gpus"]]
        df = df.merge(table, on="id")
        df["file"] = name
        parts.append(df[np.isfinite(df.pct_error)])
    out = pd.concat(parts, ignore_index=True)
    out["num_gpus"] = pd.to_numeric(out.num_gpus, errors="coerce")
    return out


def drift_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (file, source), part in df.groupby(["file", "source"]):
        counts = np.sort(part.num_gpus.unique())
        if len(counts) < MIN_SCALES:
            continue
        small = part[part.num_gpus == counts[0]].pct_error.median()
        large = part[part.num_gpus == counts[-1]].pct_error.median()
        rows.append({"file": file, "source": source, "rows": len(part), "scales": len(counts),
                     "gpus_small": counts[0], "gpus_large": counts[-1], "signed_small_pct": small,
                     "signed_large_pct": large, "drift_pts": large - small})
    return pd.DataFrame(rows)


def main(argv: list[str]) -> int:
    out = argv[argv.index("--out") + 1] if "--out" in argv else None
    files = [a for a in argv if a.endswith(".csv") and a != out] or FILES
    table = drift_table(predicted(files))
    if out:
        table.to_csv(out, index=False)
    with pd.option_context("display.width", 250, "display.max_colwidth", 60):
        print(table.round(1).to_string(index=False))
    bad = table[table.drift_pts.abs() > 5.0]
    print(f"\n{len(table)} sources span >= {MIN_SCALES} scales; {len(bad)} drift more than 5 points")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
