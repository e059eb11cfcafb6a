"""Achieved compute time of a transformer, hybrid or MoE layer and of a micro-batch on a stage
(counts and FLOPs: model.flops).

Conventions: one multiply-add = 2 FLOPs; forward = 1x, backward = 2x (Narayanan et al. 2021,
Sec. 5.1). Shapes follow Megatron: ``b`` micro-batch, ``s`` sequence, ``h`` hidden,
``a`` heads, ``L`` layers, ``V`` vocabulary.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import attention as A
from . import eager as Ea
from . import experts as E
from . import hybrid as Hy
from . import latent as La
from . import mamba as Mb
from . import quantization as Q
from . import recompute_modules as Rm
from . import window as W
from .flops import (
    attention_core_width,
    dense_mlp_fraction,
    full_recompute_share,
    head_dim,
    mlp_input_width_per_token,
    mlp_width_per_token,
    moe_layer_fraction,
    qkv_width,
    recompute_time,
)
from .types import GPUSpec, ModelSpec, Training

# --- achieved time ------------------------------------------------------------------------


def dense_peak_tflops(g: GPUSpec, t: Training):
    """The dense tensor-core peak at the run's GEMM precision (what MFU is measured against)."""
    return jnp.where(t.low_precision >= 2, g.peak_fp4_tflops,
                     jnp.where(t.low_precision >= 1, g.peak_fp8_tflops, g.peak_bf16_tflops))


def bf16_matmul_flops(g: GPUSpec):
    """Achievable bf16 GEMM FLOP/s for large shapes: peak x MAMF fraction."""
    return 1e12 * g.peak_bf16_tflops * g.matmul_eff


def nvfp4_gemm_speedup(g: GPUSpec):
    """NVFP4 / FP8 GEMM rate, large shapes: the GPU's measured ratio (``nvfp4_gemm_speedup``), or
    the peak ratio where none is measured (0). Blackwell Ultra's NVFP4 peak is 3x its FP8 peak,
    but its GEMMs run 1.81x faster (Transformer Engine's GEMM benchmark on a B300: the b300 and
    gb300 catalog entries cite it)."""
    peak_ratio = g.peak_fp4_tflops / jnp.maximum(g.peak_fp8_tflops, 1e-9)
    return jnp.where(g.nvfp4_gemm_speedup > 0, g.nvfp4_gemm_speedup, peak_ratio)


def matmul_peak_flops(g: GPUSpec, t: Training):
    """Achievable GEMM FLOP/s for large shapes: peak x best measured fraction (MAMF). MXFP8
    GEMMs run at the per-tensor fp8 rate times the GPU's MXFP8 / FP8 GEMM ratio
    (``mxfp8_gemm_ratio``: the block-scaled kernels also load a scale per 32 elements of each
    operand; 0.951 on a B300, Transformer Engine's GEMM benchmark, pre-quantized). NVFP4
    GEMMs run at the fp8 rate times the GPU's NVFP4 / FP8 GEMM speedup (``nvfp4_gemm_speedup``:
    measured with pre-quantized operands, so the casts stay with model.quantization); the recipe's
    BF16 share of the layers (``nvfp4_bf16_share``: ~16 % in the NVFP4 pre-training recipe,
    NVIDIA 2025, arXiv:2509.25149, for stability) runs at the bf16 rate (the rates combine
    harmonically)."""
    fp8 = 1e12 * g.peak_fp8_tflops * g.fp8_matmul_eff
    # A stand-in ratio where the GPU has no MXFP8 (0): such points are masked (job.jct).
    mxfp8 = jnp.where((t.mxfp8 > 0) & (g.mxfp8_gemm_ratio > 0), g.mxfp8_gemm_ratio, 1.0)
    rate = jnp.where(t.low_precision >= 1, fp8 * mxfp8, bf16_matmul_flops(g))
    share = t.nvfp4_bf16_share
    # A stand-in rate off the NVFP4 branch keeps gradients finite where the GPU has no fp8 (0).
    fp4 = jnp.where(t.low_precision >= 2, fp8 * nvfp4_gemm_speedup(g), 1.0)
    nvfp4 = 1.0 / ((1.0 - share) / fp4 + share / bf16_matmul_flops(g))
    return jnp.where(t.low_precision >= 2, nvfp4, rate)


