"""Intervals and deadline probabilities for the tasks' result tables (``job.uncertainty`` on rows).

The model error a row gets depends on what its prediction rests on: ``rows`` where the GPU
type's values were fitted to its own measured runs, ``specs`` otherwise (the calibration
record's ``gpu.<name>.from``), and ``moe`` for any mixture-of-experts model: the error on the
MoE runs, to which no efficiency is fitted (only the launch floor; ``calibrate.moe_error``);
``stacks`` for a dense model on a software stack stated as ``generic``, one with no measured runs:
the error on each stack's runs with that stack left out of the fit (scripts/leave_one_stack_out.py);
``stack:<name>`` for a stack you calibrated (``calibrate.stack``): the error on its own runs, each
predicted by the stack fitted without it (``config.resources.stack_error_file``), else ``stacks``
where it had too few runs to measure that (its fit is then no better known than a new stack's).
"""

from __future__ import annotations

import functools
import threading

import jax
import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from ..config import ConfigError
from ..config.cache import ExportedKernel
from ..config.resources import CALIBRATION_RECORD, CONF_DIR, stack_error_file
from . import uncertainty as U

# Columns of an estimate row the failure law needs (Estimate fields, SI units).
NEEDED = ("gpu", "step_s", "steps", "ckpt_interval_s", "ckpt_write_s", "restart_s", "mtbf_s", "jct_s")
_CHUNK = 4096


@functools.cache
def _record() -> dict:
    if not CALIBRATION_RECORD.is_file():
        raise ConfigError(f"{CALIBRATION_RECORD} is missing: run `jctopt task=calibrate calibrate.apply=true`")
    record = OmegaConf.to_container(OmegaConf.load(CALIBRATION_RECORD))
    if "model_error" not in record or list(record["model_error"].get("levels", [])) != list(U.LEVELS):
        raise ConfigError(f"{CALIBRATION_RECORD} has no model_error at levels {U.LEVELS}: rerun "
                          "`jctopt task=calibrate calibrate.apply=true`")
    return record


# Stacks whose predictions rest on no measured run of their own: their error is the spread across stacks.
UNSEEN_STACKS = ("generic",)
OWN_ERROR = "stack:"  # the basis prefix of a calibrated stack's own error


@functools.cache
def _shipped_stacks() -> frozenset[str]:
    return frozenset(p.stem for p in (CONF_DIR / "stack").glob("*.yaml")) | {"none"}


@functools.cache
def _load_stack_error(path: str, mtime_ns: int, size: int) -> list[float]:
    """The log quantiles of a stack error file (cached while its time and size are unchanged)."""
    error = OmegaConf.to_container(OmegaConf.load(path))
    quantiles = error.get("log_quantiles") if isinstance(error, dict) else None
    if list(error.get("levels", [])) != list(U.LEVELS) or not quantiles or len(quantiles) != len(U.LEVELS):
        raise ConfigError(f"{path} holds no log_quantiles at levels {U.LEVELS}: rerun "
                          "`jctopt task=calibrate calibrate.stack=<name>` with that stack's runs")
    return [float(q) for q in quantiles]


def stack_error(stack: str) -> list[float] | None:
    """A calibrated stack's own log-error quantiles, None where it has no error file."""
    path = stack_error_file(stack)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return _load_stack_error(str(path), stat.st_mtime_ns, stat.st_size)


def error_basis(gpu: str, moe: bool = False, stack: str = "none") -> str:
    """``moe`` for a mixture-of-experts model where the record holds the MoE runs' error; else
    ``stacks`` for a stack with no runs (UNSEEN_STACKS); ``stack:<name>`` for a calibrated stack
    with its own error, ``stacks`` for one without; else ``rows`` where the catalog's values for
    ``gpu`` were fitted to its own runs, else ``specs``."""
    if moe and "moe" in _record()["model_error"]:
        return "moe"
    if stack in UNSEEN_STACKS:
        return "stacks"
    if stack not in _shipped_stacks():
        return OWN_ERROR + stack if stack_error(stack) is not None else "stacks"
    origin = _record()["gpu"].get(str(gpu), {}).get("from", "specs")
    return "rows" if origin == "rows" else "specs"


def log_quantiles(basis: str) -> list[float]:
    """The stored error quantiles of ``basis``; a record without them (a calibration on one
    source or one die has no left-out predictions) is a ConfigError, not a guess."""
    if basis.startswith(OWN_ERROR):
        name = basis.removeprefix(OWN_ERROR)
        quantiles = stack_error(name)
        if quantiles is None:
            raise ConfigError(f"{stack_error_file(name)} was removed while in use: rerun the task")
        return quantiles
    error = _record()["model_error"]
    if basis not in error:
        raise ConfigError(f"{CALIBRATION_RECORD}: model_error has no '{basis}' basis (its calibration could not "
                          "leave a source or a die out); calibrate on runs from several sources and GPU dies")
    return error[basis]["log_quantiles"]


def check_confidence(confidence) -> float:
    if not (isinstance(confidence, (int, float)) and not isinstance(confidence, bool) and 0.0 < confidence < 1.0):
        raise ConfigError(f"job.confidence={confidence!r} is not allowed: a probability strictly between 0 and 1")
    return float(confidence)


# The failure law's deadline probability and quantiles, loaded untraced on later runs (config.cache).
_cdf = ExportedKernel(jax.jit(U.jct_cdf), "risk_cdf")
_quantile = ExportedKernel(jax.jit(U.jct_quantile), "risk_quantile")


def _padded(n: int) -> int:
    """Rows padded to a power of two (at least 16): few shapes, few compilations."""
    return max(16, 1 << (n - 1).bit_length())


_warming: list = []  # the thread building the failure law's kernels, while the task searches


