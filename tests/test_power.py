"""A board power limit below TDP (model.power): the clock it leaves, by hand, and what it slows."""

import pytest

from jctopt.config import ConfigError
from jctopt.job.jct import estimate
from jctopt.model import compute as C
from jctopt.model import power as Pw


def test_clock_under_a_power_limit_by_hand():
    """f / f_TDP = ((P - P_static) / (TDP - P_static))^(1/3): 500 W on a 700 W H100 with 90 W
    static, (410 / 610)^(1/3) = 0.8760; no limit (0) or one above TDP leaves the clock."""
    assert float(Pw.clock_ratio(500.0, 700.0)) == pytest.approx((410.0 / 610.0) ** (1.0 / 3.0), rel=1e-12)
    assert float(Pw.clock_ratio(500.0, 700.0)) == pytest.approx(0.8760, abs=1e-4)
    assert float(Pw.clock_ratio(0.0, 700.0)) == 1.0 and float(Pw.clock_ratio(900.0, 700.0)) == 1.0
    assert float(Pw.board_power_w(500.0, 700.0)) == 500.0 and float(Pw.board_power_w(0.0, 700.0)) == 700.0


BASE = ("model=llama3_70b", "gpu=h100_sxm", "training=modern", "layout.n_gpus=64", "layout.tp=8", "layout.pp=1",
        "training.global_batch=64", "job.ckpt_interval_s=3600")


def test_a_power_limit_slows_compute_not_memory_and_lowers_the_energy(config):
    """At 500 W the GEMMs run at 0.876 of their rate (layer_gemm_times by hand from the
    throttled efficiency), attention and HBM-bound work keep their speed, so the compute stretches
    by less than 1 / 0.876; communication is untouched, MFU keeps the spec peak as its
    denominator, and energy is priced at the 500 W ceiling."""
    cfg = config(*BASE)
    full = estimate(cfg)
    capped = estimate(config(*BASE, "cluster.gpu_power_limit_w=500"))
    m, g, t, lay = cfg.model, cfg.gpu, cfg.train, cfg.layout
    slow = g._replace(matmul_eff=0.8760 * g.matmul_eff)
    fast_s, slow_s = C.layer_gemm_times(m, g, t, lay.tp, lay.cp), C.layer_gemm_times(m, slow, t, lay.tp, lay.cp)
    for fast, slowed in zip(fast_s, slow_s):
        assert float(slowed) == pytest.approx(float(fast) / 0.8760, rel=1e-3)  # 70B's GEMMs: compute-bound
    ratio = float(capped.compute_s) / float(full.compute_s)
    assert 1.0 < ratio < 1.0 / 0.8760 + 1e-4
    assert ratio > 1.08  # a 70B layer's time is mostly GEMMs
    assert float(capped.tp_comm_s) == pytest.approx(float(full.tp_comm_s), rel=1e-12)
    assert float(capped.mfu) * float(capped.step_s) == pytest.approx(float(full.mfu) * float(full.step_s), rel=1e-9)
    kwh_per_gpu_hour = [float(e.energy_kwh) / float(e.gpu_hours) for e in (capped, full)]
    assert kwh_per_gpu_hour[0] / kwh_per_gpu_hour[1] == pytest.approx(500.0 / 700.0, rel=1e-12)


def test_a_power_limit_below_the_static_draw_names_the_key(config):
    with pytest.raises(ConfigError, match=r"cluster.gpu_power_limit_w=50.0 is not allowed: watts above"):
        config(*BASE, "cluster.gpu_power_limit_w=50")
