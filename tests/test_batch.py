"""Batched evaluation, retracing, gradients, numerics and masking."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jctopt
from jctopt import Reason

LAYOUTS = [  # (n_gpus, tp, pp, vpp, micro_batch, recompute, zero, fp8)
    (1024, 8, 16, 1, 1, 2.0, 0, 0.0), (1024, 8, 8, 2, 2, 1.0, 1, 1.0), (512, 4, 8, 3, 1, 1.0, 2, 1.0),
    (256, 8, 4, 1, 1, 2.0, 1, 0.0), (2048, 8, 16, 2, 1, 1.0, 3, 1.0), (128, 8, 16, 1, 1, 0.0, 0, 0.0),
]


def _variants(base):
    out = []
    for n, tp, pp, vpp, mb, rc, z, fp8 in LAYOUTS:
        out.append(base._replace(
            layout=base.layout._replace(n_gpus=jnp.asarray(float(n)), tp=jnp.asarray(float(tp)),
                                        pp=jnp.asarray(float(pp)), vpp=jnp.asarray(float(vpp))),
            train=base.train._replace(micro_batch=jnp.asarray(float(mb)), recompute=jnp.asarray(rc),
                                      zero_stage=jnp.asarray(float(z)), low_precision=jnp.asarray(fp8))))
    return out


def _stack(configs):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *configs)


@pytest.fixture(scope="module")
def h100(config):
    return config("gpu=h100_sxm", "fabric=ib_ndr400", "model=gpt3_175b", "training=modern",
                  "training.global_batch=1536")


@pytest.mark.slow
def test_batched_equals_per_configuration(h100):
    variants = _variants(h100)
    batched = jctopt.estimate_batch(_stack(variants))
    for i, cfg in enumerate(variants):
        one = jctopt.estimate(cfg)
        for field in ("jct_s", "step_s", "mem_total", "mfu", "reason"):
            np.testing.assert_allclose(np.asarray(getattr(batched, field))[i], np.asarray(getattr(one, field)),
                                       rtol=1e-10, err_msg=f"config {i} field {field}")
    assert np.asarray(batched.feasible).sum() >= 3  # the batch mixes feasible and masked rows


@pytest.mark.slow
def test_one_compilation_serves_every_batch(h100):
    traces = []

    def counted(cfg):
        traces.append(1)
        return jctopt.estimate(cfg)

    fn = jax.jit(jax.vmap(counted))
    variants = _variants(h100)
    fn(_stack(variants))
    # Different discrete choices (recompute, ZeRO, fp8, layouts) in a same-sized batch: no retrace.
    fn(_stack(variants[::-1]))
    fn(_stack([v._replace(fabric=v.fabric._replace(nic_gbit=v.fabric.nic_gbit * 2)) for v in variants]))
    assert len(traces) == 1


CONTINUOUS = {  # group -> fields that must have finite gradients
    "gpu": ["hbm_tbps", "nvlink_gbps", "nvlink_latency_us", "matmul_eff", "mem_eff", "nvlink_eff",
            "price_per_gpu_hour", "mtbf_gpu_h"],
    "fabric": ["nic_gbit", "nic_eff", "latency_us", "mtbf_nic_h", "mtbf_switch_h"],
    "cluster": ["mtbf_node_h", "storage_write_gbps", "jitter_cv", "oversubscription"],
    "train": ["overlap_eta", "zero3_overlap_eta", "grad_compression"],
    "job": ["ckpt_interval_s"],
}


@pytest.mark.slow
@pytest.mark.parametrize("ckpt_auto", [0.0, 1.0])
def test_gradients_finite_and_correct(h100, ckpt_auto):
    base = h100._replace(job=h100.job._replace(ckpt_auto=jnp.asarray(ckpt_auto),
                                               ckpt_interval_s=jnp.asarray(3600.0)))

    def objective(x):
        cfg = base
        for group, fields in CONTINUOUS.items():
            part = getattr(cfg, group)
            cfg = cfg._replace(**{group: part._replace(**{f: x[group][f] for f in fields})})
        est = jctopt.estimate(cfg)
        return est.cost_usd + 1e3 * est.jct_s  # touches cost, time and failures

    x = {g: {f: getattr(getattr(base, g), f) for f in fs} for g, fs in CONTINUOUS.items()}
    grads = jax.grad(objective)(x)
    for group, fields in grads.items():
        for f, v in fields.items():
            assert np.isfinite(float(v)), f"d JCT / d {group}.{f} is not finite"
    # Bandwidth and MTBF lower JCT; latency raises it.
    assert float(grads["fabric"]["nic_gbit"]) <= 0 and float(grads["gpu"]["mtbf_gpu_h"]) < 0
    assert float(grads["fabric"]["latency_us"]) >= 0
    check_grads(objective, (x,), order=1, modes=("rev",), eps=1e-4, rtol=2e-2)


def test_masked_rows_have_reason_inf_and_finite_gradients(config):
    cfg = config("model=gpt3_175b", "layout=single_node", "training.global_batch=8")  # 175B on 8 A100
    est = jctopt.estimate(cfg)
    assert Reason(int(est.reason)) == Reason.MEMORY
    assert float(est.jct_s) == np.inf and not bool(est.feasible)
    g = jax.grad(lambda bw: jctopt.estimate(cfg._replace(gpu=cfg.gpu._replace(hbm_tbps=bw))).step_s)(
        cfg.gpu.hbm_tbps)
    assert np.isfinite(float(g))
    # A layout that does not divide is masked inside jit rather than raised.
    bad = cfg._replace(layout=cfg.layout._replace(tp=jnp.asarray(7.0)))
    assert Reason(int(jctopt.estimate(bad).reason)) == Reason.LAYOUT


@pytest.mark.slow
def test_no_overflow_at_scale_and_float32_agrees(config):
    # 16k GPUs x 1e15 FLOP/s, 1T parameters: no overflow, nothing non-finite on a feasible row.
    cfg = config("gpu=b200", "fabric=ib_xdr800", "model=gpt_1008b", "layout.n_gpus=16384",
                 "layout.tp=8", "layout.pp=16", "training=modern", "training.global_batch=4096")
    est = jctopt.estimate(cfg)
    assert bool(est.feasible)
    for name, value in est._asdict().items():
        assert np.all(np.isfinite(np.asarray(value))), name
    f32 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), cfg)
    est32 = jctopt.estimate(f32)
    assert est32.jct_s.dtype == jnp.float32
    np.testing.assert_allclose(float(est32.jct_s), float(est.jct_s), rtol=1e-4)
    np.testing.assert_allclose(float(est32.params), float(est.params), rtol=1e-6)
