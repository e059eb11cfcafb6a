"""Parameter counts, FLOPs and achieved compute time of a transformer layer.

Conventions: one multiply-add = 2 FLOPs; forward = 1x, backward = 2x (Narayanan et al. 2021,
Sec. 5.1). Shapes follow Megatron: ``b`` micro-batch, ``s`` sequence, ``h`` hidden,
``a`` heads, ``L`` layers, ``V`` vocabulary.
"""

from __future__ import annotations

import jax.numpy as jnp

from ._types import GPUSpec, ModelSpec, Training


def head_dim(m: ModelSpec):
    return m.hidden / m.n_heads


def attention_params(m: ModelSpec):
    """Q, K, V and output projection weights of one layer (GQA: K, V have kv_heads heads)."""
    kv_dim = m.n_kv_heads * head_dim(m)
    return m.hidden * (2.0 * m.hidden + 2.0 * kv_dim)


def mlp_params_per_expert(m: ModelSpec):
    # Two matrices h x ffn, plus the gate of SwiGLU (Shazeer 2020; Llama: three matrices).
    return (2.0 + m.glu) * m.hidden * m.ffn_hidden


def layer_params(m: ModelSpec):
    """All weights of one layer: attention, every expert's MLP, router, two norms."""
    router = jnp.where(m.n_experts > 1, m.hidden * m.n_experts, 0.0)
    return attention_params(m) + m.n_experts * mlp_params_per_expert(m) + router + 2.0 * m.hidden


def embedding_params(m: ModelSpec, seq_len):
    untied_output = (1.0 - m.tied_embeddings) * m.vocab * m.hidden
    return m.vocab * m.hidden + untied_output + m.learned_positions * seq_len * m.hidden


def total_params(m: ModelSpec, seq_len):
    """Narayanan 2021 Sec. 5.1: P = 12 L h^2 (1 + 13/(12h) + (V+s)/(12 L h)) for GPT-3-style
    models; this general count reduces to it up to the bias terms."""
    return m.n_layers * layer_params(m) + embedding_params(m, seq_len) + m.hidden


def active_params(m: ModelSpec, seq_len):
    """Parameters touched per token (MoE: top_k of n_experts)."""
    inactive = (m.n_experts - m.top_k) * mlp_params_per_expert(m)
    return total_params(m, seq_len) - m.n_layers * inactive


def layer_forward_flops(m: ModelSpec, seq_len):
    """Forward FLOPs of one layer per sequence, split into (dense GEMMs, attention core).

    Dense GEMMs: 2 s x (QKV + proj + top_k MLPs) weights. Attention core: QK^T and
    scores x V, 2 * 2 s^2 h (Narayanan 2021 Eq. 3 derivation; Korthikanti 2022 Sec. 6).
    """
    s = seq_len
    gemm = 2.0 * s * (attention_params(m) + m.top_k * mlp_params_per_expert(m))
    router = jnp.where(m.n_experts > 1, 2.0 * s * m.hidden * m.n_experts, 0.0)
    core = 4.0 * s * s * m.hidden
    return gemm + router, core


def logits_forward_flops(m: ModelSpec, seq_len):
    return 2.0 * seq_len * m.hidden * m.vocab


def model_flops_per_step(m: ModelSpec, t: Training):
    """Model FLOPs (no recompute) per global batch: forward + backward = 3x forward.

    GPT-3-style models: 72 B s L h^2 (1 + s/(6h) + V/(12 L h)), Korthikanti 2022 Eq. 7.
    """
    gemm, core = layer_forward_flops(m, t.seq_len)
    per_seq = 3.0 * (m.n_layers * (gemm + core) + logits_forward_flops(m, t.seq_len))
    return t.global_batch * per_seq


def hardware_flops_per_step(m: ModelSpec, t: Training):
    """FLOPs actually executed, including the recompute forward pass.

    Full recompute repeats every layer's forward (logits are not recomputed):
    96 B s L h^2 (1 + s/(6h) + V/(16 L h)), Narayanan 2021 Eq. 3. Selective recompute
    repeats only the attention core (Korthikanti 2022 Sec. 4.2).
    """
    gemm, core = layer_forward_flops(m, t.seq_len)
    extra = jnp.where(t.recompute >= 2, gemm + core, jnp.where(t.recompute >= 1, core, 0.0))
    return model_flops_per_step(m, t) + t.global_batch * m.n_layers * extra


# --- achieved time ------------------------------------------------------------------------


def matmul_peak_flops(g: GPUSpec, t: Training):
    """Achievable GEMM FLOP/s for large shapes: peak x best measured fraction (MAMF)."""
    fp8_rate = g.peak_fp8_tflops * g.fp8_matmul_eff
    bf16_rate = g.peak_bf16_tflops * g.matmul_eff
    return 1e12 * jnp.where(t.fp8 > 0, fp8_rate, bf16_rate)


def gemm_time(m_dim, k_dim, n_dim, flops_per_s, g: GPUSpec, bytes_per_el=2.0):
    """Roofline time (s) of one (m x k) @ (k x n) GEMM.

    Compute side: the efficiency falls for thin GEMMs, d / (d + d_half) on the smallest
    dimension (tile quantisation; shape-dependence as in Calculon / Isaev et al. 2023).
    Memory side: operands and result streamed once through HBM.
    """
    d_min = jnp.minimum(jnp.minimum(m_dim, k_dim), n_dim)
    shape_eff = d_min / (d_min + g.matmul_half_dim)
    t_compute = 2.0 * m_dim * k_dim * n_dim / (flops_per_s * shape_eff)
    t_memory = bytes_per_el * (m_dim * k_dim + k_dim * n_dim + m_dim * n_dim) / hbm_rate(g)
    return jnp.maximum(t_compute, t_memory)


