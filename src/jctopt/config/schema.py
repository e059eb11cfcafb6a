"""Structured (typed) configs for Hydra: the model, GPU, fabric, cluster, layout, training and job
groups, and the whole application's config. The dataclasses are the schema: Hydra rejects a
misspelled key or a wrongly typed value while composing."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from .task_schemas import (
    CalibrateConf,
    DeadlineConf,
    GradientConf,
    OptimizeConf,
    ProcureConf,
    SpaceConf,
    SweepConf,
    SyncwallConf,
    ValidateConf,
)


@dataclass
class ModelConf:
    name: str = MISSING
    n_layers: int = MISSING
    hidden: int = MISSING
    ffn_hidden: int = MISSING
    n_heads: int = MISSING
    n_kv_heads: Optional[int] = None  # None = n_heads (no GQA)
    vocab: int = MISSING
    seq_len: int = MISSING
    glu: bool = False
    n_experts: int = 1  # routed experts (1: a dense model)
    top_k: int = 1
    tied_embeddings: bool = False
    learned_positions: bool = False
    head_dim: Optional[int] = None  # None = hidden / n_heads (Qwen3: 128 with hidden 2048, 32 heads)
    moe_ffn_hidden: Optional[int] = None  # one expert's FFN width; None = ffn_hidden (Mixtral)
    n_shared_experts: int = 0  # experts every token passes through, moe_ffn_hidden wide each
    n_dense_layers: int = 0  # leading layers with a dense ffn_hidden MLP in an MoE model (DeepSeek-V3: 3)
    # Multi-head latent attention (DeepSeek-V2 Sec. 2.1): kv_lora_rank > 0 turns it on; head_dim is
    # then the query/key head (nope + rope: 192 in DeepSeek-V3), v_head_dim the value head.
    v_head_dim: Optional[int] = None  # None = head_dim
    q_lora_rank: int = 0  # 0: queries projected directly from hidden
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0  # the decoupled RoPE key, shared by the heads
    mtp_layers: int = 0  # multi-token-prediction modules on the last stage (DeepSeek-V3: 1)
    # Sliding-window attention (model.window): window_layers of the attention layers let a query see
    # itself and the attention_window - 1 tokens before it (gpt-oss: 128 on every other layer).
    attention_window: int = 0  # tokens; 0 = no windowed layer
    window_layers: int = 0
    moe_latent_size: int = 0  # LatentMoE (model.latent): the routed experts' width (Nemotron 3 Super: 1024); 0 = hidden
    # Hybrid models (model.hybrid): Megatron-Core's layer pattern, one character per layer: M Mamba-2,
    # * attention, - dense MLP, E routed experts (Nemotron-H 8B: "M-M-M-M*-..."); None: a
    # transformer (attention and MLP in every layer). The Mamba-2 mixer's shape (model.mamba):
    layer_pattern: Optional[str] = None
    mamba_heads: int = 0
    mamba_head_dim: int = 64
    mamba_state: int = 128
    mamba_groups: int = 8


@dataclass
class GPUConf:
    name: str = MISSING
    die: Optional[str] = None  # compute die; GPU types on one die share fitted compute efficiencies. None: its own
    peak_bf16_tflops: float = MISSING
    peak_fp8_tflops: float = 0.0
    peak_fp4_tflops: float = 0.0  # NVFP4 dense peak; 0 where the GPU has no fp4 tensor cores
    hbm_gb: float = MISSING
    hbm_tbps: float = MISSING
    nvlink_gbps: float = MISSING
    nvlink_domain: int = 8
    # GPUs per compute tray where the NVLink domain spans trays (NVL72: 4), or per node where the
    # GPU only comes in nodes of its domain (GH200: 4); None: a node of any divisor of the domain
    tray_gpus: Optional[int] = None
    nvls: bool = False
    tdp_w: float = MISSING
    price_per_gpu_hour: float = MISSING
    matmul_eff: float = MISSING
    fp8_matmul_eff: float = 0.0
    matmul_half_dim: float = MISSING
    attn_eff: float = MISSING
    fused_attn_eff: float = 0.0  # cuDNN fused attention fwd+bwd / bf16 peak on this architecture (0: none, attn_eff's kernel)
    # FP8 fused attention (Transformer Engine's fp8_dot_product_attention): bf16 / fp8 time of the
    # attention core, fwd + bwd, for heads with their own K/V (MHA, MLA) and for grouped-query heads;
    # 1 = no FP8 attention kernel measured on this GPU: priced as the bf16 one (model.attention)
    fp8_attn_speedup: float = 1.0
    fp8_attn_speedup_gqa: float = 1.0
    # Mamba-2's SSD kernels (mamba_ssm's Triton): their roofline time / measured time on this
    # architecture; 1 = none measured: at their roofline (model.compute.ssd_time_per_token)
    ssd_eff: float = 1.0
    ssd_bwd_eff: float = 1.0  # the backward kernels'; 1 = none measured
    # NVFP4 / FP8 (per-tensor scaled) GEMM kernel rate, large shapes, operands pre-quantized, one
    # benchmark on this GPU; 0 = none measured: the peak ratio (model.compute.nvfp4_gemm_speedup)
    nvfp4_gemm_speedup: float = 0.0
    # MXFP8 / per-tensor FP8 GEMM kernel rate, large shapes, operands pre-quantized, one benchmark
    # on this GPU; 1 = none measured: the fp8 rate; 0 = no block-scaled (MXFP8) tensor cores
    # (precision mxfp8 masked; model.compute.matmul_peak_flops)
    mxfp8_gemm_ratio: float = 1.0
    mem_eff: float = MISSING
    nvlink_eff: float = MISSING
    nvls_eff: float = 0.0
    nvlink_latency_us: float = MISSING
    ll_latency_us: float = MISSING
    mtbf_gpu_h: float = MISSING
    # The GPU's link to host memory, for activation offloading (model.offload): GB/s per direction
    # (PCIe on HGX boards, NVLink-C2C on Grace superchips) and the host memory per GPU, GB.
    host_link_gbps: float = MISSING
    host_mem_gb: float = MISSING


@dataclass
class FabricConf:
    name: str = MISSING
    nic_gbit: float = MISSING
    nic_eff: float = MISSING
    latency_us: float = MISSING
    rdma: bool = True
    host_copy_gbps: float = MISSING
    sharp: bool = False
    mtbf_nic_h: float = MISSING
    mtbf_switch_h: float = MISSING


@dataclass
class ClusterConf:
    name: str = MISSING
    gpus_per_node: int = 8
    nics_per_node: int = 8
    rail_optimized: bool = True
    oversubscription: float = 1.0
    switch_radix: int = 64
    mtbf_node_h: float = MISSING
    storage_write_gbps: float = MISSING
    storage_read_gbps: float = MISSING
    staging_gbps: float = MISSING
    t_drain_s: float = MISSING
    t_provision_s: float = MISSING
    t_reinit_s: float = MISSING
    jitter_cv: float = 0.0
    serial_s_per_step: float = 0.0
    init_s: float = 0.0
    power_frac: float = MISSING
    gpu_power_limit_w: Optional[float] = None  # W, nvidia-smi -pl; None = TDP (model.power: the clock it leaves)
    pue: float = MISSING
    energy_price_kwh: float = MISSING


@dataclass
class LayoutConf:
    n_gpus: int = MISSING
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    etp: Optional[int] = None  # expert tensor parallel; None = tp (no MoE parallel folding)
    schedule: str = "1f1b"  # pipeline schedule: 1f1b (interleaved when vpp > 1) | zb_h1 | zb_v | dualpipe
    # Ranks ZeRO/FSDP shard over (model.memory.shard_groups): stack (node for ZeRO-3 where the stack
    # sets hybrid_shard, else all) | node | all | N data-parallel ranks (dividing dp x cp)
    zero_shard: str = "stack"


@dataclass
class TrainingConf:
    global_batch: int = MISSING  # sequences per step
    # The software stack (conf/stack) the flags below come from: its name picks the model error the
    # intervals carry (job.risk.error_basis); none = the training preset's own flags
    stack: str = "none"
    micro_batch: int = 1
    recompute: str = "none"  # none | selective | full
    # What selective recompute repeats: core_attention (Megatron, Korthikanti et al. 2022) | op
    # (torchtitan's per-op policy: every second matmul and the pointwise ops, model.sac)
    selective_ac: str = "core_attention"
    # What Megatron's selective recompute repeats, by module (model.recompute_modules.MODULES;
    # Megatron-Core's --recompute-modules, default core_attn); with selective_ac core_attention only
    recompute_modules: list[str] = field(default_factory=lambda: ["core_attn"])
    zero_stage: int = 1
    hybrid_shard: bool = False  # ZeRO-3 only: shard inside a node, replicate across nodes (FSDP HYBRID_SHARD)
    megatron_fsdp: bool = False  # ZeRO-3 only: Megatron-FSDP's, whose collectives hide at model.megatron_fsdp's overlap
    zero3_collectives_per_layer: float = 1.0  # FSDP: 1 (one flat parameter per layer); DeepSpeed ZeRO-3: one per weight matrix
    zero3_regather: bool = False  # ZeRO-3 gathers the weights again for a recomputed forward (DeepSpeed; model.zero3_gathers)
    seq_parallel: bool = True
    flash_attention: bool = True
    fused_attention: bool = False  # Transformer Engine's cuDNN attention (Megatron-Core, NeMo) instead of FlashAttention-2
    fp8_attention: bool = False  # the fused attention core in FP8 (Megatron fp8_dot_product_attention); fp8/mxfp8/nvfp4 only
    fused_elementwise: bool = True  # norms, activation, RoPE fused (TE, Apex, XLA, torch.compile); false: eager PyTorch (model.eager)
    dropout: bool = False  # hidden and attention dropout on: their 1-byte masks are kept for backward (model.memory)
    precision: str = "bf16"  # bf16 | fp16 | fp8 | mxfp8 | nvfp4 (PRECISION)
    grad_bytes: float = 2.0
    grad_compression: float = 1.0
    # The share of the catalog's fitted GEMM, attention and HBM efficiencies the stack's kernels
    # reach (1: as the shipped stacks, to which the catalog is fitted); a calibrated stack's own
    # (calibrate.stack, fit.stack_fit)
    kernel_eff: float = 1.0
    overlap_eta: float = 0.9
    zero3_overlap_eta: float = 0.9
    dp_overlap: bool = True  # gradient sync and ZeRO-3 gathers overlapped with compute
    mp_comm_overlap: bool = False
    ep_comm_overlap: bool = False  # MoE all-to-alls hidden behind another micro-batch's compute
    ep_two_hop: bool = False  # MoE dispatch over the fabric once per remote NVLink domain (DeepEP, HybridEP)
    tp_async_backward: bool = True  # Megatron --async-tensor-model-parallel-allreduce (its default)
    bucket_mparams: float = 25.0
    metric_loss_passes: int = 0  # Composer/llm-foundry: 2 (LanguageCrossEntropy, LanguagePerplexity every micro-batch)
    moe_host_s: float = 0.0  # host launch time per MoE layer and micro-batch (fwd + bwd), s; 0 under a full-iteration CUDA graph
    # CUDA graphs over each MoE layer's router and dispatcher preprocessing (Transformer Engine
    # scopes moe_router, moe_preprocess): the host keeps ahead of the GPU, but still launches the
    # dispatch, experts and combine after each dispatcher sync (model.host).
    moe_router_graphed: bool = False
    # Tokens the busiest expert-parallel rank receives over the mean (model.experts.busiest_rank_tokens):
    # 1.0 = forced balance, as benchmark runs force it; a capacity factor where inputs are padded to it.
    moe_imbalance: float = 1.0
    # Layers per pipeline stage whose stored activations are offloaded to host memory (Megatron-Core
    # --cpu-offloading-num-layers, model.offload); 0 = none
    offload_layers: int = 0
    # Under NVFP4, the share of the transformer layers whose linear layers stay in BF16: the NVFP4
    # pre-training recipe keeps ~16 % (arXiv:2509.25149); Megatron-Bridge's performance recipes none.
    nvfp4_bf16_share: float = 0.16
    # Bytes per logit element (tokens x vocab / (tp x cp)) at the loss's peak: 4, the fp32 logits
    # Megatron's fused vocab-parallel cross-entropy keeps, its softmax written in place
    # (megatron/core/tensor_parallel/cross_entropy.py); 12 for PyTorch's eager
    # F.cross_entropy(logits.float()), whose backward holds the fp32 log-softmax output, its
    # gradient and the input's gradient at once (torchtitan's loss, train.py @9dec370).
    logit_bytes: float = 4.0
    reserved_gb: float = 4.0


@dataclass
class JobConf:
    tokens: float = MISSING
    deadline_days: float = MISSING
    ckpt_interval_s: Optional[float] = None  # None = Daly-optimal for each configuration
    ckpt_async: bool = False
    confidence: float = 0.8  # central intervals (*_lo / *_hi) and the deadline's required probability


@dataclass
class AppConf:
    task: Any = MISSING
    # JAX's persistent compilation cache: auto = $XDG_CACHE_HOME/jctopt (~/.cache/jctopt),
    # off, or a directory. A repeated run loads its kernels instead of compiling them.
    compile_cache: str = "auto"
    model: ModelConf = field(default_factory=ModelConf)
    gpu: GPUConf = field(default_factory=GPUConf)
    fabric: FabricConf = field(default_factory=FabricConf)
    cluster: ClusterConf = field(default_factory=ClusterConf)
    layout: LayoutConf = field(default_factory=LayoutConf)
    training: TrainingConf = field(default_factory=TrainingConf)
    job: JobConf = field(default_factory=JobConf)
    space: SpaceConf = field(default_factory=SpaceConf)
    sweep: SweepConf = field(default_factory=SweepConf)
    procure: ProcureConf = field(default_factory=ProcureConf)
    deadline: DeadlineConf = field(default_factory=DeadlineConf)
    syncwall: SyncwallConf = field(default_factory=SyncwallConf)
    gradient: GradientConf = field(default_factory=GradientConf)
    optimize: OptimizeConf = field(default_factory=OptimizeConf)
    validate: ValidateConf = field(default_factory=ValidateConf)
    calibrate: CalibrateConf = field(default_factory=CalibrateConf)


def unknown_keys(cfg: DictConfig, schema: type = AppConf, prefix: str = "") -> list[tuple[str, list[str]]]:
    """(dotted key, the keys its group allows) for every key the schema does not have: a key
    added with Hydra's ``+`` (``+layout.tpp=8``) bypasses the structured config's own check."""
    hints = typing.get_type_hints(schema)
    allowed = [f.name for f in dataclasses.fields(schema)]
    out = []
    for key in cfg.keys():
        if key == "hydra":
            continue
        if key not in hints:
            out.append((prefix + str(key), allowed))
        elif dataclasses.is_dataclass(hints[key]) and isinstance(cfg[key], DictConfig):
            out += unknown_keys(cfg[key], hints[key], f"{prefix}{key}.")
    return out


def register_configs() -> None:
    ConfigStore.instance().store(name="base_config", node=AppConf)
    # ${tray_or:${gpu.tray_gpus},8}: a rack-scale GPU's compute tray, else the given node size.
    OmegaConf.register_new_resolver("tray_or", lambda tray, default: tray or default, replace=True)
