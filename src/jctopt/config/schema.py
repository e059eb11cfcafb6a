"""Structured (typed) configs for Hydra, value checks, and conversion to model pytrees.

The dataclasses are the schema: Hydra rejects a misspelled key or a wrongly typed value
while composing. ``check`` then rejects impossible values with a message that names the
key, the value and what is allowed. ``to_config`` turns a checked config into the float
pytree that the JAX model consumes.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

import jax.numpy as jnp
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from ..model import hybrid, pipeline, recompute_modules, schedules
from ..model import power as _power
from ..model.types import ClusterSpec, Config, FabricSpec, GPUSpec, Job, Layout, ModelSpec, Training
from .resources import CONF_DIR


class ConfigError(ValueError):
    """A configuration value the model cannot use; the message names key and value."""


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


@dataclass
class TrainingConf:
    global_batch: int = MISSING  # sequences per step
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
class SpaceConf:
    """Search ranges. Integer axes take an integer, a list, ``"from:to:step"``,
    ``"from:to:xfactor"`` (geometric) or ``"divisors"`` (tp: of n_heads, pp: of n_layers,
    cp: of seq_len, ep: of n_experts)."""

    name: str = MISSING
    gpu: list[str] = MISSING  # catalog names (conf/gpu)
    fabric: list[str] = MISSING  # catalog names (conf/fabric)
    n_gpus: Any = MISSING
    tp: Any = MISSING
    pp: Any = MISSING
    cp: Any = MISSING
    ep: Any = MISSING
    etp: Any = "tp"  # expert tensor parallel: "tp" (as tp), integers dividing tp (1: MoE parallel folding)
    vpp: Any = MISSING  # virtual (interleaved) stages per pipeline rank
    schedule: Any = field(default_factory=lambda: ["1f1b"])  # pipeline schedules (model.schedules.SCHEDULES)
    micro_batch: Any = MISSING
    accum: Any = None  # None: global batch fixed at training.global_batch, accumulation solved
    recompute: list[str] = MISSING  # none | selective | full
    zero_stage: list[int] = MISSING
    precision: list[str] = MISSING  # bf16 | fp16 | fp8
    ckpt_interval_s: list[Any] = MISSING  # seconds, or "optimal" (Daly, per configuration)
    # Per-GPU catalog values to replace, e.g. {h100_sxm: {price_per_gpu_hour: 2.1}} (your quote).
    # (Untyped so that a whole mapping can be given on the command line.)
    gpu_overrides: Any = None


@dataclass
class SweepConf:
    keep: str = "feasible"  # feasible | all | top_k | pareto | best_per_group
    objective: str = "cost_usd"  # cost_usd | jct_s | energy_kwh: what top_k / best_per_group minimise
    top_k: int = 100
    group_by: list[str] = field(default_factory=lambda: ["gpu", "fabric", "n_gpus"])
    max_days: Optional[float] = None  # keep only configurations with expected JCT <= this
    # ... and with failure-free time (steps x step, plus checkpoint stalls; start-up excluded) <= this
    max_free_days: Optional[float] = None
    chunk_size: Optional[int] = None  # configurations per compiled call; None: sized to the devices (search.engine.default_chunk_size)
    dtype: str = "float32"  # float32 (fast) | float64
    resume: bool = False  # continue the newest unfinished sweep of this configuration
    out: Optional[str] = None  # directory for the results (None = the Hydra run directory)
    progress: bool = True
    distributed: bool = False  # jax.distributed.initialize(): several hosts share the chunks


@dataclass
class ProcureConf:
    gpus: list[str] = field(default_factory=lambda: ["h100_sxm", "b200"])  # GPU types compared
    prices: Any = None  # {gpu name: USD per GPU-hour} replacing the catalog's, e.g. {h100_sxm: 2.1}


@dataclass
class DeadlineConf:
    # When nothing meets the deadline, search again with up to this many times the largest GPU
    # count, every catalog GPU type and fabric, to say what it would take.
    scale_up: list[int] = field(default_factory=lambda: [2, 4, 8])


@dataclass
class SyncwallConf:
    n_gpus: Any = "8:16384:x2"  # GPU counts on the curve (same forms as space.n_gpus)
    min_marginal_eff: float = 0.5  # flag the count where adding GPUs returns less than this


@dataclass
class GradientConf:
    comm_share: float = 0.2  # threshold: NIC bandwidth that keeps exposed communication at this share
    n_gpus_max: float = 1.0e6  # upper end of the relaxed GPU count


@dataclass
class OptimizeConf:
    mode: str = "single"  # single: cost under the deadline (TPE) | multi: cost and days (NSGA-II)
    n_trials: int = 1000  # the study's total; a resumed study runs only the missing ones
    batch_size: int = 256  # trials asked, evaluated in one jitted call, and told together
    startup_trials: int = 256  # TPE: random trials before the model of good/bad regions
    seed: int = 0
    worker: int = 0  # give each worker process sharing a study its own index (seed + 1000 x worker)
    storage: str = "sqlite:///outputs/optimize/optuna.db"  # RDB URL, journal:PATH (many workers), or memory
    study_name: Optional[str] = None  # None: model, mode and a hash of the problem definition
    progress: bool = True


@dataclass
class ValidateConf:
    runs: Optional[str] = None  # CSV path, or a shipped file's name (runs_dev2.csv); None: runs_dev.csv
    out: Optional[str] = None  # output Parquet (None: validate.parquet in the run directory)


@dataclass
class CalibrateConf:
    # The runs to fit: paths or shipped file names; None: tasks.calibrate.CALIBRATION_RUNS
    # (runs_dev.csv, runs_dev2.csv).
    runs: Optional[list[str]] = None
    # Write the fitted values into the catalogs (conf/gpu/*.yaml, conf/training/*.yaml) and
    # the record conf/calibration.yaml: they become the shipped defaults.
    apply: bool = False


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


RECOMPUTE = {"none": 0.0, "selective": 1.0, "full": 2.0}
SELECTIVE_AC = {"core_attention": 0.0, "op": 1.0}  # -> Training.selective_op
# GEMM precision -> Training.low_precision: 0 bf16/fp16, 1 fp8 (per-tensor or blockwise scaling,
# or MXFP8 block scaling: Training.mxfp8, at the GPU's mxfp8_gemm_ratio of the fp8 rate), 2 NVFP4.
PRECISION = {"bf16": 0.0, "fp16": 0.0, "fp8": 1.0, "mxfp8": 1.0, "nvfp4": 2.0}
PEAK_OF_PRECISION = {1.0: "peak_fp8_tflops", 2.0: "peak_fp4_tflops"}


def is_mxfp8(precision: str) -> float:
    """Training.mxfp8 of a precision: 1 for MXFP8's block-scaled fp8 GEMMs, else 0."""
    return float(precision == "mxfp8")


