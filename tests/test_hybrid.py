"""Hybrid Mamba-2 models (Nemotron-H, Nemotron 3): the layer pattern, the Mamba-2 mixer by hand,
parameter and FLOP counts against published figures, and the layout rules Mamba-2 adds."""

import jax.numpy as jnp
import pandas as pd
import prose
import pytest

from jctopt.config import ConfigError
from jctopt.job.jct import Reason, estimate, layout_checks
from jctopt.model import compute as C
from jctopt.model import flops as Fl
from jctopt.model import hybrid as Hy
from jctopt.model import mamba as Mb
from jctopt.runs import read as runs_read


def _model(config, name, *extra):
    return config(f"model={name}", "layout=single_node", "layout.tp=1", "training.global_batch=8", *extra)


def test_nemotron_h_8b_mamba_mixer_by_hand(config):
    """Nemotron-H 8B's mixer: hidden 4096, 128 heads of 64 (d = 8192), 8 groups of state 128.
    in_proj 4096 x (z 8192 + x 8192 + B 1024 + C 1024 + dt 128); convolution over 10240
    channels, 4 taps and a bias; A, D, dt bias per head; gated norm 8192; out_proj 8192 x 4096."""
    m = _model(config, "nemotron_h_8b").model
    in_proj = 4096 * (8192 + 8192 + 1024 + 1024 + 128)
    assert float(Mb.mixer_params(m)) == in_proj + 10240 * 5 + 3 * 128 + 8192 + 8192 * 4096 == 109_635_968
    # SSD forward per token, chunks of 128: C B^T per group (2 g Q N), its product with x
    # (2 H Q P), chunk state and output from the state (2 x 2 H N P).
    assert float(Mb.scan_forward_flops_per_token(m)) == 2 * (8 * 128 * 128 + 128 * (128 * 64 + 2 * 128 * 64))
    # Backward, recomputing C B^T and the chunk states: 3 x 2 g Q N, 3 x 2 H Q P, 5 x 2 H N P.
    assert float(Mb.scan_backward_flops_per_token(m)) == 2 * (3 * 8 * 128 * 128 + 128 * (3 * 128 * 64 + 5 * 128 * 64))
    # HBM bytes per token, d = 8192, B/C 1024, chunk states 8192 (128 x 64 x 128 / 128), C B^T
    # 1024 (8 x 128), in_proj output 18560, convolution channels 10240. Forward: layout copies
    # 4 x (18560 + 8192), convolution 4 x 10240, scan 10 d + 8 x 1024 + 12 x 8192 + 8 x 1024,
    # norm 4 d. Backward: layout copies again, norm 6 d, convolution recomputed and
    # differentiated 10 x 10240, scan 34 d + 38 x 1024 + 34 x 8192 + 24 x 1024.
    layout = 4 * (18560 + 8192)
    assert float(Mb.forward_bytes_per_token(m)) == (layout + 4 * 10240 + 10 * 8192 + 8 * 1024 + 12 * 8192
                                                    + 8 * 1024 + 4 * 8192) == 377_344
    assert float(Mb.backward_bytes_per_token(m)) == (layout + 6 * 8192 + 10 * 10240 + 34 * 8192 + 38 * 1024
                                                     + 34 * 8192 + 24 * 1024) == 879_104
    # Stored for backward, bf16: in_proj's output 18560, the scan's ungated output 8192, the
    # gated y 8192, the norm's output 8192 (1 byte when out_proj runs in fp8); the convolution's
    # output is recomputed.
    assert float(Mb.stored_activation_bytes_per_token(m, 0.0)) == 2 * (18560 + 8192 + 8192 + 8192)
    assert float(Mb.stored_activation_bytes_per_token(m, 1.0)) == 2 * (18560 + 8192 + 8192) + 8192


