"""Parameter counts and FLOPs of a transformer, hybrid or MoE layer and of a training step.

Conventions: one multiply-add = 2 FLOPs; forward = 1x, backward = 2x (Narayanan et al. 2021,
Sec. 5.1). Shapes follow Megatron: ``b`` micro-batch, ``s`` sequence, ``h`` hidden,
``a`` heads, ``L`` layers, ``V`` vocabulary.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import hybrid as Hy
from . import latent as La
from . import mamba as Mb
from . import recompute_modules as Rm
from . import sac as Sac
from .types import ModelSpec, Training


def head_dim(m: ModelSpec):
    return m.head_dim


def attention_params(m: ModelSpec):
    """Q, K, V and output projection weights of one layer.

    GQA: K, V have kv_heads heads; the query width n_heads x head_dim may differ from hidden
    (Qwen3). MLA (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1.2-2.1.3, Eqs. 9-17): queries through
    a q_lora_rank bottleneck, keys and values up-projected from one kv_lora_rank latent, plus a
    decoupled RoPE key of qk_rope_head_dim shared by the heads; head_dim = nope + rope.
    DeepSeek-V3: 187.1 M per layer.
    """
    h, heads, d_qk, d_v = m.hidden, m.n_heads, m.head_dim, m.v_head_dim
    out = heads * d_v * h
    gqa = h * (heads * d_qk + m.n_kv_heads * (d_qk + d_v)) + out
    q = jnp.where(m.q_lora_rank > 0, h * m.q_lora_rank + m.q_lora_rank * heads * d_qk, h * heads * d_qk)
    kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * heads * (d_qk - m.qk_rope_head_dim + d_v)
    return jnp.where(m.kv_lora_rank > 0, q + kv + out, gqa)


def qkv_width(m: ModelSpec):
    """Output width of Q, K, V (MLA: its down- and up-projections) as one column-parallel GEMM
    of the same FLOPs: the attention weights but the output projection, per hidden unit."""
    return attention_params(m) / m.hidden - m.n_heads * m.v_head_dim


def attention_core_width(m: ModelSpec):
    """Per-query width of the two attention products, QK^T (head_dim) and scores x V (v_head_dim),
    summed over the heads: 2 a d in standard attention."""
    return m.n_heads * (m.head_dim + m.v_head_dim)


def mlp_params(m: ModelSpec, width):
    # Two matrices h x width, plus the gate of SwiGLU (Shazeer 2020; Llama: three matrices).
    return (2.0 + m.glu) * m.hidden * width


def mlp_params_per_expert(m: ModelSpec):
    """One shared expert's weights (it reads the hidden state)."""
    return mlp_params(m, m.moe_ffn_hidden)


def routed_expert_params(m: ModelSpec):
    """One routed expert's weights: its MLP between the routed width (the hidden size, or the
    latent width under LatentMoE, model.latent) and moe_ffn_hidden."""
    return (2.0 + m.glu) * La.routed_width(m) * m.moe_ffn_hidden


def routed_mlp_params(m: ModelSpec, routed_experts):
    """A routed layer's MLP weights counting ``routed_experts`` of its routed experts (all: the
    layer's weights; top_k: those one token passes through), with the shared experts, the router
    (h x n_experts) and the latent projections (model.latent)."""
    return (routed_experts * routed_expert_params(m) + m.n_shared_experts * mlp_params_per_expert(m)
            + m.hidden * m.n_experts + La.projection_params(m))


def moe_layer_fraction(m: ModelSpec):
    """Share of the layers whose MLP is routed experts: the MLP layers but the dense ones of an
    MoE model (DeepSeek-V3: 58 of 61; Nemotron 3 Nano: 23 of 52, model.hybrid), none of a dense model."""
    return jnp.where(m.n_experts > 1, (m.mlp_layers - m.n_dense_layers) / m.n_layers, 0.0)


def dense_mlp_fraction(m: ModelSpec):
    """Share of the layers with a dense MLP: every layer of a dense transformer, the leading dense
    layers of an MoE, the ``-`` layers of a hybrid (model.hybrid)."""
    return Hy.mlp_share(m) - moe_layer_fraction(m)


def routed_params_per_layer(m: ModelSpec):
    """Routed experts' weights of one layer, averaged over the layers (what EP shards)."""
    return moe_layer_fraction(m) * m.n_experts * routed_expert_params(m)


