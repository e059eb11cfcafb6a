"""Seed worked examples that are right, and the corrected values where the seeds are wrong."""

import jax.numpy as jnp
import numpy as np
import pytest

from jctopt.job import reliability as R
from jctopt.model import comm as K
from jctopt.model import memory as Mem

DAY = 86400.0


def test_young_interval_seed001():
    # sqrt(2 * 30 s * 86400 s) = sqrt(5,184,000) = 2276.8 s ~ 38 min
    assert float(R.young_interval(30.0, DAY)) == pytest.approx(2276.8, rel=1e-4)


def test_checkpoint_and_failure_bookkeeping_seed001():
    tau = float(R.young_interval(30.0, DAY))
    n_ckpt = round(DAY / tau)  # 86400 / 2276.8 = 37.9 -> 38 checkpoints
    assert n_ckpt == 38
    assert n_ckpt * 30.0 == 1140.0  # 38 x 30 s = 1,140 s of checkpoint writes
    restart = float(R.recovery_time(10.0, 600.0, 10.0, 20.0)) + 500.0  # + the seed's 500 s catch-up
    assert restart == 1140.0  # 10 + 600 + 10 + 20 + 500
    overhead = float(R.first_order_overhead(n_ckpt, 30.0, 1.8, restart))
    assert overhead == pytest.approx(1140.0 + 2052.0)  # 1.8 x 1,140 = 2,052 s
    assert overhead / DAY == pytest.approx(0.037, abs=5e-4)  # 3,192 s / 86,400 s = 3.69 %


def test_async_interval_seed001():
    # sqrt(2 * 5.12 s * 86400 s) = sqrt(884,736) = 940.6 s ~ 15.7 min
    assert float(R.young_interval(5.12, DAY)) == pytest.approx(940.6, rel=1e-3)


def test_lost_work_erratum_seed001():
    # Erratum: the expected work lost per failure is ~ half the interval (2276.8 / 2 ~ 1140 s),
    # not a fixed 500 s. Daly's model, expanded to first order in tau/M, gives
    # T_w ~ T_s (1 + delta/tau + (R + tau/2 + delta/2) / M); compare at small tau/M.
    solve, tau, delta, restart, mtbf = 1000 * DAY, 2276.8, 30.0, 640.0, 1000 * DAY
    wall, ok = R.expected_wall_time(solve, tau, delta, restart, mtbf)
    first_order = solve * (1 + delta / tau + (restart + (tau + delta) / 2) / mtbf)
    assert bool(ok)
    assert float(wall) == pytest.approx(first_order, rel=1e-6)


def test_gradient_bytes_erratum_seed001():
    # 175e9 params x 2 bytes (bf16) = 350 GB of gradients, not 700 GB (that is fp32).
    assert 175e9 * Mem.GRAD_BYTES == 350e9


def _hockney_gpu(beta_bytes_s, alpha_s=0.0, nvls=0.0):
    """A GPU whose NVLink ring runs at exactly beta with latency alpha (LL disabled)."""
    from jctopt import GPUSpec

    values = dict.fromkeys(GPUSpec._fields, 1.0)
    values.update(nvlink_gbps=beta_bytes_s / 1e9, nvlink_eff=1.0, nvlink_latency_us=alpha_s * 1e6,
                  ll_latency_us=1e9, nvlink_domain=8.0, nvls=nvls, nvls_eff=1.0)
    return GPUSpec(**{k: jnp.asarray(v) for k, v in values.items()})


def test_hockney_ring_formula(config):
    # T = 2(P-1)(alpha + N/(P beta)) with P=8, N=1 GB, alpha=10 us, beta=100 GB/s:
    # 2*7*(10e-6 + 1e9/(8*100e9)) = 14 * (1e-5 + 1.25e-3) = 17.64 ms
    cfg = config("layout=single_node")
    g = _hockney_gpu(100e9, 10e-6)
    t = float(K.all_reduce(1e9, 8.0, 1.0, g, cfg.fabric, cfg.cluster))
    assert t == pytest.approx(0.01764, rel=1e-9)


