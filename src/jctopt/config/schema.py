"""Structured (typed) configs for Hydra: the model, GPU, fabric, cluster, layout, training and job
groups, and the whole application's config. The dataclasses are the schema: Hydra rejects a
misspelled key or a wrongly typed value while composing; a numeric field's allowed values are
declared on it (``ranged``), and ``config.checks`` applies them to config values, to
``space.gpu_overrides`` and, through the configurations they place, to the cells of runs CSVs."""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

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


class Range(NamedTuple):
    """A numeric key's allowed values: finite, from ``lo`` (excluded where ``lo_open``) to ``hi``;
    None where ``null``; ``what`` says so in the error message."""

    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    null: bool = False
    what: str = ""

    def allows(self, value) -> bool:
        if value is None:
            return self.null
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        return (self.lo < value if self.lo_open else self.lo <= value) and value <= self.hi


POSITIVE = Range(0, lo_open=True, what="a finite number > 0")
POSITIVE_OR_NULL = Range(0, lo_open=True, null=True, what="a positive integer, or null")
NON_NEGATIVE = Range(0, what="a finite number >= 0")
COUNT = Range(0, what="an integer >= 0")
FRACTION = Range(0, 1, what="a fraction in [0, 1]")
UNIT = Range(0, 1, lo_open=True, what="a fraction in (0, 1]")  # an efficiency the model divides by
TOKENS = Range(0, what="a token count >= 0 (0: no windowed layer)")
OVERSUBSCRIPTION = Range(1, what="a finite number >= 1 (1 = full bisection)")
JITTER_CV = Range(0, 1, what="a coefficient of variation in [0, 1] (0.005: 0.5 % per-rank step jitter)")
PUE = Range(1, what="a number >= 1 (facility power / IT power; 1 = no overhead)")
ZERO_STAGE = Range(0, 3, what="0, 1, 2 or 3")
IMBALANCE = Range(1, what="a finite number >= 1 (1 = forced balance)")
INTERVAL_S = Range(0, lo_open=True, null=True, what="seconds > 0, or null for Daly's optimum per configuration")
# A stack's kernels at most twice as fast as the catalog's fitted efficiencies (which stay <= 1).
KERNEL_EFF = Range(0, 2.0, lo_open=True, what="a factor in (0, 2] of the catalog's kernel efficiencies "
                   "(1: as the shipped stacks)")


def ranged(default, allowed: Range):
    """A dataclass field whose values ``allowed`` declares (read by ``ranges``)."""
    return field(default=default, metadata={"range": allowed})


def ranges(cls: type) -> dict[str, Range]:
    """{field: Range} of a schema dataclass's declared fields."""
    return {f.name: f.metadata["range"] for f in dataclasses.fields(cls) if "range" in f.metadata}