# A grouped GEMM (one kernel over all local experts, each with its own token count) loses more
# to thin shapes than one dense GEMM: its efficiency halves at about twice the dense halving
# size. Transformer Engine 2.11 grouped GEMMs on a B200 (MooreThreads/SimuMax
# configs/system/b200_bf16_ceperm.json @4dcaae513b, "group_matmul" against "matmul", bf16,
# DeepSeek-V2/V3 expert shapes): 0.28 / 0.51 / 0.65 / 0.81 of the dense efficiency at 154 /
# 308 / 616 / 1232 tokens per expert, i.e. halving at 290-400 tokens against 157 fitted for
# dense B200 GEMMs.
GROUPED_GEMM_HALF_DIM_FACTOR = 2.0


def gemm_time(m_dim, k_dim, n_dim, flops_per_s, g: GPUSpec, bytes_per_el=2.0, half_dim_factor=1.0):
    """Roofline time (s) of one (m x k) @ (k x n) GEMM.

    Compute side: the efficiency falls for thin GEMMs, d / (d + d_half) on the smallest
    dimension (tile quantisation; shape-dependence as in Calculon / Isaev et al. 2023).
    Memory side: operands and result streamed once through HBM. ``half_dim_factor`` scales
    d_half (a grouped GEMM's: GROUPED_GEMM_HALF_DIM_FACTOR).
    """
    d_min = jnp.minimum(jnp.minimum(m_dim, k_dim), n_dim)
    shape_eff = d_min / (d_min + half_dim_factor * g.matmul_half_dim)
    t_compute = 2.0 * m_dim * k_dim * n_dim / (flops_per_s * shape_eff)
    t_memory = bytes_per_el * (m_dim * k_dim + k_dim * n_dim + m_dim * n_dim) / hbm_rate(g)
    return jnp.maximum(t_compute, t_memory)


def hbm_rate(g: GPUSpec):
    """Achieved HBM bytes/s for streaming (memory-bound) kernels."""
    return 1e12 * g.hbm_tbps * g.mem_eff


def mixer_gemm_times(m: ModelSpec, g: GPUSpec, t: Training, tp, cp):
    """Forward time (s) of one layer's mixer GEMMs for one micro-batch on one GPU, split into
    (column-parallel: QKV or Mamba's in_proj, row-parallel: the attention output or out_proj),
    each weighted by its share of the layers (model.hybrid)."""
    rate = matmul_peak_flops(g, t)
    tokens = t.micro_batch * t.seq_len / cp
    h, context = m.hidden, m.n_heads * m.v_head_dim
    attn, mamba = Hy.attention_share(m), Hy.mamba_share(m)
    qkv = attn * gemm_time(tokens, h, qkv_width(m) / tp, rate, g)
    proj = attn * gemm_time(tokens, context / tp, h, rate, g)
    # A transformer's Mamba inner width is 0: a unit width keeps the unused GEMM free of 0/0.
    d_inner = jnp.where(mamba > 0, Mb.inner_width(m), 1.0)
    qkv += mamba * gemm_time(tokens, h, Mb.in_proj_width(m) / tp, rate, g)
    proj += mamba * gemm_time(tokens, d_inner / tp, h, rate, g)
    return qkv, proj