def test_mamba_mixer_backward_is_its_kernels_count(config):
    """One Nemotron-H 8B mixer on 8192 tokens of an H100: forward and backward are the layout,
    convolution and norm bytes at the achieved HBM rate plus the SSD kernels at their roofline,
    the slower of their bytes and their chunk matmuls at the GEMM rate of a 64-wide head; the
    micro-batch's compute charges the backward as counted, not twice the forward."""
    cfg = _model(config, "nemotron_h_8b", "gpu=h100_sxm")
    m, g, t = cfg.model, cfg.gpu, cfg.train
    forward, backward = (float(x) for x in C.mamba_mixer_times(m, g, 8192.0, 1.0))
    hbm = 1e12 * float(g.hbm_tbps * g.mem_eff)
    rate = 1e12 * float(g.peak_bf16_tflops * g.matmul_eff) * 64 / (64 + float(g.matmul_half_dim))
    # Streamed bytes (test above): forward layout 4 x (18560 + 8192), convolution 4 x 10240,
    # norm 4 x 8192; backward layout again, norm 6 x 8192, convolution 10 x 10240. The SSD's:
    # forward 10 d + 8 x 1024 + 12 x 8192 + 8 x 1024, backward 34 d + 38 x 1024 + 34 x 8192 + 24 x 1024.
    layout = 4 * (18560 + 8192)
    stream_fwd, stream_bwd = layout + 4 * 10240 + 4 * 8192, layout + 6 * 8192 + 10 * 10240
    ssd_fwd, ssd_bwd = 10 * 8192 + 8 * 1024 + 12 * 8192 + 8 * 1024, 34 * 8192 + 38 * 1024 + 34 * 8192 + 24 * 1024
    assert stream_fwd + ssd_fwd == 377_344 and stream_bwd + ssd_bwd == 879_104
    flops_fwd, flops_bwd = float(Mb.scan_forward_flops_per_token(m)), float(Mb.scan_backward_flops_per_token(m))
    assert forward == pytest.approx(8192 * (stream_fwd / hbm + max(ssd_fwd / hbm, flops_fwd / rate)), rel=1e-12)
    assert backward == pytest.approx(8192 * (stream_bwd / hbm + max(ssd_bwd / hbm, flops_bwd / rate)), rel=1e-12)
    assert 2.0 < backward / forward < 2.6
    # Per layer of a bf16 micro-batch without recompute: 3 x (GEMMs + elementwise), the flash
    # core 1 + 2.5 times, and the mixers' counted backward in place of a second forward pair.
    t = t._replace(micro_batch=1.0, seq_len=8192.0, recompute=0.0, flash_attention=1.0)
    gemm, core, elem = (float(x) for x in C.layer_times(m, g, t, 1.0, 1.0))
    per_layer = 3 * (gemm + elem) + 3.5 * core + float(Hy.mamba_share(m)) * (backward - 2 * forward)
    assert float(C.microbatch_compute_time(m, g, t, 1.0, 1.0, 4.0, 0.0)) == pytest.approx(4 * per_layer, rel=1e-12)
    llama = _model(config, "llama3_8b")
    assert [float(x) for x in C.mamba_mixer_times(llama.model, llama.gpu, 8192.0, 1.0)] == [0.0, 0.0]


def test_ssd_forward_rate_against_a_measured_h100(config):
    """mamba_ssm's forward SSD kernels on one H100 (vllm-project/vllm PR #27299, comment of
    2025-10-25, microbenchmark with granite-4.0-h-small's shapes: 128 heads of 64, one group of
    state 128; "Original" column, the model's chunks of 256): 1.07-1.29e7 tokens/s from 16k to
    262k tokens. The roofline gives 1.10e7 (its matmuls bind); adding bytes and matmuls, as if
    the kernels did not overlap them, would give 0.60e7."""
    cfg = _model(config, "nemotron_h_8b", "model.mamba_groups=1", "gpu=h100_sxm")
    m, g = cfg.model, cfg.gpu
    assert (float(m.mamba_heads), float(m.mamba_head_dim), float(m.mamba_state)) == (128, 64, 128)
    scan_bytes, scan_flops = Mb.scan_forward_bytes_per_token(m, 256), Mb.scan_forward_flops_per_token(m, 256)
    tokens_per_s = 1.0 / float(C.ssd_time_per_token(m, g, scan_bytes, scan_flops))
    assert 1.07e7 * 0.95 < tokens_per_s < 1.29e7
    hbm = 1e12 * float(g.hbm_tbps * g.mem_eff)
    rate = 1e12 * float(g.peak_bf16_tflops * g.matmul_eff) * 64 / (64 + float(g.matmul_half_dim))
    assert 1.0 / (float(scan_bytes) / hbm + float(scan_flops) / rate) < 0.65e7


