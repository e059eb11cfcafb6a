"""`jctopt task=validate validate.runs=RUNS.csv validate.out=OUT.parquet`: predict published
training runs and report the error on step time.

Each row of a CSV with the columns of ``jctopt/data/validation/runs_dev.csv`` becomes a model
configuration. Blank cells ("not stated") take the documented defaults of ``DEFAULTS`` and
the column ``defaults_used`` says which were applied. A row the model cannot place (unknown
GPU or fabric key, a layout that does not divide) gets a null prediction and a ``reason``;
it never stops the run. Rows the model places but judges infeasible (out of memory) keep
their predicted step time, with the model's verdict in ``model_reason``.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from omegaconf import DictConfig
from rich.console import Console

from ..config.resources import validation_file
from ..config.schema import PRECISION, ConfigError, load_option, to_config
from ..config.schema import RECOMPUTE as RECOMPUTE_LEVEL
from ..fit.risk import check_confidence, error_basis, log_quantiles
from ..fit.uncertainty import step_interval
from ..job.jct import STEP_PARTS, Reason, estimate, estimate_batch, unmasked_step
from ..model.compute import dense_peak_tflops
from ..model.hybrid import pattern_counts
from ..model.types import stack
from ..runs.catalog_models import (
    architecture_cells,
    catalog_model,
    hybrid_keys,
    hybrid_layers,
    hybrid_mamba,
    latent_size,
    sliding_window,
)
from ..runs.spellings import (
    COUNT_UNITS,
    MAX_NIC_GBIT,
    NO_FABRIC,
    RECOMPUTE,
    RECOMPUTE_ON,
    RowError,
    attention_kind,
    free_text_fabric,
    notes_setting,
    notes_switch,
    pax_remat,
    recompute_mode,
    recompute_modules,
    row_gpu,
    row_precision,
    word_value,
)
from ._output import pyplot, save_plot

DEFAULT_RUNS = "runs_dev.csv"  # shipped with the package (jctopt/data/validation/)


def runs_path(runs: str | None) -> Path:
    """The CSV that ``validate.runs`` names: a path, or the bare name of a file shipped with
    the package (``runs_dev.csv``, ``runs_dev2.csv``, ...); unset means ``DEFAULT_RUNS``."""
    path = Path(runs or DEFAULT_RUNS)
    if path.is_file():
        return path
    if path.name == str(path):
        try:
            return validation_file(path.name)
        except FileNotFoundError as err:
            raise ConfigError(f"validate.runs={runs!r} is not allowed: no such file, and {err}") from None
    raise ConfigError(f"validate.runs={runs!r} is not allowed: no such file")


# Blank cells: the value used and why (printed in the report).
DEFAULTS = {
    "kv_heads": ("= heads", "no grouped-query attention unless stated (runs_dev.csv README)"),
    "vpp": ("1; 2 for torchtitan's Interleaved 1F1B and for ZB-V; where the notes say interleaved without a "
            "depth, the fastest depth (2-16 chunks per rank) that fits",
            "no interleaved schedule unless stated; torchtitan builds two stages per rank for a looped schedule "
            "when no split is given; ZB-V's V is two chunks per rank; a run's authors tune the depth for speed"),
    "micro_batch": ("1; with ZeRO-3 at pp = 1, global_batch / dp; torchtitan at pp > 1, global_batch / (dp pp)",
                    "Megatron-LM's default micro-batch size; FSDP stacks (torchtitan's local_batch_size, MaxText's "
                    "per_device_batch_size) run the replica's batch at once unless gradient accumulation is stated; "
                    "torchtitan's pipeline splits it into pp micro-batches (pipeline_parallel_microbatches "
                    "defaults to the pipeline degree, torchtitan 2024-12)"),
    "sp": ("on with tp > 1 from 2022", "Megatron-Core and NeMo turn sequence parallelism on with tensor parallelism "
           "(Korthikanti et al. 2022 introduced it); off before 2022 and at tp = 1"),
    "cp": (1, "no context parallelism unless stated; where the row states dp, tp and pp, num_gpus / (dp x tp x pp), "
              "the only value they leave (tables without a CP column)"),
    "pp": ("num_gpus / (dp x tp x cp) where the row states dp, tp and cp",
           "the only pipeline depth the stated split leaves; with dp blank too, no default"),
    "ep": ("1; on an MoE model the fastest that places",
           "a dense model has no experts; an MoE run's authors tune its expert parallelism for speed: the "
           "divisor of the experts of least predicted step time that fits, else the fastest (chosen_by_speed)"),
    "etp": ("tp; 1 where ep x tp does not divide a stage's GPUs", "Megatron-Core's --expert-tensor-parallel-size "
            "defaults to tp; a run whose expert-parallel group could not also split each expert tp ways kept its "
            "experts whole (etp 1, MoE parallel folding), as Megatron-Bridge's MoE recipes set it"),
    "ep_comm_overlap": ("off", "MoE all-to-alls exposed where the notes set neither moe_a2a_overlap nor "
                        "overlap_moe_expert_parallel_comm and name neither DualPipe nor a recipe that sets it: "
                        "Megatron-Core's --overlap-moe-expert-parallel-comm and Megatron-Bridge's CommOverlapConfig "
                        "default to off; AutoModel and torchtitan lack the option"),
    "ep_two_hop": ("flat all-to-all", "two-hop dispatch (one fabric crossing per remote NVLink domain) only where the "
                   "notes name DeepEP, HybridEP or node-limited routing"),
    "gpus_per_node": ("the GPU's NVLink domain", "8 on HGX/DGX nodes, 72 on GB200/GB300 NVL72 racks (conf/gpu)"),
    "experts": (1, "dense model (runs_moe_dev.csv columns: experts, top_k, moe_ffn_hidden, shared_experts, "
                "dense_layers, attention, qk_head_dim)"),
    "top_k": (1, "dense model"),
    "moe_ffn_hidden": ("= ffn_hidden", "every expert as wide as the dense MLP (Mixtral)"),
    "shared_experts": (0, "no shared expert"),
    "dense_layers": (0, "every layer of an MoE model routed"),
    "measured_iter_time_s": ("global_batch x seq_len / (tokens/s per GPU x GPUs)",
                             "the step time the row's stated batch and throughput imply, as the shipped rows "
                             "derive it; not compared where the batch is not stated"),
    "global_batch": ("step x tokens/s per GPU x GPUs / seq_len; else dp x micro_batch x pp",
                     "the batch the row's own throughput and step time imply; a row stating neither: one "
                     "micro-batch per data-parallel replica (per pipeline stage under PP), as long-sequence "
                     "benchmarks run"),
    "recompute": ("the notes' recompute_granularity; else the least that fits",
                  "Megatron-Core's recompute_granularity (--recompute-activations: selective; recompute=none, a "
                  "recipe summary's) where the notes print "
                  "it; else none, else selective, else whole-layer recompute of the fewest layers per stage "
                  "(Megatron's block method), up to full: the first the memory model says fits (the run "
                  "was measured, so it fit); from selective where the cell says only that recompute was on (yes, "
                  "on, true, enabled, 1)"),
    "offload_layers": ("0; on Megatron-Core stacks from 2025 with recompute blank, the fewest layers that fit if faster",
                       "where recompute is blank and the run needs some to fit, NeMo's and Megatron-Bridge's 2025-2026 "
                       "recipes may offload activations to host memory instead (Megatron-Core --cpu-offloading; GB200 "
                       "and GB300 Llama 3 70B/405B recipes): the model takes whichever of the two it finds faster"),
    "zero_stage": ("Megatron-FSDP's sharding strategy where the notes turn it on; 3 in torchtitan and NeMo AutoModel "
                   "rows; else 1 from 2023, else 0",
                   "use_megatron_fsdp with data_parallel_sharding_strategy optim_grads_params / optim_grads / optim / "
                   "no_shard = ZeRO-3 / 2 / 1 / 0 (unstated: optim_grads_params, Megatron-LM's default), sharded "
                   "over the whole data-parallel group; torchtitan and AutoModel shard with FSDP2 (ZeRO-3) over their "
                   "data-parallel ranks by default; the distributed optimizer is the Megatron-Core/NeMo default "
                   "from 2023 on; no optimizer sharding before"),
    "hybrid_shard": ("full in torchtitan and AutoModel rows and under Megatron-FSDP; else hybrid from 2024, else full",
                     "ZeRO-3 rows whose notes name neither FULL_SHARD nor HYBRID_SHARD/HSDP: Megatron-FSDP (the ZeRO-3 "
                     "of Megatron-Core stacks: NeMo, Megatron-Bridge) shards over the whole data-parallel group and "
                     "prefetches its gathers (_megatron_fsdp); torchtitan and "
                     "AutoModel shard FSDP2 over every data-parallel rank (torchtitan data_parallel_shard_degree "
                     "-1, replicate degree 1); elsewhere PyTorch FSDP's HYBRID_SHARD as in the 2024 FSDP blog, "
                     "DeepSpeed's full partitioning before"),
    "vocab": ("by model family", "Llama 3: 128,256 (Dubey et al. 2024); Llama 2: 32,000 (Touvron et al. 2023); "
              "Nemotron: 256,000 (Nemotron-4, NVIDIA 2024); GPT-NeoX: 50,432 (Black et al. 2022, 20B.yml); "
              "other GPT: 51,200 (Megatron's padded GPT-2 BPE, Narayanan et al. 2021)"),
    "tp": ("num_gpus / (dp x pp x cp) where the row states dp, pp and cp; where pp is blank too, the largest "
           "of 8, 4, 2, 1 dividing num_gpus / (dp x cp), pp the rest; with dp blank too, the fastest split that fits",
           "the model-parallel split of Narayanan et al. 2021 Table 1 (TP within the 8-GPU node); where a row "
           "states none of tp, pp, dp: the (tp, pp) the model finds fastest among those that fit in memory, tp "
           "within the NVLink domain (the run was measured, so it fit, and published runs are tuned)"),
    "precision": ("bf16", "mixed precision with bf16 GEMMs, the default of every 2022-2026 training stack; fp8 "
                  "only where a row says so"),
    "nvfp4_bf16_share": ("0 in Megatron-Core stacks (Nemotron 3 Super: its last 14 layers), else 0.16; the layers "
                         "the notes name",
                         "NVFP4 rows: Megatron-Bridge's and NeMo's benchmark recipe (bf16_with_nvfp4_mixed) quantizes "
                         "every transformer layer (first_last_layers_bf16 off) unless its notes give "
                         "num_layers_at_start/end_in_bf16; Nemotron 3 Super's recipe keeps the last 14 in BF16 "
                         "(nemotron_3_super_bf16_with_nvfp4_mixed); elsewhere the NVFP4 pre-training recipe's ~16 % "
                         "of the layers in BF16 (arXiv:2509.25149)"),
    "architecture": ("the catalog model the row names", "layers, widths, heads, vocabulary, sequence length, experts "
                     "and MLA ranks a row leaves blank are those of the conf/model entry its model cell names, "
                     "with params_b appended where the cell names a family alone ('Llama 3.1', 'Nemotron4') "
                     "(Llama 2 7B/70B, Llama 3/3.1 8B, 70B, 405B, Llama 4 Scout/Maverick, DeepSeek-V2/V2-Lite, "
                     "DeepSeek-V3, Kimi K2, Qwen2.5 7B/14B/32B/72B, Qwen3 0.6B/1.7B/4B/8B/14B/32B, "
                     "Qwen3-30B-A3B, Qwen3-235B-A22B, GLM-4.5 and GLM-4.5-Air, gpt-oss-120b, "
                     "Mixtral 8x7B/8x22B, GPT-3 175B, Grok-1, Nemotron-4 15B/340B, "
                     "Nemotron-H 8B/47B/56B, Nemotron 3 Nano/Super/Ultra, Nemotron 3.5 Lightning, gpt-oss-20b; "
                     "each file cites its config); a hybrid Mamba-2 model's layer pattern and Mamba shape always "
                     "come from its entry, and its multi-token-prediction depth where mtp_layers is blank on a "
                     "Megatron-Core stack (Megatron-Bridge's Nemotron 3 recipes train two MTP passes; none "
                     "elsewhere)"),
    "inter_node": ("the GPU's reference system", "A100: 8 x HDR200 IB; H100/H200/H800, B200 and GB200: NDR400 IB "
                   "(ConnectX-7; DGX B200 and DGX GB200 user guides: one 400 Gb/s port per GPU); B300/GB300: "
                   "XDR800 IB (ConnectX-8); GH200: NDR200 IB (JSC JUPITER: 4 x NDR200 per node of four); "
                   "MI300X/MI325X/MI350X/MI355X: 400 Gb/s RoCE; one NIC per GPU (DGX/HGX reference designs)"),
}
REFERENCE_FABRIC = {"a100_80gb": "ib_hdr200", "a100_40gb": "ib_hdr200", "h100_sxm": "ib_ndr400", "h200": "ib_ndr400",
                    "h800": "ib_ndr400", "gh200": "ib_ndr200", "b200": "ib_ndr400", "gb200": "ib_ndr400",
                    "b300": "ib_xdr800", "gb300": "ib_xdr800", "mi300x": "roce400", "mi325x": "roce400",
                    "mi350x": "roce400", "mi355x": "roce400"}
# inter_node key -> (catalog fabric, Gbit/s per NIC or None for the catalog's, NICs per node or None = per GPU)
FABRICS = {
    "ib_hdr200x8": ("ib_hdr200", None, 8), "ib_ndr400x8": ("ib_ndr400", None, 8),
    "ib_hdr200x4": ("ib_hdr200", None, 4), "ib_edr100x8": ("ib_hdr200", 100.0, 8),
    "roce400x8": ("roce400", None, 8), "roce200x8": ("roce400", 200.0, 8),
    "roce_1600gbps_node": ("roce400", 200.0, 8),  # 1600 Gbit/s per node as 8 x 200G RoCE
    # Intel Omni-Path 100 (100 Gbit/s per port, RDMA through PSM2/verbs): IB-like, one port per GPU
    # unless the row says otherwise (as for the other keys without a count).
    "omnipath": ("ib_hdr200", 100.0, None),
}


# A fabric kind in words -> the catalog fabric; IB of a stated rate is the generation that
# carries it (_ib_fabric).
SPELLED_FABRIC = {"ib": "ib_ndr400", "roce": "roce400", "tcp": "eth100_tcp"}
# GB200's one smaller NVLink domain: NVL36 racks, cabled in pairs (NVIDIA GB200 NVL36x2).
NVL36 = 36


def _rack_node(gpu: DictConfig, gpn: int, used: list[str]) -> int:
    """A rack-scale GPU's gpus_per_node cell as the model takes it: the compute tray or the
    NVLink domain as stated; 36 an NVL36 rack (its NVLink domain set to 36); any other count
    ("8" as on HGX, "2" per superchip) the tray, one NIC per GPU either way, marked as a default."""
    tray = gpu.get("tray_gpus")
    if not tray or gpn in (tray, gpu.nvlink_domain):
        return gpn
    if gpn == NVL36 and gpu.nvlink_domain % NVL36 == 0:
        gpu.nvlink_domain = NVL36
        return gpn
    used.append("gpus_per_node")
    return int(tray)


def _ib_fabric(gbit: float) -> str:
    """The catalog's InfiniBand fabric of a NIC rate (Gbit/s): HDR up to 200, NDR up to 400, XDR."""
    return "ib_hdr200" if gbit <= 200 else "ib_ndr400" if gbit <= 400 else "ib_xdr800"


