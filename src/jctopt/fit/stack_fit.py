"""Fit a software stack to a user's runs: the few efficiencies a stack sets, nothing per GPU.

A stack's runs differ from the shipped stacks' in how fast its kernels run on the same GPU
(``kernel_eff``: the share of the catalog's fitted GEMM, attention and HBM efficiencies its
kernels reach) and in how much of the compute window hides its collectives (``overlap_eta``,
``zero3_overlap_eta``). These three (STACK_PARAMS) are fitted to the user's measured step times,
each in an unconstrained space (log for kernel_eff, logit for the fractions) as the prior stack's
value plus an offset, with the robust loss and the weak pull towards the prior of
``fit.calibrate``. A parameter the runs cannot see (no ZeRO-3 row for zero3_overlap_eta, no
overlapped traffic for overlap_eta) is not fitted: it keeps the prior's value and the reason is
reported; where the runs determine none, or fewer rows than parameters, the fit is refused.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.optimize import minimize

from ..config import ConfigError
from ..job.jct import estimate, unmasked_step
from ..model.types import Config
from .calibrate import HUBER_DELTA, PRIOR_WEIGHT, pseudo_huber

STACK_PARAMS = ("kernel_eff", "overlap_eta", "zero3_overlap_eta")
LOG_PARAMS = {"kernel_eff"}  # a positive factor; the etas are fractions in (0, 1)
# A parameter is determined where a 10 % move of its unconstrained coordinate moves the rows'
# predicted step times by at least 0.5 % (root mean square, weighted): d log(step) / dz >= 0.05.
MIN_SENSITIVITY = 0.05
# Two parameters the rows move together (their sensitivities' columns nearly parallel) are not
# both determined: the smallest singular value of the weighted sensitivities over the largest.
MIN_CONDITION = 0.05


def _fwd(name, x):
    return jnp.log(x) if name in LOG_PARAMS else jnp.log(x) - jnp.log1p(-x)


def _inv(name, z):
    return jnp.exp(z) if name in LOG_PARAMS else jax.nn.sigmoid(z)


def step_times(values: dict, batch: Config) -> jnp.ndarray:
    """Predicted step time (s) of every row of ``batch`` with the stack ``values``, unmasked."""
    train = batch.train._replace(**{p: jnp.broadcast_to(v, getattr(batch.train, p).shape) for p, v in values.items()})
    return unmasked_step(jax.vmap(estimate)(batch._replace(train=train)))


class StackFit(NamedTuple):
    values: dict  # {param: fitted value} for every STACK_PARAMS (held ones at the prior)
    fitted: tuple[str, ...]  # the parameters the runs determine
    held: dict  # {param: why it keeps the prior's value}
    sensitivity: dict  # {param: weighted RMS of d log(step) / dz at the prior}


def determined(batch: Config, weight: np.ndarray, prior: dict) -> tuple[tuple[str, ...], dict, dict]:
    """(the parameters the rows determine, {held parameter: why}, {parameter: sensitivity})."""
    z0 = jnp.zeros(len(STACK_PARAMS))

    def log_steps(z):
        return jnp.log(step_times({p: _inv(p, _fwd(p, prior[p]) + z[i]) for i, p in enumerate(STACK_PARAMS)}, batch))

    jac = np.asarray(jax.jacfwd(log_steps)(z0)) * np.sqrt(weight / weight.sum())[:, None]
    sens = {p: float(np.sqrt(np.sum(jac[:, i] ** 2))) for i, p in enumerate(STACK_PARAMS)}
    held = {p: f"the runs barely move with it (sensitivity {sens[p]:.3f} < {MIN_SENSITIVITY})"
            for p in STACK_PARAMS if sens[p] < MIN_SENSITIVITY}
    keep = [p for p in STACK_PARAMS if p not in held]
    while len(keep) > 1:
        s = np.linalg.svd(jac[:, [STACK_PARAMS.index(p) for p in keep]], compute_uv=False)
        if s[-1] >= MIN_CONDITION * s[0]:
            break
        weakest = min(keep, key=sens.get)
        held[weakest] = f"the runs cannot tell it from {', '.join(p for p in keep if p != weakest)}"
        keep.remove(weakest)
    return tuple(keep), held, sens


def _values(prior: dict, fitted: tuple[str, ...], z) -> dict:
    """Every STACK_PARAMS' value: the prior's, moved by ``z`` along the ``fitted`` ones."""
    out = {p: jnp.asarray(prior[p]) for p in STACK_PARAMS}
    out.update({p: _inv(p, _fwd(p, prior[p]) + z[i]) for i, p in enumerate(fitted)})
    return out


def _objective(batch: Config, measured_s: np.ndarray, prior: dict, fitted: tuple[str, ...]):
    """objective(z, w): the weighted robust log error of the rows (``w`` sums to 1) plus the pull
    towards the prior (fit.calibrate's loss)."""
    log_measured = jnp.log(jnp.asarray(measured_s))

    def objective(z, w):
        err = jnp.log(step_times(_values(prior, fitted, z), batch)) - log_measured
        return jnp.sum(w * pseudo_huber(err, HUBER_DELTA)) + PRIOR_WEIGHT * jnp.mean(z**2)

    return objective


def fit_stack(batch: Config, measured_s: np.ndarray, weight: np.ndarray, prior: dict, max_iter: int = 200) -> StackFit:
    """The stack values that best predict ``measured_s`` (rows of ``batch``, weights ``weight``),
    from and pulled towards ``prior`` ({param: value}); ConfigError where the rows determine
    no parameter or are fewer than the parameters they determine."""
    fitted, held, sens = determined(batch, weight, prior)
    if not fitted:
        raise ConfigError("calibrate.stack: the runs determine none of " + ", ".join(STACK_PARAMS) + ": "
                          + "; ".join(f"{p}: {why}" for p, why in held.items())
                          + " (add runs whose step time depends on them: more GPUs, ZeRO-3, data parallelism)")
    if len(measured_s) <= len(fitted):
        raise ConfigError(f"calibrate.stack: {len(measured_s)} placed run(s) with a measured step time cannot "
                          f"determine {len(fitted)} parameter(s) ({', '.join(fitted)}); give at least "
                          f"{len(fitted) + 1}")
    w = jnp.asarray(weight / weight.sum())
    objective = jax.jit(functools.partial(_objective(batch, measured_s, prior, fitted), w=w))
    res = minimize(objective, jnp.zeros(len(fitted)), method="BFGS", options={"maxiter": max_iter})
    for _ in range(5):  # restarted with a fresh Hessian where a kink stopped the line search (fit.calibrate)
        if int(res.status) == 0:
            break
        res = minimize(objective, res.x, method="BFGS", options={"maxiter": max_iter})
    return StackFit({p: float(v) for p, v in _values(prior, fitted, res.x).items()}, fitted, held, sens)


# At most this many folds: more rows (or sources) than that are dealt round-robin into them.
MAX_FOLDS = 32


def folds_of(sources: list[str]) -> tuple[np.ndarray, str]:
    """(fold of each row, how the folds were made): leave-one-source-out where the rows name at
    least three sources, else leave-one-run-out; round-robin into MAX_FOLDS beyond that."""
    names = sorted(set(sources))
    if len(names) >= 3:
        fold, kind = np.array([names.index(s) for s in sources]), f"leave-one-source-out over {len(names)} sources"
    else:
        fold, kind = np.arange(len(sources)), f"leave-one-run-out over {len(sources)} runs"
    if fold.max() + 1 > MAX_FOLDS:
        kind += f", dealt round-robin into {MAX_FOLDS} folds"
    return fold % MAX_FOLDS, kind


def left_out_log_ratios(batch: Config, measured_s: np.ndarray, weight: np.ndarray, prior: dict,
                        fitted: tuple[str, ...], folds: np.ndarray, max_iter: int = 200) -> np.ndarray:
    """log(measured / predicted) of every row, predicted by the stack fitted (``fitted``, as
    ``fit_stack``) to the rows outside its fold: one BFGS per fold, all folds in one vmapped
    solve, restarted once from where it stopped (a fresh Hessian past a kink)."""
    ids = np.unique(folds)
    w = np.stack([np.where(folds == f, 0.0, weight) for f in ids])
    w = jnp.asarray(w / w.sum(axis=1, keepdims=True))
    objective = _objective(batch, measured_s, prior, fitted)

    def solve(z0, wk):
        return minimize(lambda z: objective(z, wk), z0, method="BFGS", options={"maxiter": max_iter}).x

    solve = jax.jit(jax.vmap(solve))
    z = solve(solve(jnp.zeros((len(ids), len(fitted))), w), w)
    predicted = jax.vmap(lambda zk: step_times(_values(prior, fitted, zk), batch))(z)  # (folds, rows)
    own = np.asarray(predicted)[np.searchsorted(ids, folds), np.arange(len(folds))]
    return np.log(np.asarray(measured_s) / own)