def mlp_gemm_times(m: ModelSpec, g: GPUSpec, t: Training, tp, cp, ep=1.0, etp=None):
    """Forward time (s) of one layer's MLP GEMMs for one micro-batch on one GPU, as (up, down)
    pairs of its parts, each weighted by its share of the layers: (the dense MLP, the routed
    experts with LatentMoE's projections, the shared experts).

    Tokens per GPU are b s / cp (context parallel splits the sequence); weights are split
    over tp (Megatron column/row parallel). Routed experts: expert parallelism places
    n_experts / ep of them on each GPU, 1/etp of each (``etp`` None = tp), and dispatches to
    each the tokens that chose it (``model.experts.tokens_per_local_expert``): the FLOPs do not
    depend on ep or etp, the GEMM shapes do (small experts at small ep are thin, memory-bound
    GEMMs), and the experts run as one grouped GEMM (GROUPED_GEMM_HALF_DIM_FACTOR); under
    LatentMoE they read and write the latent width, which two projections map from and back to
    h (model.latent). Shared experts see every token. Each kind is weighted by its share of the
    layers (model.hybrid, dense_mlp_fraction, moe_layer_fraction).
    """
    etp = tp if etp is None else etp
    rate = matmul_peak_flops(g, t)
    tokens = t.micro_batch * t.seq_len / cp
    h = m.hidden

    # (up incl. the gate, down) between d_model and width, width split over ``split``
    def mlp(n_tokens, width, split, half_dim_factor=1.0, d_model=h):
        return (gemm_time(n_tokens, d_model, (1.0 + m.glu) * width / split, rate, g, half_dim_factor=half_dim_factor),
                gemm_time(n_tokens, width / split, d_model, rate, g, half_dim_factor=half_dim_factor))

    dense_up, dense_down = mlp(tokens, m.ffn_hidden, tp)
    local_experts = m.n_experts / ep
    expert_tokens = E.tokens_per_local_expert(tokens, m, tp, ep, etp) * E.busiest_rank_tokens(t)
    expert_up, expert_down = mlp(expert_tokens, m.moe_ffn_hidden, etp,
                                 GROUPED_GEMM_HALF_DIM_FACTOR, La.routed_width(m))
    # LatentMoE (model.latent): h -> l before the dispatch, l -> h after the combine, on the rank's
    # sequence-parallel share of the tokens (the dispatcher's input). A unit width stands in
    # where there is no latent width, so that no 0/0 reaches a gradient.
    latent = jnp.where(m.moe_latent_size > 0, 1.0, 0.0)
    width = jnp.where(latent > 0, m.moe_latent_size, 1.0)
    routed_tokens = tokens / jnp.where(t.seq_parallel > 0, tp, 1.0)
    latent_down = latent * gemm_time(routed_tokens, h, width, rate, g)
    latent_up = latent * gemm_time(routed_tokens, width, h, rate, g)
    has_shared = jnp.where(m.n_shared_experts > 0, 1.0, 0.0)
    # One expert's width stands in where there is none, so that no 0/0 reaches a gradient.
    shared_up, shared_down = mlp(tokens, jnp.where(has_shared > 0, m.n_shared_experts, 1.0) * m.moe_ffn_hidden, tp)
    f = moe_layer_fraction(m)
    dense = dense_mlp_fraction(m)
    return ((dense * dense_up, dense * dense_down),
            (f * (local_experts * expert_up + latent_down), f * (local_experts * expert_down + latent_up)),
            (f * has_shared * shared_up, f * has_shared * shared_down))


def layer_gemm_times(m: ModelSpec, g: GPUSpec, t: Training, tp, cp, ep=1.0, etp=None, mlp_gemms=None):
    """Forward time (s) of one layer's GEMMs for one micro-batch on one GPU, split into
    (column-parallel: QKV or a Mamba-2 mixer's in_proj, and MLP up; row-parallel: attention
    output or out_proj, and MLP down): the mixer's (mixer_gemm_times) and the MLP's
    (``mlp_gemms``, mlp_gemm_times' where the caller has them)."""
    qkv, proj = mixer_gemm_times(m, g, t, tp, cp)
    dense, routed, shared = mlp_gemm_times(m, g, t, tp, cp, ep, etp) if mlp_gemms is None else mlp_gemms
    return qkv + dense[0] + routed[0] + shared[0], proj + dense[1] + routed[1] + shared[1]