def runs_precision(gpu, precision: str) -> bool:
    """Whether ``gpu`` has tensor cores for ``precision``'s GEMMs: a peak for its level in the
    catalog, and for MXFP8 block-scaled ones (``mxfp8_gemm_ratio`` > 0). The engine's mask is
    the same test on arrays (job.jct: ``precision_ok``)."""
    peak = PEAK_OF_PRECISION.get(PRECISION[precision])
    return (peak is None or gpu[peak] > 0) and (not is_mxfp8(precision) or gpu.mxfp8_gemm_ratio > 0)


# --- value checks -------------------------------------------------------------------------

def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def recompute_choice(key: str, text: str, base_modules) -> tuple[float, list[float]]:
    """(Training.recompute, the module flags in model.recompute_modules.MODULES order) of a design-space
    recompute entry: none | selective | full, selective with the training config's modules, or
    ``selective:<module>,...`` with its own (Megatron-Core's names)."""
    mode, _, listed = str(text).partition(":")
    if mode not in RECOMPUTE or (listed and mode != "selective"):
        _fail(key, text, f"{' | '.join(RECOMPUTE)}, or selective:<modules> "
                         f"(any of {', '.join(recompute_modules.MODULES)})")
    modules = [name.strip() for name in listed.split(",")] if listed else list(base_modules)
    for name in modules:
        if name not in recompute_modules.MODULES:
            _fail(key, text, f"modules among {', '.join(recompute_modules.MODULES)}")
    return RECOMPUTE[mode], [float(name in modules) for name in recompute_modules.MODULES]