@dataclass
class ModelConf:
    name: str = MISSING  # the model's catalog name (conf/model)
    n_layers: int = ranged(MISSING, POSITIVE)  # transformer layers
    hidden: int = ranged(MISSING, POSITIVE)  # hidden size (model width)
    ffn_hidden: int = ranged(MISSING, POSITIVE)  # MLP inner width
    n_heads: int = ranged(MISSING, POSITIVE)  # attention (query) heads
    n_kv_heads: Optional[int] = ranged(None, POSITIVE_OR_NULL)  # None = n_heads (no GQA)
    vocab: int = ranged(MISSING, POSITIVE)  # vocabulary size, tokens
    seq_len: int = ranged(MISSING, POSITIVE)  # sequence length, tokens
    glu: bool = False  # gated MLP (SwiGLU: three matrices instead of two)
    n_experts: int = ranged(1, POSITIVE)  # routed experts (1: a dense model)
    top_k: int = ranged(1, POSITIVE)  # routed experts per token
    tied_embeddings: bool = False  # input and output embeddings share one matrix
    learned_positions: bool = False  # learned position embeddings (GPT-3) rather than RoPE
    head_dim: Optional[int] = ranged(None, POSITIVE_OR_NULL)  # None = hidden / n_heads (Qwen3: 128 with hidden 2048, 32 heads)
    moe_ffn_hidden: Optional[int] = ranged(None, POSITIVE_OR_NULL)  # one expert's FFN width; None = ffn_hidden (Mixtral)
    n_shared_experts: int = ranged(0, COUNT)  # experts every token passes through, moe_ffn_hidden wide each
    n_dense_layers: int = ranged(0, COUNT)  # leading layers with a dense ffn_hidden MLP in an MoE model (DeepSeek-V3: 3)
    # Multi-head latent attention (DeepSeek-V2 Sec. 2.1): kv_lora_rank > 0 turns it on; head_dim is
    # then the query/key head (nope + rope: 192 in DeepSeek-V3), v_head_dim the value head.
    v_head_dim: Optional[int] = ranged(None, POSITIVE_OR_NULL)  # None = head_dim
    q_lora_rank: int = ranged(0, COUNT)  # 0: queries projected directly from hidden
    kv_lora_rank: int = ranged(0, COUNT)  # MLA's compressed key/value width; 0: no MLA
    qk_rope_head_dim: int = ranged(0, COUNT)  # the decoupled RoPE key, shared by the heads
    mtp_layers: int = ranged(0, COUNT)  # multi-token-prediction modules on the last stage (DeepSeek-V3: 1)
    # Sliding-window attention (model.window): window_layers of the attention layers let a query see
    # itself and the attention_window - 1 tokens before it (gpt-oss: 128 on every other layer).
    attention_window: int = ranged(0, TOKENS)  # tokens; 0 = no windowed layer
    window_layers: int = ranged(0, COUNT)  # attention layers with the sliding window
    moe_latent_size: int = ranged(0, COUNT)  # LatentMoE (model.latent): the routed experts' width (Nemotron 3 Super: 1024); 0 = hidden
    # Hybrid models (model.hybrid): Megatron-Core's layer pattern, one character per layer: M Mamba-2,
    # * attention, - dense MLP, E routed experts (Nemotron-H 8B: "M-M-M-M*-..."); None: a
    # transformer (attention and MLP in every layer). The Mamba-2 mixer's shape (model.mamba):
    layer_pattern: Optional[str] = None
    mamba_heads: int = ranged(0, COUNT)  # Mamba-2 heads (0: no Mamba layers)
    mamba_head_dim: int = ranged(64, POSITIVE)  # Mamba-2 head width
    mamba_state: int = ranged(128, POSITIVE)  # Mamba-2 state size per head
    mamba_groups: int = ranged(8, POSITIVE)  # Mamba-2 B/C groups (split over tp)