def test_ring_bytes_per_gpu_erratum_seed001(config):
    # A ring all-reduce moves 2(n-1)/n x M per GPU, ~2M whatever n (not one 1.37 GB chunk):
    # at alpha = 0 its time x beta is exactly that volume.
    cfg = config("layout=single_node")
    beta = 100e9
    g = _hockney_gpu(beta)
    for n in (2.0, 4.0, 8.0):
        t = float(K.all_reduce(350e9, n, 1.0, g, cfg.fabric, cfg.cluster))
        assert t * beta == pytest.approx(2 * (n - 1) / n * 350e9, rel=1e-9)


def test_intra_node_allreduce_is_not_sub_millisecond_erratum(config):
    # 350 GB of GPT-3 gradients over 600 GB/s NVLink: 2 x 7/8 x 350 / 600 = 1.02 s (the
    # erratum's round 2 x 350 / 600 ~ 1.2 s); nowhere near sub-millisecond.
    cfg = config("layout=single_node")
    t = float(K.all_reduce(350e9, 8.0, 1.0, _hockney_gpu(600e9), cfg.fabric, cfg.cluster))
    assert t == pytest.approx(2 * 7 / 8 * 350 / 600, rel=1e-9)
    assert t > 1.0


def test_nvls_halves_bytes_not_domain_size_erratum(config):
    # In-switch reduction about halves the wire bytes: with equal link efficiency NVLS takes
    # half the ring's bandwidth time, not 1/8 of it.
    cfg = config("layout=single_node")
    ring = float(K.all_reduce(1e10, 8.0, 1.0, _hockney_gpu(100e9), cfg.fabric, cfg.cluster))
    nvls = float(K.all_reduce(1e10, 8.0, 1.0, _hockney_gpu(100e9, nvls=1.0), cfg.fabric, cfg.cluster))
    assert nvls / ring == pytest.approx(0.5, rel=1e-9)


def test_checkpoint_copy_uses_sharded_state_and_hbm3_erratum(config):
    # Erratum: T_copy for a 1 TB model is not 512 GB / 2 TB/s on one GPU. The state is sharded:
    # on 1024 H100 (TP 8, PP 16, ZeRO-1 over DP 8) each GPU copies ~1/1024 of it at ~3 TB/s.
    import jctopt

    cfg = config("gpu=h100_sxm", "model=gpt_1008b", "layout.n_gpus=1024", "layout.tp=8",
                 "layout.pp=16", "training.zero_stage=1", "training.global_batch=1024")
    est = jctopt.estimate(cfg._replace(job=cfg.job._replace(ckpt_async=jnp.asarray(1.0),
                                                            ckpt_auto=jnp.asarray(1.0))))
    t_flush = 14.0 * float(est.params) / 200e9  # staging tier 200 GB/s aggregate
    assert float(est.ckpt_write_s) == pytest.approx(t_flush, rel=1e-9)  # flush, not copy, dominates
    local_state = 14.0 * float(est.params) / 1024
    assert local_state / (3.35e12 * 0.887) < 0.1 * t_flush


def test_gradient_sync_7b_rides_nvlink_erratum_seed002(config):
    # Seed 002 sent 8-GPU intra-node traffic over a 400 Gb/s NIC (456 ms) and put compute at
    # 3.5 ms. On one DGX H100 node the DP all-reduce rides NVLink (NVLS) and compute is seconds.
    import jctopt

    cfg = config("gpu=h100_sxm", "fabric=ib_ndr400", "model=llama3_8b", "layout=single_node",
                 "layout.tp=1", "training=modern", "training.global_batch=64", "training.zero_stage=1",
                 "training.recompute=full")
    est = jctopt.estimate(cfg)
    nic_time = 2 * 7 / 8 * 2 * float(est.params) / 50e9  # the seed's NIC path
    assert float(est.dp_comm_raw_s) < 0.5 * nic_time
    assert float(est.compute_s) > 100 * 3.5e-3
    assert np.isfinite(float(est.jct_s))