def layer_times(m: ModelSpec, g: GPUSpec, t: Training, tp, cp, ep=1.0, etp=None, mlp_gemms=None):
    """Forward time (s) of one layer for one micro-batch on one GPU, split into
    (GEMMs, attention core, memory-bound elementwise ops and the Mamba-2 scan)."""
    column, row = layer_gemm_times(m, g, t, tp, cp, ep, etp, mlp_gemms)
    tokens = t.micro_batch * t.seq_len / cp
    h, d = m.hidden, head_dim(m)
    # Attention core, forward: per head (s/cp x d) @ (d x s) and (s/cp x s) @ (s x d), bf16
    # even in fp8. A fused (flash) kernel never writes the s x s scores and skips the masked
    # half of a causal square (model.attention: its rate, and a fixed cost per call; attn_eff is
    # FlashAttention-2's rate; cuDNN's kernel, where Transformer Engine runs it as in Megatron-Core
    # and NeMo, runs at its measured fused_attn_eff). Unfused, the full square
    # runs as two thin GEMMs (head dimension d) and scores, softmax and dropout are written
    # and re-read, ~12 bytes per score.
    core_flops = 2.0 * t.micro_batch * t.seq_len * t.seq_len * attention_core_width(m) / (tp * cp)
    # Sliding-window layers run their band's share of the square (model.window), the rest the causal half.
    windowed = m.window_layers / jnp.maximum(m.attention_layers, 1.0)
    flash = ((1.0 - windowed) * A.flash_forward_time(0.5 * core_flops, g, t)
             + windowed * A.flash_forward_time(W.square_share(m.attention_window, t.seq_len) * core_flops, g, t))
    scores = t.micro_batch * m.n_heads / tp * t.seq_len * t.seq_len / cp
    unfused = core_flops / (bf16_matmul_flops(g) * d / (d + g.matmul_half_dim)) + 12.0 * scores / hbm_rate(g)
    # FP8 attention runs the fused kernel's GEMMs at the fp8 rate (model.attention.fp8_speedup).
    flash = flash / A.fp8_speedup(m, g, t)
    core = Hy.attention_share(m) * jnp.where(t.flash_attention > 0, flash, unfused)
    # Elementwise traffic (bytes, bf16) of Megatron's fused kernels, per token: two layer
    # norms (read + write h: 2 x 2h), two bias-dropout-adds (read output and residual, write
    # h, a 1-byte mask: 2 x 3.5h), the bias-activation over ffn (read + write); norms and
    # dropouts split by tp under SP. Korthikanti et al. 2022 Table 4 (22B layer): SP saves
    # 0.5 ms of 7.7 forward, i.e. ~10h bytes of replicated traffic at tp = 8. Half of it (a
    # norm and a residual add) per mixer and per MLP (model.hybrid.sublayers: 2 in a transformer).
    sp_div = jnp.where(t.seq_parallel > 0, tp, 1.0)
    norms = 5.5 * Hy.sublayers(m)
    mlp_width = mlp_width_per_token(m)
    elementwise_bytes = 2.0 * tokens * (norms * h / sp_div + 2.0 * (1.0 + m.glu) * mlp_width / tp)
    # MoE layers permute each token's hidden state (LatentMoE: its latent, model.latent) into expert
    # order once per chosen expert and un-permute the outputs back (read + write 2 bytes per
    # element each way): 8 x width x top_k bytes per token (Megatron-Core moe_utils
    # permute/unpermute), on the rank's SP share of the tokens.
    elementwise_bytes += moe_layer_fraction(m) * tokens * 8.0 * La.routed_width(m) * m.top_k / sp_div
    # Eager PyTorch (no torch.compile, no fused kernels) moves more: model.eager.
    elementwise_bytes += tokens * Ea.extra_forward_bytes_per_token(m, t, tp, sp_div, mlp_width)
    elementwise = elementwise_bytes / hbm_rate(g)
    mixer_forward, _ = mamba_mixer_times(m, g, tokens, tp)
    return column + row, core, elementwise + Hy.mamba_share(m) * mixer_forward


