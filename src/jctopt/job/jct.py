"""The job-completion-time model for one configuration, and its batched form.

``estimate(cfg)`` is a pure function of a :class:`Config` of scalars; ``estimate_batch`` is
``jit(vmap(estimate))`` over a :class:`Config` of ``(n_cfg,)`` arrays. Infeasible
configurations are masked (``feasible == False``, ``reason != 0``, times = +inf); their
intermediate values are computed on safe stand-ins so gradients stay finite everywhere.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..model import compute as C
from ..model import experts as E
from ..model import flops as Fl
from ..model import pipeline as P
from ..model import power as Pw
from ..model import schedules as S
from ..model.step import StepParts, step
from ..model.types import Config
from .timeline import job_time

STEP_PARTS = StepParts._fields  # the parts of Estimate.step_s, in the order they are summed


class Reason(enum.IntEnum):
    """Why a configuration is masked (first failing check wins)."""

    OK = 0
    LAYOUT = 1  # GPUs, heads, layers, batch or experts do not divide
    PRECISION_UNSUPPORTED = 2  # fp8, MXFP8 or fp4 asked of a GPU without such tensor cores
    MEMORY = 3  # does not fit in HBM
    FAILURES = 4  # cluster fails faster than it can checkpoint: no progress


# The fields of an Estimate, s unless named otherwise; the step time's parts are StepParts'.
ESTIMATE_FIELDS = (
    "feasible", "reason",  # Reason code
    "dp", "n_micro",  # micro-batches per step per pipeline (gradient accumulation)
    *STEP_PARTS, "step_s",  # the parts sum to step_s
    "dp_comm_raw_s",  # the gradient sync before overlap
    # memory, bytes per GPU
    "mem_weights", "mem_grads", "mem_optimizer", "mem_activations", "mem_total", "mem_capacity",
    "mem_host",  # offloaded activations in host memory (model.offload)
    # whole job
    "params", "model_flops_per_step", "hardware_flops_per_step", "steps",
    "theoretical_s",  # compute only: no communication, no bubble, no failures
    "train_s",  # steps x step time + start-up, no failures
    "ckpt_write_s",  # training stall per checkpoint (delta)
    "ckpt_interval_s",  # compute time between checkpoints (tau)
    "young_interval_s", "daly_interval_s", "mtbf_s", "restart_s", "n_checkpoints", "n_failures",
    "jct_s",  # expected wall-clock, failures and lost work included
    "efficiency",  # theoretical_s / train_s
    "mfu",
    "gamma",  # raw communication / compute
    "comm_share",  # exposed communication / step
    "gpu_hours", "cost_usd", "energy_kwh", "energy_usd",
)
Estimate = NamedTuple("Estimate", [(name, jax.Array) for name in ESTIMATE_FIELDS])
Estimate.__doc__ = "Expected job completion time and its breakdown (``estimate``); masked rows hold inf."


def unmasked_step(est: "Estimate"):
    """Step time (s) before feasibility masking: the sum of ``STEP_PARTS``, which validation
    needs even where the configuration is masked (e.g. out of memory)."""
    return sum(getattr(est, k) for k in STEP_PARTS)


def _is_int(x):
    return jnp.abs(x - jnp.round(x)) < 1e-6



def layout_checks(cfg: Config, relaxed: bool = False):
    """(ok, dp, n_micro). ``relaxed``: GPU count and batch may be fractional (for gradient
    search over a continuous relaxation); only dp >= 1 and n_micro >= 1 are required."""
    m, lay, t = cfg.model, cfg.layout, cfg.train
    dp = lay.n_gpus / (lay.tp * lay.pp * lay.cp)
    n_micro = t.global_batch / (dp * t.micro_batch)
    if relaxed:
        return (dp >= 1.0) & (n_micro >= 1.0), dp, n_micro
    ok = (_is_int(dp) & (dp >= 1.0) & _is_int(n_micro) & (n_micro >= 1.0)
          & _is_int(m.n_heads / lay.tp) & P.fits(m.n_layers, lay.pp, lay.vpp)
          & ((m.mamba_layers == 0) | _is_int(m.mamba_groups / lay.tp))
          & _is_int(t.seq_len / lay.cp) & _is_int(m.n_experts / lay.ep) & _is_int(lay.tp / lay.etp)
          & _is_int(E.expert_data_parallel(lay, dp))
          & ((lay.vpp == 1.0) | (lay.pp > 1.0)) & S.valid(lay.schedule, lay.pp, lay.vpp)
          & S.enough_micro_batches(lay.schedule, lay.pp, n_micro)
          & ((lay.zero_shard < 1.0) | _is_int(dp * lay.cp / jnp.maximum(lay.zero_shard, 1.0))))  # N-rank groups tile dp x cp
    return ok, dp, n_micro


def effective_gpu(cfg: Config):
    """(cfg, precision_ok): stand-in peaks where the GPU lacks the precision asked (masked rows
    stay finite), the kernel efficiencies as the stack reaches them (``kernel_eff``: its share of
    the catalog's, at most 1 where the catalog's is) and the GEMM efficiencies slowed by a power limit below TDP
    (model.power); the peaks, and so MFU's denominator, stay the spec's."""
    g, t, c = cfg.gpu, cfg.train, cfg.cluster
    precision_ok = (C.dense_peak_tflops(g, t) > 0) & ((t.mxfp8 <= 0) | (g.mxfp8_gemm_ratio > 0))
    g = g._replace(peak_fp8_tflops=jnp.where(precision_ok, g.peak_fp8_tflops, g.peak_bf16_tflops),
                   peak_fp4_tflops=jnp.where(precision_ok, g.peak_fp4_tflops, g.peak_bf16_tflops))
    kernel = {k: jnp.minimum(t.kernel_eff * getattr(g, k), jnp.maximum(getattr(g, k), 1.0))
              for k in ("matmul_eff", "fp8_matmul_eff", "attn_eff", "fused_attn_eff", "mem_eff", "ssd_eff", "ssd_bwd_eff")}
    g = g._replace(**kernel)
    clock = Pw.clock_ratio(c.gpu_power_limit_w, g.tdp_w)
    g = g._replace(matmul_eff=clock * g.matmul_eff, fp8_matmul_eff=clock * g.fp8_matmul_eff)
    return cfg._replace(gpu=g), precision_ok


def estimate(cfg: Config, relaxed: bool = False) -> Estimate:
    """Expected job completion time and its breakdown for one configuration.

    ``relaxed=True`` treats the GPU count, dp and the number of micro-batches as continuous
    (no divisibility checks), for gradient search; round the result to a valid layout."""
    layout_ok, dp_raw, n_micro_raw = layout_checks(cfg, relaxed)
    # Safe stand-ins keep every intermediate finite on masked rows (double-where trick).
    dp = jnp.where(layout_ok, dp_raw, 1.0)
    n_micro = jnp.where(layout_ok, n_micro_raw, 1.0)
    cfg, precision_ok = effective_gpu(cfg)
    m, g, c, lay, t = cfg.model, cfg.gpu, cfg.cluster, cfg.layout, cfg.train
    st = step(cfg, dp, n_micro)
    mem = st.mem
    run = job_time(cfg, st.step_s, st.compute_step_s, st.owned_params)

    mem_ok = (mem.total <= 1e9 * g.hbm_gb) & (mem.host <= 1e9 * g.host_mem_gb)
    reason = jnp.where(~layout_ok, Reason.LAYOUT,
                       jnp.where(~precision_ok, Reason.PRECISION_UNSUPPORTED,
                                 jnp.where(~mem_ok, Reason.MEMORY,
                                           jnp.where(~run.progress_ok, Reason.FAILURES, Reason.OK))))
    feasible = reason == Reason.OK

    def masked(x):
        return jnp.where(feasible, x, jnp.inf)

    model_flops = Fl.model_flops_per_step(m, t)
    hours = lay.n_gpus * run.jct_s / 3600.0
    energy = hours * Pw.board_power_w(c.gpu_power_limit_w, g.tdp_w) * c.power_frac * c.pue / 1000.0
    peak = 1e12 * C.dense_peak_tflops(g, t)
    return Estimate(
        feasible=feasible, reason=reason.astype(jnp.int32), dp=dp_raw, n_micro=n_micro_raw,
        **st.parts._asdict(), step_s=masked(st.step_s), dp_comm_raw_s=st.dp_comm_raw_s,
        mem_weights=mem.weights, mem_grads=mem.grads, mem_optimizer=mem.optimizer,
        mem_activations=mem.activations, mem_total=mem.total, mem_capacity=1e9 * g.hbm_gb,
        mem_host=mem.host, params=run.params, model_flops_per_step=model_flops,
        hardware_flops_per_step=Fl.hardware_flops_per_step(m, t), steps=run.steps,
        theoretical_s=run.theoretical_s, train_s=masked(run.train_s), ckpt_write_s=run.ckpt_write_s,
        ckpt_interval_s=run.ckpt_interval_s, young_interval_s=run.young_interval_s,
        daly_interval_s=run.daly_interval_s, mtbf_s=run.mtbf_s, restart_s=run.restart_s,
        n_checkpoints=run.solve_s / run.ckpt_interval_s, n_failures=masked(run.wall_s / run.mtbf_s),
        jct_s=masked(run.jct_s), efficiency=jnp.where(feasible, run.theoretical_s / run.train_s, 0.0),
        mfu=jnp.where(feasible, model_flops / (st.step_s * lay.n_gpus * peak), 0.0),
        gamma=st.comm_raw_s / st.compute_step_s, comm_share=jnp.where(feasible, st.comm_exposed_s / st.step_s, 0.0),
        gpu_hours=masked(hours), cost_usd=masked(hours * g.price_per_gpu_hour),
        energy_kwh=masked(energy), energy_usd=masked(energy * c.energy_price_kwh),
    )


estimate_batch = jax.jit(jax.vmap(estimate))
