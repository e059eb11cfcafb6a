"""Attention core, TP/PP overlap and ZeRO-3 traffic against hand-computed values."""

import pytest

from jctopt import _comm as K
from jctopt import _compute as C
from jctopt import _memory as Mem
from jctopt._jct import estimate

# GPT-3 175B (s = 2048, h = 12288) on the default layout: tp 8, pp 16, dp 8 (conf/layout/gpt3_175b_1024.yaml).
S, H = 2048, 12288


def test_flash_core_is_half_the_causal_square_at_attn_eff(config):
    """Forward core = 0.5 x 4 b s^2 h / tp FLOPs (causal blocks skipped) at attn_eff x peak."""
    cfg = config("model=gpt3_175b", "training.flash_attention=true", "training.micro_batch=1")
    g, tp = cfg.gpu, 8.0
    _, core, _ = C.layer_times(cfg.model, g, cfg.train, tp, 1.0)
    expected = 0.5 * 4 * S * S * H / tp / (1e12 * float(g.peak_bf16_tflops) * float(g.attn_eff))
    assert float(core) == pytest.approx(expected, rel=1e-9)


def test_flash_backward_is_two_and_a_half_forward(config):
    """Flash: fwd + bwd core = 3.5 x fwd (Dao 2022); the rest of the layer 3 x fwd."""
    cfg = config("model=gpt3_175b", "training.flash_attention=true", "training.recompute=none",
                 "training.micro_batch=1")
    gemm, core, elem = C.layer_times(cfg.model, cfg.gpu, cfg.train, 8.0, 1.0)
    one_layer = C.microbatch_compute_time(cfg.model, cfg.gpu, cfg.train, 8.0, 1.0, 1.0, 0.0)
    assert float(one_layer) == pytest.approx(3 * float(gemm + elem) + 3.5 * float(core), rel=1e-9)


@pytest.mark.parametrize("on", [False, True])
def test_tp_overlap_hides_eta_of_the_gemm_window(config, on):
    cfg = config("model=gpt3_175b", "training.recompute=none", "training.flash_attention=true",
                 f"training.mp_comm_overlap={on}")
    est = estimate(cfg)
    m, g, f, c, lay, t = cfg.model, cfg.gpu, cfg.fabric, cfg.cluster, cfg.layout, cfg.train
    layers = float(m.n_layers / lay.pp)
    tokens = float(t.micro_batch) * S
    raw = layers * 4 * float(K.all_reduce(2.0 * tokens * H, lay.tp, 1.0, g, f, c))
    gemm, _, _ = C.layer_times(m, g, t, lay.tp, lay.cp)
    window = layers * 3 * float(gemm)
    eta = float(t.overlap_eta) if on else 0.0
    per_mb = raw - eta * min(window, raw)
    assert float(est.tp_comm_s) == pytest.approx(float(est.n_micro) * per_mb, rel=1e-6)


def test_zero3_moves_three_parameter_passes_per_micro_batch(config):
    """ZeRO-3: gather forward, gather backward, reduce-scatter gradients, every micro-batch;
    no per-step gradient all-reduce (Rajbhandari et al. 2020: 3x parameter bytes vs 2x for DDP)."""
    cfg = config("model=gpt3_175b", "layout.tp=1", "layout.pp=1", "layout.vpp=1", "layout.n_gpus=1536",
                 "training.zero_stage=3", "training.micro_batch=1", "training.global_batch=3072")
    est = estimate(cfg)
    assert float(est.dp_comm_s) == 0.0 and float(est.dp_comm_raw_s) == 0.0
    mem = Mem.memory(cfg.model, cfg.layout, cfg.train, est.dp, est.n_micro)
    g, f, c = cfg.gpu, cfg.fabric, cfg.cluster
    # A dense model's MLP is its one "expert" (ep = 1): two gathers per pass, same group.
    def passes(bytes_per_param):
        return sum(float(K.all_gather(bytes_per_param * p, 1536.0, 1.0, g, f, c))
                   for p in (mem.dense_params, mem.expert_params))
    weights, grads = passes(Mem.WEIGHT_BYTES), passes(float(cfg.train.grad_bytes))
    raw = 2 * weights + grads
    window = float(est.compute_s) / float(est.n_micro)
    exposed = raw - float(cfg.train.overlap_eta) * min(window, raw)
    assert float(est.n_micro) == 2.0
    assert float(est.zero3_comm_s) == pytest.approx(2 * exposed, rel=1e-6)