def hbm_rate(g: GPUSpec):
    """Achieved HBM bytes/s for streaming (memory-bound) kernels."""
    return 1e12 * g.hbm_tbps * g.mem_eff


def layer_gemm_times(m: ModelSpec, g: GPUSpec, t: Training, tp, cp):
    """Forward time (s) of one layer's GEMMs for one micro-batch on one GPU, split into
    (column-parallel: QKV and MLP up, row-parallel: attention output and MLP down).

    Tokens per GPU are b s / cp (context parallel splits the sequence); weights are split
    over tp (Megatron column/row parallel). MoE expert GEMMs see top_k x tokens spread over
    n_experts (balanced routing).
    """
    rate = matmul_peak_flops(g, t)
    tokens = t.micro_batch * t.seq_len / cp
    h, d = m.hidden, head_dim(m)
    kv_dim = m.n_kv_heads * d
    qkv = gemm_time(tokens, h, (h + 2.0 * kv_dim) / tp, rate, g)
    proj = gemm_time(tokens, h / tp, h, rate, g)
    # Each expert sees top_k * tokens / n_experts tokens of this GPU's share.
    expert_tokens = tokens * m.top_k / m.n_experts
    up = gemm_time(expert_tokens, h, (1.0 + m.glu) * m.ffn_hidden / tp, rate, g)
    down = gemm_time(expert_tokens, m.ffn_hidden / tp, h, rate, g)
    return qkv + m.n_experts * up, proj + m.n_experts * down


def layer_times(m: ModelSpec, g: GPUSpec, t: Training, tp, cp):
    """Forward time (s) of one layer for one micro-batch on one GPU, split into
    (GEMMs, attention core, memory-bound elementwise ops)."""
    column, row = layer_gemm_times(m, g, t, tp, cp)
    tokens = t.micro_batch * t.seq_len / cp
    h, d = m.hidden, head_dim(m)
    # Attention core, forward: per head (s/cp x d) @ (d x s) and (s/cp x s) @ (s x d), bf16
    # even in fp8. A fused (flash) kernel never writes the s x s scores, skips the masked half
    # of a causal square and runs at attn_eff of the bf16 peak, its FLOPs counted as
    # FlashAttention's benchmarks count them (Dao 2023, Sec. 4.1); unfused, the full square
    # runs as two thin GEMMs (head dimension d) and scores, softmax and dropout are written
    # and re-read, ~12 bytes per score.
    core_flops = 4.0 * t.micro_batch * t.seq_len * t.seq_len * h / (tp * cp)
    flash = 0.5 * core_flops / (1e12 * g.peak_bf16_tflops * g.attn_eff)
    scores = t.micro_batch * m.n_heads / tp * t.seq_len * t.seq_len / cp
    bf16 = 1e12 * g.peak_bf16_tflops * g.matmul_eff
    unfused = core_flops / (bf16 * d / (d + g.matmul_half_dim)) + 12.0 * scores / hbm_rate(g)
    core = jnp.where(t.flash_attention > 0, flash, unfused)
    # Elementwise traffic (bytes, bf16) of Megatron's fused kernels, per token: two layer
    # norms (read + write h: 2 x 2h), two bias-dropout-adds (read output and residual, write
    # h, a 1-byte mask: 2 x 3.5h), the bias-activation over ffn (read + write); norms and
    # dropouts split by tp under SP. Korthikanti et al. 2022 Table 4 (22B layer): SP saves
    # 0.5 ms of 7.7 forward, i.e. ~10h bytes of replicated traffic at tp = 8.
    sp_div = jnp.where(t.seq_parallel > 0, tp, 1.0)
    elementwise_bytes = 2.0 * tokens * (11.0 * h / sp_div + 2.0 * (1.0 + m.glu) * m.top_k * m.ffn_hidden / tp)
    elementwise = elementwise_bytes / hbm_rate(g)
    return column + row, core, elementwise


CROSS_ENTROPY_BYTES = 20.0
# One no-grad cross-entropy forward over bf16 logits under autocast: read bf16 (2), write the
# fp32 upcast (4), log-softmax reads it and writes fp32 (4 + 4): 14 bytes per logit.
METRIC_LOSS_BYTES = 14.0


def core_backward_factor(t: Training):
    """Backward / forward time of the attention core: 2 for the two unfused GEMMs' gradients;
    2.5 for a flash kernel, which recomputes the scores blockwise (Dao et al. 2022, Alg. 4;
    FlashAttention benchmarks count backward FLOPs as 2.5x forward)."""
    return jnp.where(t.flash_attention > 0, 2.5, 2.0)


def microbatch_compute_time(m: ModelSpec, g: GPUSpec, t: Training, tp, cp, layers_per_stage, last_stage):
    """Forward + backward (+ recompute) compute time (s) of one micro-batch on one stage.

    Backward costs 2x forward (Narayanan 2021 Sec. 5.1), the flash attention core 2.5x.
    ``last_stage`` (0/1) adds the output logits GEMM and the cross-entropy over them.
    """
    gemm, core, elem = layer_times(m, g, t, tp, cp)
    recompute = jnp.where(t.recompute >= 2, gemm + core + elem, jnp.where(t.recompute >= 1, core, 0.0))
    per_layer = 3.0 * (gemm + elem) + (1.0 + core_backward_factor(t)) * core + recompute
    tokens = t.micro_batch * t.seq_len / cp
    logits = 3.0 * gemm_time(tokens, m.hidden, m.vocab / tp, matmul_peak_flops(g, t), g)
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
