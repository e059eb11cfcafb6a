"""AMD Instinct GPUs in the catalog: MI325X is the MI300X's CDNA 3 compute with more and
faster HBM; MI355X (CDNA 4) has no NVFP4, MI350X is its die at a lower clock; validate has a
reference fabric for every GPU."""

import pytest

from jctopt.config import ConfigError
from jctopt.config.resources import CONF_DIR
from jctopt.job.jct import Reason, estimate
from jctopt.model import compute as C
from jctopt.runs import defaults as runs_defaults

# Llama 3 70B with ZeRO-3 and full recompute on one 8-GPU node, 4 sequences per micro-batch.
NODE = ("model=llama3_70b", "layout.n_gpus=8", "layout.tp=1", "layout.pp=1", "training.micro_batch=4",
        "training.global_batch=64", "training.zero_stage=3", "training.recompute=full")


def test_mi325x_is_the_mi300x_compute_with_more_hbm(config):
    """Same peaks (1,300 / 2,610 TFLOP/s dense, ml-engineering), 256 vs 192 GB and 6.0 vs 5.3
    TB/s. A node whose footprint lies between the two capacities is refused on the MI300X for
    memory and runs on the MI325X; the footprint itself does not depend on the GPU."""
    mi300x, mi325x = config("gpu=mi300x", *NODE), config("gpu=mi325x", *NODE)
    assert float(mi325x.gpu.peak_bf16_tflops) == float(mi300x.gpu.peak_bf16_tflops) == 1300.0
    assert float(mi325x.gpu.peak_fp8_tflops) == float(mi300x.gpu.peak_fp8_tflops) == 2610.0
    assert (float(mi300x.gpu.hbm_gb), float(mi325x.gpu.hbm_gb)) == (192.0, 256.0)
    assert (float(mi300x.gpu.hbm_tbps), float(mi325x.gpu.hbm_tbps)) == pytest.approx((5.3, 6.0))
    a, b = estimate(mi300x), estimate(mi325x)
    assert float(a.mem_total) == pytest.approx(float(b.mem_total), rel=1e-12)
    assert 192e9 < float(a.mem_total) < 256e9
    assert int(a.reason) == Reason.MEMORY and int(b.reason) == Reason.OK


def test_mi325x_gemm_runs_at_its_own_mamf(config):
    """A large bf16 GEMM is compute bound on both: its time is 2mnk over peak x matmul_eff x
    the shape factor, so the two GPUs' times stand in the ratio of their matmul_eff (the
    MI325X's MAMF, 784.9 vs 668.4 TFLOP/s, moved by the same shared offset)."""
    g0, g1 = config("gpu=mi300x").gpu, config("gpu=mi325x").gpu
    m = k = n = 16384.0

    def by_hand(g):
        shape = n / (n + float(g.matmul_half_dim))
        return 2 * m * k * n / (1e12 * float(g.peak_bf16_tflops) * float(g.matmul_eff) * shape)

    for g in (g0, g1):
        assert float(C.gemm_time(m, k, n, C.bf16_matmul_flops(g), g)) == pytest.approx(by_hand(g), rel=1e-9)
    assert float(g1.matmul_eff) > float(g0.matmul_eff)


def test_mi355x_runs_fp8_and_refuses_nvfp4(config):
    """MI355X: 2,500 / 5,000 TFLOP/s dense bf16 / fp8 and MXFP4, not NVFP4: precision=nvfp4 is
    refused naming the GPU; fp8 gives a finite, feasible estimate."""
    est = estimate(config("gpu=mi355x", "training.precision=fp8", *NODE))
    assert bool(est.feasible) and 0 < float(est.step_s) < float("inf")
    with pytest.raises(ConfigError, match=r"training.precision='nvfp4' is not allowed.*gpu=mi355x has no nvfp4"):
        config("gpu=mi355x", "training.precision=nvfp4")


def test_mi350x_is_the_mi355x_die_at_its_lower_clock(config):
    """MI350X: the MI355X's CDNA 4 die at 2.2 GHz for 2.4 (1000 W for 1400): peaks 2,300 /
    4,600 TFLOP/s dense against 2,500 / 5,000, the same memory and the same fitted efficiencies
    (one die). A large bf16 GEMM, compute bound on both, runs in the ratio of the peaks."""
    g0, g1 = config("gpu=mi355x").gpu, config("gpu=mi350x").gpu
    assert (float(g1.peak_bf16_tflops), float(g1.peak_fp8_tflops)) == (2300.0, 4600.0)
    assert (float(g1.hbm_gb), float(g1.hbm_tbps), float(g1.tdp_w)) == (288.0, 8.0, 1000.0)
    for key in ("matmul_eff", "fp8_matmul_eff", "matmul_half_dim", "attn_eff", "mem_eff"):
        assert float(getattr(g1, key)) == float(getattr(g0, key)), key
    m = k = n = 16384.0
    t0, t1 = (float(C.gemm_time(m, k, n, C.bf16_matmul_flops(g), g)) for g in (g0, g1))
    assert t1 / t0 == pytest.approx(2500.0 / 2300.0, rel=1e-9)
    est = estimate(config("gpu=mi350x", "training.precision=fp8", *NODE))
    assert bool(est.feasible) and 0 < float(est.step_s) < float("inf")


@pytest.mark.parametrize("gpu", sorted(p.stem for p in (CONF_DIR / "gpu").glob("*.yaml")))
def test_every_catalog_gpu_has_a_reference_fabric(gpu):
    """validate gives a row without an inter_node cell its GPU's reference fabric."""
    assert (CONF_DIR / "fabric" / f"{runs_defaults.REFERENCE_FABRIC[gpu]}.yaml").is_file()