@dataclass
class GPUConf:
    name: str = MISSING  # the GPU's catalog name (conf/gpu)
    die: Optional[str] = None  # compute die; GPU types on one die share fitted compute efficiencies. None: its own
    peak_bf16_tflops: float = ranged(MISSING, POSITIVE)  # dense BF16 tensor peak, TFLOP/s
    peak_fp8_tflops: float = ranged(0.0, NON_NEGATIVE)  # dense FP8 tensor peak, TFLOP/s; 0: no FP8 tensor cores
    peak_fp4_tflops: float = ranged(0.0, NON_NEGATIVE)  # NVFP4 dense peak; 0 where the GPU has no fp4 tensor cores
    hbm_gb: float = ranged(MISSING, POSITIVE)  # HBM capacity, GB
    hbm_tbps: float = ranged(MISSING, POSITIVE)  # HBM bandwidth, TB/s
    nvlink_gbps: float = ranged(MISSING, POSITIVE)  # NVLink (or Infinity Fabric) bandwidth per GPU per direction, GB/s
    nvlink_domain: int = ranged(8, POSITIVE)  # GPUs one NVLink domain joins (8 on HGX, 72 on NVL72)
    # GPUs per compute tray where the NVLink domain spans trays (NVL72: 4), or per node where the
    # GPU only comes in nodes of its domain (GH200: 4); None: a node of any divisor of the domain
    tray_gpus: Optional[int] = ranged(None, POSITIVE_OR_NULL)
    nvls: bool = False  # NVLink SHARP (in-switch reduction) available
    tdp_w: float = ranged(MISSING, POSITIVE)  # board power, W
    price_per_gpu_hour: float = ranged(MISSING, POSITIVE)  # rental price, USD per GPU-hour
    matmul_eff: float = ranged(MISSING, UNIT)  # large BF16 GEMMs' share of the peak (fitted: calibrate)
    fp8_matmul_eff: float = ranged(0.0, FRACTION)  # the same for FP8 GEMMs; 0: matmul_eff
    matmul_half_dim: float = ranged(MISSING, POSITIVE)  # GEMM dimension at which half of matmul_eff is reached (small-GEMM roll-off)
    attn_eff: float = ranged(MISSING, POSITIVE)  # attention core's share of the BF16 peak, fwd + bwd (fitted)
    fused_attn_eff: float = ranged(0.0, FRACTION)  # cuDNN fused attention fwd+bwd / bf16 peak on this architecture (0: none, attn_eff's kernel)
    # FP8 fused attention (Transformer Engine's fp8_dot_product_attention): bf16 / fp8 time of the
    # attention core, fwd + bwd, for heads with their own K/V (MHA, MLA) and for grouped-query heads;
    # 1 = no FP8 attention kernel measured on this GPU: priced as the bf16 one (model.attention)
    fp8_attn_speedup: float = ranged(1.0, POSITIVE)
    fp8_attn_speedup_gqa: float = ranged(1.0, POSITIVE)  # the same for grouped-query heads
    # Mamba-2's SSD kernels (mamba_ssm's Triton): their roofline time / measured time on this
    # architecture; 1 = none measured: at their roofline (model.compute.ssd_time_per_token)
    ssd_eff: float = ranged(1.0, POSITIVE)
    ssd_bwd_eff: float = ranged(1.0, POSITIVE)  # the backward kernels'; 1 = none measured
    # NVFP4 / FP8 (per-tensor scaled) GEMM kernel rate, large shapes, operands pre-quantized, one
    # benchmark on this GPU; 0 = none measured: the peak ratio (model.compute.nvfp4_gemm_speedup)
    nvfp4_gemm_speedup: float = ranged(0.0, NON_NEGATIVE)
    # MXFP8 / per-tensor FP8 GEMM kernel rate, large shapes, operands pre-quantized, one benchmark
    # on this GPU; 1 = none measured: the fp8 rate; 0 = no block-scaled (MXFP8) tensor cores
    # (precision mxfp8 masked; model.compute.matmul_peak_flops)
    mxfp8_gemm_ratio: float = ranged(1.0, NON_NEGATIVE)
    mem_eff: float = ranged(MISSING, UNIT)  # achievable share of hbm_tbps (fitted)
    nvlink_eff: float = ranged(MISSING, UNIT)  # achievable share of nvlink_gbps (nccl-tests bus bandwidth)
    nvls_eff: float = ranged(0.0, FRACTION)  # the same for NVLS collectives
    nvlink_latency_us: float = ranged(MISSING, POSITIVE)  # NVLink collective latency, us
    ll_latency_us: float = ranged(MISSING, POSITIVE)  # NCCL low-latency protocol latency, us
    mtbf_gpu_h: float = ranged(MISSING, POSITIVE)  # mean time between a GPU's failures, h
    # The GPU's link to host memory, for activation offloading (model.offload): GB/s per direction
    # (PCIe on HGX boards, NVLink-C2C on Grace superchips) and the host memory per GPU, GB.
    host_link_gbps: float = ranged(MISSING, POSITIVE)
    host_mem_gb: float = ranged(MISSING, NON_NEGATIVE)  # host memory per GPU for offloading, GB


@dataclass
class FabricConf:
    name: str = MISSING  # the fabric's catalog name (conf/fabric)
    nic_gbit: float = ranged(MISSING, POSITIVE)  # NIC line rate, Gbit/s per NIC
    nic_eff: float = ranged(MISSING, UNIT)  # achievable share of the line rate
    latency_us: float = ranged(MISSING, POSITIVE)  # inter-node collective latency per step, us
    rdma: bool = True  # GPUDirect RDMA; false: TCP through host memory
    host_copy_gbps: float = ranged(MISSING, POSITIVE)  # host copy bandwidth without RDMA, GB/s
    sharp: bool = False  # in-network reduction (InfiniBand SHARP)
    mtbf_nic_h: float = ranged(MISSING, POSITIVE)  # mean time between a NIC's failures, h
    mtbf_switch_h: float = ranged(MISSING, POSITIVE)  # mean time between a switch's failures, h