def check(cfg: DictConfig, layout: bool = True) -> None:
    """Reject impossible values, naming the key, the value and what is allowed.

    ``layout=False`` skips the ``layout`` group (a design space brings its own layouts)."""
    positive = {
        "model": ["n_layers", "hidden", "ffn_hidden", "n_heads", "vocab", "seq_len", "n_experts", "top_k"],
        "gpu": ["peak_bf16_tflops", "hbm_gb", "hbm_tbps", "nvlink_gbps", "nvlink_domain", "tdp_w",
                "matmul_eff", "matmul_half_dim", "attn_eff", "mem_eff", "nvlink_eff", "nvlink_latency_us", "ll_latency_us", "mtbf_gpu_h",
                "host_link_gbps", "fp8_attn_speedup", "fp8_attn_speedup_gqa", "ssd_eff", "ssd_bwd_eff"],
        "fabric": ["nic_gbit", "nic_eff", "latency_us", "host_copy_gbps", "mtbf_nic_h", "mtbf_switch_h"],
        "cluster": ["gpus_per_node", "nics_per_node", "switch_radix", "mtbf_node_h",
                    "storage_write_gbps", "storage_read_gbps", "staging_gbps", "power_frac", "pue"],
        **({"layout": ["n_gpus", "tp", "pp", "cp", "ep", "vpp"]} if layout else {}),
        "training": ["global_batch", "micro_batch", "grad_bytes", "grad_compression", "bucket_mparams",
                     "zero3_collectives_per_layer", "logit_bytes"],
        "job": ["tokens", "deadline_days"],
    }
    for group, keys in positive.items():
        for key in keys:
            value = cfg[group][key]
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                _fail(f"{group}.{key}", value, "a finite number > 0")
    non_negative = {
        "gpu": ["peak_fp8_tflops", "peak_fp4_tflops", "price_per_gpu_hour", "fp8_matmul_eff", "fused_attn_eff", "nvls_eff",
                "host_mem_gb", "nvfp4_gemm_speedup", "mxfp8_gemm_ratio"],
        "cluster": ["t_drain_s", "t_provision_s", "t_reinit_s", "jitter_cv", "serial_s_per_step",
                    "init_s", "energy_price_kwh"],
        "training": ["reserved_gb", "metric_loss_passes", "moe_host_s", "offload_layers"],
    }
    for group, keys in non_negative.items():
        for key in keys:
            value = cfg[group][key]
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                _fail(f"{group}.{key}", value, "a finite number >= 0")
    for key in ("gpu.matmul_eff", "gpu.fp8_matmul_eff", "gpu.fused_attn_eff", "gpu.mem_eff", "gpu.nvlink_eff",
                "gpu.nvls_eff", "fabric.nic_eff", "cluster.power_frac", "training.overlap_eta",
                "training.zero3_overlap_eta", "training.grad_compression", "training.nvfp4_bf16_share"):
        group, name = key.split(".")
        value = cfg[group][name]
        if not 0 <= value <= 1:
            _fail(key, value, "a fraction in [0, 1]")
    for key, one in (("cluster.oversubscription", "full bisection"), ("training.moe_imbalance", "forced balance")):
        group, name = key.split(".")
        value = cfg[group][name]
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 1):
            _fail(key, value, f"a finite number >= 1 (1 = {one})")
    confidence = cfg.job.confidence
    if not (isinstance(confidence, float) and 0.0 < confidence < 1.0):
        _fail("job.confidence", confidence, "a probability strictly between 0 and 1")
    limit = cfg.cluster.gpu_power_limit_w
    if limit is not None and not (isinstance(limit, (int, float)) and math.isfinite(limit)
                                  and _power.STATIC_W < limit):
        _fail("cluster.gpu_power_limit_w", limit, f"watts above the static draw of {_power.STATIC_W:g} W "
              "(_power.STATIC_W), or null for the GPU's TDP")
    interval = cfg.job.ckpt_interval_s
    if interval is not None and not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval > 0):
        _fail("job.ckpt_interval_s", interval, "seconds > 0, or null for Daly's optimum per configuration")

    m, lay, tr, gpu, cl = cfg.model, cfg.layout, cfg.training, cfg.gpu, cfg.cluster
    kv = m.n_kv_heads if m.n_kv_heads is not None else m.n_heads
    if kv <= 0 or m.n_heads % kv:
        _fail("model.n_kv_heads", m.n_kv_heads, f"a positive divisor of model.n_heads={m.n_heads}")
    # Without a stated head_dim the head is hidden / n_heads; with one the query width n_heads x
    # head_dim is its own (GLM-4.5: 96 heads on a hidden size of 5,120).
    if m.head_dim is None and m.hidden % m.n_heads:
        _fail("model.n_heads", m.n_heads, f"a divisor of model.hidden={m.hidden}, or state model.head_dim")
    if m.top_k > m.n_experts:
        _fail("model.top_k", m.top_k, f"<= model.n_experts={m.n_experts}")
    for key in ("head_dim", "moe_ffn_hidden", "v_head_dim"):
        if m[key] is not None and not m[key] > 0:
            _fail(f"model.{key}", m[key], "a positive integer, or null")
    for key in ("n_shared_experts", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "mtp_layers"):
        if not m[key] >= 0:
            _fail(f"model.{key}", m[key], "an integer >= 0")
    if m.moe_latent_size and not (m.n_experts > 1 and 0 < m.moe_latent_size < m.hidden):
        _fail("model.moe_latent_size", m.moe_latent_size,
              f"0, or below model.hidden={m.hidden} in an MoE model (model.n_experts > 1)")
    if m.kv_lora_rank and not 0 <= m.qk_rope_head_dim < (m.head_dim or m.hidden // m.n_heads):
        _fail("model.qk_rope_head_dim", m.qk_rope_head_dim, "below model.head_dim (the query/key head: nope + rope)")
    _check_layer_pattern(m)
    attention_layers = layer_counts(OmegaConf.to_container(m, resolve=True))["attention_layers"]
    if m.attention_window < 0:
        _fail("model.attention_window", m.attention_window, "a token count >= 0 (0: no windowed layer)")
    if not 0 <= m.window_layers <= attention_layers or (m.window_layers > 0) != (m.attention_window > 0):
        _fail("model.window_layers", m.window_layers,
              f"0-{attention_layers} (the attention layers), > 0 exactly when model.attention_window > 0")
    if not 0 <= m.n_dense_layers < m.n_layers or (m.n_dense_layers and m.n_experts == 1):
        _fail("model.n_dense_layers", m.n_dense_layers,
              f"0, or below model.n_layers={m.n_layers} in an MoE model (model.n_experts > 1)")
    if tr.recompute not in RECOMPUTE:
        _fail("training.recompute", tr.recompute, " | ".join(RECOMPUTE))
    if tr.selective_ac not in SELECTIVE_AC:
        _fail("training.selective_ac", tr.selective_ac, " | ".join(SELECTIVE_AC))
    for module in tr.recompute_modules:
        if module not in recompute_modules.MODULES:
            _fail("training.recompute_modules", module, " | ".join(recompute_modules.MODULES))
    if "mla_up_proj" in tr.recompute_modules and not m.kv_lora_rank:
        others = " | ".join(name for name in recompute_modules.MODULES if name != "mla_up_proj")
        _fail("training.recompute_modules", "mla_up_proj",
              f"{others} (mla_up_proj needs multi-latent attention, model.kv_lora_rank > 0)")
    if tr.precision not in PRECISION:
        _fail("training.precision", tr.precision, " | ".join(PRECISION))
    if not runs_precision(gpu, tr.precision):
        supported = " | ".join(p for p in PRECISION if runs_precision(gpu, p))
        cores = "block-scaled MXFP8 tensor cores: mxfp8_gemm_ratio 0" if is_mxfp8(tr.precision) else \
            f"{tr.precision} tensor cores"
        _fail("training.precision", tr.precision, f"{supported} (gpu={gpu.name} has no {cores})")
    if tr.fp8_attention and PRECISION[tr.precision] == 0:
        _fail("training.fp8_attention", tr.fp8_attention,
              f"false with training.precision={tr.precision} (FP8 attention runs inside an fp8 recipe: "
              "precision fp8, mxfp8 or nvfp4)")
    if tr.fp8_attention and not (tr.flash_attention and tr.fused_attention):
        _fail("training.fp8_attention", tr.fp8_attention,
              "false unless training.flash_attention and training.fused_attention are true (FP8 attention "
              "is Transformer Engine's cuDNN fused kernel)")
    if tr.zero_stage not in (0, 1, 2, 3):
        _fail("training.zero_stage", tr.zero_stage, "0, 1, 2 or 3")
    if (allowed := node_sizes(gpu, cl.gpus_per_node)) is not None:
        _fail("cluster.gpus_per_node", cl.gpus_per_node, allowed)
    if layout:
        check_layout(m.n_heads, m.n_layers, m.seq_len, m.n_experts, lay.n_gpus, lay.tp, lay.pp,
                     lay.cp, lay.ep, lay.vpp, tr.global_batch, tr.micro_batch, lay.etp, lay.schedule,
                     mamba_groups=m.mamba_groups if layer_counts(m)["mamba_layers"] else None)


def _check_layer_pattern(m: DictConfig) -> None:
    """A hybrid model's layer pattern: one symbol per layer (model.hybrid), dense MLP layers counted as
    its n_dense_layers, routed ones only with experts, Mamba layers with a Mamba shape."""
    pattern = m.layer_pattern
    if pattern is None:
        return
    if not pattern or set(pattern) - set(hybrid.PATTERN_SYMBOLS):
        _fail("model.layer_pattern", pattern, f"a string of {' '.join(hybrid.PATTERN_SYMBOLS)} (M Mamba-2, * attention, "
              "- dense MLP, E routed experts), one per layer, without pipeline marks")
    if len(pattern) != m.n_layers:
        _fail("model.n_layers", m.n_layers, f"{len(pattern)}, the length of model.layer_pattern")
    counts = hybrid.pattern_counts(pattern)
    if hybrid.MOE in pattern and m.n_experts == 1:
        _fail("model.layer_pattern", pattern, "without E (routed experts) when model.n_experts=1")
    if m.n_experts > 1 and m.n_dense_layers != counts["dense_mlp_layers"]:
        _fail("model.n_dense_layers", m.n_dense_layers, f"{counts['dense_mlp_layers']}, the - (dense MLP) layers "
              "of model.layer_pattern")
    if counts["mamba_layers"]:
        for key in ("mamba_groups", "mamba_head_dim", "mamba_state"):
            if not m[key] > 0:
                _fail(f"model.{key}", m[key], "a positive integer")
        if not m.mamba_heads > 0 or m.mamba_heads % m.mamba_groups:
            _fail("model.mamba_heads", m.mamba_heads, f"a positive multiple of model.mamba_groups={m.mamba_groups}")


def layer_counts(m: dict) -> dict[str, int]:
    """Layers per kind (model.hybrid): from the pattern, or attention and MLP in every layer."""
    if m.get("layer_pattern") is None:
        return {"attention_layers": m["n_layers"], "mamba_layers": 0, "mlp_layers": m["n_layers"]}
    counts = hybrid.pattern_counts(m["layer_pattern"])
    return {k: counts[k] for k in ("attention_layers", "mamba_layers", "mlp_layers")}


def node_sizes(gpu: DictConfig, gpus_per_node: int) -> str | None:
    """What cluster.gpus_per_node may be with this GPU, or None when ``gpus_per_node`` is allowed:
    a divisor of its NVLink domain; for a rack of compute trays (NVL72) the tray, whose hosts,
    NICs and failures a node stands for (cluster=nvl72), or the whole domain as one node; for a
    GPU sold in nodes of its domain (GH200's four) that node."""
    if gpu.nvlink_domain % gpus_per_node:
        return f"a divisor of gpu.nvlink_domain={gpu.nvlink_domain} (gpu={gpu.name})"
    if gpu.tray_gpus and gpus_per_node not in (gpu.tray_gpus, gpu.nvlink_domain):
        if gpu.tray_gpus == gpu.nvlink_domain:
            return f"{gpu.tray_gpus} (gpu={gpu.name} comes in nodes of {gpu.tray_gpus})"
        return (f"{gpu.tray_gpus} (gpu={gpu.name} is a rack of {gpu.tray_gpus}-GPU compute trays: cluster=nvl72) or "
                f"{gpu.nvlink_domain} (the whole NVLink domain as one node)")
    return None


def check_layout(heads, layers, seq_len, experts, n_gpus, tp, pp, cp, ep, vpp, global_batch, micro_batch,
                 etp=None, schedule="1f1b", mamba_groups=None):
    """Raise ConfigError naming the first layout value that does not divide (or a schedule that
    cannot run on it); ``etp`` None = tp; ``mamba_groups`` those of a model with Mamba-2 layers."""
    etp = tp if etp is None else etp
    if schedule not in schedules.SCHEDULES:
        _fail("layout.schedule", schedule, " | ".join(schedules.SCHEDULES))
    if heads % tp:
        _fail("layout.tp", tp, f"a divisor of model.n_heads={heads}")
    if mamba_groups is not None and mamba_groups % tp:
        _fail("layout.tp", tp, f"a divisor of model.mamba_groups={mamba_groups} (Mamba-2 splits its groups over tp)")
    if not pipeline.fits(layers, pp, vpp):
        _fail("layout.pp", pp, f"pp x vpp (vpp={vpp}) at most model.n_layers + 2 = {layers + 2} "
              "(every virtual stage holds a layer, the embedding or the loss)")
    if vpp > 1 and pp == 1:
        _fail("layout.vpp", vpp, "1 when layout.pp=1 (interleaving needs a pipeline)")
    if seq_len % cp:
        _fail("layout.cp", cp, f"a divisor of model.seq_len={seq_len}")
    if experts % ep:
        _fail("layout.ep", ep, f"a divisor of model.n_experts={experts}")
    if n_gpus % (tp * pp * cp):
        _fail("layout.n_gpus", n_gpus, f"a multiple of tp*pp*cp={tp * pp * cp}")
    if etp < 1 or tp % etp:
        _fail("layout.etp", etp, f"a divisor of layout.tp={tp} (expert tensor parallelism within the TP ranks)")
    dp = n_gpus // (tp * pp * cp)
    if (tp * cp * dp) % (etp * ep):
        # MoE parallel folding: the stage's tp*cp*dp ranks split into etp x ep x edp (model.experts).
        _fail("layout.ep", ep, f"a divisor of tp*cp*dp/etp={tp * cp * dp // etp} (etp={etp})")
    if global_batch % (dp * micro_batch):
        _fail("training.global_batch", global_batch,
              f"a multiple of dp x micro_batch = {dp} x {micro_batch} = {dp * micro_batch}")
    if (why := schedules.requirement(schedule, pp, vpp, global_batch // (dp * micro_batch))) is not None:
        _fail("layout.schedule", schedule, f"a schedule that runs here: {schedule} needs {why}")


# --- conversion ---------------------------------------------------------------------------

def _floats(cls, values: dict):
    return cls(**{k: jnp.asarray(float(values[k])) for k in cls._fields})


def to_config(cfg: DictConfig, layout: bool = True) -> Config:
    """A checked Hydra config as a pytree of float scalars (``layout=False``: the layout
    group is neither checked nor meaningful, a design space supplies it)."""
    check(cfg, layout=layout)
    c = OmegaConf.to_container(cfg, resolve=True)
    model = dict(c["model"])
    model["n_kv_heads"] = model["n_kv_heads"] or model["n_heads"]
    model["head_dim"] = model["head_dim"] or model["hidden"] / model["n_heads"]
    model["moe_ffn_hidden"] = model["moe_ffn_hidden"] or model["ffn_hidden"]
    model["v_head_dim"] = model["v_head_dim"] or model["head_dim"]
    model.update(layer_counts(model))
    tr = dict(c["training"])
    training = dict(tr, seq_len=model["seq_len"], recompute=RECOMPUTE[tr["recompute"]],
                    selective_op=SELECTIVE_AC[tr["selective_ac"]], low_precision=PRECISION[tr["precision"]],
                    mxfp8=is_mxfp8(tr["precision"]),
                    **{f"recompute_{name}": float(name in tr["recompute_modules"])
                       for name in recompute_modules.MODULES})
    interval = c["job"]["ckpt_interval_s"]
    job = dict(c["job"], ckpt_auto=1.0 if interval is None else 0.0,
               ckpt_interval_s=1.0 if interval is None else interval)
    return Config(
        model=_floats(ModelSpec, model), gpu=_floats(GPUSpec, c["gpu"]),
        fabric=_floats(FabricSpec, c["fabric"]),
        cluster=_floats(ClusterSpec, dict(c["cluster"], gpu_power_limit_w=c["cluster"]["gpu_power_limit_w"] or 0.0)),
        layout=_floats(Layout, dict(c["layout"], etp=c["layout"].get("etp") or c["layout"]["tp"],
                                    schedule=schedules.SCHEDULES[c["layout"].get("schedule", "1f1b")])),
        train=_floats(Training, training), job=_floats(Job, job),
    )


def as_dict(value: Any) -> dict:
    """A mapping-valued setting (DictConfig, dict or None) as a plain dict."""
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else dict(value or {})


def catalog_names(group: str) -> list[str]:
    """The entries of a catalog group (``conf/<group>/*.yaml``), sorted."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def load_option(group: str, name: str) -> DictConfig:
    """One catalog entry, e.g. ``load_option("gpu", "b200")`` or ``("model", "deepseek_v3")``, typed by its schema."""
    schema = {"gpu": GPUConf, "fabric": FabricConf, "model": ModelConf}[group]
    # Looked up among the catalog's names, never built into a path: any string (a long or
    # odd cell of a runs file) is either a catalog entry or a ConfigError.
    options = catalog_names(group)
    if name not in options:
        shown = name if len(str(name)) <= 60 else f"{str(name)[:57]}..."
        raise ConfigError(f"{group}={shown!r} is not allowed: one of {', '.join(options)}")
    return OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.load(CONF_DIR / group / f"{name}.yaml"))


def compose(overrides: list[str] | None = None) -> DictConfig:
    """Compose the app config from ``conf/`` (for Python users and tests)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides or []))
