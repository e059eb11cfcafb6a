"""Training logs as runs rows: the step time a log measured, with the run's settings beside it.

A log ``PATH`` (``calibrate.logs``) comes with its run's settings in ``PATH``'s stem + ``.yaml``
(``train.log`` -> ``train.yaml``): the columns of a runs CSV (``gpu``, ``num_gpus``, ``model`` or
its shape, ``tp``, ``pp``, ``global_batch``, ``seq_len``, ``precision``, ``stack`` ...). The
log gives the measured step: the median over the logged steps after the first WARMUP_STEPS,
from the first of LOG_LINES that the log prints.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from ..config import ConfigError

# (what, pattern, how a match becomes the row's cell): the lines each framework prints per step.
LOG_LINES = (
    # Megatron-LM / NeMo (megatron/training/training.py training_log): "elapsed time per iteration (ms): 1234.5"
    ("Megatron-LM / NeMo iteration time", re.compile(r"elapsed time per iteration \(ms\):\s*([\d.]+)"),
     "measured_iter_time_s", 1e-3),
    # torchtitan (torchtitan/train.py, its metrics line): "tps: 5,432" tokens per second per GPU
    ("torchtitan tokens/s per GPU", re.compile(r"\btps:\s*([\d,]+(?:\.\d+)?)"), "tokens_per_s_per_gpu", 1.0),
    # DeepSpeed's ThroughputTimer (deepspeed/utils/timer.py): "CurrSamplesPerSec=12.34" (not its running
    # average), all ranks together
    ("DeepSpeed samples/s", re.compile(r"(?<![A-Za-z])(?:Curr)?SamplesPerSec=([\d.]+)"), "samples_per_s", 1.0),
    # Hugging Face Trainer's closing metrics: {'train_samples_per_second': 12.3, ...}
    ("HF Trainer samples/s", re.compile(r"['\"]?train_samples_per_second['\"]?\s*[:=]\s*([\d.]+)"), "samples_per_s", 1.0),
)
WARMUP_STEPS = 2  # the first logged steps compile, allocate and warm the caches


def measured_from_log(text: str, path: Path) -> tuple[str, float, str]:
    """(column, value, what) of the step the log measured: the median of its logged values
    after WARMUP_STEPS (all of them where it logs no more than that)."""
    for what, pattern, column, scale in LOG_LINES:
        values = [float(v.replace(",", "")) * scale for v in pattern.findall(text)]
        if values:
            steady = values[WARMUP_STEPS:] or values
            return column, float(np.median(steady)), f"{what}, median of {len(steady)} logged step(s)"
    raise ConfigError(f"calibrate.logs: {path} has no line jctopt reads a step time from ("
                      + "; ".join(what for what, *_ in LOG_LINES) + ")")


def log_row(path: Path) -> dict:
    """One runs row from the log ``path`` and its settings file (``path`` with suffix .yaml)."""
    settings = path.with_suffix(".yaml")
    if not path.is_file():
        raise ConfigError(f"calibrate.logs: no such file {path}")
    if not settings.is_file():
        raise ConfigError(f"calibrate.logs: {path} needs its run's settings in {settings} (the columns of a runs "
                          "CSV: gpu, num_gpus, model, tp, pp, global_batch, seq_len, precision ...)")
    row = OmegaConf.to_container(OmegaConf.load(settings))
    if not isinstance(row, dict):
        raise ConfigError(f"calibrate.logs: {settings} is not a mapping of runs columns to values")
    column, value, what = measured_from_log(path.read_text(errors="replace"), path)
    if column == "samples_per_s":  # sequences per second over every rank: the step is the batch's time
        if "global_batch" not in row:
            raise ConfigError(f"calibrate.logs: {path} logs samples/s; {settings} must state global_batch")
        column, value = "measured_iter_time_s", float(row["global_batch"]) / value
    row = {"id": path.stem, "source": str(path), "derivation": f"calibrate.logs: {what}", **row, column: value}
    if column == "tokens_per_s_per_gpu":
        row["measured_iter_time_s"] = None  # from the throughput once placed (runs.place)
    return row


def log_rows(paths: list[str]) -> pd.DataFrame:
    """The rows of ``calibrate.logs``, one per log."""
    return pd.DataFrame([log_row(Path(p)) for p in paths])