VOCAB = [(r"llama.?3", 128256), (r"llama.?2", 32000), (r"nemotron", 256000), (r"neox", 50432), (r"", 51200)]


# What benchmark tables print in a number column that does not apply ("VP n/a" without
# interleaving, "EP n/a" for a dense model): read as blank, so the documented default applies.
NOT_APPLICABLE = {"n/a", "na", "-", "\u2013", "\u2014"}


def _blank(v) -> bool:
    """Not stated: missing, NaN, empty, or printed as not applicable (NOT_APPLICABLE)."""
    if isinstance(v, str):
        return not v.strip() or v.strip().lower() in NOT_APPLICABLE
    return v is None or (isinstance(v, float) and math.isnan(v))


# Integer columns that may be 0; every other integer column (sizes, counts, parallel degrees) is >= 1.
COUNTS_FROM_ZERO = {"zero_stage", "sp", "shared_experts", "dense_layers", "mtp_layers", "q_lora_rank",
                    "qk_rope_head_dim"}


# The largest count a row may state: above it, products of counts (parameters, FLOPs) leave
# the float range; no layer count, width, batch or GPU count comes near it.
MAX_COUNT = 1e15
PARALLEL_AXES = {"tp", "pp", "dp", "cp", "ep", "etp", "vpp"}
MOE_COUNTS = {"experts", "top_k", "shared_experts", "dense_layers", "mtp_layers"}


def _int(row, key, used: list[str], rule: int | None = None) -> int:
    """``row[key]`` as an integer; where blank (or printed "n/a"), ``rule`` (this row's value of
    the documented rule in DEFAULTS[key]) or else the fixed default of DEFAULTS[key]."""
    v = row.get(key)
    if _blank(v):
        if key not in DEFAULTS:
            raise RowError(f"{key} is blank and has no documented default")
        default = rule if rule is not None else DEFAULTS[key][0]
        if not isinstance(default, int):  # a rule that did not apply to this row
            raise RowError(f"{key} is blank and its default rule does not apply: {DEFAULTS[key][1]}")
        used.append(key)
        return int(default)
    v = int(v) if isinstance(v, (bool, np.bool_)) else v  # a column of flags, read as booleans
    text = re.sub(r"(?<=\d)[,_](?=\d{3})", "", str(v).strip())  # thousands separators: "1,024"
    # A count with its column's unit or a remark: "1024 GPUs", "8192 tokens", "8 (HGX)".
    unit = COUNT_UNITS.get(key, "(?!)")
    text = re.sub(rf"^(\d+(?:\.0+)?)\s*(?:{unit})?\s*(?:\(.*\))?$", r"\1", text, flags=re.IGNORECASE)
    text = re.sub(r"^(\d+[kK])\s*tokens?$", r"\1", text) if key == "seq_len" else text
    text = word_value(key, text.lower()) or text
    # A parallel degree printed with its axis, as layout tables write it: "TP8", "EP = 64", "VP 4".
    axis = {"vpp": "vpp?"}.get(key, key) if key in PARALLEL_AXES else "(?!)"
    text = re.sub(rf"^{axis}\s*[=:]?\s*(?=\d)", "", text, flags=re.IGNORECASE)
    # An MoE count among words, its only number: "top-8", "256 routed", "first 3" (dense layers).
    if key in MOE_COUNTS:
        words_around = re.fullmatch(r"(?:[a-z][a-z\s]*?[\s:=-]\s*)?(\d+)(?:\s*[a-z(][a-z\s()]*)?", text,
                                    flags=re.IGNORECASE)
        text = words_around.group(1) if words_around else text
    # A sequence length in K tokens ("8K", "128k"): 1024 each, as context lengths are printed.
    text = str(int(text[:-1]) * 1024) if key == "seq_len" and re.fullmatch(r"\d+[kK]", text) else text
    try:
        number = float(text)
    except ValueError:
        raise RowError(f"{key}={v!r} is not a number") from None
    if not number.is_integer():
        raise RowError(f"{key}={v!r} is not an integer")
    if number > MAX_COUNT:  # products of such counts overflow a float
        raise RowError(f"{key}={v!r} is not allowed: an integer <= {MAX_COUNT:.0e}")
    if number < (0 if key in COUNTS_FROM_ZERO else 1):
        raise RowError(f"{key}={v!r} is not allowed: an integer >= {0 if key in COUNTS_FROM_ZERO else 1}")
    return int(number)


def _glu(row, layers, hidden, ffn, heads, kv, vocab) -> tuple[int, str]:
    """Gated MLP or not: whichever parameter count is nearer ``params_b`` (not a CSV column)."""
    head = hidden // heads
    attn = hidden * hidden * 2 + 2 * hidden * kv * head
    counts = {g: (layers * (attn + (3 if g else 2) * hidden * ffn) + vocab * hidden) / 1e9 for g in (0, 1)}
    if _blank(row.get("params_b")):
        return int(ffn != 4 * hidden), "glu inferred from ffn_hidden != 4 hidden (params_b blank)"
    try:
        target = float(row["params_b"])
    except ValueError:
        raise RowError(f"params_b={row['params_b']!r} is not a number") from None
    g = min(counts, key=lambda k: abs(counts[k] - target))
    return g, ""


def _moe_dispatch(row) -> tuple[bool, bool, bool]:
    """(all-to-all overlapped, two-hop dispatch, overlap named) as the row's notes name them.
    Overlap: the recipe's ``moe_a2a_overlap`` or ``overlap_moe_expert_parallel_comm`` setting
    (Megatron-Core's --overlap-moe-expert-parallel-comm, in any of notes_setting's forms),
    DualPipe (DeepSeek-V3 report Sec. 3.2.1), overlap stated disabled, or a recipe known to set
    it (_a2a_overlap_recipe); where none is named, off:
    Megatron-Core's option and Megatron-Bridge's ``CommOverlapConfig.overlap_moe_expert_parallel_comm``
    default to off, and other stacks (AutoModel, torchtitan) lack it.
    Two-hop: DeepEP or HybridEP (Megatron's flex dispatcher backends, named or set by a
    full-iteration helper) or DeepSeek's node-limited routing; where none is named, the flat
    all-to-all dispatcher."""
    notes = str(row.get("notes", ""))
    flag = notes_switch(notes, "moe_a2a_overlap", "a2a_overlap", "overlap_moe_expert_parallel_comm")
    named = True
    if flag is not None:
        overlap = flag
    elif re.search(r"dualpipe", notes, re.IGNORECASE):
        overlap = True
    elif _overlaps_disabled(row):
        overlap = False
    elif (recipe := _a2a_overlap_recipe(row)) is not None:
        overlap = recipe
    else:
        overlap, named = False, False
    two_hop = bool(re.search(r"deepep|hybridep|node-limited routing", notes, re.IGNORECASE)
                   or FULL_ITERATION_HELPER.search(notes))
    return overlap, two_hop, named


