"""FP8 attention (model.attention.fp8_speedup): the core's time against cuDNN's measured bf16 / fp8
ratio, the heads that pick the ratio, the precisions it needs, and validate reading the recipe's
fp8_dot_product_attention."""

import pandas as pd
import prose
import pytest

import jctopt
from jctopt import ConfigError
from jctopt.config.resources import validation_file
from jctopt.model import compute as C

# NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results @3929da2, causal, non-deterministic
# backward: (forward + backward ms in bf16, the same in fp8) at s = 4096 and 8192.
CUDNN_GB300_DSV3 = [(0.864 + 3.127, 0.493 + 1.803), (3.013 + 11.074, 1.758 + 6.188)]    # 128 heads, 192/128
CUDNN_GB300_KIMI = [(0.421 + 1.548, 0.244 + 0.904), (1.466 + 5.466, 0.865 + 3.064)]     # 64 heads, 192/128
CUDNN_GB200_LLAMA = [(0.391 + 1.198, 0.305 + 1.167), (1.397 + 4.127, 1.074 + 3.781)]    # 64 query / 8 KV heads


def _mean_ratio(*tables):
    ratios = [bf16 / fp8 for table in tables for bf16, fp8 in table]
    return sum(ratios) / len(ratios)


def _cores(config, *overrides):
    base = ("training.flash_attention=true", "training.fused_attention=true", "training.micro_batch=1", *overrides)
    off, on = config(*base), config(*base, "training.fp8_attention=true")
    core_off = C.layer_times(off.model, off.gpu, off.train, 1.0, 1.0)[1]
    core_on = C.layer_times(on.model, on.gpu, on.train, 1.0, 1.0)[1]
    return float(core_off), float(core_on)


@pytest.mark.parametrize("overrides, measured", [
    (("gpu=gb300", "model=deepseek_v3", "training.precision=mxfp8"), _mean_ratio(CUDNN_GB300_DSV3, CUDNN_GB300_KIMI)),
    (("gpu=b300", "model=deepseek_v3", "training.precision=fp8"), _mean_ratio(CUDNN_GB300_DSV3, CUDNN_GB300_KIMI)),
    (("gpu=gb200", "model=llama3_70b", "training.precision=fp8"), _mean_ratio(CUDNN_GB200_LLAMA))])
def test_fp8_core_runs_at_the_measured_ratio(config, overrides, measured):
    """MLA heads (their own K/V) take the MHA/MLA ratio, Llama's grouped-query heads the GQA one:
    the whole core (fixed cost included) divided by the benchmark's mean, within 1 %."""
    core_off, core_on = _cores(config, *overrides)
    assert core_off / core_on == pytest.approx(measured, rel=0.01)


def test_fp8_attention_without_a_measurement_is_the_bf16_kernel(config):
    """No FP8 attention measured on an MI300X: the core keeps its bf16 time (the catalog's 1)."""
    core_off, core_on = _cores(config, "gpu=mi300x", "model=llama3_70b", "training.precision=fp8")
    assert core_on == pytest.approx(core_off, rel=1e-12)


def test_fp8_attention_needs_low_precision_gemms(config):
    """A bf16 point of a design space keeps the bf16 core (low_precision 0); a bf16 training config
    asking for it is refused, naming the key, and so is one without Transformer Engine's fused
    kernel."""
    cfg = config("gpu=gb300", "model=deepseek_v3", "training.precision=mxfp8", "training.fp8_attention=true",
                 "training.flash_attention=true", "training.fused_attention=true")
    bf16_point = cfg.train._replace(low_precision=0.0 * cfg.train.low_precision)
    fp8_core = C.layer_times(cfg.model, cfg.gpu, cfg.train, 1.0, 1.0)[1]
    bf16_core = C.layer_times(cfg.model, cfg.gpu, bf16_point, 1.0, 1.0)[1]
    assert float(bf16_core) > 1.5 * float(fp8_core)
    with pytest.raises(ConfigError, match=r"training.fp8_attention=True is not allowed: false with training.precision=bf16"):
        config("gpu=gb300", "model=deepseek_v3", "training.precision=bf16", "training.fp8_attention=true")
    with pytest.raises(ConfigError, match=r"training.fp8_attention=True is not allowed: false unless "
                                          r"training.flash_attention and training.fused_attention"):
        config("gpu=gb300", "model=deepseek_v3", "training.precision=fp8", "training.fp8_attention=true",
               "training.flash_attention=true", "training.fused_attention=false")


