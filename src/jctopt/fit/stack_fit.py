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
    measured = jnp.asarray(measured_s)
    w = jnp.asarray(weight / weight.sum())

    def values(z):
        out = {p: jnp.asarray(prior[p]) for p in STACK_PARAMS}
        out.update({p: _inv(p, _fwd(p, prior[p]) + z[i]) for i, p in enumerate(fitted)})
        return out

    def objective(z):
        err = jnp.log(step_times(values(z), batch)) - jnp.log(measured)
        return jnp.sum(w * pseudo_huber(err, HUBER_DELTA)) + PRIOR_WEIGHT * jnp.mean(z**2)

    objective = jax.jit(objective)
    res = minimize(objective, jnp.zeros(len(fitted)), method="BFGS", options={"maxiter": max_iter})
    for _ in range(5):  # restarted with a fresh Hessian where a kink stopped the line search (fit.calibrate)
        if int(res.status) == 0:
            break
        res = minimize(objective, res.x, method="BFGS", options={"maxiter": max_iter})
    return StackFit({p: float(v) for p, v in values(res.x).items()}, fitted, held, sens)
