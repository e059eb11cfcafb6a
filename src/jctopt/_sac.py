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
"""

from __future__ import annotations

from ._types import ModelSpec


def recomputed_matmul_share(m: ModelSpec, width):
    """Share of a layer's forward GEMM FLOPs that the per-op policy repeats: every second of
    its matmuls in execution order, each weighted by its weight's size (the same tokens pass
    through every one). ``width``: the MLP width a token passes through
    (``_compute.mlp_width_per_token``: an MoE layer's top-k and shared experts)."""
    h = m.hidden
    q, kv = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
    context = m.n_heads * m.v_head_dim
    # wq, wk, wv, wo; then (w1, w3, w2) gated or (w1, w2): the 2nd, 4th and 6th are recomputed.
    attention = h * q + h * kv + h * kv + context * h
    mlp = (2.0 + m.glu) * h * width
    recomputed = h * kv + context * h + h * width
    return recomputed / (attention + mlp)