def recompute_module_times(m: ModelSpec, g: GPUSpec, t: Training, tp, cp, core, mlp_gemms):
    """Forward time (s) of one layer's recomputable modules for one micro-batch on one GPU
    (model.recompute_modules), averaged over the layers as ``layer_times``: the attention core
    (``core``); MLA's two up-projection GEMMs (column-parallel, from the latents every TP rank
    holds); the two pre-norms and the routed experts' activation, at layer_times' bytes per
    element; the dense MLP, the MoE layer (its routed and shared experts, their activation and
    the permutation of the tokens, layer_times' 8 bytes per routed element) and the shared
    experts, GEMMs (``mlp_gemms``: mlp_gemm_times') and elementwise traffic. Recomputed GEMMs
    quantize their inputs again under fp8 and fp4 recipes (model.quantization)."""
    rate = matmul_peak_flops(g, t)
    tokens = t.micro_batch * t.seq_len / cp
    h, f = m.hidden, moe_layer_fraction(m)
    sp_div = jnp.where(t.seq_parallel > 0, tp, 1.0)
    cast = Q.cast_bytes_per_element(t) / hbm_rate(g)
    # MLA up-projections; a unit width stands in where a latent is absent (no 0/0 in a gradient).
    has_q, has_kv = m.q_lora_rank > 0, m.kv_lora_rank > 0
    q_rank, kv_rank = jnp.where(has_q, m.q_lora_rank, 1.0), jnp.where(has_kv, m.kv_lora_rank, 1.0)
    up_q = jnp.where(has_q & has_kv, gemm_time(tokens, q_rank, m.n_heads * m.head_dim / tp, rate, g), 0.0)
    up_kv = gemm_time(tokens, kv_rank, m.n_heads * (m.head_dim - m.qk_rope_head_dim + m.v_head_dim) / tp, rate, g)
    mla = Hy.attention_share(m) * jnp.where(
        has_kv, up_q + up_kv + cast * tokens * (m.q_lora_rank + m.kv_lora_rank), 0.0)
    norms = 2.0 * tokens * 2.0 * Hy.sublayers(m) * h / sp_div / hbm_rate(g)

    def activation(width):  # bytes of the bias-activation kernel over ``width`` (layer_times)
        return 2.0 * tokens * 2.0 * (1.0 + m.glu) * width / tp / hbm_rate(g)

    def block(gemms, width, inputs):  # GEMMs, activation, quantized GEMM inputs per token
        return gemms[0] + gemms[1] + activation(width) + cast * tokens * inputs

    dense, routed, shared = mlp_gemms
    routed_width, shared_width = f * m.top_k * m.moe_ffn_hidden, f * m.n_shared_experts * m.moe_ffn_hidden
    dense_width = dense_mlp_fraction(m) * m.ffn_hidden
    has_shared = jnp.where(m.n_shared_experts > 0, 1.0, 0.0)
    shared_block = block(shared, shared_width, f * has_shared * h / sp_div + shared_width / tp)
    permute = f * tokens * 8.0 * La.routed_width(m) * m.top_k / sp_div / hbm_rate(g)
    moe = (block(routed, routed_width, f * m.top_k * La.routed_width(m) + routed_width / tp)
           + shared_block + permute)
    return Rm.ModuleParts(core_attn=core, mla_up_proj=mla, layernorm=norms, moe_act=activation(routed_width),
                          mlp=block(dense, dense_width, dense_mlp_fraction(m) * h / sp_div + dense_width / tp),
                          moe=moe, shared_experts=shared_block)


def layer_block_times(m: ModelSpec, g: GPUSpec, t: Training, tp, cp, gemm, core, elem_and_scan):
    """Forward time (s) of one layer's two blocks for one micro-batch on one GPU, from its
    ``layer_times`` (gemm, core, elementwise + scan): (the mixer: its GEMMs, the attention core
    and the Mamba-2 kernels; the MLP or experts: the other GEMMs), the memory-bound elementwise
    work split evenly between them (a norm and a residual add each)."""
    qkv, proj = mixer_gemm_times(m, g, t, tp, cp)
    scan = Hy.mamba_share(m) * mamba_mixer_times(m, g, t.micro_batch * t.seq_len / cp, tp)[0]
    elem = elem_and_scan - scan
    return qkv + proj + core + scan + 0.5 * elem, gemm - qkv - proj + 0.5 * elem