def _padded_capacity(row) -> float | None:
    """The capacity factor every expert's input is padded to, where the notes name Megatron-Core's
    ``moe_expert_capacity_factor`` together with ``moe_pad_expert_input_to_capacity=True``: the
    busiest rank's excess (model.experts.busiest_rank_tokens). None otherwise (forced or natural
    balance: the training preset's, 1.0 for benchmark rows that force it)."""
    notes = str(row.get("notes", ""))
    factor = re.search(r"moe_expert_capacity_factor\W*([0-9]*\.?[0-9]+)", notes)
    padded = re.search(r"moe_pad_expert_input_to_capacity\W*true", notes, re.IGNORECASE)
    return max(float(factor.group(1)), 1.0) if factor and padded else None


# Megatron-Bridge recipes that set overlap_moe_expert_parallel_comm without the rows' notes
# printing the flag: the v0.6.0 full-iteration helpers (perf_recipes/qwen/common.py
# _enable_hybridep_full_iteration_mxfp8, perf_recipes/deepseek/common.py
# _enable_deepseek_full_iteration_mxfp8: overlap_moe_expert_parallel_comm=True, and the
# HybridEP dispatcher, moe_flex_dispatcher_backend="hybridep"), and the
# v0.1.0rc4 launcher (scripts/performance/run_script.py: DeepSeek-V3 overlaps only on H100,
# ``A2A_1F1B = gpu in ["h100"]``; Qwen3 keeps the default, off).
FULL_ITERATION_HELPER = re.compile(r"_enable_\w*full_iteration\w*\(")
MB_V010RC4 = re.compile(r"Megatron-Bridge@v0\.1\.0rc4")


def _a2a_overlap_recipe(row) -> bool | None:
    """Whether the recipe the row's notes name overlaps the MoE all-to-alls; None where the
    notes name none of the recipes above."""
    notes = str(row.get("notes", ""))
    if FULL_ITERATION_HELPER.search(notes):
        return True
    if MB_V010RC4.search(notes):
        deepseek = bool(re.search(r"deepseek", str(row.get("model", "")), re.IGNORECASE))
        return deepseek and row_gpu(row.get("gpu", ""))[0] == "h100_sxm"
    return None


def _moe_layers_graphed(row) -> bool:
    """Whether CUDA graphs take the MoE layers' launches off the host (model.host): a full-iteration
    graph; graphs over token-dropping layers, whose shapes are static (a dropless layer's token
    counts change every step; Megatron-Bridge's CUDA-graph guide: graphs need static shapes)."""
    notes = str(row.get("notes", ""))
    full = re.search(r"full_iteration", notes, re.IGNORECASE)
    static = re.search(r"cuda_graphs?\W*true", notes, re.IGNORECASE) and re.search(r"token-?drop", notes, re.IGNORECASE)
    return bool(full or static)


# Transformer Engine graphs over moe_router and moe_preprocess leave a launch-bound MoE run
# launch-bound under the all-to-all dispatcher, which waits on the GPU for each layer's token
# counts (Megatron-Bridge docs/training/cuda-graphs.md @067f987df0, Qwen3-30B-A3B on 16 H100,
# attn + moe_router + moe_preprocess graphs: 42.00 s against 41.36 s eager), and take it off
# the host's pace under HybridEP (skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md
# @067f987df0, the same shape in BF16, moe_router + moe_preprocess graphs: 24.71 s a step with
# the GPU busy 22.82 s of it, 2026-07-25; the model prices that run's GPU at 23.1 s and, with the
# eager launch floor, 30.2 s a step) but for the launches after each dispatch's sync, which
# HybridEP keeps (``moe_router_graphed``, model.host: 27.0 s; 1.9 s of the measured step is idle, the
# model's sync 3.8 s).
# The scope as a config prints it (cuda_graph_scope=['attn', 'moe_router']) or as Megatron's
# flag takes it (--cuda-graph-scope attn moe_router moe_preprocess).
_GRAPH_SCOPE = re.compile(r"cuda_graph\w*\W+(?:transformer_engine\W*)?\[([^\]]*)\]"
                          r"|--cuda-graph-scope((?:\s+[a-z_]+)+)", re.IGNORECASE)


def _te_scoped_hybridep(notes: str) -> bool:
    """Whether the notes name TE-scoped CUDA graphs over both moe_router and moe_preprocess
    and the HybridEP dispatcher."""
    scopes = " ".join(" ".join(groups) for groups in _GRAPH_SCOPE.findall(notes)).lower()
    return "moe_router" in scopes and "moe_preprocess" in scopes and "hybridep" in notes.lower()


def _overlaps_disabled(row) -> bool:
    """Whether the notes say the run turned its communication overlaps off ("overlap paths
    disabled": MooreThreads/SimuMax's Megatron-LM runs pass --disable-tp-comm-overlap-* and no
    --overlap-grad-reduce or --overlap-moe-expert-parallel-comm): TP, data-parallel and MoE
    traffic all exposed."""
    return bool(re.search(r"overlap paths disabled", str(row.get("notes", "")), re.IGNORECASE))


def _tp_overlap(row, year: int, torchtitan: bool) -> tuple[bool, bool]:
    """(TP collectives pipelined with the GEMMs, column-parallel backward all-reduce behind the
    weight gradient) as the row's stack runs them. Megatron-Core 2024 recipes pipeline TP
    collectives (--tp-comm-overlap) and PP sends; Megatron-LM's asynchronous backward all-reduce
    is on by default in the code of Korthikanti et al. 2022 (megatron/mpu/layers.py), and the
    2021 runs predate it. torchtitan's tensor parallelism (DTensor) runs each all-gather and
    reduce-scatter between the GEMMs, exposed, unless async TP is on (torch.compile's
    micro-pipelining pass, ``enable_async_tensor_parallel``), which the notes name
    ("AsyncTP", "Async TP"; the asyncTP benchmark's rows say "vanilla TP" or "async TP").
    The first switch also hides interleaved PP sends (job.jct); every torchtitan row with a
    pipeline names async TP, so none runs torchtitan's PP with its sends exposed. A row whose
    notes turn the overlaps off (_overlaps_disabled) pipelines nothing."""
    if _overlaps_disabled(row):
        return False, year >= 2022
    if torchtitan:
        notes = str(row.get("notes", ""))
        async_tp = bool(re.search(r"\basync ?tp\b", notes, re.IGNORECASE)) and not re.search(
            r"vanilla tp", notes, re.IGNORECASE)
        return async_tp, async_tp
    return year >= 2024, year >= 2022


def _schedule(row) -> str:
    """The pipeline schedule the row's notes name: DualPipe (the DeepSeek-V3 report) or a
    zero-bubble schedule (ZB-H1, ZB-V); else 1F1B, interleaved when vpp > 1."""
    notes = str(row.get("notes", ""))
    for pattern, name in ((r"dualpipe", "dualpipe"), (r"\bzb-?v\b", "zb_v"), (r"\bzb-?h1\b|\bzb1p\b", "zb_h1")):
        if re.search(pattern, notes, re.IGNORECASE):
            return name
    return "1f1b"


