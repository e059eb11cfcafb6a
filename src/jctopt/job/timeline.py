"""The whole job on the wall clock: steps, checkpoints, failures and restarts (seed 001;
Young 1974, Daly 2006 via ``job.reliability``)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..model import compute as C
from ..model import flops as Fl
from ..model.types import Config
from . import reliability as R

Array = jax.Array

# Checkpoint state: bf16 weights + fp32 master weights + Adam m and v = 14 bytes/parameter
# (ZeRO, Rajbhandari et al. 2020; BLOOM-176B: 2.3 TB, reliability.csv).
CKPT_BYTES_PER_PARAM = 14.0


class JobTime(NamedTuple):
    """Seconds unless named otherwise."""

    params: Array
    steps: Array
    train_s: Array  # steps x step time + start-up, no failures
    theoretical_s: Array  # compute only: no communication, no bubble, no failures
    ckpt_write_s: Array  # training stall per checkpoint (delta)
    ckpt_interval_s: Array  # compute time between checkpoints (tau)
    young_interval_s: Array
    daly_interval_s: Array
    mtbf_s: Array
    restart_s: Array
    solve_s: Array  # steps x step time
    wall_s: Array  # expected wall time of the solve, failures and lost work included
    jct_s: Array  # wall_s + start-up
    progress_ok: Array  # the cluster does not fail faster than it checkpoints


def cluster_mtbf_s(cfg: Config):
    """The cluster's MTBF, s: GPUs, nodes, NICs and the switches of a two-tier fat tree (leaves
    with half their ports down, half as many spines)."""
    g, f, c, lay = cfg.gpu, cfg.fabric, cfg.cluster, cfg.layout
    n_nodes = lay.n_gpus / c.gpus_per_node
    n_nics = n_nodes * c.nics_per_node
    n_switches = jnp.where(n_nodes > 1.0, 1.5 * n_nics / (c.switch_radix / 2.0), 0.0)
    return R.cluster_mtbf(lay.n_gpus, n_nodes, n_nics, n_switches, g.mtbf_gpu_h, c.mtbf_node_h,
                          f.mtbf_nic_h, f.mtbf_switch_h)


def job_time(cfg: Config, step_s, compute_step_s, owned_params) -> JobTime:
    """Expected wall time of the job from its step time (s) and the parameters whose state this
    GPU writes at a checkpoint."""
    m, g, c, t, job = cfg.model, cfg.gpu, cfg.cluster, cfg.train, cfg.job
    params = Fl.total_params(m, t.seq_len)
    steps = job.tokens / (t.global_batch * t.seq_len)
    mtbf = cluster_mtbf_s(cfg)
    ckpt_bytes = CKPT_BYTES_PER_PARAM * params
    t_sync = ckpt_bytes / (1e9 * c.storage_write_gbps)
    # Async (seed 001): stall = max(T_copy of this GPU's shard through HBM, T_flush to staging).
    t_copy = CKPT_BYTES_PER_PARAM * owned_params / C.hbm_rate(g)
    t_flush = ckpt_bytes / (1e9 * c.staging_gbps)
    delta = jnp.where(job.ckpt_async > 0, jnp.maximum(t_copy, t_flush), t_sync)
    restart = R.recovery_time(c.t_drain_s, c.t_provision_s, ckpt_bytes / (1e9 * c.storage_read_gbps),
                              c.t_reinit_s)
    daly = R.daly_interval(delta, mtbf)
    tau = jnp.where(job.ckpt_auto > 0, daly, job.ckpt_interval_s)
    solve = steps * step_s
    wall, progress_ok = R.expected_wall_time(solve, tau, delta, restart, mtbf)
    return JobTime(
        params=params, steps=steps, train_s=steps * step_s + c.init_s, theoretical_s=steps * compute_step_s,
        ckpt_write_s=delta, ckpt_interval_s=tau, young_interval_s=R.young_interval(delta, mtbf),
        daly_interval_s=daly, mtbf_s=mtbf, restart_s=restart, solve_s=solve, wall_s=wall,
        jct_s=wall + c.init_s, progress_ok=progress_ok)
