"""Gradient search: optima and thresholds against closed forms and exact evaluation."""

import math

import numpy as np
import pytest

import jctopt
from jctopt.search import gradient as G
from jctopt.tasks import gradient


@pytest.fixture(scope="module")
def base(config):
    return config("task=estimate")


def _daly_exact_optimum(delta, mtbf):
    """Root of d/dtau [(e^{(tau+delta)/M} - 1) / tau] = 0, i.e. (tau/M) e^x = e^x - 1 with
    x = (tau + delta)/M, by bisection (Daly 2006's model, independent of the code)."""
    h = lambda tau: (tau / mtbf) * math.exp((tau + delta) / mtbf) - math.expm1((tau + delta) / mtbf)  # noqa: E731
    lo, hi = 1e-6 * mtbf, 10 * mtbf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if h(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [(), ("cluster.storage_write_gbps=20",), ("cluster.mtbf_node_h=2000",)])
def test_gradient_checkpoint_interval_is_dalys_optimum(config, overrides):
    cfg = config("task=estimate", *overrides)
    est = jctopt.estimate(cfg)
    tau = G.optimal_checkpoint_interval(cfg)
    exact = _daly_exact_optimum(float(est.ckpt_write_s), float(est.mtbf_s))
    assert tau == pytest.approx(exact, rel=1e-6)
    assert tau == pytest.approx(float(est.daly_interval_s), rel=2e-3)  # Daly's series formula
    ratio = float(est.ckpt_write_s) / float(est.mtbf_s)
    assert tau == pytest.approx(float(est.young_interval_s), rel=2 * math.sqrt(ratio))  # first order


def test_bandwidth_threshold_hits_the_target(base):
    bw = G.min_nic_bandwidth(base, 0.25)
    at = jctopt.estimate(G.with_value(base, "fabric", "nic_gbit", bw)).comm_share
    assert float(at) == pytest.approx(0.25, abs=1e-6)
    lower = jctopt.estimate(G.with_value(base, "fabric", "nic_gbit", bw * 0.9)).comm_share
    assert float(lower) > 0.25


@pytest.mark.slow
def test_relaxed_sync_wall_is_a_minimum_and_rounds_to_a_valid_count(base):
    n = G.sync_wall(base)
    jct = lambda x: float(G._jct_at(base, x))  # noqa: E731
    assert jct(n) <= jct(n * 0.98) and jct(n) <= jct(n * 1.02)
    assert jct(n) < jct(1024.0)
    valid = G.round_gpus(base, n, "best")
    assert valid in G.valid_gpu_counts(base).tolist()


@pytest.mark.slow
def test_fewest_gpus_for_deadline(compose):
    out, sens = gradient.run_gradient(compose("task=estimate", "job.deadline_days=30"))
    n = out["min_gpus_for_deadline"]
    counts = G.valid_gpu_counts(jctopt.to_config(compose("task=estimate"))).tolist()
    assert n in counts and out["deadline_jct_s"] <= 30 * 86400
    cfg = jctopt.to_config(compose("task=estimate"))
    previous = counts[counts.index(n) - 1]
    est = jctopt.estimate(G.with_value(cfg, "layout", "n_gpus", float(previous)))
    assert not (bool(est.feasible) and float(est.jct_s) <= 30 * 86400)  # one fewer step misses it


@pytest.mark.slow
def test_sensitivity_against_closed_form_and_finite_differences(base):
    rows = {r["input"]: r for r in G.sensitivity(base)}
    est = jctopt.estimate(base)
    # JCT = (expected wall time, proportional to tokens) + start-up: elasticity = (JCT - init) / JCT
    init = float(base.cluster.init_s)
    assert rows["job.tokens"]["jct_elasticity"] == pytest.approx((float(est.jct_s) - init) / float(est.jct_s), rel=1e-9)
    # central finite difference of ln JCT in ln(peak)
    h = 1e-4
    up = jctopt.estimate(G.with_value(base, "gpu", "peak_bf16_tflops", float(base.gpu.peak_bf16_tflops) * math.exp(h)))
    dn = jctopt.estimate(G.with_value(base, "gpu", "peak_bf16_tflops", float(base.gpu.peak_bf16_tflops) * math.exp(-h)))
    fd = (math.log(float(up.jct_s)) - math.log(float(dn.jct_s))) / (2 * h)
    assert rows["gpu.peak_bf16_tflops"]["jct_elasticity"] == pytest.approx(fd, rel=1e-4)
    assert all(np.isfinite(r["jct_elasticity"]) for r in rows.values())
    assert "layout.tp" not in rows and "training.recompute" not in rows  # discrete choices excluded


@pytest.mark.slow
def test_gradient_task_writes_outputs(compose, tmp_path):
    gradient.main(compose("task=estimate"), tmp_path)
    import json

    import pandas as pd

    out = json.loads((tmp_path / "gradient.json").read_text())
    assert out["ckpt_interval_opt_s"] > 0 and out["sync_wall_gpus"] > 1024
    assert len(pd.read_parquet(tmp_path / "sensitivity.parquet")) > 10
