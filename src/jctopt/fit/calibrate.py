"""Fit a few global efficiency parameters to measured step times by gradient descent.

Per GPU die: large-GEMM efficiency (bf16 and fp8), the GEMM dimension at which efficiency
halves, the fused-attention efficiency; per GPU type: the streaming-HBM efficiency (one die
ships with different memory: A100 40 GB HBM2 / 80 GB HBM2e, H100 HBM3 / H200 HBM3e);
globally: the two overlap efficiencies (TRAINING_PARAMS). Not one knob per row. The loss is
a robust (pseudo-Huber) penalty on the log error of the step time, each source weighted
equally (MPT is three quarters of the rows), plus a weak pull towards the spec values so that
a parameter the data cannot see stays where the specs put it. Each parameter lives in an unconstrained space (logit for fractions, log
for the dimension) as spec value + an offset shared by every GPU + a deviation per die (per
GPU type for ``mem_eff``): what the software stacks lose against the specs on every GPU is
learned once and carries over to GPU types with no rows (``transfer``), and a GPU type
without rows whose die has rows (H200) takes that die's deviations. Fitted with BFGS through
the differentiable model (``jax.scipy.optimize.minimize``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.optimize import minimize

from ..job.jct import estimate, unmasked_step
from ..model.types import Config

GPU_PARAMS = ("matmul_eff", "fp8_matmul_eff", "matmul_half_dim", "attn_eff", "mem_eff")
DIE_PARAMS = ("matmul_eff", "fp8_matmul_eff", "matmul_half_dim", "attn_eff")  # the chip's; mem_eff is the SKU's
# Overlap: how much of the compute window hides the data-parallel gradient sync (DDP buckets,
# Megatron's overlapped reduce) and, apart, ZeRO-3's collectives (gathers, reduce-scatters,
# HYBRID_SHARD's all-reduce), whose gathers sit on the forward's critical path (each layer
# waits for its weights) where a gradient bucket waits for nothing.
TRAINING_PARAMS = ("overlap_eta", "zero3_overlap_eta")
LOG_PARAMS = {"matmul_half_dim"}  # positive, unbounded; the rest are fractions in (0, 1)
# Pull towards the spec values, on every unconstrained coordinate (shared offsets, per-die
# and per-GPU deviations, eta). Chosen on runs_dev.csv (fitted / leave-one-source-out median,
# squared loss, 2026-11-21): 3e-4: 4.1 / 5.3 %; 1e-3: 4.1 / 5.1 %; 3e-3: 4.0 / 5.2 %; 1e-2: 4.6 / 6.3 %.
PRIOR_WEIGHT = 1e-3
# The log error enters as a pseudo-Huber penalty: quadratic below HUBER_DELTA (10 %), linear
# beyond, so that rows whose error comes from an effect the model lacks (e.g. Narayanan 2021
# Table 2's ZeRO-3 rows, 15-50 % too fast) do not drag every GPU's efficiencies towards them.
# Chosen on runs_dev.csv (fitted median / p90, squared loss 4.0 / 13.8 %): 0.1: 3.9 / 12.8 %;
# 0.05: 3.8 / 12.9 %, with the PyTorch FSDP blog's median over 10 %.
HUBER_DELTA = 0.1


def pseudo_huber(x, delta):
    """2 delta^2 (sqrt(1 + (x / delta)^2) - 1): x^2 for |x| << delta (the squared loss's scale,
    so PRIOR_WEIGHT keeps its meaning), ~2 delta |x| beyond."""
    return 2.0 * delta**2 * (jnp.sqrt(1.0 + (x / delta) ** 2) - 1.0)


class Problem(NamedTuple):
    """Rows to fit: a batched Config, which GPU type each row runs on, its measured step time,
    and its weight (1 / rows of its source / number of sources); which die each GPU type is."""

    batch: Config  # leaves (n_rows,)
    gpu_index: np.ndarray  # (n_rows,) int, into gpus
    gpus: tuple[str, ...]
    measured_s: np.ndarray  # (n_rows,)
    weight: np.ndarray  # (n_rows,), sums to 1
    dies: tuple[str, ...]  # (n_gpus,) the die of each of gpus


def _fwd(name, x):
    return jnp.log(x) if name in LOG_PARAMS else jnp.log(x) - jnp.log1p(-x)


def _inv(name, z):
    return jnp.exp(z) if name in LOG_PARAMS else jax.nn.sigmoid(z)


def _groups(p: str, dies: tuple[str, ...]) -> np.ndarray:
    """(n_gpus,) index of the deviation each GPU type uses for parameter ``p``."""
    if p in DIE_PARAMS:
        names = sorted(set(dies))
        return np.array([names.index(d) for d in dies])
    return np.arange(len(dies))


def n_unknowns(dies: tuple[str, ...]) -> int:
    """Shared offsets, one deviation per die (per GPU type for mem_eff), the overlap etas."""
    return len(GPU_PARAMS) + sum(_groups(p, dies).max() + 1 for p in GPU_PARAMS) + len(TRAINING_PARAMS)


def split(z: jnp.ndarray, dies: tuple[str, ...]):
    """Unconstrained vector -> (shared offsets (n_params,), {param: deviation per GPU type (n_gpus,)},
    offsets of the TRAINING_PARAMS (n_training,))."""
    k = len(GPU_PARAMS)
    dev, start = {}, k
    for p in GPU_PARAMS:
        groups = _groups(p, dies)
        dev[p] = z[start + groups]
        start += int(groups.max()) + 1
    return z[:k], dev, z[start:]


def values_from(z: jnp.ndarray, prior: dict, dies: tuple[str, ...]) -> dict:
    """{"gpu": {param: (n_gpus,)}, "training": {param: scalar}}: the prior (spec) values moved by the shared
    offset and each GPU's (die's) deviation, in the unconstrained space."""
    shared, dev, eta = split(z, dies)
    gpu = {p: _inv(p, _fwd(p, jnp.asarray(prior["gpu"][p])) + shared[i] + dev[p]) for i, p in enumerate(GPU_PARAMS)}
    training = {p: _inv(p, _fwd(p, jnp.asarray(prior["training"][p])) + eta[i]) for i, p in enumerate(TRAINING_PARAMS)}
    return {"gpu": gpu, "training": training}


def transfer(offsets: dict, spec: dict) -> dict:
    """Values for a GPU without rows: its spec values moved by offsets ``{param: offset}`` in
    the unconstrained space (``Fit.offsets_for``). A spec 0 (no fp8 tensor cores) stays 0."""
    return {p: (float(_inv(p, _fwd(p, jnp.asarray(v)) + offsets[p])) if v > 0 else 0.0)
            for p, v in spec.items() if p in offsets}


def catalog_values(problem: Problem) -> dict:
    """The values the rows were built with (the catalog), one per GPU type."""
    first = [int(np.flatnonzero(problem.gpu_index == k)[0]) for k in range(len(problem.gpus))]
    gpu = {p: np.asarray(getattr(problem.batch.gpu, p))[first] for p in GPU_PARAMS}
    training = {p: float(np.asarray(getattr(problem.batch.train, p))[0]) for p in TRAINING_PARAMS}
    return _fittable({"gpu": gpu, "training": training})


def prior_from(spec: dict, gpus: tuple[str, ...]) -> dict:
    """The prior of a fit over ``gpus`` from spec values ``{"gpu": {name: {param: v}},
    "training": {"overlap_eta": v, "zero3_overlap_eta": v}}``."""
    gpu = {p: np.array([float(spec["gpu"][name][p]) for name in gpus]) for p in GPU_PARAMS}
    return _fittable({"gpu": gpu, "training": {p: float(spec["training"][p]) for p in TRAINING_PARAMS}})


def _fittable(prior: dict) -> dict:
    # fp8_matmul_eff is 0 in the catalog of GPUs without fp8; keep it inside (0, 1) for the logit.
    prior["gpu"]["fp8_matmul_eff"] = np.clip(prior["gpu"]["fp8_matmul_eff"], 0.05, 0.95)
    return prior


def step_times(values: dict, problem: Problem) -> jnp.ndarray:
    """Predicted step time (s) of every row, before feasibility masking."""
    b, gi = problem.batch, problem.gpu_index
    gpu = b.gpu._replace(**{p: values["gpu"][p][gi] for p in GPU_PARAMS})
    train = b.train._replace(**{p: jnp.broadcast_to(v, getattr(b.train, p).shape) for p, v in values["training"].items()})
    est = jax.vmap(estimate)(b._replace(gpu=gpu, train=train))
    return unmasked_step(est)


def loss(z: jnp.ndarray, problem: Problem, prior: dict, prior_weight: float = PRIOR_WEIGHT) -> jnp.ndarray:
    pred = step_times(values_from(z, prior, problem.dies), problem)
    err = jnp.log(pred) - jnp.log(problem.measured_s)
    return jnp.sum(problem.weight * pseudo_huber(err, HUBER_DELTA)) + prior_weight * jnp.mean(z**2)


class Fit(NamedTuple):
    values: dict  # {"gpu": {param: (n_gpus,)}, "training": {param: float}}
    shared: dict  # {param: offset in the unconstrained space}, every GPU's
    die_deviations: dict  # {die: {param: deviation}} for the dies with rows (DIE_PARAMS)
    loss: float

    def offsets_for(self, die: str) -> dict:
        """Offsets (``transfer``) for a GPU type without rows: the shared ones, plus its die's
        deviations where the die has rows."""
        own = self.die_deviations.get(die, {})
        return {p: v + own.get(p, 0.0) for p, v in self.shared.items()}


def fit(problem: Problem, prior: dict, max_iter: int = 200, prior_weight: float = PRIOR_WEIGHT,
        max_restarts: int = 5) -> Fit:
    """Fitted values, starting from and pulled towards ``prior`` (the spec values).

    The loss has kinks (roofline maxima, the fastest collective algorithm), where BFGS's line
    search can fail long before the optimum (jax status 3 after 32 iterations on runs_dev.csv,
    median error 7.3 %); restarted from there with a fresh Hessian it converges (4.1 %)."""
    prior = jax.tree.map(jnp.asarray, prior)
    objective = jax.jit(lambda z: loss(z, problem, prior, prior_weight))
    res = minimize(objective, jnp.zeros(n_unknowns(problem.dies)), method="BFGS", options={"maxiter": max_iter})
    for _ in range(max_restarts):
        if int(res.status) == 0:  # converged
            break
        res = minimize(objective, res.x, method="BFGS", options={"maxiter": max_iter})
    shared, dev, _ = split(res.x, problem.dies)
    dies = {d: {p: float(dev[p][problem.dies.index(d)]) for p in DIE_PARAMS} for d in problem.dies}
    return Fit(jax.tree.map(np.asarray, values_from(res.x, prior, problem.dies)),
               {p: float(shared[i]) for i, p in enumerate(GPU_PARAMS)}, dies, float(res.fun))


def subset(problem: Problem, rows: np.ndarray) -> Problem:
    """The problem restricted to ``rows``, with weights renormalised per source."""
    return problem._replace(batch=jax.tree.map(lambda x: x[rows], problem.batch), gpu_index=problem.gpu_index[rows],
                            measured_s=problem.measured_s[rows], weight=problem.weight[rows] / problem.weight[rows].sum())


def source_weights(sources: list[str], configurations: list | None = None) -> np.ndarray:
    """Each source weighs the same; rows share their source's weight. With ``configurations``
    (one hashable per row), a configuration that several sources measured (a benchmark table
    repeated across container releases) counts once: its rows split one row's weight."""
    s = np.asarray(sources)
    names, counts = np.unique(s, return_counts=True)
    per = dict(zip(names, 1.0 / (counts * len(names))))
    weight = np.array([per[x] for x in s])
    if configurations is not None:
        copies = {}
        for c in configurations:
            copies[c] = copies.get(c, 0) + 1
        weight = weight / np.array([copies[c] for c in configurations])
    return weight / weight.sum()
