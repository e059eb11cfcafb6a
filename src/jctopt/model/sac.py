"""torchtitan's per-op selective activation checkpointing: what its recompute repeats.

Megatron's selective recompute (Korthikanti et al. 2022 Sec. 4.2) repeats a layer's attention
core in the backward pass. torchtitan's "selective op" policy (the default of its Llama
configs, ``activation_checkpoint.selective_ac_option = "op"``) saves the outputs of the compute
and communication ops instead (its ``_save_list``: ``aten.mm``, the flash / efficient SDPA
kernels, ``reduce_scatter_tensor``, ``max``) "except every second mm" (pytorch/torchtitan
torchtitan/models/llama3/parallelize_llama.py @820504e, ``_custom_policy``), and recomputes what
it does not save: every second matmul of a transformer block, counted in execution order, and
the pointwise ops between (norms, activation, RoPE), never the attention core. Under tensor
parallelism with sequence parallelism the all-gathers are not saved either, so the recompute
gathers the layer's inputs again (the reduce-scatters it keeps).

A Llama block runs its matmuls as wq, wk, wv, wo, then the feed-forward's w1, w3, w2
(``w2(silu(w1(x)) * w3(x))``); the counter restarts in every block, so wk, wo and w3 are
recomputed; a non-gated MLP (w1, w2) recomputes wk, wo and w2.

What a block keeps for its backward is therefore the checkpoint's input and the outputs of the
saved ops, nothing else (torch.utils.checkpoint's selective policy, MUST_SAVE vs
PREFER_RECOMPUTE): the layer input, wq's and wv's outputs, the attention output, w1's and (gated)
w2's outputs, and under tensor parallelism the reduce-scatters' outputs; a norm, RoPE or the
activation keeps nothing (same file @9dec370, the 2024-12 benchmarks' commit). torchao's float8
linears run ``_scaled_mm``, not ``mm``, so the policy would save none of their outputs, but the
2024-12 tables measure float8 at the bf16 runs' memory (76.8 vs 77.0 GiB): the same bytes are
kept for both.
"""

from __future__ import annotations

import jax.numpy as jnp

from .types import ModelSpec


def recomputed_matmul_share(m: ModelSpec, width):
    """Share of a layer's forward GEMM FLOPs that the per-op policy repeats: every second of
    its matmuls in execution order, each weighted by its weight's size (the same tokens pass
    through every one). ``width``: the MLP width a token passes through
    (``model.compute.mlp_width_per_token``: an MoE layer's top-k and shared experts)."""
    h = m.hidden
    q, kv = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
    context = m.n_heads * m.v_head_dim
    # wq, wk, wv, wo; then (w1, w3, w2) gated or (w1, w2): the 2nd, 4th and 6th are recomputed.
    attention = h * q + h * kv + h * kv + context * h
    mlp = (2.0 + m.glu) * h * width
    recomputed = h * kv + context * h + h * width
    return recomputed / (attention + mlp)


def stored_bytes_per_token(m: ModelSpec, tp, sp_div):
    """Bytes of one dense layer's activations the per-op policy keeps per token and GPU (bf16):
    the layer input (split by sequence parallelism), wq's output (heads x head_dim), wv's
    (kv_heads x v_head_dim), the attention output (heads x v_head_dim) and w1's (ffn_hidden),
    split over tp; a gated MLP's w2 output, a row-parallel partial sum as wide as the hidden size
    on every TP rank; with tp > 1, the outputs of the two reduce-scatters (split by sequence)."""
    h = m.hidden
    split = m.n_heads * m.head_dim + m.n_kv_heads * m.v_head_dim + m.n_heads * m.v_head_dim + m.ffn_hidden
    reduce_scatters = jnp.where(tp > 1, 2.0 * h / sp_div, 0.0)
    return 2.0 * (h / sp_div + split / tp + m.glu * h + reduce_scatters)
