"""Low-precision recipes: the casts that feed fp8/fp4 GEMMs, priced by HBM, and the bf16 output
layer, against hand-computed values."""

import pytest

from jctopt.config import ConfigError, to_config
from jctopt.job.jct import Reason, estimate
from jctopt.model import compute as C
from jctopt.model import flops as Fl
from jctopt.model import quantization as Q

# Llama 3 8B: h 4096, 32 heads of 128, 8 KV heads, SwiGLU width 14336, vocabulary 128,256.
H, HEADS, KV, D, FFN, V = 4096, 32, 8, 128, 14336, 128256


def _time(cfg, tp=2.0, last=0.0):
    return float(C.microbatch_compute_time(cfg.model, cfg.gpu, cfg.train, tp, 1.0, 1.0, last))


def _hbm(g):
    return 1e12 * float(g.hbm_tbps) * float(g.mem_eff)


@pytest.mark.parametrize("precision, bytes_per_element", [("fp8", 2 + 1 + 1 + 2 / 32), ("mxfp8", 2 + 1 + 1 + 2 / 32),
                                                          ("nvfp4", 2 + 2 + 0.5 + 0.5 + 2 / 16)])
def test_one_layer_pays_the_casts_of_its_gemm_operands(config, precision, bytes_per_element):
    """Llama 3 8B layer, tp 2 with SP, micro-batch 1 x 8192 tokens, no recompute. Quantized per
    token: forward QKV input h/2 + attention-output input 4096/2 + MLP-up input h/2 + MLP-down
    input 14336/2 = 13,312; backward QKV output gradient (4096 + 2 x 1024)/2 + h/2 + h/2 +
    MLP-up output gradient 2 x 14336/2 = 21,504. Each element costs read bf16 + two
    low-precision copies + scales, and NVFP4 one more bf16 read for the amax of its Hadamard-
    transformed copy; the bf16 run of the same layer pays none of it."""
    base = ("model=llama3_8b", "gpu=b200", "model.seq_len=8192", "training.micro_batch=1",
            "training.recompute=none", "training.seq_parallel=true")
    low, bf16 = config(*base, f"training.precision={precision}"), config(*base, "training.precision=bf16")
    elements = 8192 * (13312 + 21504)
    expected = bytes_per_element * elements / _hbm(low.gpu)
    gemm_low, core, elem = C.layer_times(low.model, low.gpu, low.train, 2.0, 1.0)
    rest = 3.0 * float(gemm_low + elem) + (1.0 + float(C.core_backward_factor(low.train))) * float(core)
    assert _time(low) - rest == pytest.approx(expected, rel=1e-9)
    gemm, core, elem = C.layer_times(bf16.model, bf16.gpu, bf16.train, 2.0, 1.0)
    core_factor = 1.0 + float(C.core_backward_factor(bf16.train))
    assert _time(bf16) == pytest.approx(3.0 * float(gemm + elem) + core_factor * float(core), rel=1e-9)


def test_recompute_quantizes_the_forward_again(config):
    """Full recompute runs the forward twice, its casts included: the forward elements once more."""
    base = ("model=llama3_8b", "gpu=h100_sxm", "training.precision=fp8", "model.seq_len=8192",
            "training.micro_batch=1", "training.seq_parallel=true")
    none, full = config(*base, "training.recompute=none"), config(*base, "training.recompute=full")
    gemm, core, elem = C.layer_times(full.model, full.gpu, full.train, 2.0, 1.0)
    forward_again = float(gemm + core + elem) + Q.FP8_CAST_BYTES * 8192 * 13312 / _hbm(full.gpu)
    assert _time(full) - _time(none) == pytest.approx(forward_again, rel=1e-9)