def ssd_time_per_token(m: ModelSpec, g: GPUSpec, scan_bytes, scan_flops, backward=False):
    """Time (s) per token of the SSD kernels (one pass, before TP) that move ``scan_bytes``
    and run ``scan_flops`` of chunk matmuls at the GEMM rate of their thinnest dimension, the
    head. Each kernel overlaps its loads with its matmuls, so the slower of the two sets the pace
    (the roofline, as ``gemm_time``), reached to the GPU's measured ``ssd_eff``. On an H100
    mamba_ssm's forward SSD kernels (128 heads of 64, one group of state 128, chunks of 256) run
    1.07-1.29e7 tokens/s from 16k tokens up (vllm-project/vllm PR #27299, comment of 2025-10-25,
    "Original" column): 77-93 ns a token against the roofline's 91 (adding bytes and matmuls
    would give 168), so ``ssd_eff`` 1. On a B200 the same Triton kernels (8 heads of 64, 8
    groups of state 128, chunks of 128) take 7.13-7.26 ns a token against the roofline's 4.36:
    0.61 (flashinfer-ai/flashinfer PR #2709, Triton baseline; NVIDIA's CUTLASS SSD examples call
    the kernel bound by its segment-sum arithmetic, with low MMA use on Blackwell).

    ``backward``: the backward kernels at the GPU's ``ssd_bwd_eff``, set where only whole
    training steps are measured (fwd + bwd): a pure Mamba-2 model of 48 layers of width 2048
    (64 heads of 64, one group of state 128, batch 4 x 4,096, bf16) trains at 102.5, 239.2 and
    360.4 TFLOP/s on an A100, an H200 and a GB200 (state-spaces/mamba issue #904, "Training
    throughput" table, 2026-04-06). The model gives A100 / H200 2.35 (measured 2.33) at the
    roofline on both; GB200 / H200 1.51 asks the backward kernels to run at 0.38 of theirs on
    Blackwell, the forward staying at its measured 0.61 (1.73 were both at 0.61)."""
    p = jnp.maximum(m.mamba_head_dim, 1.0)  # a model without mixers has no head (no 0/0)
    scan_rate = bf16_matmul_flops(g) * p / (p + g.matmul_half_dim)
    eff = g.ssd_bwd_eff if backward else g.ssd_eff  # backward: a Python bool, which pass is priced
    return jnp.maximum(scan_bytes / hbm_rate(g), scan_flops / scan_rate) / eff


def mamba_mixer_times(m: ModelSpec, g: GPUSpec, tokens, tp):
    """(forward, backward) time (s) of one Mamba-2 mixer's kernels besides its projections, for
    ``tokens`` tokens on one GPU: the layout copies', convolution's and norm's HBM traffic and
    the SSD kernels at their roofline (``ssd_time_per_token``); the backward counted kernel by
    kernel (model.mamba). 0 for a model without mixers."""
    mamba = Hy.mamba_share(m) > 0

    def pass_time(stream_bytes, scan_bytes, scan_flops, backward):
        per_token = stream_bytes / hbm_rate(g) + ssd_time_per_token(m, g, scan_bytes, scan_flops, backward)
        return jnp.where(mamba, tokens / tp * per_token, 0.0)

    return (pass_time(Mb.stream_forward_bytes_per_token(m), Mb.scan_forward_bytes_per_token(m),
                      Mb.scan_forward_flops_per_token(m), False),
            pass_time(Mb.stream_backward_bytes_per_token(m), Mb.scan_backward_bytes_per_token(m),
                      Mb.scan_backward_flops_per_token(m), True))


