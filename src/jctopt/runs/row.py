"""One measured run as a model configuration (``row_config``): its cells, its stack and defaults."""

from __future__ import annotations

import copy
import math
import re

from omegaconf import DictConfig

from ..config import PRECISION, ConfigError, load_option
from ..model.hybrid import pattern_counts
from .catalog_models import (
    architecture_cells,
    catalog_model,
    hybrid_keys,
    hybrid_layers,
    hybrid_mamba,
    latent_size,
    sliding_window,
)
from .cells import _blank, _global_batch, _glu, _int, _split_from_dp
from .columns import apply_flags, apply_stack, flag, row_stack
from .defaults import FABRICS, REFERENCE_FABRIC, SPELLED_FABRIC, VOCAB
from .hardware import _ib_fabric, _rack_node, _stated_hardware
from .spellings import (
    MAX_NIC_GBIT,
    NO_FABRIC,
    RECOMPUTE,
    RECOMPUTE_ON,
    RowError,
    attention_kind,
    free_text_fabric,
    recompute_mode,
    recompute_modules,
    row_gpu,
    row_precision,
)


def row_config(base: DictConfig, row: dict) -> tuple[DictConfig, list[str]]:
    """The Hydra config of one CSV row, and the defaults it needed."""
    used: list[str] = []
    key = catalog_model(row.get("model", ""), row.get("params_b"))
    hybrid = None if key is None else hybrid_layers(key)
    for cell in ("model", "attention"):
        if hybrid is None and hybrid_mamba(row.get(cell, "")):
            raise RowError(f"{cell}={row[cell]!r} is a hybrid Mamba-2 / linear-attention model outside the "
                           f"catalog: its layer pattern is unknown (catalog hybrids: {', '.join(hybrid_keys())})")
    row = _with_catalog_architecture(row, key, used)
    cfg = copy.deepcopy(base)
    tr = cfg.training
    apply_stack(tr, row_stack(row, tr.stack, used))
    apply_flags(tr, row)
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
        # count; X per GPU is roce<X>).
        fabric, gbit, nics = "roce400", float(m.group(1)) / node_gpus, gpn
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

    lay = cfg.layout
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
    lay.ep = _int(row, "ep", used, rule=1)
    lay.schedule = row_schedule(row) if lay.pp > 1 else "1f1b"
    lay.vpp = _int(row, "vpp", used, rule=2 if lay.schedule == "zb_v" else 1)
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
    tr.zero_stage = _int(row, "zero_stage", used, rule=int(tr.zero_stage))  # blank: the stack's
    replica_batch = tr.global_batch * lay.tp * lay.pp * lay.cp // lay.n_gpus
    whole_replica = replica_batch if tr.zero_stage >= 3 and lay.pp == 1 and replica_batch >= 1 else 1
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
    if recompute == "selective" and tr.selective_ac == "core_attention":
        tr.recompute_modules = recompute_modules(cell) or recompute_modules(row.get("recompute_modules")) or ["core_attn"]
    tr.seq_parallel = bool(_int(row, "sp", used, rule=int(lay.tp > 1)))
    tr.precision = precision
    if PRECISION[precision] < 1:
        tr.fp8_attention = False  # FP8 attention is an fp8 recipe's option
    if tr.zero_stage >= 3 and _blank(row.get("hybrid_shard")):
        used.append("hybrid_shard")
    if m.n_experts > 1 and _blank(row.get("ep_comm_overlap")):
        used.append("ep_comm_overlap")
    # CUDA graphs over the MoE layers take their launches off the host (model.host).
    if flag(row, "moe_layers_graphed"):
        tr.moe_host_s = 0.0
    if precision == "nvfp4":
        share = flag(row, "nvfp4_bf16_share", float)
        if share is None:
            used.append("nvfp4_bf16_share")  # the stack's (training preset's) share
        else:
            tr.nvfp4_bf16_share = min(share, 1.0)
    return cfg, used


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
    # Its MTP depth: the row's; where blank, the catalog's, as Megatron-Core's recipes train the
    # heads (Megatron-Bridge recipes/nemotronh/h100/nemotron_3_{super,nano,ultra}.py @067f987d:
    # mtp_num_layers 2 for Super, Ultra and Lightning; a stack without them states 0).
    if not _blank(row.get("mtp_layers")):
        m.mtp_layers = _int(row, "mtp_layers", [])
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


# Pipeline schedules a row may name (blank: 1F1B, interleaved where vpp > 1); "interleaved" with a
# blank vpp: interleaved at the depth that places fastest (runs.place).
SCHEDULES = {"1f1b": "1f1b", "interleaved": "1f1b", "dualpipe": "dualpipe", "zb_h1": "zb_h1", "zb_v": "zb_v"}


def row_schedule(row: dict) -> str:
    """The layout's pipeline schedule as the row's ``schedule`` cell names it."""
    cell = row.get("schedule")
    if _blank(cell):
        return "1f1b"
    name = str(cell).strip().lower().replace("-", "_")
    if name not in SCHEDULES:
        raise RowError(f"schedule={cell!r} is not one of {', '.join(SCHEDULES)}")
    return SCHEDULES[name]