def mlp_width_per_token(m: ModelSpec):
    """MLP width one token passes through, averaged over the layers: ffn_hidden in a dense
    layer, (top_k + shared experts) x moe_ffn_hidden in an MoE layer."""
    f = moe_layer_fraction(m)
    return dense_mlp_fraction(m) * m.ffn_hidden + f * (m.top_k + m.n_shared_experts) * m.moe_ffn_hidden


def mlp_input_width_per_token(m: ModelSpec):
    """Elements per token the MLP GEMMs read, averaged over the layers (and, alike, the output
    gradients of their last GEMMs): h in a dense layer; in a routed one top_k copies of the
    routed width, h for the shared experts (one GEMM), and under LatentMoE the two projections'
    inputs, h and the latent width (model.latent)."""
    f = moe_layer_fraction(m)
    shared = jnp.where(m.n_shared_experts > 0, 1.0, 0.0) * m.hidden
    projections = jnp.where(m.moe_latent_size > 0, m.hidden + m.moe_latent_size, 0.0)
    return dense_mlp_fraction(m) * m.hidden + f * (m.top_k * La.routed_width(m) + shared + projections)


def mlp_params_per_token(m: ModelSpec):
    """MLP weights one token passes through, averaged over the layers: the dense MLP, or top_k
    routed experts, the shared ones, the router and the latent projections (model.latent)."""
    return (dense_mlp_fraction(m) * mlp_params(m, m.ffn_hidden)
            + moe_layer_fraction(m) * routed_mlp_params(m, m.top_k))


def moe_layer_params(m: ModelSpec):
    """All weights of a routed layer: attention, every routed and shared expert, the router,
    the latent projections, two norms."""
    return attention_params(m) + routed_mlp_params(m, m.n_experts) + 2.0 * m.hidden


def layer_params(m: ModelSpec):
    """All weights of one layer, averaged over the layers: its mixers (attention, Mamba-2), its
    MLP (dense or routed experts and router) and a norm per mixer and MLP (model.hybrid)."""
    return (Hy.attention_share(m) * attention_params(m) + Hy.mamba_share(m) * Mb.mixer_params(m)
            + dense_mlp_fraction(m) * mlp_params(m, m.ffn_hidden)
            + moe_layer_fraction(m) * routed_mlp_params(m, m.n_experts) + Hy.sublayers(m) * m.hidden)


def embedding_params(m: ModelSpec, seq_len):
    untied_output = (1.0 - m.tied_embeddings) * m.vocab * m.hidden
    return m.vocab * m.hidden + untied_output + m.learned_positions * seq_len * m.hidden


def total_params(m: ModelSpec, seq_len):
    """Narayanan 2021 Sec. 5.1: P = 12 L h^2 (1 + 13/(12h) + (V+s)/(12 L h)) for GPT-3-style
    models; this general count reduces to it up to the bias terms. A multi-token-prediction
    module adds a layer, a 2h x h projection and two norms; it shares the embedding and the
    output head (DeepSeek-V3 report, Sec. 2.2)."""
    block = jnp.where(m.n_experts > 1, moe_layer_params(m), layer_params(m))  # V3's MTP block is routed
    mtp = m.mtp_layers * (block + 2.0 * m.hidden * m.hidden + 2.0 * m.hidden)
    return m.n_layers * layer_params(m) + embedding_params(m, seq_len) + m.hidden + mtp


def active_params(m: ModelSpec, seq_len):
    """Parameters touched per token (MoE: top_k of the routed experts, and the shared ones)."""
    routed_layers = m.n_layers * moe_layer_fraction(m) + jnp.where(m.n_experts > 1, m.mtp_layers, 0.0)
    inactive = (m.n_experts - m.top_k) * routed_expert_params(m)
    return total_params(m, seq_len) - routed_layers * inactive


def layer_forward_flops(m: ModelSpec, seq_len):
    """Forward FLOPs of one layer per sequence (averaged over the layers), split into (dense
    GEMMs, attention core).

    Dense GEMMs: 2 s x (QKV + proj + the MLP weights a token passes through, the router's
    and LatentMoE's projections among them: mlp_params_per_token); a
    hybrid's Mamba-2 mixers add their projections and their SSD scan (model.mamba), which is linear
    in s and counted here. Attention core: QK^T and scores x V, 2 s^2 a (d_qk + d_v) (= 4 s^2 h
    when a d = h; Narayanan 2021 Eq. 3 derivation; Korthikanti 2022 Sec. 6). Each term is
    weighted by the share of the layers that hold it (model.hybrid).
    """
    s = seq_len
    mixers = Hy.attention_share(m) * attention_params(m) + Hy.mamba_share(m) * Mb.gemm_params(m)
    gemm = 2.0 * s * (mixers + mlp_params_per_token(m))
    scan = s * Hy.mamba_share(m) * Mb.scan_forward_flops_per_token(m)
    core = Hy.attention_share(m) * 2.0 * s * s * attention_core_width(m)
    return gemm + scan, core