def test_without_sequence_parallelism_every_tp_rank_casts_the_whole_hidden_state(config):
    """Without SP the two hidden-size operands of each pass (QKV and MLP-up inputs forward, the
    attention-output and MLP-down output gradients backward) are whole on every TP rank: at
    tp 2, 2 h - 2 h / 2 = h more elements per token each way."""
    base = ("model=llama3_8b", "gpu=h100_sxm", "training.precision=fp8", "model.seq_len=8192",
            "training.micro_batch=1", "training.recompute=none")
    sp, no_sp = config(*base, "training.seq_parallel=true"), config(*base, "training.seq_parallel=false")
    f_sp, b_sp = Q.quantized_elements_per_token(sp.model, sp.train, 2.0, 6144.0, float(FFN))
    f_no, b_no = Q.quantized_elements_per_token(no_sp.model, no_sp.train, 2.0, 6144.0, float(FFN))
    assert float(f_no - f_sp) == pytest.approx(2 * H / 2, rel=1e-12)
    assert float(b_no - b_sp) == pytest.approx(2 * H / 2, rel=1e-12)


def test_output_layer_stays_bf16_under_fp8(config):
    """The logits GEMM of the last stage runs at the bf16 rate whatever the layers' precision:
    3 x 2 x 8192 x 4096 x (V / 2) FLOPs at peak_bf16 x matmul_eff (thick GEMM: shape factor
    4096 / (4096 + half_dim))."""
    base = ("model=llama3_8b", "gpu=h100_sxm", "model.seq_len=8192", "training.micro_batch=1",
            "training.recompute=none", "training.seq_parallel=true", "training.metric_loss_passes=0")
    cfg = config(*base, "training.precision=fp8")
    g = cfg.gpu
    shape = 4096 / (4096 + float(g.matmul_half_dim))
    logits = 3 * 2.0 * 8192 * 4096 * (V / 2) / (1e12 * float(g.peak_bf16_tflops) * float(g.matmul_eff) * shape)
    loss = C.CROSS_ENTROPY_BYTES * 8192 * V / 2 / _hbm(g)
    assert _time(cfg, last=1.0) - _time(cfg) == pytest.approx(logits + loss, rel=1e-9)


def test_nvfp4_gemm_runs_the_recipes_bf16_share_at_the_bf16_rate(config):
    """A 16384 x 8192 x 8192 GEMM under NVFP4 on a GB300: 84 % of the FLOPs at the fp4 rate,
    16 % at peak_bf16 x matmul_eff (arXiv:2509.25149's BF16 layers), times the shape factor
    8192 / (8192 + half_dim). The fp4 rate is the fp8 rate (peak_fp8 x fp8_matmul_eff) times
    1.81, the NVFP4 / FP8 GEMM speedup Transformer Engine's GEMM benchmark measures on Blackwell
    Ultra (B300, operands pre-quantized: 6.812 / 3.764 ms per layer; docs/examples/gemm_profiling
    @d0067d0), not the peak ratio 15000 / 5000 = 3."""
    cfg = config("gpu=gb300", "training.precision=nvfp4")
    g = cfg.gpu
    flops = 2.0 * 16384 * 8192 * 8192
    fp4 = 1e12 * float(g.peak_fp8_tflops) * float(g.fp8_matmul_eff) * 6.812 / 3.764
    bf16 = 1e12 * float(g.peak_bf16_tflops) * float(g.matmul_eff)
    shape = 8192 / (8192 + float(g.matmul_half_dim))
    expected = flops * (0.84 / fp4 + 0.16 / bf16) / shape
    rate = C.matmul_peak_flops(g, cfg.train)
    assert float(C.gemm_time(16384.0, 8192.0, 8192.0, rate, g)) == pytest.approx(expected, rel=2e-3)
    # Megatron-Bridge's benchmark recipe keeps no layer in BF16: every FLOP at the fp4 rate.
    allfp4 = config("gpu=gb300", "training.precision=nvfp4", "training.nvfp4_bf16_share=0")
    rate = C.matmul_peak_flops(allfp4.gpu, allfp4.train)
    assert float(C.gemm_time(16384.0, 8192.0, 8192.0, rate, g)) == pytest.approx(flops / fp4 / shape, rel=2e-3)


