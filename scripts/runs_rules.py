"""What a row's notes and source say about its software: overlaps, schedules, graphs, FSDP.

The rules ``convert_runs.py`` reads the shipped runs' prose by, once, to write their columns;
nothing at prediction time reads a note or a source (jctopt.runs reads columns).
"""

from __future__ import annotations

import re

from notes_settings import notes_modules, notes_setting, notes_switch, pax_remat  # noqa: F401 (notes_modules: convert_runs)

from jctopt.runs.cells import _blank
from jctopt.runs.spellings import row_gpu


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


def _stated_offload_layers(row: dict) -> int | None:
    """Layers whose activations the row's notes say were offloaded to host memory: Megatron-Core's
    ``cpu_offloading_num_layers`` (Megatron-Bridge; not where ``cpu_offloading`` is off), NeMo's
    ``activation_offload_layers``."""
    notes = row.get("notes", "")
    setting = notes_setting(notes, "cpu_offloading_num_layers", "activation_offload_layers")
    if setting is None or not setting[0].isdigit() or notes_switch(notes, "cpu_offloading") is False:
        return None
    return int(setting[0])


# A row whose notes or derivation say its pipeline schedule was interleaved without saying into
# how many chunks ("interleaved; chunk count not stated"); a negation ("no interleaving") does not
# count.
INTERLEAVED_NOTES = re.compile(r"\binterleaved\b", re.IGNORECASE)


NOT_INTERLEAVED_NOTES = re.compile(r"\b(no|not|without|non)[ -]interleav", re.IGNORECASE)




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


# A board power limit as notes state it: "500 W power limit", "750W power cap", "limited to 750W",
# "power-capped at 600 W" (watts of three or four digits, a GPU board's range).
POWER_LIMIT = re.compile(r"\b(\d{3,4}) ?W (?:power )?(?:limit|cap)\b"
                         r"|\b(?:power[- ]?)?(?:limited|capped) (?:to|at) (\d{3,4}) ?W\b", re.IGNORECASE)
# The HBM a row's notes state apart from the catalog's: "96GB HBM2e (2.4 TB/s)", as Meta's Grand
# Teton H100s that torchtitan benchmarks on.
STATED_HBM = re.compile(r"\b(\d+) ?GB HBM\w*\s*\(([\d.]+) ?TB/s")


def stated_hardware(row: dict) -> dict:
    """The hardware columns the notes state: gpu_power_limit_w (model.power), hbm_gb, hbm_tbps."""
    notes = str(row.get("notes", ""))
    cells = {}
    if m := POWER_LIMIT.search(notes):
        cells["gpu_power_limit_w"] = float(m.group(1) or m.group(2))
    if m := STATED_HBM.search(notes):
        cells["hbm_gb"], cells["hbm_tbps"] = float(m.group(1)), float(m.group(2))
    return cells


def per_gpu_fabric(row: dict) -> str | None:
    """``inter_node=unknown_<X>gbps`` whose notes say the X Gbit/s is per GPU ("backend RDMA 400
    Gb/s per GPU"): the same as ``roce<X>``, one RoCE NIC of X per GPU; None otherwise."""
    m = re.fullmatch(r"unknown_(\d+)gbps", str(row.get("inter_node", "")).strip().lower())
    if m and re.search(rf"\b{m.group(1)} ?Gb(?:it)?(?:/s|ps) per GPU", str(row.get("notes", "")), re.IGNORECASE):
        return f"roce{m.group(1)}"
    return None