CROSS_ENTROPY_BYTES = 20.0
# One no-grad cross-entropy forward over bf16 logits under autocast: read bf16 (2), write the
# fp32 upcast (4), log-softmax reads it and writes fp32 (4 + 4): 14 bytes per logit.
METRIC_LOSS_BYTES = 14.0


def core_backward_factor(t: Training):
    """Backward / forward time of the attention core: 2 for the two unfused GEMMs' gradients;
    2.5 for a flash kernel, which recomputes the scores blockwise (Dao et al. 2022, Alg. 4;
    FlashAttention benchmarks count backward FLOPs as 2.5x forward)."""
    return jnp.where(t.flash_attention > 0, 2.5, 2.0)


def microbatch_compute_time(m: ModelSpec, g: GPUSpec, t: Training, tp, cp, layers_per_stage, last_stage, ep=1.0,
                            etp=None):
    """Forward + backward (+ recompute) compute time (s) of one micro-batch on one stage.

    Backward costs 2x forward (Narayanan 2021 Sec. 5.1), the flash attention core 2.5x, a
    Mamba-2 mixer's kernels what they move and multiply (model.mamba). ``last_stage`` adds that
    many output heads: the logits GEMM and the cross-entropy over them (1 +
    multi-token-prediction modules on the last stage, 0 elsewhere).
    """
    mlp_gemms = mlp_gemm_times(m, g, t, tp, cp, ep, etp)
    gemm, core, elem = layer_times(m, g, t, tp, cp, ep, etp, mlp_gemms)
    modules = recompute_module_times(m, g, t, tp, cp, core, mlp_gemms)
    per_layer = (3.0 * (gemm + elem) + (1.0 + core_backward_factor(t)) * core
                 + recompute_time(m, t, gemm, core, elem, modules))
    tokens = t.micro_batch * t.seq_len / cp
    # A Mamba-2 mixer's backward is its kernels' own count, not twice the forward (model.mamba).
    mixer_forward, mixer_backward = mamba_mixer_times(m, g, tokens, tp)
    per_layer += Hy.mamba_share(m) * (mixer_backward - 2.0 * mixer_forward)
    # Low-precision recipes quantize each GEMM input forward (again when recomputing) and each
    # output gradient backward, through HBM (model.quantization).
    q_fwd, q_bwd = Q.quantized_elements_per_token(m, t, tp, qkv_width(m), mlp_width_per_token(m),
                                                  mlp_input_width_per_token(m))
    per_layer += (Q.cast_bytes_per_element(t) * tokens * ((1.0 + full_recompute_share(t)) * q_fwd + q_bwd)
                  / hbm_rate(g))
    # The output layer stays in bf16 under fp8 and fp4 recipes: Transformer Engine's autocast
    # covers the transformer layers, Megatron-Core's output layer is a plain bf16 linear.
    logits = 3.0 * gemm_time(tokens, m.hidden, m.vocab / tp, bf16_matmul_flops(g), g)
    # Cross-entropy over tokens x V/tp logits, memory bound: upcast to fp32, max and sum-exp
    # reads, the fp32 softmax kept for backward, the bf16 gradient written: ~20 bytes per
    # logit (engineering estimate; Megatron's vocab-parallel cross-entropy keeps fp32 logits).
    # Plus training metrics computed from the logits after every micro-batch's backward:
    # Composer's trainer (_train_microbatch -> _eval_train_metrics) updates each of llm-foundry's
    # MPT train metrics, LanguageCrossEntropy and LanguagePerplexity, a cross-entropy forward each.
    bytes_per_logit = CROSS_ENTROPY_BYTES + t.metric_loss_passes * METRIC_LOSS_BYTES
    loss = bytes_per_logit * tokens * m.vocab / tp / hbm_rate(g)
    return layers_per_stage * per_layer + last_stage * (logits + loss)


def optimizer_time(local_params, g: GPUSpec):
    """Adam step, memory bound: fp32 master, m, v read + written, bf16 grad read and bf16
    weight written = 28 bytes per local parameter (ZeRO paper, K = 12 optimizer bytes)."""
    return 28.0 * local_params / hbm_rate(g)