def _global_batch(row: dict, lay: DictConfig, seq_len: int, used: list[str]) -> int:
    """Sequences per step. Blank: what the row's own throughput and step time imply
    (step x tokens/s per GPU x GPUs / seq_len), else one micro-batch per data-parallel replica,
    pp of them under a pipeline; either way a whole number of micro-batches per replica."""
    if not _blank(row.get("global_batch")):
        return _int(row, "global_batch", used)
    used.append("global_batch")
    dp = max(lay.n_gpus // (lay.tp * lay.pp * lay.cp), 1)
    micro = 1 if _blank(row.get("micro_batch")) else _int(row, "micro_batch", [])
    try:
        implied = float(row["measured_iter_time_s"]) * float(row["tokens_per_s_per_gpu"]) * lay.n_gpus / seq_len
    except (KeyError, TypeError, ValueError):
        implied = math.nan
    if math.isfinite(implied) and implied > 0:
        return max(round(implied / (dp * micro)), 1) * dp * micro
    return dp * micro * lay.pp


# The GH200's other memory: 141 GB HBM3e at 4.8 TB/s (ml-engineering's memory table, "GH200 SXM
# (2)"; NVIDIA sells it as 144 GB); the catalog's gh200 is the 96 GB HBM3 part.
GH200_HBM3E = re.compile(r"\b14[14] ?gi?b\b|hbm3e", re.IGNORECASE)


# A board power limit as notes state it: "500 W power limit", "750W power cap", "limited to 750W",
# "power-capped at 600 W" (watts of three or four digits, a GPU board's range).
POWER_LIMIT = re.compile(r"\b(\d{3,4}) ?W (?:power )?(?:limit|cap)\b"
                         r"|\b(?:power[- ]?)?(?:limited|capped) (?:to|at) (\d{3,4}) ?W\b", re.IGNORECASE)


def _stated_hardware(cfg: DictConfig, row: dict) -> None:
    """Hardware the row states apart from the catalog GPU: a GH200 with HBM3e in its gpu cell,
    and in its notes a board power limit below TDP (POWER_LIMIT: model.power) and the HBM
    ("96GB HBM2e (2.4 TB/s)"), as Meta's Grand Teton H100s that torchtitan benchmarks on."""
    if cfg.gpu.name == "gh200" and GH200_HBM3E.search(str(row.get("gpu", ""))):
        cfg.gpu.hbm_gb, cfg.gpu.hbm_tbps = 141.0, 4.8
    notes = str(row.get("notes", ""))
    if m := POWER_LIMIT.search(notes):
        cfg.cluster.gpu_power_limit_w = float(m.group(1) or m.group(2))
    if m := re.search(r"\b(\d+) ?GB HBM\w*\s*\(([\d.]+) ?TB/s", notes):
        cfg.gpu.hbm_gb, cfg.gpu.hbm_tbps = float(m.group(1)), float(m.group(2))


def _megatron_fsdp_switch(row: dict) -> bool:
    """Whether the row's notes turn Megatron-FSDP on (``use_megatron_fsdp``): read for its ZeRO
    stage (_settings_from_notes), its sharding (_hybrid_shard) and its overlap (row_config)."""
    return bool(notes_switch(str(row.get("notes", "")), "use_megatron_fsdp"))


def _hybrid_shard(row, year: int) -> bool | None:
    """ZeRO-3 sharding strategy as the row's notes or its zero_stage cell name it (FSDP
    ``FULL_SHARD``, or ``HYBRID_SHARD`` / HSDP; Megatron-FSDP: full); None where they name none."""
    notes = f"{row.get('notes', '')} {re.sub(r'[ -]', '_', str(row.get('zero_stage', '')).upper())}"
    if "FULL_SHARD" in notes:
        return False
    if "HYBRID_SHARD" in notes or "HSDP" in notes:
        return True
    if _megatron_fsdp_switch(row):
        return False  # Megatron-FSDP shards over the whole data-parallel group unless told otherwise
    return None


# Megatron-FSDP's sharding strategies (--data-parallel-sharding-strategy) as ZeRO stages;
# Megatron-LM's flag defaults to optim_grads_params (megatron/training/arguments.py @d98e8a6).
MEGATRON_FSDP_STAGES = {"optim_grads_params": "3", "optim_grads": "2", "optim": "1", "no_shard": "0"}
# Megatron-Core's --recompute-granularity values (None / null: off) and the older
# --recompute-activations (selective).
GRANULARITY = {"full": "full", "selective": "selective", "none": "none", "null": "none"}


def _settings_from_notes(row: dict) -> dict:
    """``row`` with its blank recompute and zero_stage cells read from the settings its notes
    print (notes_setting): Megatron-Core's ``recompute_granularity`` (``--recompute-activations``:
    selective; ``recompute=none`` as runs_mbridge_dense.csv summarises its recipes) or Paxml's remat
    policy (pax_remat), and Megatron-FSDP (``use_megatron_fsdp``) with
    its sharding strategy as a ZeRO stage."""
    notes = row.get("notes", "")
    stated = {}
    if _blank(row.get("recompute")):
        granularity = notes_setting(notes, "recompute_granularity", "recompute")
        if granularity is not None and granularity[0] in GRANULARITY:
            stated["recompute"] = GRANULARITY[granularity[0]]
        elif notes_switch(notes, "recompute_activations"):
            stated["recompute"] = "selective"
        elif (policy := pax_remat(notes)) is not None:
            stated["recompute"] = policy
    if _blank(row.get("zero_stage")) and _megatron_fsdp_switch(row):
        strategy = notes_setting(notes, "data_parallel_sharding_strategy")
        stated["zero_stage"] = MEGATRON_FSDP_STAGES.get(strategy[0] if strategy else "optim_grads_params", "3")
    return dict(row, **stated) if stated else row


def row_config(base: DictConfig, row: dict) -> tuple[DictConfig, list[str]]:
    """The Hydra config of one CSV row, and the defaults it needed."""
    used: list[str] = []
    row = _settings_from_notes(row)
    key = catalog_model(row.get("model", ""), row.get("params_b"))
    hybrid = None if key is None else hybrid_layers(key)
    for cell in ("model", "attention"):
        if hybrid is None and hybrid_mamba(row.get(cell, "")):
            raise RowError(f"{cell}={row[cell]!r} is a hybrid Mamba-2 / linear-attention model outside the "
                           f"catalog: its layer pattern is unknown (catalog hybrids: {', '.join(hybrid_keys())})")
    row = _with_catalog_architecture(row, key, used)
    cfg = copy.deepcopy(base)
    gpu, aliased = row_gpu(row["gpu"])
    if aliased:
        used.append("gpu")
    try:
        cfg.gpu = load_option("gpu", gpu)
    except ConfigError:
        raise RowError(f"gpu={row['gpu']!r} is not in the catalog (conf/gpu)") from None
    if _blank(row.get("precision")):
        used.append("precision")
        precision = "bf16"
    else:
        precision = row_precision(row["precision"])
    # A blank cell (read as NaN) is "unknown": the GPU's reference fabric.
    inter = "unknown" if _blank(row.get("inter_node")) else str(row["inter_node"]).strip().lower()
    gpn = _rack_node(cfg.gpu, _int(row, "gpus_per_node", used, rule=int(cfg.gpu.nvlink_domain)), used)
    node_gpus = cfg.gpu.get("tray_gpus") or gpn  # the GPUs behind one host's NICs (an NVL72 rack's tray)
    if inter in FABRICS:
        fabric, gbit, nics = FABRICS[inter]
    elif inter == "unknown" or NO_FABRIC.match(inter):
        used.append("inter_node")
        fabric, gbit, nics = REFERENCE_FABRIC.get(gpu), None, gpn
        if fabric is None:
            raise RowError(f"inter_node unknown and gpu={gpu!r} has no reference fabric")
    elif m := re.fullmatch(r"unknown_(\d+)gbps", inter):
        # X Gbit/s per node, RoCE-like, one NIC per GPU (the sources name neither fabric nor NIC
        # count); per GPU where the notes say so ("backend RDMA 400 Gb/s per GPU").
        per_gpu = re.search(rf"\b{m.group(1)} ?Gb(?:it)?(?:/s|ps) per GPU", str(row.get("notes", "")), re.IGNORECASE)
        fabric, gbit, nics = "roce400", float(m.group(1)) / (1 if per_gpu else node_gpus), gpn
    elif m := re.fullmatch(r"(ib|roce)_?(?:[a-z]dr)?(\d+)(?:g|gbps)?(?:x(\d+))?", inter):
        # Other keys of the documented form: InfiniBand or RoCE, NIC rate (Gbit/s), NICs per
        # node (one per GPU where no count is given), e.g. ib_xdr800x4 for a GB300 tray.
        gbit, nics = float(m.group(2)), int(m.group(3)) if m.group(3) else gpn
        fabric = "roce400" if m.group(1) == "roce" else _ib_fabric(gbit)
    elif spelled := free_text_fabric(inter):
        # The same as spelled out: "8x 400G NDR InfiniBand", "RoCEv2 400 Gb/s x8". A kind without
        # a rate ("InfiniBand", "RoCE") runs at the GPU's reference rate for IB, the catalog's for
        # the others, and is marked as defaulted.
        kind, gbit, count = spelled
        reference = REFERENCE_FABRIC.get(gpu, "")
        if kind == "reference":
            used.append("inter_node")
            kind = "roce" if reference.startswith("roce") else "ib"
        if gbit is None:
            used.append("inter_node")
            fabric = reference if kind == "ib" and reference.startswith("ib_") else SPELLED_FABRIC[kind]
        else:
            if gbit > MAX_NIC_GBIT and count is None and not re.search(r"per (?:gpu|nic)", inter):
                gbit = gbit / node_gpus  # the node's (tray's) total, one NIC per GPU
            fabric = _ib_fabric(gbit) if kind == "ib" else SPELLED_FABRIC[kind]
        nics = count or gpn
    else:
        raise RowError(f"inter_node={inter!r} is not modelled (ib_<gen><Gbit/s>x<NICs per node>, "
                       "roce<Gbit/s>x<NICs>, unknown_<Gbit/s per node>gbps, omnipath, unknown, nvlink, or in words "
                       "naming InfiniBand/NDR/ConnectX, RoCE/Ethernet/EFA/Slingshot or TCP, with or without a rate)")
    cfg.fabric = load_option("fabric", fabric)
    if gbit is not None:
        cfg.fabric.nic_gbit = gbit
    cfg.cluster.gpus_per_node = gpn
    cfg.cluster.nics_per_node = nics or gpn
    _stated_hardware(cfg, row)

    layers, hidden, heads = (_int(row, k, used) for k in ("layers", "hidden", "heads"))
    ffn, seq = (_int(row, k, used) for k in ("ffn_hidden", "seq_len"))
    if _blank(row.get("vocab")):
        used.append("vocab")
        vocab = next(v for pattern, v in VOCAB if re.search(pattern, str(row.get("model", "")), re.IGNORECASE))
    else:
        vocab = _int(row, "vocab", used)
    kv = heads if _blank(row.get("kv_heads")) else _int(row, "kv_heads", used)
    if _blank(row.get("kv_heads")):
        used.append("kv_heads")
    glu, note = (hybrid["glu"], "") if hybrid else _glu(row, layers, hidden, ffn, heads, kv, vocab)
    if note:
        used.append("glu")
    m = cfg.model
    m.name, m.n_layers, m.hidden, m.ffn_hidden, m.n_heads, m.n_kv_heads = str(row["id"]), layers, hidden, ffn, heads, kv
    m.vocab, m.seq_len, m.glu = vocab, seq, bool(glu)
    _moe_columns(m, row, used)
    # GPT-style (2-matrix MLP) models tie embeddings and learn positions; Llama-style do neither.
    m.tied_embeddings, m.learned_positions = not glu, not glu
    if hybrid:
        _hybrid_model(m, row, hybrid)
    # A catalog MoE's latent expert width (model.latent): no runs column states it.
    m.moe_latent_size = latent_size(key) if key is not None and m.n_experts > 1 else 0
    # A catalog model's sliding window (model.window), on its share of the row's layers: no column states it.
    window, share = sliding_window(key) if key is not None and not hybrid else (0, 0.0)
    m.attention_window, m.window_layers = window, round(share * layers) if window else 0

    lay, tr = cfg.layout, cfg.training
    lay.n_gpus = _int(row, "num_gpus", used)
    dp = None if _blank(row.get("dp")) else _int(row, "dp", [])  # text or inf: that row's reason
    if _blank(row.get("tp")) and _blank(row.get("pp")) and dp is not None:
        used.append("tp")
        lay.cp = _int(row, "cp", used)
        model_parallel, rest = divmod(lay.n_gpus, dp * lay.cp)
        if rest:
            raise RowError(f"tp and pp blank and num_gpus={lay.n_gpus} is not a multiple of dp x cp = {dp * lay.cp}")
        lay.tp = math.gcd(8, model_parallel)  # TP within the 8-GPU node, as far as the split allows
        lay.pp = model_parallel // lay.tp
    elif dp is not None and (_blank(row.get("tp")) or _blank(row.get("pp")) or _blank(row.get("cp"))):
        lay.tp, lay.pp, lay.cp = _split_from_dp(row, lay.n_gpus, dp, used)
    else:
        lay.tp, lay.pp, lay.cp = (_int(row, k, used) for k in ("tp", "pp", "cp"))
    torchtitan = _torchtitan_stack(row)
    interleaved = torchtitan and lay.pp > 1 and re.search(r"interleaved 1f1b", str(row.get("notes", "")), re.IGNORECASE)
    lay.ep = _int(row, "ep", used, rule=1)
    lay.schedule = _schedule(row) if lay.pp > 1 else "1f1b"
    lay.vpp = _int(row, "vpp", used, rule=2 if interleaved or lay.schedule == "zb_v" else 1)
    # Expert tensor parallelism: blank is tp, Megatron-Core's default for
    # --expert-tensor-parallel-size; etp 1 at tp > 1 keeps experts whole and lets EP span the
    # TP ranks (MoE parallel folding, model.experts).
    lay.etp = None if m.n_experts == 1 or _blank(row.get("etp")) else _int(row, "etp", [])
    stage_ranks = lay.n_gpus // lay.pp  # tp x cp x dp
    if m.n_experts > 1 and lay.etp is None and stage_ranks % (lay.tp * lay.ep) and stage_ranks % lay.ep == 0:
        lay.etp = 1  # DEFAULTS["etp"]: tp-wide experts would not fit the EP group the run had
        used.append("etp")
    if lay.pp == 1 and lay.vpp > 1:
        raise RowError(f"vpp={lay.vpp} with pp=1")
    if lay.etp is not None and (lay.etp < 1 or lay.tp % lay.etp):
        raise RowError(f"etp={row['etp']!r}: expert tensor parallelism must divide tp={lay.tp}")
    if dp is not None and dp * lay.tp * lay.pp * lay.cp != lay.n_gpus:
        raise RowError(f"dp x tp x pp x cp = {dp} x {lay.tp} x {lay.pp} x {lay.cp} != "
                       f"num_gpus={lay.n_gpus}")
    tr.global_batch = _global_batch(row, lay, seq, used)
    year = source_year(row)
    tr.zero_stage = _int(row, "zero_stage", used, rule=3 if _fsdp_native(row) else int(year >= 2023))
    replica_batch = tr.global_batch * lay.tp * lay.pp * lay.cp // lay.n_gpus
    if tr.zero_stage >= 3 and lay.pp == 1 and replica_batch >= 1:
        whole_replica = replica_batch
    elif torchtitan and lay.pp > 1 and replica_batch % lay.pp == 0:
        whole_replica = replica_batch // lay.pp  # pp micro-batches (torchtitan's default)
    else:
        whole_replica = 1
    tr.micro_batch = _int(row, "micro_batch", used, rule=whole_replica)
    cell = row.get("recompute")
    if _blank(cell):
        used.append("recompute")
        cell = "none"  # place_rows raises it to the least recompute that fits
    recompute = recompute_mode(cell)
    if recompute in RECOMPUTE_ON:  # on, of unstated granularity: the least that fits from selective (_place)
        used.append("recompute")
        recompute = "selective"
    if recompute not in RECOMPUTE:
        raise RowError(f"recompute={cell!r} is not one of none, selective, full (its first word but for "
                       "activation checkpointing's own words; no, off, false, "
                       "disabled, 0 = none; yes, on, true, enabled, 1 = the least that fits from selective; a list "
                       "of Megatron recompute modules = selective)")
    tr.recompute = RECOMPUTE[recompute]
    tr.selective_ac = "op" if recompute == "selective" and _per_op_sac(row, torchtitan) else "core_attention"
    if recompute == "selective" and tr.selective_ac == "core_attention":
        tr.recompute_modules = recompute_modules(cell, row.get("notes", "")) or ["core_attn"]
    tr.seq_parallel = bool(_int(row, "sp", used, rule=int(year >= 2022 and lay.tp > 1)))
    tr.precision = precision
    tr.flash_attention = year >= 2023  # FlashAttention (2022) is standard in the 2023+ stacks
    # Transformer Engine's cuDNN fused attention runs in Megatron-Core and NeMo (and cuDNN flash
    # attention in the JAX stacks of NVIDIA's DGX Cloud recipes) from 2024; llm-foundry, torchtitan
    # and the FSDP blog call FlashAttention-2 (directly or through PyTorch SDPA).
    tr.fused_attention = year >= 2024 and bool(FUSED_ATTENTION_STACKS.search(_stack_text(row)))
    # Megatron's fp8_dot_product_attention (Transformer Engine's recipe field: fp8_dpa) where the
    # notes print it on (an fp8 recipe's option).
    tr.fp8_attention = bool(tr.fused_attention and PRECISION[precision] >= 1
                            and notes_switch(str(row.get("notes", "")), "fp8_dot_product_attention", "fp8_dpa"))
    tr.mp_comm_overlap, tr.tp_async_backward = _tp_overlap(row, year, torchtitan)
    # Unnamed: full in torchtitan and AutoModel (FSDP2 over every data-parallel rank unless a
    # replicate degree is set, _fsdp_native); else hybrid from 2024 (PyTorch FSDP's HYBRID_SHARD,
    # the strategy of the 2024 FSDP blog), full before (DeepSpeed ZeRO-3, 2021).
    # ZeRO-3 on a Megatron-Core stack (NeMo, Megatron-Bridge), or where the notes turn on
    # use_megatron_fsdp, is Megatron-FSDP: sharded over the whole data-parallel group, its
    # collectives prefetched (model.megatron_fsdp).
    tr.megatron_fsdp = tr.zero_stage >= 3 and (_megatron_core_stack(row) or _megatron_fsdp_switch(row))
    named = _hybrid_shard(row, year)
    tr.hybrid_shard = named if named is not None else (year >= 2024 and not _fsdp_native(row)
                                                       and not tr.megatron_fsdp)
    if named is None and tr.zero_stage >= 3:
        used.append("hybrid_shard")
    # ZeRO-3 before PyTorch FSDP (2022) is DeepSpeed's, which all-gathers every partitioned
    # tensor on its own (partition_parameters.py, 2020-21: one _allgather_param per parameter):
    # the layer's weight matrices (QKV, output, MLP in and out, a GLU gate); biases and norms
    # stay whole under stage3_param_persistence_threshold.
    tr.zero3_collectives_per_layer = 1 if year >= 2022 else 4 + int(cfg.model.glu)
    # DeepSpeed's ZeRO-3 also gathers the weights again for a recomputed forward (model.zero3_gathers).
    tr.zero3_regather = year < 2022
    tr.dp_overlap = year >= 2023 and not _overlaps_disabled(row)
    tr.ep_comm_overlap, tr.ep_two_hop, named = _moe_dispatch(row)
    tr.moe_imbalance = _padded_capacity(row) or tr.moe_imbalance
    if _moe_layers_graphed(row):
        tr.moe_host_s = 0.0
    elif _te_scoped_hybridep(str(row.get("notes", ""))):
        tr.moe_router_graphed = True
    tr.offload_layers = _stated_offload_layers(row) or 0
    if precision == "nvfp4":
        tr.nvfp4_bf16_share = _nvfp4_bf16_share(row, key, m.n_layers, tr.nvfp4_bf16_share, used)
    if m.n_experts > 1 and not named:
        used.append("ep_comm_overlap")
    # llm-foundry's MPT runs under Composer, which updates its two train metrics (cross-entropy,
    # perplexity) from the logits after every micro-batch (composer/trainer/trainer.py).
    tr.metric_loss_passes = 2 if "llm-foundry" in str(row.get("source", "")) else 0
    tr.fused_elementwise = not _eager_elementwise(row)
    # torchtitan's loss is PyTorch's eager cross-entropy on fp32 logits (logit_bytes 12) where it
    # is not compiled: with torch.compile off, and read so for every 2024 row (torchtitan compiled
    # it with the model from 2024-10-22, e10cb94, until e8977b0 of 2024-12-18 turned that off, the
    # 2024-12 benchmarks' train.py @9dec370; again from bbb1b61, 2025-04-02).
    if torchtitan and (year < 2025 or not tr.fused_elementwise):  # compile off: _eager_elementwise
        tr.logit_bytes = 12.0
    # Dropout, whose masks the memory model keeps (model.memory): Megatron-LM's 0.1 default in the
    # GPT-3-era papers and DeepSpeed's Megatron GPT, before 2023; LLaMA-era recipes train without.
    tr.dropout = year < 2023
    return cfg, used


# Rows whose elementwise operators ran as eager PyTorch kernels (model.eager): torchtitan rows whose
# notes say torch.compile was off, and the PyTorch FSDP blog's runs, made with IBM's fms-fsdp
# (its scripts/7b.sh and 34b.sh @2fdced76: --use_torch_compile=False).
EAGER_NOTES = re.compile(r"compile\s*(=\s*(no|false)\b|off\b)", re.IGNORECASE)
EAGER_SOURCES = re.compile(r"Maximizing training throughput using PyTorch FSDP")


# torchtitan's layer-level policy ("selective layer", selective_ac_option = an integer N)
# recomputes every N-th block whole and no other; its per-op policy is the default
# (selective_ac_option = "op" in its Llama configs).
LAYER_SAC_NOTES = re.compile(r"selective[ _-]?layer|selective_ac_option\s*=?\s*['\"]?\d", re.IGNORECASE)


def _per_op_sac(row: dict, torchtitan: bool) -> bool:
    """Whether a selective-recompute row ran torchtitan's per-op policy (model.sac): a torchtitan row
    whose notes do not name its layer-level policy, which is read as Megatron's selective
    recompute (its every-N-th-layer recompute is not modelled apart)."""
    return torchtitan and not LAYER_SAC_NOTES.search(f"{row.get('notes', '')} {row.get('recompute', '')}")


def _eager_elementwise(row: dict) -> bool:
    """Whether a row's norms, activation and rotary embedding ran as eager PyTorch kernels."""
    return bool((_torchtitan_stack(row) and EAGER_NOTES.search(str(row.get("notes", ""))))
                or EAGER_SOURCES.search(str(row.get("source", ""))))


# Sources whose software is Megatron-Core / NeMo / Transformer Engine, or NVIDIA's JAX recipes.
FUSED_ATTENTION_STACKS = re.compile(r"nemo|megatron|nemotron|dgxc|maxtext|automodel", re.IGNORECASE)


def _megatron_core_stack(row: dict) -> bool:
    """Whether the row ran Megatron-Core (NeMo, Megatron-LM, Megatron-Bridge); NeMo AutoModel,
    NeMo by name, is PyTorch-native."""
    text = _stack_text(row)
    return bool(re.search(r"nemo|megatron", text, re.IGNORECASE)) and not re.search(r"automodel", text, re.IGNORECASE)


def _fsdp_native(row: dict) -> bool:
    """Whether the row's stack shards parameters, gradients and optimizer state over its
    data-parallel ranks by default (ZeRO-3): torchtitan (FSDP2 ``fully_shard`` over
    ``data_parallel_shard_degree``, -1 = every data-parallel rank) and NeMo AutoModel (FSDP2)."""
    return bool(re.search(r"torchtitan|automodel", _stack_text(row), re.IGNORECASE))


def _stack_text(row: dict) -> str:
    return f"{row.get('source', '')} {row.get('container_or_version', '')}"


def _torchtitan_stack(row: dict) -> bool:
    return "torchtitan" in _stack_text(row)


LATEST_YEAR = 2026  # a "2048" in a source is a GPU count, not a year


def source_year(row: dict) -> int:
    """The year of the software a row ran: the latest year its source names, or its container
    release (NeMo "26.08 NeMo Container", "nemo:25.04": 20YY); 2024 when none is named."""
    text = _stack_text(row)
    years = [int(y) for y in re.findall(r"(?<!\d)(20\d\d)(?!\d)", text)]  # "_2025-06" names 2025 too
    years += [2000 + int(y) for y in re.findall(r"(?:\b|nemo:)(2[2-9])\.(?:0[1-9]|1[0-2])\b", text)]
    return max((y for y in years if y <= LATEST_YEAR), default=2024)


def _with_catalog_architecture(row: dict, key: str | None, used: list[str]) -> dict:
    """``row`` with its blank architecture cells taken from catalog model ``key``, the one its
    ``model`` cell names (DEFAULTS["architecture"]); unchanged where it names none."""
    filled = {} if key is None else {k: v for k, v in architecture_cells(key).items() if _blank(row.get(k))}
    if filled:
        used.append("architecture")
    return {**row, **filled}


def _hybrid_model(m: DictConfig, row: dict, hybrid) -> None:
    """A catalog hybrid's layer pattern and Mamba-2 shape (model.hybrid, model.mamba): no runs column states
    them, so a row's layer count must be the catalog's."""
    if m.n_layers != hybrid["n_layers"]:
        raise RowError(f"layers={row.get('layers')!r}: {row.get('model')!r} is a hybrid Mamba-2 model whose "
                       f"{hybrid['n_layers']}-layer pattern comes from the catalog")
    for k, v in hybrid.items():
        m[k] = v
    # Its MTP depth: the row's; where blank, the catalog's on Megatron-Core stacks, whose recipes
    # train the heads (Megatron-Bridge recipes/nemotronh/h100/nemotron_3_{super,nano,ultra}.py
    # @067f987d: mtp_num_layers 2 for Super, Ultra and Lightning), none elsewhere (NeMo
    # AutoModel's Super benchmark sets no num_nextn_predict_layers; its Ultra benchmark's 2 must
    # be stated in the column).
    if not _blank(row.get("mtp_layers")):
        m.mtp_layers = _int(row, "mtp_layers", [])
    elif not _megatron_core_stack(row):
        m.mtp_layers = 0
    # A hybrid MoE's dense MLP layers are the pattern's - layers, wherever they stand.
    m.n_dense_layers = pattern_counts(hybrid["layer_pattern"])["dense_mlp_layers"] if m.n_experts > 1 else 0


def _moe_columns(m: DictConfig, row: dict, used: list[str]) -> None:
    """The mixture-of-experts columns of ``runs_moe_dev.csv``; a file without them is dense."""
    if "experts" not in row:
        m.n_experts, m.top_k = 1, 1
        return
    m.n_experts, m.top_k = _int(row, "experts", used), _int(row, "top_k", used)
    attention = "gqa" if _blank(row.get("attention")) else str(row["attention"]).strip().lower()
    # Multi-head and multi-query attention are GQA with kv_heads = heads or 1 (the kv_heads
    # column says which); a sliding window, chunked (local) attention or attention sinks
    # ("gqa+swa", "swa", "chunked") keep GQA's shapes: the window's saving is not priced.
    # MLA with DeepSeek-V3.2's sparse attention ("mla+dsa") is placed with MLA's shapes: up to
    # 2048 tokens every query attends to every earlier key as in MLA; the 2048-key cap beyond
    # and the lightning indexer's cost (DeepSeek-V3.2-Exp report) are not priced. Names written
    # out ("Multi-head Latent Attention", "grouped-query", "full causal") read the same.
    attention = attention_kind(attention) or attention
    if attention not in ("gqa", "mla"):
        raise RowError(f"attention={row.get('attention')!r} is not modelled (gqa, mha, mqa, mla)")
    if not _blank(row.get("qk_head_dim")):
        m.head_dim = _int(row, "qk_head_dim", used)
    if attention == "mla":
        # The CSV's qk_head_dim is the non-RoPE part; the model's head_dim is the whole query/key head.
        m.qk_rope_head_dim = _int(row, "qk_rope_head_dim", used)
        m.head_dim = _int(row, "qk_head_dim", used) + m.qk_rope_head_dim
        m.v_head_dim, m.kv_lora_rank = _int(row, "v_head_dim", used), _int(row, "kv_lora_rank", used)
        m.q_lora_rank = 0 if _blank(row.get("q_lora_rank")) else _int(row, "q_lora_rank", used)
    m.mtp_layers = 0 if _blank(row.get("mtp_layers")) else _int(row, "mtp_layers", used)
    if m.n_experts > 1:
        m.moe_ffn_hidden = _int(row, "moe_ffn_hidden", used, rule=int(m.ffn_hidden))
        m.n_shared_experts = _int(row, "shared_experts", used)
        m.n_dense_layers = _int(row, "dense_layers", used)


def place_rows(cfg: DictConfig, table: pd.DataFrame) -> tuple[list[dict], list[int], list]:
    """(one record per row: id, source, measured time, defaults_used or reason, and
    chosen_by_speed: whether a blank cell took the value the model finds fastest, a split, an
    interleaving depth or offloading; positions of the placed rows; their model configurations)."""
    base = copy.deepcopy(cfg)
    configs, index, rows = [], [], []
    for i, row in enumerate(table.to_dict("records")):
        out = {"id": row["id"], "source": row.get("source"), "measured_iter_time_s": row.get("measured_iter_time_s"),
               "gpu": row.get("gpu"), "model": row.get("model")}
        try:
            if _split_blank(row):
                config, rc, used = _fastest_split(base, row)
                chosen = True
            elif _interleaving_depth_unstated(row):
                config, rc, used = _fastest_interleaving(base, row)
                chosen = float(config.layout.vpp) > 1
            else:
                config, rc, used = _place(base, row)
                chosen = "offload_layers" in used
            chosen = chosen or _ep_unstated(row, rc)
            measured = _measured_from_throughput(row, rc)
            if measured is not None:
                out["measured_iter_time_s"] = measured
                used = [*used, "measured_iter_time_s"]
            configs.append(config)
            index.append(i)
            out["gpu"] = rc.gpu.name
            out["defaults_used"] = ",".join(sorted(set(used)))
            out["chosen_by_speed"] = chosen
        except (RowError, ConfigError, ValueError, TypeError) as err:
            out["reason"] = str(err)
        rows.append(out)
    return rows, index, configs


def _measured_from_throughput(row: dict, rc: DictConfig) -> float | None:
    """The step time (s) a row with a blank measured time implies by its stated global batch
    and tokens/s per GPU (DEFAULTS["measured_iter_time_s"]); None where the row states its time
    or lacks either."""
    if not _blank(row.get("measured_iter_time_s")) or _blank(row.get("global_batch")):
        return None
    try:
        tokens_per_s = float(row["tokens_per_s_per_gpu"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(tokens_per_s) and tokens_per_s > 0):
        return None
    return rc.training.global_batch * rc.model.seq_len / (tokens_per_s * rc.layout.n_gpus)


_estimate_one = jax.jit(estimate)


def _place(base: DictConfig, row: dict):
    """(model config, Hydra config, defaults used) of one row; a blank recompute is the least
    that fits, or, where the row's stack offloads activations and states no offload, the
    fewest offloaded layers that fit if the model finds that faster (DEFAULTS["offload_layers"]);
    a blank ep on an MoE model the fastest (DEFAULTS["ep"], _fastest_ep)."""
    rc, used = row_config(base, row)
    if _ep_unstated(row, rc):
        return _fastest_ep(base, row, rc.model.n_experts)
    if "recompute" not in used:
        return to_config(rc), rc, used
    config = _least_recompute_that_fits(rc)
    if (config.train.recompute > 0 and _blank(row.get("recompute")) and _offload_in_reach(row)
            and _stated_offload_layers(row) is None):
        offloaded = _fewest_offloaded_layers_that_fit(config, math.ceil(rc.model.n_layers / rc.layout.pp))
        if offloaded is not None and float(_estimate_one(offloaded).step_s) < float(_estimate_one(config).step_s):
            rc.training.recompute, rc.training.offload_layers = "none", int(offloaded.train.offload_layers)
            return offloaded, rc, used + ["offload_layers"]
    return config, rc, used


# Megatron-Bridge's NVFP4 benchmark recipes that keep layers in BF16 (catalog key: last layers):
# Nemotron 3 Super's (nemotron_3_super_bf16_with_nvfp4_mixed, training/mixed_precision.py
# @067f987d: first_last_layers_bf16 True, num_layers_at_end_in_bf16 14; perf_recipes/nemotronh
# common.py _nemotron_3_super_nvfp4_precision uses it on every GPU).
MEGATRON_BRIDGE_NVFP4_BF16_END_LAYERS = {"nemotron3_super_120b_a12b": 14}


def _nvfp4_bf16_share(row: dict, key: str | None, layers: int, recipe_default: float, used: list[str]) -> float:
    """Share of the layers an NVFP4 row keeps in BF16 (DEFAULTS["nvfp4_bf16_share"]): the first and
    last layers its notes name (Megatron's ``num_layers_at_start_in_bf16`` / ``..._at_end_...``);
    else, in Megatron-Core stacks, those of the model's benchmark recipe
    (MEGATRON_BRIDGE_NVFP4_BF16_END_LAYERS), none for other models (Megatron-Bridge
    ``bf16_with_nvfp4_mixed``: first_last_layers_bf16 False, every transformer layer quantized);
    the NVFP4 pre-training recipe's share elsewhere."""
    notes = str(row.get("notes", ""))
    named = [int(n) for n in re.findall(r"num_layers_at_(?:start|end)_in_bf16\W*(\d+)", notes)]
    if named:
        return min(sum(named) / layers, 1.0)
    used.append("nvfp4_bf16_share")
    if not _megatron_core_stack(row):
        return recipe_default
    return min(MEGATRON_BRIDGE_NVFP4_BF16_END_LAYERS.get(key, 0) / layers, 1.0)


def _stated_offload_layers(row: dict) -> int | None:
    """Layers whose activations the row's notes say were offloaded to host memory: Megatron-Core's
    ``cpu_offloading_num_layers`` (Megatron-Bridge; not where ``cpu_offloading`` is off), NeMo's
    ``activation_offload_layers``."""
    notes = row.get("notes", "")
    setting = notes_setting(notes, "cpu_offloading_num_layers", "activation_offload_layers")
    if setting is None or not setting[0].isdigit() or notes_switch(notes, "cpu_offloading") is False:
        return None
    return int(setting[0])


def _offload_in_reach(row: dict) -> bool:
    """Whether the row's stack offers activation offloading as a tuned recipe uses it: Megatron-Core
    (--cpu-offloading) in NeMo's and Megatron-Bridge's 2025-2026 performance recipes."""
    return _megatron_core_stack(row) and source_year(row) >= 2025


def _fewest_offloaded_layers_that_fit(config, stage_layers: int):
    """``config`` without recompute and with the fewest of the busiest stage's ``stage_layers``
    offloaded that fits in HBM and host memory; None when none does. Offloading more layers
    frees HBM but fills host memory, so the bisection runs on HBM alone (monotone) and host
    memory is checked once, at the fewest: where it overflows there, it overflows above too."""
    def offload(k):
        return config._replace(train=config.train._replace(recompute=jnp.asarray(RECOMPUTE_LEVEL["none"]),
                                                           offload_layers=jnp.asarray(float(k))))

    def fits_hbm(c):
        e = _estimate_one(c)
        return float(e.mem_total) <= float(e.mem_capacity)

    fewest = _fewest_layers_that_fit(offload, stage_layers, fits_hbm)
    return None if fewest is None or _reason(fewest) == Reason.MEMORY else fewest


def _fewest_layers_that_fit(config_with, layers: int, fits=None):
    """``config_with(k)`` for the fewest k in 1..layers that ``fits`` (default: fits in memory;
    bisection: more layers saved never needs more of what ``fits`` checks); None when even
    ``layers`` does not."""
    fits = fits or (lambda c: _reason(c) != Reason.MEMORY)
    if not fits(config_with(layers)):
        return None
    lo, hi = 0, layers  # config_with(lo) does not fit, config_with(hi) does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(config_with(mid)) else (mid, hi)
    return config_with(hi)


def _ep_unstated(row: dict, rc: DictConfig) -> bool:
    """Whether an MoE row leaves ep blank, so that it runs at its fastest (_fastest_ep)."""
    return _blank(row.get("ep")) and rc.model.n_experts > 1


def _fastest_ep(base: DictConfig, row: dict, n_experts: int):
    """``_place`` of an MoE row that states no ep, at the divisor of the experts of least
    predicted step time that fits in memory, else the fastest of all (DEFAULTS["ep"])."""
    divisors = [ep for ep in range(1, n_experts + 1) if n_experts % ep == 0]
    best, last_error = _fastest_placement(base, ((ep, dict(row, ep=ep)) for ep in divisors))
    if best is None:
        raise RowError(f"ep is blank and no divisor of the {n_experts} experts places"
                       + (f" (e.g. {last_error})" if last_error else ""))
    config, rc, used = best
    return config, rc, sorted(set(used) | {"ep"})


def _split_from_dp(row: dict, n_gpus: int, dp: int, used: list[str]) -> tuple[int, int, int]:
    """(tp, pp, cp) of a row that states dp and one of tp, pp (the other blank), or both with cp
    blank: the blank one is num_gpus / (dp x the other two), cp 1 where blank beside it, the only
    value the stated ones leave (DEFAULTS["tp"], ["pp"], ["cp"])."""
    stated = {k: _int(row, k, []) for k in ("tp", "pp", "cp") if not _blank(row.get(k))}
    if "cp" not in stated and ("tp" in stated) != ("pp" in stated):
        stated["cp"] = _int(row, "cp", used)
    (blank,) = {"tp", "pp", "cp"} - set(stated)
    others = math.prod(stated.values()) * dp
    value, rest = divmod(n_gpus, others)
    if rest or value < 1:
        raise RowError(f"{blank} is blank and num_gpus={n_gpus} is not a multiple of dp x the other two ({others})")
    used.append(blank)
    split = {**stated, blank: value}
    return split["tp"], split["pp"], split["cp"]


def _split_blank(row: dict) -> bool:
    return all(_blank(row.get(k)) for k in ("tp", "pp", "dp"))


def _fastest_split(base: DictConfig, row: dict):
    """``_place`` of a row that states none of tp, pp, dp, at the (tp, pp) of least predicted
    step time that fits in memory (else the fastest of all): tp a power of two within the
    NVLink domain dividing the heads, pp any divisor of the GPUs left (DEFAULTS["tp"])."""
    n = _int(row, "num_gpus", [])
    splits = [(tp, pp) for tp in (1, 2, 4, 8, 16, 32, 64) for pp in range(1, n // tp + 1) if n % (tp * pp) == 0]
    best, last_error = _fastest_placement(base, ((split, dict(row, tp=split[0], pp=split[1])) for split in splits),
                                          keep=lambda split, rc: split[0] <= rc.gpu.nvlink_domain)
    if best is None:
        raise RowError(f"tp, pp and dp are blank and no split of num_gpus={n} divides the model and batch"
                       + (f" (e.g. {last_error})" if last_error else ""))
    config, rc, used = best
    return config, rc, sorted(set(used) | {"tp", "pp"})


def _fastest_placement(base: DictConfig, variants, keep=lambda key, rc: True):
    """((config, rc, used) of the variant row, given as (key, row), placed at the least predicted
    step time among those the model accepts, else among those that only lack memory, else among
    the rest (masked for another reason, as the row itself would be), or None; the last placement
    error). Variants that do not place, whose layout the model refuses (no framework runs them)
    or that ``keep`` refuses are skipped; ties go to the smaller key."""
    candidates, last_error = [], None
    for key, variant in variants:
        try:
            config, rc, used = _place(base, variant)
        except (RowError, ConfigError, ValueError, TypeError) as err:
            last_error = err  # this variant does not divide the model or the batch
            continue
        if not keep(key, rc):
            continue
        est = _estimate_one(config)
        reason = Reason(int(est.reason))
        if reason == Reason.LAYOUT:
            continue
        rank = {Reason.OK: 0, Reason.MEMORY: 1}.get(reason, 2)
        candidates.append((rank, float(unmasked_step(est)), key, (config, rc, used)))
    best = min(candidates, key=lambda c: c[:3], default=None)
    return (None if best is None else best[3]), last_error


# A row whose notes or derivation say its pipeline schedule was interleaved without saying into
# how many chunks ("interleaved; chunk count not stated"); a negation ("no interleaving") does not
# count.
INTERLEAVED_NOTES = re.compile(r"\binterleaved\b", re.IGNORECASE)
NOT_INTERLEAVED_NOTES = re.compile(r"\b(no|not|without|non)[ -]interleav", re.IGNORECASE)
MAX_INTERLEAVING = 16


def _interleaving_depth_unstated(row: dict) -> bool:
    """Whether the row ran an interleaved pipeline schedule of unstated depth: vpp blank, pp > 1,
    the notes or derivation say interleaved, and the stack is not torchtitan (whose own default,
    two stages per rank, DEFAULTS["vpp"] applies)."""
    notes = f"{row.get('notes', '')} {row.get('derivation', '')}"
    try:
        pipelined = float(row.get("pp")) > 1
    except (TypeError, ValueError):
        pipelined = False  # a blank or unreadable pp: row_config says why
    return (pipelined and _blank(row.get("vpp")) and bool(INTERLEAVED_NOTES.search(notes))
            and not NOT_INTERLEAVED_NOTES.search(notes) and not _torchtitan_stack(row))


def _fastest_interleaving(base: DictConfig, row: dict):
    """``_place`` of a row that ran an interleaved schedule of unstated depth, at the depth
    (2..MAX_INTERLEAVING chunks per rank, the layers split as the frameworks split them) of
    least predicted step time that fits in memory, else the fastest of all: a run's authors
    tune the depth for speed (DEFAULTS["vpp"]). Where no depth places, one chunk per rank."""
    depths = range(2, MAX_INTERLEAVING + 1)
    best, _ = _fastest_placement(base, ((vpp, dict(row, vpp=vpp)) for vpp in depths))
    if best is None:
        return _place(base, row)
    config, rc, used = best
    return config, rc, sorted(set(used) | {"vpp"})


def _reason(config) -> Reason:
    return Reason(int(_estimate_one(config).reason))


def _least_recompute_that_fits(rc: DictConfig):
    """The row's model config with the least recompute that fits in memory: none (where the
    cell is blank; selective where it says recompute was on), selective, then whole-layer
    recompute of the fewest layers per stage (Megatron's block method,
    ``model.compute.full_recompute_share``), up to full; the first of these when nothing fits."""
    def fits(config):
        return _reason(config) != Reason.MEMORY

    first = to_config(rc)
    if fits(first):
        return first
    rc.training.recompute = "selective"
    selective = to_config(rc)
    if fits(selective):
        return selective

    def block(k):  # k of the busiest stage's layers recomputed whole
        return selective._replace(train=selective.train._replace(recompute=jnp.asarray(1.0 + k / layers)))

    layers = math.ceil(rc.model.n_layers / rc.layout.pp)
    blocked = _fewest_layers_that_fit(block, layers)
    return first if blocked is None else blocked


REQUIRED_COLUMNS = ("id", "gpu", "precision", "num_gpus", "tp", "pp", "global_batch", "measured_iter_time_s")


def read_runs(runs: Path) -> pd.DataFrame:
    """The runs CSV; a file that is not one (empty, binary, malformed), lacks a required column
    or holds no row is one ConfigError. Problems within a row are that row's ``reason``."""
    bad = f"validate.runs={str(runs)!r} is not allowed"
    try:
        table = pd.read_csv(runs)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ConfigError(f"{bad}: not a CSV file ({type(err).__name__}: {err})") from None
    # Column names in any case, padded or with spaces ("Num GPUs" is num_gpus).
    table.columns = [re.sub(r"\s+", "_", str(c).strip()).lower() for c in table.columns]
    missing = set(REQUIRED_COLUMNS) - set(table.columns)
    if missing:
        raise ConfigError(f"{bad}: missing columns {', '.join(sorted(missing))} (needed: {', '.join(REQUIRED_COLUMNS)})")
    if table.empty:
        raise ConfigError(f"{bad}: the file has a header but no rows")
    return table


def run_validate(cfg: DictConfig, runs: Path) -> pd.DataFrame:
    """One row per input row: id, predicted_iter_time_s, predicted_mfu_pct, abs_pct_error,
    reason (null prediction) or model_reason, defaults_used, and the step breakdown."""
    table = read_runs(runs)
    rows, index, configs = place_rows(cfg, table)
    df = pd.DataFrame(rows)
    for col in ("predicted_iter_time_s", "predicted_mfu_pct", "abs_pct_error", *STEP_PARTS, "mem_total_gb"):
        df[col] = np.nan
    df["model_reason"] = None
    df["moe"] = False
    if configs:
        batch = stack(configs)
        df.loc[index, "moe"] = np.asarray(batch.model.n_experts) > 1
        est = estimate_batch(batch)
        comp = {k: np.asarray(getattr(est, k)) for k in STEP_PARTS}
        step = np.asarray(unmasked_step(est))  # OOM rows keep their prediction
        n = np.asarray(batch.layout.n_gpus)
        peak = 1e12 * np.asarray(dense_peak_tflops(batch.gpu, batch.train))
        mfu = 100.0 * np.asarray(est.model_flops_per_step) / (step * n * peak)
        reasons = [Reason(int(r)).name for r in np.asarray(est.reason)]
        for j, i in enumerate(index):
            df.loc[i, "predicted_iter_time_s"] = step[j]
            df.loc[i, "predicted_mfu_pct"] = mfu[j]
            for k in STEP_PARTS:
                df.loc[i, k] = comp[k][j]
            df.loc[i, "mem_total_gb"] = float(np.asarray(est.mem_total)[j]) / 1e9
            if reasons[j] != "OK":
                df.loc[i, "model_reason"] = reasons[j]
    # The central interval at job.confidence of each prediction, from the model's left-out error
    # for what it rests on (fit.risk: the GPU type's own rows or its specs, or the MoE runs).
    df["predicted_lo_s"] = df["predicted_hi_s"] = np.nan
    bases = pd.Series([error_basis(g, m) for g, m in zip(df.gpu.astype(str), df.moe)], index=df.index)
    df = df.drop(columns="moe")
    for basis, part in df[df.predicted_iter_time_s.notna()].groupby(bases):
        lo, hi = step_interval(part.predicted_iter_time_s.to_numpy(float), log_quantiles(basis),
                               check_confidence(cfg.job.confidence))
        df.loc[part.index, "predicted_lo_s"], df.loc[part.index, "predicted_hi_s"] = lo, hi
    # A measured time that is not a number is left out of the comparison (its row is still predicted).
    df["measured_iter_time_s"] = pd.to_numeric(df.measured_iter_time_s, errors="coerce")
    # Signed: > 0 where the model is slower than the measurement (pessimistic), < 0 where faster.
    df["pct_error"] = 100.0 * (df.predicted_iter_time_s - df.measured_iter_time_s) / df.measured_iter_time_s
    df["abs_pct_error"] = df.pct_error.abs()
    return df


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Median, 90th percentile and count of |error| % per source, plus all rows."""
    ok = df[df.abs_pct_error.notna()]
    per = ok.groupby("source").abs_pct_error.agg(median="median", p90=lambda x: x.quantile(0.9), n="count")
    total = pd.DataFrame({"median": [ok.abs_pct_error.median()], "p90": [ok.abs_pct_error.quantile(0.9)],
                          "n": [len(ok)]}, index=["all rows"])
    return pd.concat([per.sort_values("median"), total])


def bias_table(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """Median |error| %, median signed error % (> 0: the model is too slow) and count per value of
    ``key`` (a GPU, a model), most rows first: where the model errs, and in which direction."""
    ok = df[df.abs_pct_error.notna()].assign(**{key: lambda d: d[key].fillna("(blank)").astype(str)})
    per = ok.groupby(key).agg(median=("abs_pct_error", "median"), signed=("pct_error", "median"),
                              n=("pct_error", "count"))
    return per.sort_values(["n", "median"], ascending=[False, True])


def report(df: pd.DataFrame, runs: Path) -> str:
    s = summary(df)
    lines = [f"# Validation against {runs.name}", "",
             f"{int(s.loc['all rows', 'n'])} of {len(df)} rows compared; median |error| on step time "
             f"{s.loc['all rows', 'median']:.1f} %, 90th percentile {s.loc['all rows', 'p90']:.1f} %.", "",
             "| source | median % | p90 % | rows |", "|---|---:|---:|---:|"]
    lines += [f"| {src} | {r['median']:.1f} | {r['p90']:.1f} | {int(r['n'])} |" for src, r in s.iterrows()]
    # A model cell that names a catalog model counts under its key (one family however spelled).
    families = df.assign(family=[catalog_model(m) or m for m in df.get("model", pd.Series(index=df.index))])
    for key, title in (("gpu", "By GPU"), ("family", "By model (catalog key where the row names one)")):
        table = bias_table(families, key)
        lines += ["", f"## {title}", "", "Signed: the median of predicted / measured - 1 (> 0: the model is too slow).",
                  "", f"| {key} | median % | signed % | rows |", "|---|---:|---:|---:|"]
        lines += [f"| {k} | {r['median']:.1f} | {r['signed']:+.1f} | {int(r['n'])} |" for k, r in table.iterrows()]
    skipped = df[df.reason.notna()] if "reason" in df else df.iloc[:0]
    if len(skipped):
        lines += ["", "## Rows not placed", ""] + [f"- `{r.id}`: {r.reason}" for _, r in skipped.iterrows()]
    lines += ["", "## Defaults for blank cells", ""] + [f"- `{k}`: {v} ({why})" for k, (v, why) in DEFAULTS.items()]
    lines += ["- `gpu`: any case, '-' or ' ' for '_', a leading DGX/HGX ignored; `a100_class`, `a100`: a100_80gb "
              "(the 40 GB part has the same peak, slower HBM); `h100`: h100_sxm",
              "- `inter_node=unknown_<X>gbps`: X Gbit/s per node (an NVL72 rack's 4-GPU tray) over one RoCE NIC "
              "per GPU",
              "- `inter_node` in words: InfiniBand, its generation (EDR-XDR), ConnectX-6/7/8 or Quantum name IB; "
              "RoCE, Ethernet, Spectrum-X, EFA, Slingshot price as RoCE; TCP/TCPX as TCP; a kind without a rate "
              "runs at the GPU's reference IB rate or the catalog's; a rate above 800 Gbit/s without a NIC count is "
              "the node's total; NVLink, MNNVL, none: the GPU's reference fabric (as blank)",
              "- MLP gated (SwiGLU) or not: whichever parameter count is nearer `params_b`",
              "- FlashAttention: on for sources from 2023 on, off before",
              "- Fused attention (`fused_attention`, cuDNN's kernel: at `fused_attn_eff` on Hopper, at the fitted `attn_eff` on Blackwell): on for "
              "Megatron-Core, NeMo, Nemotron, DGX Cloud (NeMo, MaxText) and Automodel sources from 2024 on; "
              "FlashAttention-2 otherwise (llm-foundry, torchtitan, PyTorch FSDP)",
              "- FP8 attention (`fp8_attention`, the core at the catalog's measured bf16 / fp8 ratio, `_attention`): "
              "off; on where an fp8-recipe row of a fused-attention stack prints `fp8_dot_product_attention` on "
              "(as a config or `--fp8-dot-product-attention`; Transformer Engine's recipe field `fp8_dpa`)",
              "- TP/PP communication overlap (`mp_comm_overlap`): on for sources from 2024 on (Megatron-Core "
              "`--tp-comm-overlap`, `--overlap-p2p-communication`), off before; torchtitan rows only where "
              "the notes name async TP (DTensor's collectives otherwise run between the GEMMs); off where "
              "the notes say the overlap paths were disabled",
              "- Column-parallel backward all-reduces behind the weight-gradient GEMMs (`tp_async_backward`): "
              "on for sources from 2022 on (Megatron-LM `--async-tensor-model-parallel-allreduce`, in the code "
              "of Korthikanti et al. 2022), off before and in torchtitan rows without async TP",
              "- Data-parallel traffic (gradient sync, ZeRO-3 gathers) overlapped with compute (`dp_overlap`): "
              "off for sources before 2023 (Megatron-LM all-reduced after the backward, Korthikanti et al. "
              "2022 Sec. 6.3), on from 2023 (PyTorch DDP/FSDP, Megatron-Core `--overlap-grad-reduce`) unless "
              "the notes say the overlap paths were disabled",
              "- ZeRO-3 sharding: as the notes name it (`FULL_SHARD` or `HYBRID_SHARD`); else inside a node, "
              "nodes replicating (FSDP `HYBRID_SHARD`), for sources from 2024 on, and over every "
              "data-parallel rank (DeepSpeed ZeRO-3) before",
              "- ZeRO-3 all-gathers per layer (`zero3_collectives_per_layer`): 1 for sources from 2022 on "
              "(PyTorch FSDP, one flat parameter per layer), before one per weight matrix, 4 (5 with a GLU "
              "gate), as DeepSpeed ZeRO-3 gathered each partitioned tensor on its own",
              "- ZeRO-3 gathers again for a recomputed forward (`zero3_regather`): for sources before 2022 "
              "(DeepSpeed's forward post-hook partitions the weights, the recomputation's pre-hook gathers "
              "them again), not from 2022 (PyTorch FSDP recomputes inside the gathered layer's backward)",
              "- Training metrics recomputed from the logits every micro-batch (`metric_loss_passes`): 2 for "
              "llm-foundry sources (Composer updates MPT's train cross-entropy and perplexity after each "
              "micro-batch's backward), 0 otherwise",
              "- Elementwise kernels (`fused_elementwise`): eager PyTorch (unfused RMSNorm, SwiGLU, RoPE; _eager) "
              "for torchtitan rows whose notes say compile was off and for the PyTorch FSDP blog's fms-fsdp runs "
              "(--use_torch_compile=False in its scripts); fused otherwise",
              "- Bytes per logit at the loss's peak (`logit_bytes`): 12 for torchtitan rows whose loss ran eager "
              "(PyTorch's cross-entropy on fp32 logits: torch.compile off, or a 2024 commit, when torchtitan did not "
              "compile its loss), 4 otherwise (Megatron's fused cross-entropy keeps the fp32 logits)",
              "- Dropout (`dropout`, its masks kept in memory): on for sources before 2023 (Megatron-LM's 0.1 "
              "default in the GPT-3-era papers, DeepSpeed's Megatron GPT), off from 2023 (LLaMA-era recipes)",
              "- What selective recompute repeats (`selective_ac`): torchtitan's per-operator policy (`op`: every "
              "second matmul, the pointwise ops and the SP all-gathers; _sac) for torchtitan rows unless their "
              "notes name its layer-level policy; Megatron's attention core (`core_attention`) otherwise",
              "- Which modules Megatron's selective recompute repeats (`recompute_modules`): those the recompute "
              "cell lists (`selective:mla_up_proj,mlp`) or names in prose (RMSNorm, MLA up-projection), else "
              "the notes' `recompute_modules=[...]` or Paxml remat policy (`SAVE_QKV_OUT_PROJ`: norms, attention "
              "core, MLP; `SAVE_DOT_ONLY`: norms, attention core), else Megatron-Core's default, the attention "
              "core (`core_attn`)",
              "- Host launch time per MoE layer (`moe_host_s`): the training preset's, 0 where the notes name a "
              "full-iteration CUDA graph (`full_iteration`) or CUDA graphs over token-dropping layers (static "
              "shapes); Transformer Engine graphs over `moe_router` and `moe_preprocess` with the HybridEP "
              "dispatcher keep the host ahead but for each dispatch's sync (`moe_router_graphed`; the all-to-all "
              "dispatcher stays launch-bound)"]
    return "\n".join(lines) + "\n"


def plot(df: pd.DataFrame, path: Path) -> Path:
    plt = pyplot()
    ok = df[df.abs_pct_error.notna()]
    fig, ax = plt.subplots(figsize=(8, 6))
    for src, part in ok.groupby("source"):
        ax.loglog(part.measured_iter_time_s, part.predicted_iter_time_s, "o", ms=4, label=str(src)[:60])
    lo, hi = ok[["measured_iter_time_s", "predicted_iter_time_s"]].min().min(), ok[
        ["measured_iter_time_s", "predicted_iter_time_s"]].max().max()
    xs = np.array([lo / 1.2, hi * 1.2])
    ax.plot(xs, xs, "k-", lw=0.8)
    ax.fill_between(xs, xs / 1.1, xs * 1.1, color="0.85", zorder=0, label="+-10 %")
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title("predicted vs measured")
    ax.legend(fontsize=5, loc="upper left")
    return save_plot(fig, path)


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    v = cfg.validate
    runs = runs_path(v.runs)
    out = Path(v.out) if v.out else run_dir / "validate.parquet"
    df = run_validate(cfg, runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(out, index=False)
    (run_dir / "validate.md").write_text(report(df, runs))
    if df.abs_pct_error.notna().any():
        plot(df, run_dir / "validate.png")
    console = Console()
    s = summary(df)
    console.print(s.round(1).to_string())
    console.print(f"wrote {out}, {run_dir / 'validate.md'}")
    n = int(df.abs_pct_error.notna().sum())
    median = float(df.abs_pct_error.median()) if n else float("nan")
    print(f"median_abs_pct_error={median:.4f} n={n}")
    return df