def test_validate_reads_fp8_dot_product_attention(compose):
    """On where an fp8 row of a fused-attention stack prints the recipe's switch (a config or the
    Megatron flag); off where it prints nothing, says False, or the row is bf16."""
    moe = pd.read_csv(validation_file("runs_moe_dev.csv"))
    row = moe[moe.id == "mb_2606_qwen3_30b_a3b_gb200_mxfp8_n8_gbs512"].iloc[0].to_dict()
    assert "fp8_dot_product_attention=True" in row["notes"]
    base = compose("task=validate")
    for notes, precision, expected in [(row["notes"], "MXFP8", True),
                                       ("--fp8-format hybrid --fp8-dot-product-attention", "FP8", True),
                                       ("te recipe: DelayedScaling(fp8_dpa=True)", "FP8", True),
                                       ("cfg.mixed_precision.fp8_dot_product_attention = False", "MXFP8", False),
                                       ("", "MXFP8", False), (row["notes"], "BF16", False)]:
        cfg, _ = prose.row_config(base, dict(row, notes=notes, precision=precision))
        assert cfg.training.fp8_attention == expected, (notes, precision)
        jctopt.to_config(cfg)  # a bf16 row never asks for it


def test_deepseek_v3_on_gb300_with_its_recipes_fp8_attention(compose):
    """Megatron-Bridge's 26.08 table (docs/performance-summary.md @067f987df0): DeepSeek-V3 on 256
    GB300, MXFP8, GBS 4096, MBS 1, PP 2, VP 8, EP 32, 6288 tokens/s/GPU = 10.422 s a step. Its
    recipe (perf_recipes/deepseek/gb300/deepseek_v3.py, deepseek_v3_pretrain_256gpu_gb300_fp8mx_config)
    recomputes nothing and runs the full-iteration MXFP8 helper with FP8 attention: the step within
    7 % with it (-2.6 %), and the attention core's share of a DeepSeek-V3 layer makes it matter
    (> 8 %; 11.8 %)."""
    moe = pd.read_csv(validation_file("runs_moe_dev.csv"))
    row = moe[moe.id == "mb_2608_deepseek_v3_gb200_mxfp8_n256_gbs4096"].iloc[0].to_dict()
    calls = "_enable_deepseek_full_iteration_mxfp8(cfg, fp8_dot_product_attention=True, fp8_output_proj=True)"
    gb300 = dict(row, id="mb_2608_deepseek_v3_gb300", gpu="gb300", pp=2, vpp=8, ep=32, recompute="none",
                 measured_iter_time_s=4096 * 4096 / (6288 * 256),
                 notes=f"recompute_modules=[]; calls: _benchmark_common(cfg) | {calls}")
    base = compose("task=validate")
    with_fp8, _, _ = prose.place(base, gb300)
    without, _, _ = prose.place(base, dict(gb300, notes=gb300["notes"].replace("=True, fp8_output", "=False, fp8_output")))
    step, bf16_core_step = float(jctopt.estimate(with_fp8).step_s), float(jctopt.estimate(without).step_s)
    assert step == pytest.approx(gb300["measured_iter_time_s"], rel=0.07)
    assert bf16_core_step > 1.08 * step


def test_diagnosis_offers_fp8_attention(config):
    """An fp8 job on Transformer Engine's fused kernel is offered FP8 attention where the GPU's
    measured ratio for its heads is above 1 (GB300, MLA), and not where it is not (H100, GQA: 0.99)
    or where the GEMMs are bf16."""
    from jctopt.job import diagnosis as D

    change = next(ch for ch in D.CHANGES if "fp8_dot_product_attention" in ch.label)
    base = ("training.flash_attention=true", "training.fused_attention=true")
    gb300 = config("gpu=gb300", "model=deepseek_v3", "training.precision=mxfp8", *base)
    assert bool(change.applicable(gb300))
    assert float(change.apply(gb300).train.fp8_attention) == 1.0
    assert not bool(change.applicable(config("gpu=h100_sxm", "model=llama3_70b", "training.precision=fp8", *base)))
    assert not bool(change.applicable(config("gpu=gb300", "model=deepseek_v3", "training.precision=bf16", *base)))