def test_nvfp4_gemms_run_at_the_peak_ratio_where_no_speedup_is_measured(config):
    """A B200 has no NVFP4 and per-tensor FP8 GEMMs measured in one benchmark: its NVFP4 GEMMs
    run at the fp8 rate times the peak ratio, 9000 / 4500 = 2."""
    cfg = config("gpu=b200", "training.precision=nvfp4", "training.nvfp4_bf16_share=0")
    g = cfg.gpu
    fp8 = 1e12 * 4500 * float(g.fp8_matmul_eff)
    assert float(C.matmul_peak_flops(g, cfg.train)) == pytest.approx(2.0 * fp8, rel=1e-9)


def test_nvfp4_runs_on_blackwell_ultra_and_is_masked_on_hopper(config):
    """gb300 + nvfp4: a finite, feasible estimate. An H100 has no fp4 tensor cores: the same
    configuration is masked with the reason PRECISION_UNSUPPORTED (built without the config check,
    as a sweep over precisions would build it)."""
    gb300 = config("model=llama3_70b", "gpu=gb300", "training.precision=nvfp4", "layout.n_gpus=512",
                   "layout.tp=4", "layout.pp=4", "training=modern", "training.global_batch=1024")
    est = estimate(gb300)
    assert bool(est.feasible) and 0 < float(est.step_s) < float("inf")
    h100 = config("model=llama3_70b", "gpu=h100_sxm", "layout.n_gpus=512", "layout.tp=4", "layout.pp=4",
                  "training=modern", "training.global_batch=1024")
    masked = estimate(h100._replace(train=h100.train._replace(low_precision=gb300.train.low_precision)))
    assert int(masked.reason) == Reason.PRECISION_UNSUPPORTED and float(masked.step_s) == float("inf")


def test_mxfp8_gemm_by_hand(config):
    """A 16384 x 8192 x 8192 GEMM under MXFP8 on a B200 runs at the per-tensor fp8 rate times
    7.161 / 6.812 = 0.951 slower, the MXFP8 / FP8 current-scaling GEMM ratio of Transformer
    Engine's benchmark with pre-quantized operands (B300 SXM6 AC, 12 GEMMs of a layer: 6.812 ms
    FP8, 7.161 ms MXFP8; docs/examples/gemm_profiling @d0067d0), times the shape factor."""
    mx, fp8 = config("gpu=b200", "training.precision=mxfp8"), config("gpu=b200", "training.precision=fp8")
    g = mx.gpu
    flops = 2.0 * 16384 * 8192 * 8192
    shape = 8192 / (8192 + float(g.matmul_half_dim))
    rate = 1e12 * 4500 * float(g.fp8_matmul_eff) * 6.812 / 7.161
    mx_s = float(C.gemm_time(16384.0, 8192.0, 8192.0, C.matmul_peak_flops(g, mx.train), g))
    assert mx_s == pytest.approx(flops / rate / shape, rel=2e-4)
    fp8_s = float(C.gemm_time(16384.0, 8192.0, 8192.0, C.matmul_peak_flops(g, fp8.train), g))
    assert fp8_s == pytest.approx(flops / (1e12 * 4500 * float(g.fp8_matmul_eff)) / shape, rel=1e-9)


def test_mxfp8_is_refused_and_masked_on_hopper(config, compose):
    """An H100 has fp8 tensor cores but no block-scaled ones (Transformer Engine runs MXFP8 from
    compute capability 10.0): `precision=mxfp8` is refused naming the key and the GPU, and the
    same point built without the check, as a sweep over precisions builds it, is masked with
    PRECISION_UNSUPPORTED; per-tensor fp8 on the H100 runs. The refusal lists what the H100 runs."""
    with pytest.raises(ConfigError, match=r"training.precision='mxfp8' is not allowed: bf16 \| fp16 \| fp8 "
                                          r"\(gpu=h100_sxm has no block-scaled"):
        to_config(compose("gpu=h100_sxm", "training.precision=mxfp8"))
    h100 = config("model=llama3_70b", "gpu=h100_sxm", "layout.n_gpus=512", "layout.tp=4", "layout.pp=4",
                  "training=modern", "training.global_batch=1024", "training.precision=fp8")
    assert bool(estimate(h100).feasible)
    masked = estimate(h100._replace(train=h100.train._replace(mxfp8=h100.train.mxfp8 + 1.0)))
    assert int(masked.reason) == Reason.PRECISION_UNSUPPORTED and float(masked.step_s) == float("inf")