def logits_forward_flops(m: ModelSpec, seq_len):
    return 2.0 * seq_len * m.hidden * m.vocab


def model_flops_per_step(m: ModelSpec, t: Training):
    """Model FLOPs (no recompute) per global batch: forward + backward = 3x forward.

    GPT-3-style models: 72 B s L h^2 (1 + s/(6h) + V/(12 L h)), Korthikanti 2022 Eq. 7.
    """
    gemm, core = layer_forward_flops(m, t.seq_len)
    # Each multi-token-prediction module runs one more layer and the output head.
    layers, heads = m.n_layers + m.mtp_layers, 1.0 + m.mtp_layers
    per_seq = 3.0 * (layers * (gemm + core) + heads * logits_forward_flops(m, t.seq_len))
    return t.global_batch * per_seq


def full_recompute_share(t: Training):
    """Share of a stage's layers recomputed whole: 0 up to selective (recompute <= 1), 1 at full
    (2); in between, Megatron's block recompute of that share of the layers
    (--recompute-method block --recompute-num-layers k: recompute = 1 + k / layers), the rest
    selective."""
    return jnp.clip(t.recompute - 1.0, 0.0, 1.0)


def recompute_time(m: ModelSpec, t: Training, gemm, core, elem, modules: Rm.ModuleParts):
    """Forward work repeated in the backward pass of one layer (s or FLOPs): the whole forward
    for fully recomputed layers (Narayanan 2021 Eq. 3), for selective ones the modules that
    Megatron-Core recomputes (the attention core by default, Korthikanti 2022 Sec. 4.2;
    ``modules``: their forward work, model.recompute_modules) or, under torchtitan's per-op policy,
    every second matmul and the pointwise ops (model.sac)."""
    full = full_recompute_share(t)
    per_op = Sac.recomputed_matmul_share(m, mlp_width_per_token(m)) * gemm + elem
    selective = jnp.where(t.selective_op > 0, per_op, Rm.repeated_forward(t, modules))
    return full * (gemm + core + elem) + (1.0 - full) * jnp.where(t.recompute >= 1, selective, 0.0)


def recompute_module_flops(m: ModelSpec, seq_len, core):
    """Forward FLOPs per sequence of one layer's recomputable modules (model.recompute_modules),
    averaged over the layers: the attention core (``core``), MLA's up-projections, the dense
    MLP, the MoE layer (its top_k routed and its shared experts, router and latent
    projections) and the shared experts; the norms and the activation move bytes only."""
    s, f = seq_len, moe_layer_fraction(m)
    return Rm.ModuleParts(
        core_attn=core, mla_up_proj=2.0 * s * Hy.attention_share(m) * Rm.mla_up_params(m), layernorm=0.0,
        moe_act=0.0, mlp=2.0 * s * dense_mlp_fraction(m) * mlp_params(m, m.ffn_hidden),
        moe=2.0 * s * f * routed_mlp_params(m, m.top_k),
        shared_experts=2.0 * s * f * m.n_shared_experts * mlp_params_per_expert(m))


def hardware_flops_per_step(m: ModelSpec, t: Training):
    """FLOPs actually executed, including the recompute forward pass.

    Full recompute repeats every layer's forward (logits are not recomputed):
    96 B s L h^2 (1 + s/(6h) + V/(16 L h)), Narayanan 2021 Eq. 3. Selective recompute
    repeats the modules Megatron-Core recomputes (the attention core by default, Korthikanti
    2022 Sec. 4.2; model.recompute_modules), or, under torchtitan's per-op policy, every second
    matmul (model.sac).
    """
    gemm, core = layer_forward_flops(m, t.seq_len)
    extra = recompute_time(m, t, gemm, core, 0.0, recompute_module_flops(m, t.seq_len, core))
    return model_flops_per_step(m, t) + t.global_batch * m.n_layers * extra
