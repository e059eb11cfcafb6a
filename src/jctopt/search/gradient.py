"""Gradient search on the continuous knobs of one configuration.

The model is differentiable in every continuous input, so thresholds and optima are found by
Newton steps on ``jax.grad`` in log space (the knobs are positive and span decades), kept
inside a shrinking bracket so that a kink (a change of collective algorithm or placement)
never throws the iteration out. Discrete knobs (the GPU count) are relaxed to reals through
``estimate(..., relaxed=True)`` and the answer is rounded to valid layouts afterwards.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..job.jct import estimate
from ..model.types import Config

# Inputs whose value selects a behaviour rather than measures a quantity: no elasticity.
DISCRETE = {
    "model": {"glu", "n_experts", "top_k", "tied_embeddings", "learned_positions", "n_layers", "n_heads",
              "n_kv_heads", "n_shared_experts", "n_dense_layers", "q_lora_rank", "kv_lora_rank", "mtp_layers"},
    "gpu": {"nvls", "nvlink_domain"},
    "fabric": {"rdma", "sharp"},
    "cluster": {"gpus_per_node", "nics_per_node", "rail_optimized", "switch_radix"},
    "layout": {"n_gpus", "tp", "pp", "cp", "ep", "vpp", "etp", "schedule", "zero_shard"},
    "train": {"recompute", "zero_stage", "seq_parallel", "flash_attention", "fused_attention", "fp8_attention", "low_precision", "micro_batch", "global_batch"},
    "job": {"ckpt_auto", "ckpt_async"},
}
HYDRA_GROUP = {"train": "training"}  # pytree group -> config group, for the names users type


def _bracketed_newton(g: Callable[[float], tuple[float, float]], lo: float, hi: float, tol: float = 1e-10,
                      max_iter: int = 200) -> float:
    """Root of a function of u that is increasing across [lo, hi] (g returns value and slope):
    Newton steps, bisection whenever a step leaves the bracket."""
    g_lo, _ = g(lo)
    g_hi, _ = g(hi)
    if not (g_lo <= 0.0 <= g_hi):
        raise ValueError(f"no sign change in [{lo:.4g}, {hi:.4g}]: g = {g_lo:.4g}, {g_hi:.4g}")
    u = 0.5 * (lo + hi)
    for _ in range(max_iter):
        val, slope = g(u)
        if val > 0:
            hi = u
        else:
            lo = u
        step = u - val / slope if slope > 0 and np.isfinite(slope) else None
        u_next = step if step is not None and lo < step < hi else 0.5 * (lo + hi)
        if abs(u_next - u) < tol or hi - lo < tol:
            return u_next
        u = u_next
    return u


def solve_log(f: Callable, target: float, lo: float, hi: float) -> float:
    """x in [lo, hi] with f(x) = target, f monotone (either direction), by Newton in log x."""
    sign = 1.0 if float(f(hi)) > float(f(lo)) else -1.0
    h = jax.jit(jax.value_and_grad(lambda u: sign * (f(jnp.exp(u)) - target)))
    return math.exp(_bracketed_newton(lambda u: tuple(map(float, h(u))), math.log(lo), math.log(hi)))


def minimize_log(f: Callable, lo: float, hi: float) -> float:
    """Minimiser of a unimodal f on [lo, hi]: root of d f / d log x by Newton on the second
    derivative; an end point when f is monotone on the interval."""
    df = jax.grad(lambda u: f(jnp.exp(u)))
    both = jax.jit(lambda u: (df(u), jax.grad(df)(u)))
    g = lambda u: tuple(map(float, both(u)))  # noqa: E731
    u_lo, u_hi = math.log(lo), math.log(hi)
    if g(u_lo)[0] >= 0:
        return lo
    if g(u_hi)[0] <= 0:
        return hi
    return math.exp(_bracketed_newton(g, u_lo, u_hi))


def with_value(cfg: Config, group: str, field: str, value) -> Config:
    """``cfg`` with ``cfg.<group>.<field>`` set to ``value`` (float64)."""
    part = getattr(cfg, group)
    return cfg._replace(**{group: part._replace(**{field: jnp.asarray(value, dtype=jnp.float64)})})


def optimal_checkpoint_interval(cfg: Config) -> float:
    """Checkpoint interval (s of compute) that minimises the expected JCT (Daly 2006 model)."""
    cfg = with_value(cfg, "job", "ckpt_auto", 0.0)
    est = estimate(cfg)
    delta, mtbf = float(est.ckpt_write_s), float(est.mtbf_s)
    jct = lambda tau: estimate(with_value(cfg, "job", "ckpt_interval_s", tau)).jct_s  # noqa: E731
    return minimize_log(jct, 1e-3 * math.sqrt(delta * mtbf), min(1e3 * math.sqrt(delta * mtbf), 20 * mtbf))


def min_nic_bandwidth(cfg: Config, comm_share: float, lo_gbit: float = 1.0, hi_gbit: float = 1e5) -> float:
    """NIC line rate (Gbit/s) at which exposed communication is ``comm_share`` of the step."""
    share = lambda bw: estimate(with_value(cfg, "fabric", "nic_gbit", bw)).comm_share  # noqa: E731
    return solve_log(share, comm_share, lo_gbit, hi_gbit)


def relaxed_gpu_bounds(cfg: Config, n_max: float) -> tuple[float, float]:
    """GPU counts the relaxation allows: one model replica up to one micro-batch per replica."""
    lay, t = cfg.layout, cfg.train
    replica = float(lay.tp * lay.pp * lay.cp)
    # Nudged inside: exp(log(n)) may round below n, where the relaxation is infeasible.
    return replica * (1 + 1e-9), min(n_max, replica * float(t.global_batch / t.micro_batch)) * (1 - 1e-9)


def _jct_at(cfg: Config, n):
    return estimate(with_value(cfg, "layout", "n_gpus", n), relaxed=True).jct_s


def min_gpus_for_deadline(cfg: Config, deadline_s: float, n_max: float = 1e6) -> float | None:
    """Smallest (real) GPU count, layout otherwise fixed, whose expected JCT meets the deadline;
    None when even the fastest count in range misses it."""
    lo, _ = relaxed_gpu_bounds(cfg, n_max)
    fastest = sync_wall(cfg, n_max)
    if float(_jct_at(cfg, fastest)) > deadline_s:
        return None
    if float(_jct_at(cfg, lo)) <= deadline_s:
        return lo
    return solve_log(lambda n: _jct_at(cfg, n), deadline_s, lo, fastest)


def sync_wall(cfg: Config, n_max: float = 1e6) -> float:
    """GPU count (real, layout otherwise fixed) that minimises the expected JCT."""
    lo, hi = relaxed_gpu_bounds(cfg, n_max)
    return minimize_log(lambda n: jnp.log(_jct_at(cfg, n)), lo, hi)


def sensitivity(cfg: Config) -> list[dict]:
    """Elasticities of JCT and cost, d ln y / d ln x, for every continuous input x, largest
    first: +0.5 means 1 % more of x gives 0.5 % more JCT."""
    d_jct = jax.grad(lambda c: jnp.log(estimate(c).jct_s))(cfg)
    d_cost = jax.grad(lambda c: jnp.log(estimate(c).cost_usd))(cfg)
    rows = []
    for group in Config._fields:
        values, gj, gc = (getattr(x, group) for x in (cfg, d_jct, d_cost))
        for field in type(values)._fields:
            if field in DISCRETE.get(group, ()):
                continue
            x = float(getattr(values, field))
            if x == 0.0:
                continue
            ej, ec = x * float(getattr(gj, field)), x * float(getattr(gc, field))
            if ej != 0.0 or ec != 0.0:
                rows.append({"input": f"{HYDRA_GROUP.get(group, group)}.{field}", "value": x, "jct_elasticity": ej, "cost_elasticity": ec})
    return sorted(rows, key=lambda r: -abs(r["jct_elasticity"]))


def valid_gpu_counts(cfg: Config) -> np.ndarray:
    """GPU counts for which the layout of ``cfg`` (tp, pp, cp, ep, micro-batch, global batch)
    divides: dp divides global_batch / micro_batch and tp x cp x dp is a multiple of etp x ep."""
    lay, t = cfg.layout, cfg.train
    replica = int(lay.tp * lay.pp * lay.cp)
    per_dp = int(t.global_batch) // int(t.micro_batch)
    experts = int(lay.etp * lay.ep)
    dps = np.array([d for d in range(1, per_dp + 1) if per_dp % d == 0 and (d * int(lay.cp * lay.tp)) % experts == 0])
    return dps * replica


def round_gpus(cfg: Config, n_real: float, choose: str) -> int | None:
    """A valid GPU count near ``n_real``: ``"up"`` the smallest at or above it, ``"best"`` the
    one of the two neighbours with the lower exact JCT."""
    counts = valid_gpu_counts(cfg)
    above = counts[counts >= n_real * (1 - 1e-9)]
    below = counts[counts < n_real * (1 - 1e-9)]
    if choose == "up":
        return int(above[0]) if above.size else None
    candidates = [int(x) for x in (below[-1:].tolist() + above[:1].tolist())]
    jct = [float(estimate(with_value(cfg, "layout", "n_gpus", float(n))).jct_s) for n in candidates]
    return candidates[int(np.argmin(jct))] if candidates else None