def test_ssd_forward_time_against_a_measured_b200(config):
    """The same Triton SSD kernels on a B200 (flashinfer-ai/flashinfer PR #2709, Triton
    baseline, batched, bf16: 8 heads of 64, 8 groups of state 128, chunks of 128): 3.736 ms for
    256 sequences of 16 chunks, 1.881 ms for 128, 0.952 ms for 64, i.e. 7.13-7.26 ns a token.
    The roofline alone gives 4.36 ns; the catalog's measured ``ssd_eff`` (0.61) brings it there."""
    cfg = _model(config, "nemotron_h_8b", "model.mamba_heads=8", "gpu=b200")
    m, g = cfg.model, cfg.gpu
    assert (float(m.mamba_groups), float(m.mamba_state), float(m.mamba_head_dim)) == (8, 128, 64)
    per_token = float(C.ssd_time_per_token(m, g, Mb.scan_forward_bytes_per_token(m, 128),
                                           Mb.scan_forward_flops_per_token(m, 128)))
    measured = [3.736e-3 / (256 * 16 * 128), 1.881e-3 / (128 * 16 * 128), 0.952e-3 / (64 * 16 * 128)]
    assert min(measured) * 0.97 < per_token < max(measured) * 1.03
    assert per_token * float(g.ssd_eff) == pytest.approx(4.36e-9, rel=0.02)


def test_mamba2_training_rates_across_generations(config):
    """A pure Mamba-2 model (48 layers of width 2048: 64 heads of 64, one group of state 128;
    batch 4 x 4,096, bf16) trains at 102.5, 239.2 and 360.4 TFLOP/s on one A100, H200 and GB200
    (state-spaces/mamba issue #904, "Training throughput", 2026-04-06). The step-time ratios do
    not depend on how its FLOPs were counted. A100 / H200 (2.33) is predicted with the SSD
    kernels at their roofline on both; GB200 / H200 (1.51) is what set Blackwell's backward
    ``ssd_bwd_eff`` (0.38): with the backward at the forward's measured 0.61 it would be 1.73."""
    def step_s(gpu, *extra):
        cfg = config("model=nemotron_h_8b", "model.layer_pattern=" + "M" * 48, "model.n_layers=48",
                     "model.hidden=2048", "model.mamba_heads=64", "model.mamba_groups=1", "model.seq_len=4096",
                     "model.vocab=50288", "model.tied_embeddings=true", "layout=single_node", "layout.n_gpus=1",
                     "layout.tp=1", "training=modern", "training.micro_batch=4", "training.global_batch=4",
                     "training.precision=bf16", "training.recompute=none", f"gpu={gpu}", *extra)
        in_proj, out_proj = 2048 * (2 * 4096 + 2 * 128 + 64), 4096 * 2048  # z, x, B, C, dt; back to 2048
        assert float(Mb.mixer_params(cfg.model)) == pytest.approx(in_proj + out_proj, rel=0.01)
        return float(estimate(cfg).step_s)

    h200 = step_s("h200")
    assert step_s("a100_80gb") / h200 == pytest.approx(239.2 / 102.5, rel=0.03)
    assert h200 / step_s("gb200") == pytest.approx(360.4 / 239.2, rel=0.02)
    assert h200 / step_s("gb200", "gpu.ssd_bwd_eff=0.61") > 1.7


# Nemotron-H 56B pre-training steps NVIDIA published as the example output of its benchmark
# recipe (NVIDIA/dgxc-benchmarking nemotron-h/README.md, "Example output" of parse_train_timing,
# FP8 current scaling, sequence 8192, CUDA graphs on, 118 layers): 128 H100 at tp 8, mbs 1,
# GBS 384 (@2fc17d4, release 25.08, nemo:25.07.01): 11.874 s; 128 GB200 at tp 4, mbs 2, GBS 384
# (@8e77d60, release 25.10, nemo:25.09.00; the README computes its MFU as GB200's): 5.310 s.
NEMOTRON_H_56B_STEPS = [("h100_sxm", 8, 1, 11.874), ("gb200", 4, 2, 5.310)]


def _nemotron_h_56b_step_s(compose, tmp_path, gpu, tp, mbs, measured_s):
    row = dict(id=f"nemotron_h_56b_{gpu}", source="NVIDIA/dgxc-benchmarking nemotron-h/README.md",
               model="nemotron_h_56b", gpu=gpu, precision="fp8", num_gpus=128, tp=tp, pp=1, cp=1, ep=1, vpp=1,
               micro_batch=mbs, global_batch=384, seq_len=8192, measured_iter_time_s=measured_s,
               iter_time_kind="measured", notes="CUDA graphs on; fp8 current scaling")
    pd.DataFrame([row]).to_csv(tmp_path / f"{gpu}.csv", index=False)
    placed = runs_read.read_runs(tmp_path / f"{gpu}.csv").iloc[0].to_dict()
    cfg, _, _ = prose.place(compose("task=validate"), placed)
    return float(estimate(cfg).step_s)


