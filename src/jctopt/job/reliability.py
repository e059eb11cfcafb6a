"""Checkpoints, failures and the expected wall-clock time including lost work. Times in s."""

from __future__ import annotations

import jax.numpy as jnp

_HOUR = 3600.0

# Past this many MTBFs per checkpoint segment the job makes essentially no progress
# (e^40 ~ 2e17 restarts per segment); such configurations are masked, not priced.
MAX_EXPONENT = 40.0


def cluster_mtbf(n_gpus, n_nodes, n_nics, n_switches, mtbf_gpu_h, mtbf_node_h, mtbf_nic_h,
                 mtbf_switch_h):
    """Mean time between job interruptions (s): independent exponential components, so the
    failure rates add (e.g. Kokolis et al. 2024, MTTF = 1 / (N_nodes r_f))."""
    rate_per_h = (n_gpus / mtbf_gpu_h + n_nodes / mtbf_node_h + n_nics / mtbf_nic_h
                  + n_switches / mtbf_switch_h)
    return _HOUR / rate_per_h


def young_interval(ckpt_s, mtbf_s):
    """Young 1974: tau = sqrt(2 delta M)."""
    return jnp.sqrt(2.0 * ckpt_s * mtbf_s)


def daly_interval(ckpt_s, mtbf_s):
    """Daly 2006, higher-order optimum:
    tau = sqrt(2 delta M) [1 + 1/3 sqrt(delta/(2M)) + 1/9 delta/(2M)] - delta for delta < 2M,
    else M."""
    r = ckpt_s / (2.0 * mtbf_s)
    r_safe = jnp.minimum(r, 1.0)
    tau = young_interval(ckpt_s, mtbf_s) * (1.0 + jnp.sqrt(r_safe) / 3.0 + r_safe / 9.0) - ckpt_s
    return jnp.where(r < 1.0, tau, mtbf_s)


def recovery_time(t_drain, t_provision, t_download, t_reinit):
    """Restart cost R after a failure, excluding lost work (which the expected-time model
    below accounts for: on average about half an interval is recomputed)."""
    return t_drain + t_provision + t_download + t_reinit


def expected_wall_time(solve_s, tau_s, ckpt_s, restart_s, mtbf_s):
    """Daly 2006 (FGCS 22:303), exponential failures, expected wall-clock time:
    T_w = M e^{R/M} (e^{(tau + delta)/M} - 1) T_s / tau.

    Returns (T_w, ok): ok is False where the exponent exceeds MAX_EXPONENT (the job cannot
    make progress); T_w is then computed on a clipped exponent and must be masked.
    """
    x = (tau_s + ckpt_s) / mtbf_s
    y = restart_s / mtbf_s
    ok = (x + y) < MAX_EXPONENT
    x_safe = jnp.minimum(x, MAX_EXPONENT)
    y_safe = jnp.minimum(y, MAX_EXPONENT)
    wall = mtbf_s * jnp.exp(y_safe) * jnp.expm1(x_safe) * solve_s / tau_s
    return wall, ok


def first_order_overhead(n_checkpoints, ckpt_s, n_failures, per_failure_s):
    """Seed 001's first-order bookkeeping: checkpoint time + failures x cost per failure."""
    return n_checkpoints * ckpt_s + n_failures * per_failure_s
