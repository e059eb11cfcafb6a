"""Property tests: monotonicity of the model and the gradient optimum of the checkpoint interval."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jctopt
from jctopt.job import reliability as R

LAYOUTS = [(64, 8, 1, 1), (256, 8, 4, 1), (512, 4, 8, 2), (1024, 8, 16, 1), (128, 1, 1, 1), (2048, 8, 8, 3)]
SETTINGS = settings(max_examples=25, deadline=None)


@pytest.fixture(scope="module")
def base(config):
    return config("gpu=h100_sxm", "fabric=ib_ndr400", "model=gpt_39p1b", "training=modern",
                  "training.global_batch=3072")


def _with_layout(cfg, layout, zero, recompute):
    n, tp, pp, vpp = layout
    return cfg._replace(
        layout=cfg.layout._replace(n_gpus=jnp.asarray(float(n)), tp=jnp.asarray(float(tp)),
                                   pp=jnp.asarray(float(pp)), vpp=jnp.asarray(float(vpp))),
        train=cfg.train._replace(zero_stage=jnp.asarray(float(zero)), recompute=jnp.asarray(float(recompute))))


layouts = st.sampled_from(LAYOUTS)
zeros = st.integers(0, 3)
recomputes = st.integers(0, 2)
factors = st.floats(1.0, 8.0)


@pytest.mark.slow
@SETTINGS
@given(layout=layouts, zero=zeros, recompute=recomputes, f_nic=factors, f_nv=factors, f_hbm=factors,
       f_storage=factors)
def test_more_bandwidth_never_increases_jct(base, layout, zero, recompute, f_nic, f_nv, f_hbm, f_storage):
    cfg = _with_layout(base, layout, zero, recompute)
    faster = cfg._replace(
        fabric=cfg.fabric._replace(nic_gbit=cfg.fabric.nic_gbit * f_nic),
        gpu=cfg.gpu._replace(nvlink_gbps=cfg.gpu.nvlink_gbps * f_nv, hbm_tbps=cfg.gpu.hbm_tbps * f_hbm),
        cluster=cfg.cluster._replace(storage_write_gbps=cfg.cluster.storage_write_gbps * f_storage))
    before, after = jctopt.estimate(cfg), jctopt.estimate(faster)
    if bool(before.feasible):
        assert float(after.jct_s) <= float(before.jct_s) * (1 + 1e-12)


@pytest.mark.slow
@SETTINGS
@given(layout=layouts, zero=zeros, recompute=recomputes, f=st.floats(1.0, 50.0), auto=st.booleans())
def test_higher_failure_rate_never_decreases_jct(base, layout, zero, recompute, f, auto):
    cfg = _with_layout(base, layout, zero, recompute)
    cfg = cfg._replace(job=cfg.job._replace(ckpt_auto=jnp.asarray(float(auto)), ckpt_interval_s=jnp.asarray(3600.0)))
    worse = cfg._replace(gpu=cfg.gpu._replace(mtbf_gpu_h=cfg.gpu.mtbf_gpu_h / f),
                         cluster=cfg.cluster._replace(mtbf_node_h=cfg.cluster.mtbf_node_h / f))
    before, after = jctopt.estimate(cfg), jctopt.estimate(worse)
    if bool(before.feasible) and bool(after.feasible):
        assert float(after.jct_s) >= float(before.jct_s) * (1 - 1e-12)


@SETTINGS
@given(layout=layouts, zero=zeros, recompute=recomputes, f=st.floats(1.0, 4.0))
def test_more_hbm_never_makes_a_feasible_layout_infeasible(base, layout, zero, recompute, f):
    cfg = _with_layout(base, layout, zero, recompute)
    bigger = cfg._replace(gpu=cfg.gpu._replace(hbm_gb=cfg.gpu.hbm_gb * f))
    if bool(jctopt.estimate(cfg).feasible):
        assert bool(jctopt.estimate(bigger).feasible)


def _grad_descent_interval(ckpt_s, mtbf_s, restart_s, steps=60):
    """Minimise Daly's expected wall time over log(tau) by descent on jax.grad, with the
    step scaled by jax's second derivative (damped Newton; the valley is very flat)."""
    solve = 30 * 86400.0

    def loss(log_tau):
        wall, _ = R.expected_wall_time(solve, jnp.exp(log_tau), ckpt_s, restart_s, mtbf_s)
        return jnp.log(wall)

    grad = jax.jit(jax.grad(loss))
    curvature = jax.jit(jax.grad(jax.grad(loss)))
    x = jnp.log(jnp.asarray(mtbf_s / 4))  # start far from the optimum
    for _ in range(steps):
        step = grad(x) / jnp.maximum(curvature(x), 1e-6)
        x = x - jnp.clip(step, -1.0, 1.0)
    assert abs(float(grad(x))) < 1e-9  # converged to a stationary point
    return float(jnp.exp(x))


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(ckpt_s=st.floats(5.0, 300.0), mtbf_h=st.floats(2.0, 200.0), restart_s=st.floats(0.0, 1800.0))
def test_gradient_optimal_interval_matches_young_daly(ckpt_s, mtbf_h, restart_s):
    mtbf_s = mtbf_h * 3600.0
    tau = _grad_descent_interval(ckpt_s, mtbf_s, restart_s)
    assert tau == pytest.approx(float(R.daly_interval(ckpt_s, mtbf_s)), rel=0.02)
    assert tau == pytest.approx(float(R.young_interval(ckpt_s, mtbf_s)), rel=0.02 + ckpt_s / mtbf_s * 10)


def test_seed_case_gradient_optimum():
    # Seed 001 numbers: delta = 30 s, M = 24 h -> Young 2276.8 s, Daly 2260.9 s.
    tau = _grad_descent_interval(30.0, 86400.0, 640.0)
    assert tau == pytest.approx(2276.8, rel=0.02)
    assert tau == pytest.approx(2260.9, rel=0.02)
    assert np.isfinite(tau)