def test_nemotron_h_56b_published_steps(compose, tmp_path):
    """The hybrid path against measured dense hybrid steps, outside the shipped rows: each within
    12 % (both +10 %; adding the SSD kernels' bytes and matmuls instead of taking their roofline
    put H100 at +19 %), and the H100 / GB200 ratio, 2.24, within 3 % (+0.3 %; with Blackwell's
    SSD backward at the forward's measured 0.61 GB200 was +3 % and the ratio +7 %)."""
    steps = {gpu: _nemotron_h_56b_step_s(compose, tmp_path, gpu, tp, mbs, measured_s)
             for gpu, tp, mbs, measured_s in NEMOTRON_H_56B_STEPS}
    for gpu, _, _, measured_s in NEMOTRON_H_56B_STEPS:
        assert steps[gpu] == pytest.approx(measured_s, rel=0.12), gpu
    assert steps["h100_sxm"] / steps["gb200"] == pytest.approx(11.874 / 5.310, rel=0.03)


def test_layer_pattern_sets_the_shares(config):
    """Nemotron-H 8B: 24 M + 4 * + 24 - in 52 layers, one norm per layer; a transformer keeps
    attention and an MLP in every layer (two norms)."""
    m = _model(config, "nemotron_h_8b").model
    assert (float(m.mamba_layers), float(m.attention_layers), float(m.mlp_layers)) == (24, 4, 24)
    assert float(Hy.sublayers(m)) == 1.0
    # One layer, averaged: 24 mixers, 4 attention layers (Q 4096 x 4096, K and V 4096 x 1024,
    # O 4096 x 4096), 24 squared-ReLU MLPs (2 x 4096 x 21504), a norm each.
    attention = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096
    per_layer = (24 * 109_635_968 + 4 * attention + 24 * 2 * 4096 * 21504) / 52 + 4096
    assert float(Fl.layer_params(m)) == pytest.approx(per_layer, rel=1e-12)
    llama = _model(config, "llama3_8b").model
    assert (float(Hy.attention_share(llama)), float(Hy.mamba_share(llama)), float(Hy.sublayers(llama))) == (1, 0, 2)


# Published sizes (conf/model/*.yaml cite each): Megatron-Bridge docs/models/nemotron/nemotronh.md
# ("Parameters: 8B / 47B / 56B") and nemotron3-nano.md ("3.5B active parameters and 30B parameters
# in total", a name rounded down from the 31.6 B the model counts: tolerance 6 %).
@pytest.mark.parametrize("name, total, active, rel", [
    ("nemotron_h_8b", 8.0, 8.0, 0.02), ("nemotron_h_47b", 47.0, 47.0, 0.02), ("nemotron_h_56b", 56.0, 56.0, 0.02),
    ("nemotron3_nano_30b_a3b", 30.0, 3.5, 0.06)])
def test_published_parameter_counts(config, name, total, active, rel):
    cfg = _model(config, name)
    assert float(Fl.total_params(cfg.model, cfg.train.seq_len)) / 1e9 == pytest.approx(total, rel=rel)
    assert float(Fl.active_params(cfg.model, cfg.train.seq_len)) / 1e9 == pytest.approx(active, rel=rel)


def test_nemotron3_nano_model_flops_match_the_published_rate(config):
    """Megatron-Bridge docs/performance-summary.md @067f987d, 26.08, Nemotron_3_Nano on 8 GB300 at
    sequence 8192: 901 model TFLOP/s per GPU at 39,936 tokens/s per GPU, 22.56 GFLOP per token.
    Megatron's own count widens the Mamba mixer to 2 hidden (5376, against 64 x 64 = 4096 here):
    within 5 %."""
    cfg = _model(config, "nemotron3_nano_30b_a3b", "model.seq_len=8192")
    per_token = float(Fl.model_flops_per_step(cfg.model, cfg.train)) / float(cfg.train.global_batch * 8192)
    assert per_token == pytest.approx(901e12 / 39936, rel=0.05)


