"""Pytrees that carry one configuration (or a batch of them) through the model.

Every leaf is a floating-point array so that one compiled function serves any mix of
configurations, and so that every continuous quantity stays differentiable. Discrete
choices (recompute mode, ZeRO stage, flags) are floats too and are selected with
``jnp.where``; they change values, never the traced graph.

Shapes: ``()`` for one configuration, ``(n_cfg,)`` for a batch. Units are in the names.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import Array


class ModelSpec(NamedTuple):
    n_layers: Array
    hidden: Array
    ffn_hidden: Array  # dense MLP width (every layer of a dense model, the leading dense layers of an MoE)
    n_heads: Array
    n_kv_heads: Array  # == n_heads without GQA
    vocab: Array
    glu: Array  # 1 = gated MLP (SwiGLU: three matrices), 0 = two matrices
    n_experts: Array  # 1 for a dense model
    top_k: Array  # experts per token (1 for a dense model)
    tied_embeddings: Array  # 1 = input and output embedding share weights
    learned_positions: Array  # 1 = learned absolute position embeddings (seq_len x hidden)
    head_dim: Array  # per attention head (hidden / n_heads unless the model says otherwise)
    moe_ffn_hidden: Array  # one expert's MLP width
    n_shared_experts: Array  # experts every token passes through (DeepSeek, Llama 4)
    n_dense_layers: Array  # leading layers with a dense MLP in an MoE model
    v_head_dim: Array  # value head (= head_dim except in MLA)
    q_lora_rank: Array  # MLA query compression (0: none)
    kv_lora_rank: Array  # MLA key-value compression; 0 = not MLA
    qk_rope_head_dim: Array  # MLA decoupled RoPE key dimension
    mtp_layers: Array  # multi-token-prediction modules (layer + output head) on the last stage
    moe_latent_size: Array  # routed experts' width under LatentMoE (model.latent); 0 = hidden
    attention_window: Array  # sliding window, tokens (model.window); 0 = none
    window_layers: Array  # attention layers with the window (the rest attend causally to the whole sequence)
    # Hybrid models (model.hybrid): layers holding each kind; a transformer has attention and an MLP in every layer.
    attention_layers: Array  # layers with an attention mixer (n_layers in a transformer)
    mamba_layers: Array  # layers with a Mamba-2 mixer (0 in a transformer)
    mlp_layers: Array  # layers with an MLP, dense or routed (n_layers in a transformer)
    mamba_heads: Array  # Mamba-2 mixer (model.mamba): heads
    mamba_head_dim: Array  # channels per head
    mamba_state: Array  # SSM state size N
    mamba_groups: Array  # B/C groups (heads share them in groups)


class GPUSpec(NamedTuple):
    peak_bf16_tflops: Array  # dense tensor-core peak
    peak_fp8_tflops: Array  # 0 where the GPU has no fp8
    peak_fp4_tflops: Array  # NVFP4; 0 where the GPU has no fp4
    hbm_gb: Array
    hbm_tbps: Array
    nvlink_gbps: Array  # GB/s per GPU, one direction
    nvlink_domain: Array  # GPUs sharing one NVLink/xGMI switch domain
    nvls: Array  # 1 = NVLink SHARP in-switch reduction available
    tdp_w: Array
    price_per_gpu_hour: Array  # USD
    matmul_eff: Array  # best achieved / peak for large bf16 GEMMs
    fp8_matmul_eff: Array  # best achieved / peak for large fp8 GEMMs
    matmul_half_dim: Array  # GEMM dimension at which efficiency is half its maximum
    attn_eff: Array  # fused (flash) attention fwd+bwd sustained / bf16 peak, FLOPs counted as FlashAttention does; the fixed cost per call is model.attention's
    fused_attn_eff: Array  # the architecture's own fused attention kernel (cuDNN via Transformer Engine), fwd+bwd sustained / bf16 peak as attn_eff; 0: none faster than attn_eff's
    fp8_attn_speedup: Array  # bf16 / fp8 time of the fused attention core, fwd+bwd, heads with their own K/V (MHA, MLA); 1 = none measured
    fp8_attn_speedup_gqa: Array  # the same for grouped-query heads
    ssd_eff: Array  # Mamba-2 SSD kernels: roofline time / measured time; 1 = none measured
    ssd_bwd_eff: Array  # the same for their backward kernels
    nvfp4_gemm_speedup: Array  # NVFP4 / FP8 GEMM rate, large shapes, measured; 0 = none measured: the peak ratio
    mxfp8_gemm_ratio: Array  # MXFP8 / per-tensor FP8 GEMM rate, large shapes, measured; 1 = none measured; 0 = no MXFP8
    mem_eff: Array  # achieved / peak HBM bandwidth for streaming kernels
    nvlink_eff: Array  # ring all-reduce bus bandwidth / nvlink_gbps
    nvls_eff: Array  # NVLS all-reduce bus bandwidth / (2 * nvlink_gbps)
    nvlink_latency_us: Array  # alpha per ring step inside the domain (Simple protocol)
    ll_latency_us: Array  # alpha per ring step with NCCL's low-latency (LL) protocol
    mtbf_gpu_h: Array
    host_link_gbps: Array  # GB/s per direction to host memory (PCIe, NVLink-C2C), for activation offloading
    host_mem_gb: Array  # host memory per GPU available to offloaded activations


class FabricSpec(NamedTuple):
    nic_gbit: Array  # line rate of one NIC, Gbit/s
    nic_eff: Array  # achieved / line rate for large messages
    latency_us: Array  # alpha per hop across the scale-out fabric
    rdma: Array  # 1 = GPUDirect RDMA; 0 = TCP sockets (host copies)
    host_copy_gbps: Array  # GB/s per GPU of host memcpy bandwidth on the TCP path
    sharp: Array  # 1 = in-network reduction (IB SHARP) available
    mtbf_nic_h: Array
    mtbf_switch_h: Array


class ClusterSpec(NamedTuple):
    gpus_per_node: Array
    nics_per_node: Array
    rail_optimized: Array  # 1 = rail-optimized leaves, 0 = fat-tree with ToR per node group
    oversubscription: Array  # leaf uplink oversubscription (1 = full bisection)
    switch_radix: Array  # ports per switch
    mtbf_node_h: Array  # host failures (CPU, memory, PSU, software) per node
    storage_write_gbps: Array  # GB/s, aggregate persistent storage write
    storage_read_gbps: Array  # GB/s, aggregate read (restart)
    staging_gbps: Array  # GB/s, aggregate fast tier for async checkpoints (host RAM / NVMe)
    t_drain_s: Array
    t_provision_s: Array
    t_reinit_s: Array
    jitter_cv: Array  # per-rank step-time coefficient of variation (stragglers)
    serial_s_per_step: Array  # Amdahl serial part per step (data loading, logging)
    init_s: Array  # one-off job start-up
    power_frac: Array  # average draw / TDP while training
    gpu_power_limit_w: Array  # board power limit set by the operator (W); 0 = the GPU's TDP (model.power)
    pue: Array
    energy_price_kwh: Array  # USD per kWh


class Layout(NamedTuple):
    n_gpus: Array
    tp: Array
    pp: Array
    cp: Array
    ep: Array  # expert parallel (model.experts: carved from tp x cp x dp with etp x ep x edp)
    vpp: Array  # virtual (interleaved) stages per pipeline rank
    etp: Array  # expert tensor parallel: ranks splitting each expert; tp without MoE parallel folding
    schedule: Array  # pipeline schedule code (model.schedules.SCHEDULES: 1f1b, zb_h1, zb_v, dualpipe)
    zero_shard: Array  # ZeRO shard group (model.memory.ZERO_SHARD): the stack's, a node, all, or N data-parallel ranks


class Training(NamedTuple):
    seq_len: Array
    global_batch: Array  # sequences per optimizer step
    micro_batch: Array  # sequences per micro-batch per data-parallel rank
    recompute: Array  # 0 none, 1 selective (the recompute_* modules: the attention core by default), 2 full; 1 + share of layers in between (block)
    selective_op: Array  # 1 = selective recompute is torchtitan's per-op policy (model.sac), 0 = the attention core
    # Megatron-Core's selective recompute by module (model.recompute_modules): 1 = recomputed
    recompute_core_attn: Array
    recompute_mla_up_proj: Array
    recompute_layernorm: Array
    recompute_moe_act: Array
    recompute_mlp: Array
    recompute_moe: Array
    recompute_shared_experts: Array
    zero_stage: Array  # 0..3
    hybrid_shard: Array  # 1 = ZeRO-3 state sharded inside a node only, nodes are replicas (FSDP HYBRID_SHARD)
    zero3_collectives_per_layer: Array  # ZeRO-3 all-gathers (reduce-scatters) per layer and pass
    zero3_regather: Array  # 1 = ZeRO-3 gathers the weights again for a recomputed forward (DeepSpeed; model.zero3_gathers)
    seq_parallel: Array  # 1 = Megatron sequence parallelism with TP
    flash_attention: Array  # 1 = attention scores are never stored
    fused_attention: Array  # 1 = Transformer Engine's cuDNN fused attention (at fused_attn_eff where the GPU has it), 0 = FlashAttention-2
    fp8_attention: Array  # 1 = the fused attention core in FP8 where the GEMMs are (low_precision >= 1), model.attention
    fused_elementwise: Array  # 1 = norms, activation, RoPE as fused kernels (TE, Apex, XLA, torch.compile), 0 = eager PyTorch (model.eager)
    dropout: Array  # 1 = hidden and attention dropout on (masks kept for backward), 0 = none, as LLaMA-era recipes
    low_precision: Array  # GEMMs in 0 bf16/fp16, 1 fp8 or MXFP8, 2 NVFP4 (config.choices.PRECISION)
    mxfp8: Array  # 1 = the fp8 GEMMs block-scaled (MXFP8: an E8M0 scale per 32 elements), 0 = per-tensor or blockwise
    grad_bytes: Array  # bytes per gradient element on the wire
    grad_compression: Array  # wire bytes / uncompressed bytes (1 = none)
    kernel_eff: Array  # the stack's share of the catalog's kernel efficiencies (job.jct.effective_gpu)
    overlap_eta: Array  # fraction of the overlap window that hides DP traffic (DDP buckets, Megatron)
    zero3_overlap_eta: Array  # the same for ZeRO-3's gathers, reduce-scatters and HYBRID_SHARD all-reduce
    megatron_fsdp: Array  # 1 = ZeRO-3 by Megatron-FSDP (prefetched, double-buffered): its own overlap (model.megatron_fsdp)
    dp_overlap: Array  # 1 = data-parallel traffic (gradient sync, ZeRO-3 gathers) overlapped with compute
    mp_comm_overlap: Array  # 1 = TP collectives pipelined with the GEMMs, PP sends with compute
    ep_comm_overlap: Array  # 1 = MoE dispatch/combine overlapped with another micro-batch's compute
    ep_two_hop: Array  # 1 = MoE dispatch crosses the fabric once per remote domain (DeepEP, HybridEP), 0 = flat all-to-all
    tp_async_backward: Array  # 1 = column-parallel backward collectives behind the weight-gradient GEMMs
    bucket_mparams: Array  # DDP bucket size, millions of parameters
    metric_loss_passes: Array  # extra no-grad cross-entropy passes over the logits per micro-batch (training metrics)
    moe_host_s: Array  # host (CPU) time to launch one MoE layer's forward + backward per micro-batch, s (model.host)
    moe_router_graphed: Array  # 1 = the router and dispatcher preprocessing replay from CUDA graphs: no launch floor, the dispatcher's sync stays (model.host)
    moe_imbalance: Array  # tokens the busiest EP rank receives / the mean (1 = forced balance; model.experts)
    offload_layers: Array  # layers per stage whose stored activations sit in host memory (model.offload)
    nvfp4_bf16_share: Array  # under NVFP4: share of the transformer layers' linear layers kept in BF16
    logit_bytes: Array  # bytes per logit element at the loss's peak (model.memory): 4 fused fp32, 12 eager PyTorch
    reserved_gb: Array  # CUDA context, NCCL buffers, allocator fragmentation per GPU


class Job(NamedTuple):
    tokens: Array
    ckpt_interval_s: Array  # compute time between checkpoints (used when ckpt_auto == 0)
    ckpt_auto: Array  # 1 = Daly-optimal interval per configuration
    ckpt_async: Array  # 1 = asynchronous checkpoint (cost max(T_copy, T_flush))


def stack(configs: list["Config"]) -> "Config":
    """Configurations of scalars as one Config of (n,) arrays."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *configs)


class Config(NamedTuple):
    model: ModelSpec
    gpu: GPUSpec
    fabric: FabricSpec
    cluster: ClusterSpec
    layout: Layout
    train: Training
    job: Job