def prewarm(n_rows: int) -> None:
    """Build (trace or load, and compile) the kernels ``with_risk`` will call for ``n_rows`` rows
    in a thread, while the task's search runs: XLA compiles without the GIL."""
    size = _padded(n_rows)
    ones, k = np.ones(size), np.ones(U.N_NODES)

    def build():
        try:
            jax.block_until_ready(_quantile(np.asarray([0.1, 0.9])[:, None], *(ones[None, :] for _ in range(6)), k))
            jax.block_until_ready(_cdf(ones, *(ones for _ in range(6)), k))
        except Exception:  # noqa: BLE001 - with_risk's own call raises it, where it is handled
            pass

    # Not a daemon: an exit waits for it rather than tearing the interpreter down under XLA.
    _warming.append(threading.Thread(target=build, name="prewarm-risk"))
    _warming[-1].start()


def with_risk(rows: pd.DataFrame, confidence: float, deadline_s: float, init_s: float,
              moe: bool = False, stack: str = "none") -> pd.DataFrame:
    """``rows`` (estimates with the NEEDED columns) with, at ``confidence``: ``step_lo_s`` /
    ``step_hi_s`` (model error), ``jct_lo_s`` / ``jct_hi_s`` (model error and failures
    combined), ``p_deadline`` = P(JCT <= deadline_s), and ``error_basis``. Infeasible rows
    (infinite JCT) get NaN intervals and probability 0."""
    confidence = check_confidence(confidence)
    while _warming:
        _warming.pop().join()
    missing = sorted(set(NEEDED) - set(rows.columns))
    if missing:
        raise ValueError(f"rows lack columns {missing} for intervals")
    out = rows.copy()
    for col in ("step_lo_s", "step_hi_s", "jct_lo_s", "jct_hi_s", "p_deadline"):
        out[col] = np.nan
    basis = np.asarray([error_basis(g, moe, stack) for g in out.gpu.astype(str)], dtype=object)
    out["error_basis"] = [f"{b}, dense runs (no MoE error recorded)" if moe and b != "moe" else b for b in basis]
    ok = np.isfinite(out.jct_s.to_numpy(float))
    out.loc[~ok, "p_deadline"] = 0.0
    levels = [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0]
    for b in np.unique(basis):
        idx = np.flatnonzero(ok & (basis == b))
        if idx.size == 0:
            continue
        quantiles = log_quantiles(b)
        k = U.error_multipliers(quantiles)
        step = out.step_s.to_numpy(float)[idx]
        lo, hi = U.step_interval(step, quantiles, confidence)
        out.loc[out.index[idx], "step_lo_s"] = lo
        out.loc[out.index[idx], "step_hi_s"] = hi
        for start in range(0, idx.size, _CHUNK):
            part = idx[start:start + _CHUNK]
            r = out.iloc[part]
            size = _padded(len(part))  # repeating the last row
            args = [np.pad(a, (0, size - len(part)), mode="edge") for a in (
                r.steps.to_numpy(float) * r.step_s.to_numpy(float), r.ckpt_interval_s.to_numpy(float),
                r.ckpt_write_s.to_numpy(float), r.restart_s.to_numpy(float), r.mtbf_s.to_numpy(float),
                np.full(len(part), float(init_s)))]
            q = np.asarray(_quantile(np.asarray(levels)[:, None], *(a[None, :] for a in args), k))[:, :len(part)]
            out.loc[out.index[part], "jct_lo_s"] = q[0]
            out.loc[out.index[part], "jct_hi_s"] = q[1]
            p = np.asarray(_cdf(np.full(size, float(deadline_s)), *args, k))[:len(part)]
            out.loc[out.index[part], "p_deadline"] = p
    return out


def with_step_interval(rows: pd.DataFrame, confidence: float, moe: bool = False,
                       stack: str = "none") -> pd.DataFrame:
    """``rows`` with ``step_lo_s`` / ``step_hi_s``, the model-error interval of the step time at
    ``confidence`` (a product per row: cheap enough for every row a sweep keeps, where the JCT
    law's quantiles, 0.9 ms a row, are not). NaN where the step time is not finite."""
    confidence = check_confidence(confidence)
    out = rows.copy()
    step = out.step_s.to_numpy(float)
    lo, hi = np.full(len(out), np.nan), np.full(len(out), np.nan)
    gpus = out.gpu.astype(str).to_numpy()
    for gpu in np.unique(gpus):
        at = (gpus == gpu) & np.isfinite(step)
        lo[at], hi[at] = U.step_interval(step[at], log_quantiles(error_basis(gpu, moe, stack)), confidence)
    out["step_lo_s"], out["step_hi_s"] = lo, hi
    return out


def with_job_risk(cfg, rows: pd.DataFrame) -> pd.DataFrame:
    """``with_risk`` at the composed job's confidence, deadline and start-up, for its model."""
    return with_risk(rows, cfg.job.confidence, 86400.0 * float(cfg.job.deadline_days), cfg.cluster.init_s,
                     moe=cfg.model.n_experts > 1, stack=cfg.training.stack)


def p_cheaper(cost_a: float, gpu_a: str, cost_b: float, gpu_b: str, moe: bool = False,
              stack: str = "none") -> float:
    """P(a's true cost < b's) when each predicted cost is off by its GPU type's model error,
    independently (a conservative reading: errors common to both cancel in reality). Costs
    scale with the step time; over the equiprobable multipliers, ties count half."""
    ka = cost_a * U.error_multipliers(log_quantiles(error_basis(gpu_a, moe, stack)))
    kb = cost_b * U.error_multipliers(log_quantiles(error_basis(gpu_b, moe, stack)))
    diff = ka[:, None] - kb[None, :]
    return float(np.mean((diff < 0) + 0.5 * (diff == 0)))