def test_nemotron3_5_lightning_is_nano_with_two_mtp_passes(config):
    """Nemotron 3.5 Lightning: Nano's backbone (Megatron-Bridge builds it on Nano's provider), two
    MTP passes on top. Megatron-Bridge docs/performance-summary.md @067f987d, 26.08, on 8 GB200:
    807 model TFLOP/s per GPU at 28,672 tokens/s, 28.1 GFLOP per token; Megatron widens the
    mixer (as for Nano, above): within 5 %."""
    lightning = _model(config, "nemotron3_5_lightning_30b_a3b", "model.seq_len=8192")
    nano = _model(config, "nemotron3_nano_30b_a3b", "model.seq_len=8192")
    backbone = lightning._replace(model=lightning.model._replace(mtp_layers=nano.model.mtp_layers))
    assert float(Fl.total_params(backbone.model, 8192)) == float(Fl.total_params(nano.model, 8192))
    assert int(lightning.model.mtp_layers) == 2
    per_token = float(Fl.model_flops_per_step(lightning.model, lightning.train)) / float(lightning.train.global_batch * 8192)
    assert per_token == pytest.approx(807e12 / 28672, rel=0.05)
    assert per_token > float(Fl.model_flops_per_step(nano.model, nano.train)) / float(nano.train.global_batch * 8192)


def test_hybrid_moe_routes_only_its_expert_layers(config):
    """Nemotron 3 Nano: 23 of 52 layers routed (top-6 of 128 experts of 1856, two shared), none
    dense; every other layer is a mixer."""
    m = _model(config, "nemotron3_nano_30b_a3b").model
    assert float(Fl.moe_layer_fraction(m)) == pytest.approx(23 / 52)
    assert float(Fl.dense_mlp_fraction(m)) == pytest.approx(0.0)
    assert float(Fl.mlp_width_per_token(m)) == pytest.approx(23 / 52 * (6 + 2) * 1856)


def test_mamba_groups_bound_tensor_parallelism(config):
    """Megatron-Core splits the 8 B/C groups over tp: tp 16 divides Nemotron-H 8B's 32 heads but
    not its groups, so it is masked (and a config naming it refused)."""
    ok = _model(config, "nemotron_h_8b", "layout.n_gpus=16", "layout.tp=8")
    assert bool(layout_checks(ok)[0])
    bad = ok._replace(layout=ok.layout._replace(tp=jnp.asarray(16.0)))
    assert not bool(layout_checks(bad)[0])
    assert estimate(bad).reason == Reason.LAYOUT
    with pytest.raises(ConfigError, match=r"layout.tp=16 is not allowed: a divisor of model.mamba_groups=8"):
        config("model=nemotron_h_8b", "layout=single_node", "layout.n_gpus=16", "layout.tp=16")


@pytest.mark.parametrize("override, key", [
    ("model.layer_pattern=M-M*X", "model.layer_pattern"), ("model.n_layers=51", "model.n_layers"),
    ("model.mamba_heads=12", "model.mamba_heads"), ("model.mamba_groups=0", "model.mamba_groups"),
    ("model.mamba_state=0", "model.mamba_state")])
def test_bad_layer_patterns_are_refused_by_key(config, override, key):
    with pytest.raises(ConfigError, match=rf"{key}=.* is not allowed"):
        _model(config, "nemotron_h_8b", override)


def test_routed_layers_need_experts(config):
    with pytest.raises(ConfigError, match=r"model.layer_pattern=.* without E"):
        _model(config, "nemotron_h_8b", "model.layer_pattern=" + "ME-M*" + "M-" * 23 + "M")


def test_nemotron_h_56b_recipe_layout_is_finite_and_fits(config):
    """The dgxc-benchmarking layout for Nemotron-H 56B on H100 (nemotron-h/README.md: FP8, 64 GPUs,
    tp 8, sequence 8192, micro-batch 1, global batch 192): a finite step that fits in 80 GB."""
    cfg = config("model=nemotron_h_56b", "gpu=h100_sxm", "training=modern", "layout.n_gpus=64", "layout.tp=8",
                 "layout.pp=1", "layout.cp=1", "layout.vpp=1", "training.global_batch=192", "training.micro_batch=1",
                 "training.precision=fp8", "training.seq_parallel=true", "training.recompute=selective")
    est = estimate(cfg)
    assert est.reason == Reason.OK and bool(jnp.isfinite(est.step_s)) and float(est.step_s) > 0
