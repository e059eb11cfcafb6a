"""Fit a few global efficiency parameters to measured step times by gradient descent.

Per GPU type: large-GEMM efficiency (bf16 and fp8), the GEMM dimension at which efficiency
halves, the fused-attention efficiency and the streaming-HBM efficiency; globally: the
overlap efficiency eta. Not one knob per row. The loss is the squared log error of the step
time, each source weighted equally (MPT is three quarters of the rows), plus a weak pull
towards the spec values so that a parameter the data cannot see stays where the specs put
it. Each parameter lives in an unconstrained space (logit for fractions, log for the
dimension) as spec value + an offset shared by every GPU + a per-GPU deviation: what the
software stacks lose against the specs on every GPU is learned once and carries over to GPU
types with no rows (``transfer``). Fitted with BFGS through the differentiable model
(``jax.scipy.optimize.minimize``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.optimize import minimize

from ._jct import estimate, unmasked_step
from ._types import Config

GPU_PARAMS = ("matmul_eff", "fp8_matmul_eff", "matmul_half_dim", "attn_eff", "mem_eff")
LOG_PARAMS = {"matmul_half_dim"}  # positive, unbounded; the rest are fractions in (0, 1)
# Pull towards the spec values, on every unconstrained coordinate (shared offsets, per-GPU
# deviations, eta). Chosen on runs_dev.csv (fitted / leave-one-source-out median, 2026-11-21):
# 1e-3: 4.2 / 9.8 %; 3e-3: 4.2 / 10.9 %; 1e-2: 4.8 / 11.1 %; 3e-2: 6.7 / 10.1 %; 1e-1: 8.4 / 12.2 %.
PRIOR_WEIGHT = 1e-3


class Problem(NamedTuple):
    """Rows to fit: a batched Config, which GPU type each row runs on, its measured step time,
    and its weight (1 / rows of its source / number of sources)."""

    batch: Config  # leaves (n_rows,)
    gpu_index: np.ndarray  # (n_rows,) int, into gpus
    gpus: tuple[str, ...]
    measured_s: np.ndarray  # (n_rows,)
    weight: np.ndarray  # (n_rows,), sums to 1


def _fwd(name, x):
    return jnp.log(x) if name in LOG_PARAMS else jnp.log(x) - jnp.log1p(-x)


def _inv(name, z):
    return jnp.exp(z) if name in LOG_PARAMS else jax.nn.sigmoid(z)


def split(z: jnp.ndarray, n_gpus: int):
    """Unconstrained vector -> (shared offsets (n_params,), per-GPU deviations (n_params, n_gpus), eta)."""
    k = len(GPU_PARAMS)
    return z[:k], z[k:k + k * n_gpus].reshape(k, n_gpus), z[-1]


def values_from(z: jnp.ndarray, prior: dict) -> dict:
    """{"gpu": {param: (n_gpus,)}, "overlap_eta": scalar}: the prior (spec) values moved by the shared
    offset and each GPU's deviation, in the unconstrained space."""
    n_gpus = len(prior["gpu"][GPU_PARAMS[0]])
    shared, dev, eta = split(z, n_gpus)
    gpu = {p: _inv(p, _fwd(p, jnp.asarray(prior["gpu"][p])) + shared[i] + dev[i]) for i, p in enumerate(GPU_PARAMS)}
    return {"gpu": gpu, "overlap_eta": _inv("overlap_eta", _fwd("overlap_eta", jnp.asarray(prior["overlap_eta"])) + eta)}


def transfer(shared: dict, spec: dict) -> dict:
    """Values for a GPU without rows: its catalog (spec) values moved by the shared offsets
    ``{param: offset}`` of a fit. A catalog 0 (no fp8 tensor cores) stays 0."""
    return {p: (float(_inv(p, _fwd(p, jnp.asarray(v)) + shared[p])) if v > 0 else 0.0)
            for p, v in spec.items() if p in shared}