def legacy_training(row: dict, plain, preset) -> tuple[dict, set[str]]:
    """(The training flags a row's source year, source name and notes imply, as validate read
    them before the runs had these columns; those of them the notes name outright).
    ``plain``: the row's config as the column reader places it without them (its precision,
    recompute, zero stage, model); ``preset``: the training preset, whose values held where no
    rule applied."""
    year = source_year(row)
    torchtitan = _torchtitan_stack(row)
    tr, notes = plain.training, str(row.get("notes", ""))
    fused_attention = year >= 2024 and bool(FUSED_ATTENTION_STACKS.search(_stack_text(row)))
    mp_overlap, tp_async = _tp_overlap(row, year, torchtitan)
    megatron_fsdp = tr.zero_stage >= 3 and (_megatron_core_stack(row) or _megatron_fsdp_switch(row))
    named = _hybrid_shard(row, year)
    ep_overlap, two_hop, ep_named = _moe_dispatch(row)
    fused_elementwise = not _eager_elementwise(row)
    out = {
        "flash_attention": year >= 2023,
        "fused_attention": fused_attention,
        "fp8_attention": bool(fused_attention and tr.precision in ("fp8", "mxfp8", "nvfp4")
                              and notes_switch(notes, "fp8_dot_product_attention", "fp8_dpa")),
        "mp_comm_overlap": mp_overlap, "tp_async_backward": tp_async,
        "megatron_fsdp": megatron_fsdp,
        "hybrid_shard": named if named is not None else (year >= 2024 and not _fsdp_native(row) and not megatron_fsdp),
        "zero3_collectives_per_layer": 1 if year >= 2022 else 4 + int(plain.model.glu),
        "zero3_regather": year < 2022,
        "dp_overlap": year >= 2023 and not _overlaps_disabled(row),
        "ep_comm_overlap": ep_overlap, "ep_two_hop": two_hop,
        "moe_imbalance": _padded_capacity(row) or preset.moe_imbalance,
        "moe_layers_graphed": _moe_layers_graphed(row),
        "moe_router_graphed": (not _moe_layers_graphed(row) and _te_scoped_hybridep(notes)) or preset.moe_router_graphed,
        "offload_layers": _stated_offload_layers(row) or 0,
        "metric_loss_passes": 2 if "llm-foundry" in str(row.get("source", "")) else 0,
        "fused_elementwise": fused_elementwise,
        "logit_bytes": 12.0 if torchtitan and (year < 2025 or not fused_elementwise) else preset.logit_bytes,
        "dropout": year < 2023,
        "selective_ac": "op" if tr.recompute == "selective" and _per_op_sac(row, torchtitan) else "core_attention",
    }
    if tr.precision == "nvfp4":
        share = _nvfp4_bf16_share(row, plain.model.n_layers)
        out["nvfp4_bf16_share"] = preset.nvfp4_bf16_share if share is None else share
    named = {"hybrid_shard"} if named is not None else set()
    return out, named | ({"ep_comm_overlap"} if ep_named else set())


# Megatron-Bridge's NVFP4 benchmark recipes that keep layers in BF16 (catalog key: last layers):
# Nemotron 3 Super's (nemotron_3_super_bf16_with_nvfp4_mixed, training/mixed_precision.py
# @067f987d: first_last_layers_bf16 True, num_layers_at_end_in_bf16 14; perf_recipes/nemotronh
# common.py _nemotron_3_super_nvfp4_precision uses it on every GPU).
MEGATRON_BRIDGE_NVFP4_BF16_END_LAYERS = {"nemotron3_super_120b_a12b": 14}


def _nvfp4_bf16_share(row: dict, layers: int) -> float | None:
    """Share of the layers an NVFP4 row keeps in BF16: the first and last layers its notes name
    (Megatron's ``num_layers_at_start_in_bf16`` / ``..._at_end_...``); else, in Megatron-Core
    stacks, those of the model's benchmark recipe (MEGATRON_BRIDGE_NVFP4_BF16_END_LAYERS), none
    for other models (Megatron-Bridge ``bf16_with_nvfp4_mixed``: every transformer layer
    quantized); None elsewhere (the training preset's share)."""
    from jctopt.runs.catalog_models import catalog_model

    named = [int(n) for n in re.findall(r"num_layers_at_(?:start|end)_in_bf16\W*(\d+)", str(row.get("notes", "")))]
    if named:
        return min(sum(named) / layers, 1.0)
    if not _megatron_core_stack(row):
        return None
    key = catalog_model(row.get("model", ""), row.get("params_b"))
    return min(MEGATRON_BRIDGE_NVFP4_BF16_END_LAYERS.get(key, 0) / layers, 1.0)


def cell_modules(cell) -> list[str]:
    """The Megatron modules a recompute cell names itself (jctopt.runs.spellings reads them)."""
    from jctopt.runs.spellings import recompute_modules

    return [] if _blank(cell) else (recompute_modules(cell) or [])