def test_expert_inputs_are_cast_once_per_routed_copy(config):
    """Qwen3-30B-A3B (every layer routed, top-8, no shared expert, h 2048, 32 heads of 128,
    4 KV heads, experts 768 wide, SwiGLU) at tp 1: forward, the QKV input (h), the eight
    dispatched copies feeding the experts (8 h), the attention output input (4096) and the
    down GEMMs' inputs (8 x 768); backward, the output gradients of QKV (32 + 2 x 4) x 128,
    the attention output (h), the up GEMMs (2 x 8 x 768) and the eight down GEMMs (8 h).
    DeepSeek-V3 (3 dense layers of 61, top-8 and one shared expert): 3/61 + 58/61 x 9 copies of h."""
    cfg = config("model=qwen3_30b_a3b", "gpu=h100_sxm", "training.precision=fp8", "layout.tp=1")
    m = cfg.model
    assert float(Fl.mlp_input_width_per_token(m)) == 8.0 * 2048
    forward, backward = Q.quantized_elements_per_token(m, cfg.train, 1.0, float(Fl.qkv_width(m)),
                                                       float(Fl.mlp_width_per_token(m)), Fl.mlp_input_width_per_token(m))
    assert float(forward) == pytest.approx(2048 + 8 * 2048 + 4096 + 8 * 768, rel=1e-12)
    assert float(backward) == pytest.approx(40 * 128 + 2048 + 2 * 8 * 768 + 8 * 2048, rel=1e-12)
    v3 = config("model=deepseek_v3", "gpu=h100_sxm").model
    assert float(Fl.mlp_input_width_per_token(v3)) == pytest.approx((3 / 61 + 58 / 61 * 9) * 7168, rel=1e-12)


@pytest.mark.slow
def test_a_sweep_masks_mxfp8_on_hopper_and_prices_it_on_blackwell(compose, tmp_path):
    """A sweep over H100 and B200, fp8 and MXFP8: every H100 MXFP8 point is masked with
    PRECISION_UNSUPPORTED, its fp8 points are not; on the B200 each MXFP8 step is its fp8 step
    with the GEMMs 7.161 / 6.812 slower, so longer, and no point is masked for precision."""
    from jctopt.tasks.sweep import run_sweep

    df = run_sweep(compose("model=llama3_8b", "training=modern", "training.global_batch=64",
                           "space.gpu=[h100_sxm,b200]", "space.fabric=[ib_ndr400]", "space.n_gpus=[8]",
                           "space.tp=[1,2]", "space.pp=[1]", "space.cp=[1]", "space.ep=[1]", "space.vpp=[1]",
                           "space.micro_batch=[1]", "space.recompute=[selective]", "space.zero_stage=[1]",
                           "space.precision=[fp8,mxfp8]", "space.ckpt_interval_s=[optimal]",
                           "sweep.dtype=float64", "sweep.progress=false", "sweep.keep=all"), tmp_path)
    h100, b200 = df[df.gpu == "h100_sxm"], df[df.gpu == "b200"]
    assert set(h100[h100.precision == "mxfp8"].reason) == {"PRECISION_UNSUPPORTED"}
    assert "PRECISION_UNSUPPORTED" not in set(h100[h100.precision == "fp8"].reason) | set(b200.reason)
    steps = b200.pivot_table(index="tp", columns="precision", values="step_s")
    assert len(steps) == 2 and (steps.mxfp8 > steps.fp8).all()