@dataclass
class ClusterConf:
    name: str = MISSING  # the cluster's catalog name (conf/cluster)
    gpus_per_node: int = ranged(8, POSITIVE)  # GPUs per node (host)
    nics_per_node: int = ranged(8, POSITIVE)  # NICs per node
    tray_nodes: bool = False  # nodes are a rack-scale GPU's compute trays (cluster=nvl72): a GPU without them is refused
    rail_optimized: bool = True  # rail-optimized fabric: rank i of every node on one leaf
    oversubscription: float = ranged(1.0, OVERSUBSCRIPTION)  # leaf uplink oversubscription (1 = full bisection)
    switch_radix: int = ranged(64, POSITIVE)  # ports per switch
    mtbf_node_h: float = ranged(MISSING, POSITIVE)  # mean time between a host's failures (CPU, memory, software), h; one host per compute tray
    storage_write_gbps: float = ranged(MISSING, POSITIVE)  # checkpoint write bandwidth, GB/s aggregate
    storage_read_gbps: float = ranged(MISSING, POSITIVE)  # checkpoint read bandwidth, GB/s aggregate
    staging_gbps: float = ranged(MISSING, POSITIVE)  # async checkpoint fast tier, GB/s aggregate
    t_drain_s: float = ranged(MISSING, NON_NEGATIVE)  # time to stop after a failure, s
    t_provision_s: float = ranged(MISSING, NON_NEGATIVE)  # time to replace a failed node, s
    t_reinit_s: float = ranged(MISSING, NON_NEGATIVE)  # time to restart the job's processes, s
    jitter_cv: float = ranged(0.0, JITTER_CV)  # per-rank step-time jitter, coefficient of variation
    serial_s_per_step: float = ranged(0.0, NON_NEGATIVE)  # unoverlapped host time per step (data loading), s
    init_s: float = ranged(0.0, NON_NEGATIVE)  # job start-up time, s
    power_frac: float = ranged(MISSING, UNIT)  # average power as a share of TDP
    gpu_power_limit_w: Optional[float] = None  # W, nvidia-smi -pl; None = TDP (model.power: the clock it leaves)
    pue: float = ranged(MISSING, PUE)  # data-centre power usage effectiveness (>= 1)
    energy_price_kwh: float = ranged(MISSING, NON_NEGATIVE)  # energy price, USD per kWh


@dataclass
class LayoutConf:
    n_gpus: int = ranged(MISSING, POSITIVE)  # GPUs in the job
    tp: int = ranged(1, POSITIVE)  # tensor-parallel ranks
    pp: int = ranged(1, POSITIVE)  # pipeline stages
    cp: int = ranged(1, POSITIVE)  # context-parallel ranks
    ep: int = ranged(1, POSITIVE)  # expert-parallel ranks
    vpp: int = ranged(1, POSITIVE)  # virtual (interleaved) stages per pipeline rank
    etp: Optional[int] = ranged(None, POSITIVE_OR_NULL)  # expert tensor parallel; None = tp (no MoE parallel folding)
    schedule: str = "1f1b"  # pipeline schedule: 1f1b (interleaved when vpp > 1) | zb_h1 | zb_v | dualpipe
    # Ranks ZeRO/FSDP shard over (model.memory.shard_groups): stack (node for ZeRO-3 where the stack
    # sets hybrid_shard, else all) | node | all | N data-parallel ranks (dividing dp x cp)
    zero_shard: str = "stack"


