"""How sure a JCT is: the model's own step-time error combined with the randomness of failures.

The model error is the distribution of log(measured / predicted) step time that ``calibrate``
measures on runs it was not fitted to (leave-one-source-out for GPU types with measured rows,
leave-one-die-out for GPU types known from their specs, the unfitted MoE runs for MoE models;
conf/calibration.yaml, ``model_error``), kept as quantiles at ``LEVELS``. It scales the failure-free solve time
T_s = steps x step; the failure model (``job.failure_time``) then spreads the wall time around
the scaled T_s with the configuration's checkpoint interval, write stall, restart cost and
MTBF. The JCT law is the mixture over equiprobable error multipliers k_j:

    P(JCT <= t) = 1/n sum_j P(init + W(k_j T_s) <= t).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import failure_time as F

# Levels of the stored log-error quantiles; the 20 equiprobable nodes' midpoints
# (j + 1/2) / 20 run from 0.025 to 0.975, so nothing is extrapolated.
LEVELS = (0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.975)
N_NODES = 20
_BISECT_STEPS = 60


def quantiles_of(log_ratios, weights=None, levels=LEVELS) -> list[float]:
    """The stored form of an error distribution: quantiles at ``levels`` of log(measured /
    predicted), each row weighing ``weights`` (calibrate's: every source the same): each sorted
    row at the midpoint of its cumulative weight, linear in between (with equal weights,
    Hyndman & Fan 1996, type 5)."""
    x = np.asarray(log_ratios, float)
    w = np.ones_like(x) if weights is None else np.asarray(weights, float)
    keep = np.isfinite(x) & (w > 0)
    if keep.sum() < 2:
        raise ValueError(f"{keep.sum()} finite log ratios: too few for an error distribution")
    order = np.argsort(x[keep])
    x, w = x[keep][order], w[keep][order]
    mid = (np.cumsum(w) - 0.5 * w) / w.sum()
    return [float(v) for v in np.interp(levels, mid, x)]


def central(log_quantiles, confidence) -> tuple[float, float]:
    """(lo, hi) log ratios of the central ``confidence`` interval, linear between ``LEVELS``."""
    lo, hi = np.interp([(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0], LEVELS, np.asarray(log_quantiles, float))
    return float(lo), float(hi)


def coverage(log_ratios, log_quantiles, confidence, weights=None) -> float:
    """Weighted share of ``log_ratios`` inside the central ``confidence`` interval of an error
    distribution stored as ``log_quantiles``."""
    x = np.asarray(log_ratios, float)
    w = np.ones_like(x) if weights is None else np.asarray(weights, float)
    lo, hi = central(log_quantiles, confidence)
    keep = np.isfinite(x)
    return float(np.sum(w[keep] * ((x[keep] >= lo) & (x[keep] <= hi))) / np.sum(w[keep]))


def error_multipliers(log_quantiles) -> np.ndarray:
    """(N_NODES,) equiprobable step-time multipliers measured / predicted: the quantile
    function, linear between ``LEVELS``, at the midpoints (j + 1/2) / N_NODES."""
    mid = (np.arange(N_NODES) + 0.5) / N_NODES
    return np.exp(np.interp(mid, LEVELS, np.asarray(log_quantiles, float)))


def step_interval(step_s, log_quantiles, confidence):
    """Central interval (lo, hi) of the measured step time at ``confidence`` (0 < c < 1)."""
    lo, hi = central(log_quantiles, confidence)
    return step_s * np.exp(lo), step_s * np.exp(hi)


def jct_cdf(t_s, solve_s, tau_s, ckpt_s, restart_s, mtbf_s, init_s, multipliers):
    """P(JCT <= t_s): the failure law of each scaled solve time, averaged over the model-error
    multipliers (``multipliers``: (n,) array, last axis)."""
    k = jnp.asarray(multipliers)
    args = [jnp.asarray(a)[..., None] for a in (t_s, solve_s, tau_s, ckpt_s, restart_s, mtbf_s, init_s)]
    t, solve, tau, ckpt, restart, mtbf, init, k = jnp.broadcast_arrays(*args, k)
    return jnp.mean(F.wall_time_cdf(t - init, solve * k, tau, ckpt, restart, mtbf), axis=-1)


def jct_quantile(q, solve_s, tau_s, ckpt_s, restart_s, mtbf_s, init_s, multipliers):
    """The JCT (s) with P(JCT <= t) = q: bisection of ``jct_cdf`` between the failure-free
    time at the smallest multiplier and the failure law's 1 - 1e-9 quantile at the largest."""
    k = jnp.asarray(multipliers)
    q, solve_s, tau_s, ckpt_s, restart_s, mtbf_s, init_s = jnp.broadcast_arrays(
        *(jnp.asarray(a, float) for a in (q, solve_s, tau_s, ckpt_s, restart_s, mtbf_s, init_s)))
    lo = init_s + solve_s * jnp.min(k) * (1.0 + ckpt_s / tau_s)
    hi = init_s + F.wall_time_quantile(1.0 - 1e-9, solve_s * jnp.max(k), tau_s, ckpt_s, restart_s, mtbf_s)

    def step(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        below = jct_cdf(mid, solve_s, tau_s, ckpt_s, restart_s, mtbf_s, init_s, k) < q
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    lo, hi = jax.lax.fori_loop(0, _BISECT_STEPS, step, (lo, hi))
    return 0.5 * (lo + hi)