def catalog_values(problem: Problem) -> dict:
    """The values the rows were built with (the catalog), one per GPU type."""
    first = [int(np.flatnonzero(problem.gpu_index == k)[0]) for k in range(len(problem.gpus))]
    gpu = {p: np.asarray(getattr(problem.batch.gpu, p))[first] for p in GPU_PARAMS}
    return _fittable({"gpu": gpu, "overlap_eta": float(np.asarray(problem.batch.train.overlap_eta)[0])})


def prior_from(spec: dict, gpus: tuple[str, ...]) -> dict:
    """The prior of a fit over ``gpus`` from spec values ``{"gpu": {name: {param: v}},
    "training": {"overlap_eta": v}}``."""
    gpu = {p: np.array([float(spec["gpu"][name][p]) for name in gpus]) for p in GPU_PARAMS}
    return _fittable({"gpu": gpu, "overlap_eta": float(spec["training"]["overlap_eta"])})


def _fittable(prior: dict) -> dict:
    # fp8_matmul_eff is 0 in the catalog of GPUs without fp8; keep it inside (0, 1) for the logit.
    prior["gpu"]["fp8_matmul_eff"] = np.clip(prior["gpu"]["fp8_matmul_eff"], 0.05, 0.95)
    return prior


def step_times(values: dict, problem: Problem) -> jnp.ndarray:
    """Predicted step time (s) of every row, before feasibility masking."""
    b, gi = problem.batch, problem.gpu_index
    gpu = b.gpu._replace(**{p: values["gpu"][p][gi] for p in GPU_PARAMS})
    train = b.train._replace(overlap_eta=jnp.broadcast_to(values["overlap_eta"], b.train.overlap_eta.shape))
    est = jax.vmap(estimate)(b._replace(gpu=gpu, train=train))
    return unmasked_step(est)


def loss(z: jnp.ndarray, problem: Problem, prior: dict, prior_weight: float = PRIOR_WEIGHT) -> jnp.ndarray:
    pred = step_times(values_from(z, prior), problem)
    err = jnp.log(pred) - jnp.log(problem.measured_s)
    return jnp.sum(problem.weight * err**2) + prior_weight * jnp.mean(z**2)


class Fit(NamedTuple):
    values: dict  # {"gpu": {param: (n_gpus,)}, "overlap_eta": float}
    shared: dict  # {param: offset in the unconstrained space}, for ``transfer``
    loss: float


def fit(problem: Problem, prior: dict, max_iter: int = 200, prior_weight: float = PRIOR_WEIGHT) -> Fit:
    """Fitted values, starting from and pulled towards ``prior`` (the spec values)."""
    prior = jax.tree.map(jnp.asarray, prior)
    z0 = jnp.zeros(len(GPU_PARAMS) * (1 + len(problem.gpus)) + 1)
    objective = jax.jit(lambda z: loss(z, problem, prior, prior_weight))
    res = minimize(objective, z0, method="BFGS", options={"maxiter": max_iter})
    shared, _, _ = split(res.x, len(problem.gpus))
    return Fit(jax.tree.map(np.asarray, values_from(res.x, prior)),
               {p: float(shared[i]) for i, p in enumerate(GPU_PARAMS)}, float(res.fun))


def subset(problem: Problem, rows: np.ndarray) -> Problem:
    """The problem restricted to ``rows``, with weights renormalised per source."""
    return problem._replace(batch=jax.tree.map(lambda x: x[rows], problem.batch), gpu_index=problem.gpu_index[rows],
                            measured_s=problem.measured_s[rows], weight=problem.weight[rows] / problem.weight[rows].sum())


def source_weights(sources: list[str]) -> np.ndarray:
    """Each source weighs the same; rows share their source's weight."""
    s = np.asarray(sources)
    names, counts = np.unique(s, return_counts=True)
    per = dict(zip(names, 1.0 / (counts * len(names))))
    return np.array([per[x] for x in s])
