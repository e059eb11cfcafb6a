"""Per-GPU memory (bytes) on the most loaded pipeline stage, and the feasibility mask."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from . import experts as E
from . import flops as Fl
from . import hybrid as Hy
from . import mamba as Mb
from . import offload as O
from . import pipeline as P
from . import recompute_modules as Rm
from . import sac as Sac
from . import schedules as S
from .types import Layout, ModelSpec, Training

# Mixed-precision Adam: bf16 weights 2 + bf16 grads 2 + fp32 master, m, v 12 bytes per
# parameter (Rajbhandari et al. 2020, ZeRO, Sec. 3.1, K = 12).
WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2.0, 2.0, 12.0


class Memory(NamedTuple):
    weights: object  # bytes per GPU
    grads: object
    optimizer: object
    activations: object  # in HBM
    zero3_buffer: object
    total: object
    host: object  # offloaded activations in host memory (model.offload)
    offloaded_per_micro_batch: object  # of them, one micro-batch's: what is copied out and back
    dense_params: object  # parameters this GPU holds before ZeRO sharding: dense part
    expert_params: object  # ... and MoE experts (sharded over a smaller data-parallel group)
    shard_dense: object  # ranks sharding the dense ZeRO state (see shard_groups)
    shard_expert: object


def local_params(m: ModelSpec, lay: Layout, t: Training):
    """(dense, expert) parameters held by one GPU of the largest stage, before ZeRO.

    Layers split over pp (the busiest rank's, ``model.pipeline.stage_layers``), weights over tp,
    experts over etp x ep (``model.experts``). With pp > 1 the
    first (or last) stage also holds a V x h embedding; with pp == 1 the one stage holds all.
    DualPipe holds two stages per rank (``model.schedules.parameter_copies``).
    """
    layers, _ = P.stage_layers(m.n_layers, lay.pp, lay.vpp, m.mtp_layers)
    # A dense model's MLP is dense: it shards and syncs with the rest over dp x cp.
    experts = Fl.routed_params_per_layer(m)
    dense_layer = Fl.layer_params(m) - experts
    embed = jnp.where(lay.pp > 1, m.vocab * m.hidden, Fl.embedding_params(m, t.seq_len))
    copies = S.parameter_copies(lay.schedule, lay.pp)  # DualPipe: two stages per rank
    dense = copies * (layers * dense_layer + embed) / lay.tp
    expert = copies * layers * experts / (lay.etp * lay.ep)
    return dense, expert


def activation_bytes_per_layer(m: ModelSpec, lay: Layout, t: Training):
    """Stored activations of one layer for one micro-batch (bytes).

    Korthikanti et al. 2022, Table 2: s b h (34 + 5 a s / h) without parallelism;
    s b h (10 + 24/t + 5 a s/(h t)) with TP; s b h / t (34 + 5 a s / h) with TP + SP;
    the 5 a s^2 b term vanishes with selective recompute (or fused attention); full
    recompute keeps only the layer input, 2 s b h (/t with SP). Generalised here to GQA
    (K, V of kv_heads), SwiGLU and MoE (ffn the width a token passes through:
    Fl.mlp_width_per_token). MLP term: Korthikanti's 4 s b ffn is the activation's input and the
    second GEMM's input, bf16 each; SwiGLU keeps its two-branch input (2 ffn wide) and the
    second GEMM's input, 6 s b ffn.
    Low-precision GEMMs (fp8, MXFP8, NVFP4) keep the quantized copy of each GEMM input for the
    weight gradient (Transformer Engine's Linear: "input^T" in FP8 feeds the wgrad GEMM, TE docs,
    low-precision training, "Linear layer data flow"): the QKV, projection, fc1 and fc2 inputs
    at 1 byte, not 2. Attention's Q, K, V and the norms stay bf16.
    Dropout's 1-byte masks (after attention and after the MLP, sbh each; on the scores, a s^2 b,
    with its 2-byte output) are kept only where dropout is on (``t.dropout``, Korthikanti's
    GPT-3 setting); at p = 0 PyTorch's dropout returns its input and keeps nothing
    (aten/src/ATen/native/Dropout.cpp), so a LLaMA-era layer keeps 2 s b h less and 2 a s^2 b of
    its unfused scores' 5.
    A hybrid's layers hold one mixer or one MLP each (model.hybrid): half the replicated term per
    mixer and per MLP, attention's terms on its share of the layers, a Mamba-2 mixer's own
    (model.mamba.stored_activation_bytes_per_token, split over tp) on its share.
    Megatron's selective recompute by module (``recompute_modules``) does not keep what its
    modules would (module_bytes_not_kept). CP splits the sequence, so everything is divided by
    cp. Returns (a layer as the run stores it, a layer whole as full recompute re-materialises
    it in the backward pass).
    """
    s, b, h, tp, cp = t.seq_len, t.micro_batch, m.hidden, lay.tp, lay.cp
    sbh = s * b * h
    low = jnp.where(t.low_precision >= 1, 1.0, 0.0)  # GEMM inputs saved at 1 byte instead of 2
    # Norm inputs, dropout masks (1 byte, with dropout on), QKV / fc1 inputs: 4 + dropout - low
    # bytes per hidden unit per mixer and MLP.
    replicated = (4.0 + t.dropout - low) * Hy.sublayers(m) * sbh
    # Q, context, K, V (MLA: K and V up-projected per head, kv_heads = n_heads); the context is
    # the projection's input.
    attn = Hy.attention_share(m)
    split_attn = attn * (2.0 * s * b * (m.n_heads + m.n_kv_heads) * (m.head_dim + m.v_head_dim)
                         - low * s * b * m.n_heads * m.v_head_dim)
    split_attn += Hy.mamba_share(m) * s * b * Mb.stored_activation_bytes_per_token(m, low)
    # The busiest expert-parallel rank keeps its excess of routed tokens too (model.experts).
    routed_excess = (E.busiest_rank_tokens(t) - 1.0) * Fl.moe_layer_fraction(m) * m.top_k * m.moe_ffn_hidden
    split_mlp = s * b * (Fl.mlp_width_per_token(m) + routed_excess) * (4.0 + 2.0 * m.glu - low)
    scores = attn * (2.0 + 3.0 * t.dropout) * m.n_heads * s * s * b  # softmax output (+ mask, dropout output)
    # Selective recompute drops the attention core's scores (torchtitan's per-op policy and
    # Megatron's default, core_attn), or what the modules it names would keep (model.recompute_modules).
    rc = Rm.flags(t)
    core_recomputed = (t.recompute > 1) | ((t.recompute >= 1) & ((t.selective_op > 0) | (rc.core_attn > 0)))
    keep_scores = jnp.where(~core_recomputed & (t.flash_attention < 1), 1.0, 0.0)
    sp_div = jnp.where(t.seq_parallel > 0, tp, 1.0)
    stored = replicated / sp_div + (split_attn + split_mlp + keep_scores * scores) / tp
    selective = stored - module_bytes_not_kept(m, t, rc, s * b, low, sp_div, tp)
    # torchtitan's per-op policy keeps only what it saves (model.sac), in a dense attention layer;
    # its MoE, MLA and Mamba layers keep the selective bound above.
    selective = jnp.where(per_op_layers(m, t), s * b * Sac.stored_bytes_per_token(m, tp, sp_div), selective)
    full_recompute = 2.0 * sbh / sp_div
    share = Fl.full_recompute_share(t)  # block recompute: that share of the layers keeps only its input
    return (share * full_recompute + (1.0 - share) * selective) / cp, stored / cp


def per_op_layers(m: ModelSpec, t: Training):
    """Whether every layer is a dense attention block that torchtitan's per-op selective
    policy (model.sac) checkpoints."""
    dense = (m.n_experts <= 1) & (Hy.mamba_share(m) <= 0) & (m.kv_lora_rank <= 0)
    return dense & (t.recompute == 1) & (t.selective_op > 0)


def module_bytes_not_kept(m: ModelSpec, t: Training, rc, tokens, low, sp_div, tp):
    """Bytes of one layer's stored activations (``activation_bytes_per_layer``'s terms, per
    micro-batch of ``tokens``) that Megatron's recomputed modules ``rc`` do not keep
    (model.recompute_modules): mla_up_proj the per-head Q, K and V; layernorm the two norms'
    outputs where the linears would keep them in bf16 (a low-precision linear keeps its own
    quantized copy); moe_act the routed experts' activation output, fc2's input; mlp, moe and
    shared_experts everything their MLP term holds (the block's input, the norm's output, stays)."""
    mla = jnp.where(m.kv_lora_rank > 0, 1.0, 0.0) * Hy.attention_share(m) * 2.0 * (
        m.n_heads * m.head_dim + m.n_kv_heads * (m.head_dim + m.v_head_dim))
    norms = 2.0 * (1.0 - low) * Hy.sublayers(m) * m.hidden
    f, per_width = Fl.moe_layer_fraction(m), 4.0 + 2.0 * m.glu - low  # split_mlp's bytes per element
    routed = f * E.busiest_rank_tokens(t) * m.top_k * m.moe_ffn_hidden  # with the busiest rank's excess
    shared = f * m.n_shared_experts * m.moe_ffn_hidden
    dense = Fl.dense_mlp_fraction(m) * m.ffn_hidden
    return tokens * (rc.mla_up_proj * mla / tp + rc.layernorm * norms / sp_div
                     + rc.moe_act * (2.0 - low) * routed / tp
                     + per_width * (rc.mlp * dense + rc.moe * (routed + shared) + rc.shared_experts * shared) / tp)


# layout.zero_shard codes; a positive code is that many data-parallel ranks.
ZERO_SHARD = {"stack": 0.0, "node": -1.0, "all": -2.0}


def shard_groups(lay: Layout, t: Training, dp, gpus_per_node):
    """(dense, expert) ranks over which ZeRO shards its state. ``layout.zero_shard``: all = the
    data-parallel group dp*cp; node = its ranks inside one node (ranks are ordered tp, cp, dp, so a
    node holds gpus_per_node/tp of them), every node a replica (PyTorch FSDP HYBRID_SHARD, Zhao et
    al. 2023, arXiv:2304.11277, Sec. 3.2; ZeRO++ hpZ, Wang et al. 2023, arXiv:2306.10209, Sec. 3.2;
    InternEvo's hierarchical ZeRO, Chen et al. 2024, arXiv:2401.09149); N = groups of N ranks;
    stack = node for ZeRO-3 where the stack's ``hybrid_shard`` says so, else all. Experts shard over
    their share of it (the expert-data-parallel group tp*cp*dp/(etp*ep) when all)."""
    full = dp * lay.cp
    in_node = jnp.clip(gpus_per_node / lay.tp, 1.0, full)
    stack_group = jnp.where((t.hybrid_shard > 0) & (t.zero_stage >= 3), in_node, full)
    code = lay.zero_shard
    dense = jnp.where(code == ZERO_SHARD["stack"], stack_group,
                      jnp.where(code == ZERO_SHARD["node"], in_node,
                                jnp.where(code == ZERO_SHARD["all"], full, jnp.clip(code, 1.0, full))))
    return dense, jnp.maximum(dense * lay.tp / (lay.etp * lay.ep), 1.0)


def memory(m: ModelSpec, lay: Layout, t: Training, dp, n_micro, gpus_per_node):
    """Bytes per GPU: weights, grads, optimizer state (ZeRO 1/2/3 sharded over
    ``shard_groups``), activations of the micro-batches in flight on the busiest stage
    (``model.schedules.in_flight``) less those of the offloaded layers (``model.offload``), which sit in
    host memory (``host``) while one layer's copy is in flight, and the ZeRO-3 gather buffer."""
    dense, expert = local_params(m, lay, t)
    shard_dense, shard_expert = shard_groups(lay, t, dp, gpus_per_node)

    def sharded(nbytes, stage):
        return nbytes * (dense / jnp.where(t.zero_stage >= stage, shard_dense, 1.0)
                         + expert / jnp.where(t.zero_stage >= stage, shard_expert, 1.0))

    # ZeRO-3 under PP holds the stage's weights gathered and its gradients unsharded through
    # the step (FSDP2 with reshard_after_forward False, see job.jct): only the optimizer is sharded.
    gathered = (lay.pp > 1) & (t.zero_stage >= 3)
    whole = dense + expert
    weights = jnp.where(gathered, WEIGHT_BYTES * whole, sharded(WEIGHT_BYTES, 3))
    grads = jnp.where(gathered, GRAD_BYTES * whole, sharded(GRAD_BYTES, 2))
    optimizer = sharded(OPTIMIZER_BYTES, 1)

    per_layer, per_layer_full = activation_bytes_per_layer(m, lay, t)
    layers, _ = P.stage_layers(m.n_layers, lay.pp, lay.vpp, m.mtp_layers)
    in_flight = S.in_flight(lay.schedule, lay.pp, lay.vpp, n_micro)  # per schedule (model.schedules)
    # Full recompute, and torchtitan's per-op policy, re-materialise one layer at a time during
    # backward.
    working = jnp.where((t.recompute > 1) | per_op_layers(m, t), per_layer_full, 0.0)
    # The logits at the loss's peak, logit_bytes per element (config.schema.TrainingConf).
    logits = t.logit_bytes * t.seq_len * t.micro_batch * m.vocab / (lay.tp * lay.cp)
    offloaded = O.offloaded_share(t, layers)
    offloaded_per_micro_batch = layers * offloaded * per_layer
    host = in_flight * offloaded_per_micro_batch
    in_transit = jnp.where(offloaded > 0, per_layer, 0.0)
    activations = in_flight * layers * per_layer - host + in_transit + working + logits

    layer_weights = Fl.layer_params(m) / lay.tp
    zero3_buffer = jnp.where((t.zero_stage >= 3) & ~gathered, 2.0 * WEIGHT_BYTES * layer_weights, 0.0)
    total = weights + grads + optimizer + activations + zero3_buffer + 1e9 * t.reserved_gb
    return Memory(weights, grads, optimizer, activations, zero3_buffer, total, host, offloaded_per_micro_batch, dense, expert,
                  shard_dense, shard_expert)