@dataclass
class TrainingConf:
    global_batch: int = ranged(MISSING, POSITIVE)  # sequences per step
    # The software stack (conf/stack) the flags below come from: its name picks the model error the
    # intervals carry (job.risk.error_basis); none = the training preset's own flags
    stack: str = "none"
    micro_batch: int = ranged(1, POSITIVE)  # sequences per micro-batch
    recompute: str = "none"  # none | selective | full
    # What selective recompute repeats: core_attention (Megatron, Korthikanti et al. 2022) | op
    # (torchtitan's per-op policy: every second matmul and the pointwise ops, model.sac)
    selective_ac: str = "core_attention"
    # What Megatron's selective recompute repeats, by module (model.recompute_modules.MODULES;
    # Megatron-Core's --recompute-modules, default core_attn); with selective_ac core_attention only
    recompute_modules: list[str] = field(default_factory=lambda: ["core_attn"])
    zero_stage: int = ranged(1, ZERO_STAGE)  # ZeRO stage: 0 (none), 1 (optimizer state), 2 (+ gradients), 3 (+ weights: FSDP)
    hybrid_shard: bool = False  # ZeRO-3 only: shard inside a node, replicate across nodes (FSDP HYBRID_SHARD)
    megatron_fsdp: bool = False  # ZeRO-3 only: Megatron-FSDP's, whose collectives hide at model.megatron_fsdp's overlap
    zero3_collectives_per_layer: float = ranged(1.0, POSITIVE)  # FSDP: 1 (one flat parameter per layer); DeepSpeed ZeRO-3: one per weight matrix
    zero3_regather: bool = False  # ZeRO-3 gathers the weights again for a recomputed forward (DeepSpeed; model.zero3_gathers)
    seq_parallel: bool = True  # Megatron sequence parallelism with tp > 1
    flash_attention: bool = True  # FlashAttention (no stored attention matrix)
    fused_attention: bool = False  # Transformer Engine's cuDNN attention (Megatron-Core, NeMo) instead of FlashAttention-2
    fp8_attention: bool = False  # the fused attention core in FP8 (Megatron fp8_dot_product_attention); fp8/mxfp8/nvfp4 only
    fused_elementwise: bool = True  # norms, activation, RoPE fused (TE, Apex, XLA, torch.compile); false: eager PyTorch (model.eager)
    dropout: bool = False  # hidden and attention dropout on: their 1-byte masks are kept for backward (model.memory)
    precision: str = "bf16"  # bf16 | fp16 | fp8 | mxfp8 | nvfp4 (PRECISION)
    grad_bytes: float = ranged(2.0, POSITIVE)  # bytes per gradient element synchronised (2: bf16)
    grad_compression: float = ranged(1.0, UNIT)  # gradient compression ratio (1: none)
    # The share of the catalog's fitted GEMM, attention and HBM efficiencies the stack's kernels
    # reach (1: as the shipped stacks, to which the catalog is fitted); a calibrated stack's own
    # (calibrate.stack, fit.stack_fit)
    kernel_eff: float = ranged(1.0, KERNEL_EFF)
    overlap_eta: float = ranged(0.9, FRACTION)  # share of overlappable communication hidden behind compute
    zero3_overlap_eta: float = ranged(0.9, FRACTION)  # the same for ZeRO-3 gathers
    dp_overlap: bool = True  # gradient sync and ZeRO-3 gathers overlapped with compute
    mp_comm_overlap: bool = False  # tensor-parallel communication overlapped with GEMMs (TE userbuffers)
    ep_comm_overlap: bool = False  # MoE all-to-alls hidden behind another micro-batch's compute
    ep_two_hop: bool = False  # MoE dispatch over the fabric once per remote NVLink domain (DeepEP, HybridEP)
    tp_async_backward: bool = True  # Megatron --async-tensor-model-parallel-allreduce (its default)
    bucket_mparams: float = ranged(25.0, POSITIVE)  # gradient bucket size, million elements
    metric_loss_passes: int = ranged(0, NON_NEGATIVE)  # Composer/llm-foundry: 2 (LanguageCrossEntropy, LanguagePerplexity every micro-batch)
    moe_host_s: float = ranged(0.0, NON_NEGATIVE)  # host launch time per MoE layer and micro-batch (fwd + bwd), s; 0 under a full-iteration CUDA graph
    # CUDA graphs over each MoE layer's router and dispatcher preprocessing (Transformer Engine
    # scopes moe_router, moe_preprocess): the host keeps ahead of the GPU, but still launches the
    # dispatch, experts and combine after each dispatcher sync (model.host).
    moe_router_graphed: bool = False
    # Tokens the busiest expert-parallel rank receives over the mean (model.experts.busiest_rank_tokens):
    # 1.0 = forced balance, as benchmark runs force it; a capacity factor where inputs are padded to it.
    moe_imbalance: float = ranged(1.0, IMBALANCE)
    # Layers per pipeline stage whose stored activations are offloaded to host memory (Megatron-Core
    # --cpu-offloading-num-layers, model.offload); 0 = none
    offload_layers: int = ranged(0, NON_NEGATIVE)
    # Under NVFP4, the share of the transformer layers whose linear layers stay in BF16: the NVFP4
    # pre-training recipe keeps ~16 % (arXiv:2509.25149); Megatron-Bridge's performance recipes none.
    nvfp4_bf16_share: float = ranged(0.16, FRACTION)
    # Bytes per logit element (tokens x vocab / (tp x cp)) at the loss's peak: 4, the fp32 logits
    # Megatron's fused vocab-parallel cross-entropy keeps, its softmax written in place
    # (megatron/core/tensor_parallel/cross_entropy.py); 12 for PyTorch's eager
    # F.cross_entropy(logits.float()), whose backward holds the fp32 log-softmax output, its
    # gradient and the input's gradient at once (torchtitan's loss, train.py @9dec370).
    logit_bytes: float = ranged(4.0, POSITIVE)
    reserved_gb: float = ranged(4.0, NON_NEGATIVE)  # memory per GPU the framework reserves (CUDA context, allocator), GB


@dataclass
class JobConf:
    tokens: float = ranged(MISSING, POSITIVE)  # training tokens of the job
    deadline_days: float = ranged(MISSING, POSITIVE)  # the deadline, days
    ckpt_interval_s: Optional[float] = ranged(None, INTERVAL_S)  # None = Daly-optimal for each configuration
    ckpt_async: bool = False  # checkpoints written asynchronously (staged)
    confidence: float = 0.8  # central intervals (*_lo / *_hi) and the deadline's required probability


@dataclass
class AppConf:
    task: Any = MISSING  # the task to run (task=<name>)
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
