"""A runs row's architecture from the model catalog (``conf/model``) where its cells are blank.

Benchmark tables name a well-known model ("Llama 3.1 405B", "DeepSeek-V3", "Qwen3-235B-A22B")
and print the layout, not the architecture. Where a row names a catalog model, each blank
architecture cell takes the catalog's value (each model file cites the config it copies);
cells the row states are kept. A model the catalog lacks leaves the cells blank (and the row
is refused by the cell it lacks).
"""

from __future__ import annotations

import functools
import re
from types import MappingProxyType

from ..config import load_option

# Catalog key -> the model-column spellings it answers to (case and separators ignored). Llama
# 3.1 and 3.3 keep Llama 3's shapes (Dubey et al. 2024, Table 3); DeepSeek-V3.1/V3.2 keep V3's.
NAMES = {
    # "llama31_405b": MLPerf Training's benchmark ids.
    "llama3_405b": r"llama ?3(\.?[13])? ?405b", "llama3_70b": r"llama ?3(\.?[13])? ?70b",
    "llama3_8b": r"llama ?3(\.?1)? ?8b", "llama2_34b": r"llama ?2( style)? ?34b",
    "llama2_70b": r"llama ?2 ?70b", "llama2_7b": r"llama ?2 ?7b",
    # DeepSeek-V3 of any other size is another model (torchtitan's "DeepSeek-V3 16B" is V2-Lite's
    # shape); DeepSeek-R1 (and R1-Zero) is V3-Base trained on (DeepSeek-AI 2025, arXiv:2501.12948;
    # its config.json is V3's), its distillations are Llama and Qwen models; a torchtitan test
    # model ("mini_kimi_k2") is not Kimi K2.
    "deepseek_v3": r"deepseek ?(v3(\.\d)?|r1( ?zero)?(?! ?distill))(?! ?(?!671b)\d+b)",
    "kimi_k2": r"(?<!mini )kimi ?k2",
    "deepseek_v2_lite": r"deepseek ?v2 ?lite|deepseek ?v3 ?16b",
    "deepseek_v2": r"deepseek ?v2(?! ?lite)(?! ?(?!236b)\d+b)",
    # Qwen3's MoE sizes also as "Qwen3 MoE 30B" (NeMo AutoModel) or without the active size.
    "qwen3_30b_a3b": r"qwen ?3 ?(moe ?)?30b( ?a3b)?", "qwen3_235b_a22b": r"qwen ?3 ?(moe ?)?235b( ?a22b)?",
    # Qwen3's dense sizes ("Qwen3-32B", "qwen3_0.6b"); a sized variant (Qwen3-VL, -Coder) is another model.
    "qwen3_0p6b": r"qwen ?3 ?0\.?6b", "qwen3_1p7b": r"qwen ?3 ?1\.?7b", "qwen3_4b": r"qwen ?3 ?4b",
    "qwen3_8b": r"qwen ?3 ?8b", "qwen3_14b": r"qwen ?3 ?14b", "qwen3_32b": r"qwen ?3 ?32b",
    "gpt_oss_120b": r"gpt ?oss ?120b", "gpt_oss_20b": r"gpt ?oss ?20b",
    # Qwen2.5's dense sizes from 7B ("Qwen2.5-72B-Instruct"); Qwen2.5-VL, -Coder and -Math are other models.
    "qwen2p5_7b": r"qwen ?2\.?5 ?7b", "qwen2p5_14b": r"qwen ?2\.?5 ?14b", "qwen2p5_32b": r"qwen ?2\.?5 ?32b",
    "qwen2p5_72b": r"qwen ?2\.?5 ?72b",
    # GLM-4.5 and its Air (Megatron-Bridge: "glm45_355b", "glm45_air_106b"); GLM-4.5V is a vision model.
    "glm45_air_106b_a12b": r"glm ?4\.?5 ?air( ?106b)?( ?a12b)?",
    "glm45_355b_a32b": r"glm ?4\.?5(?! ?air)(?!v)( ?355b)?( ?a32b)?",
    "llama4_scout": r"llama ?4 ?scout", "llama4_maverick": r"llama ?4 ?maverick",
    "mixtral_8x7b": r"mixtral ?8x7b", "mixtral_8x22b": r"mixtral ?8x22b", "gpt3_175b": r"gpt ?3 ?175b",
    "grok1_314b": r"grok ?1", "nemotron4_15b": r"nemotron ?(4 ?)?15b", "nemotron4_340b": r"nemotron ?(4 ?)?340b",
    # Hybrid Mamba-2 models (model.hybrid): their layer pattern comes from the catalog only.
    # Megatron-Bridge's tables also print "Nemotron5-H_56B".
    "nemotron_h_8b": r"nemotron ?5? ?h ?8b", "nemotron_h_47b": r"nemotron ?5? ?h ?47b",
    "nemotron_h_56b": r"nemotron ?5? ?h ?56b",
    # "Nemotron 3" also as NeMo AutoModel prints it ("Nemotron V3 Nano 30B", "Nemotron Nano v3 30B")
    # and by size alone (dgxc-benchmarking: "Nemotron 3 30B", "Nemotron 3 120B").
    "nemotron3_nano_30b_a3b": (r"nemotron ?v?3 ?nano(?! ?4b)( ?30b ?a3b)?"
                               r"|nemotron ?(nano ?)?v?3 ?(nano ?)?30b( ?a3b)?"),
    "nemotron3_super_120b_a12b": (r"nemotron ?v?3 ?super( ?120b ?a12b)?"
                                  r"|nemotron ?(super ?)?v?3 ?(super ?)?120b( ?a12b)?"),
    "nemotron3_ultra_550b_a55b": r"nemotron ?v?3 ?ultra( ?550b ?a55b)?",
    # Megatron-Bridge prints "Nemotron_3_5_Lightning".
    "nemotron3_5_lightning_30b_a3b": r"nemotron ?v?3(\.| )5 ?lightning( ?30b ?a3b)?",
}


# Hybrid Mamba-2 / attention models (NVIDIA Nemotron-H, Nemotron 3, and others): a row cannot
# state their layer pattern, so one is placed only as a catalog model; any other is refused
# rather than priced as a transformer with attention in every layer. Nemotron Nano 2 (9B/12B v2)
# is a Nemotron-H hybrid; the Llama-based Nemotron Nano 8B v1 and Super 49B are transformers.
# Linear-attention hybrids are refused alike: Qwen3-Next (three Gated DeltaNet layers to one of
# attention), Kimi Linear (Kimi Delta Attention), MiniMax-01/M1 (lightning attention).
HYBRID_MAMBA = (r"nemotron ?v?(h|3(\.\d)?)(?![a-z0-9])|nemotron ?nano ?(\d+b ?)?v ?2(?![a-z0-9])"
                r"|mamba|jamba|zamba|hymba|samba"
                r"|qwen ?3 ?next|kimi ?linear|minimax ?(01|m1|text ?01)|(gated ?)?deltanet|linear ?attention"
                r"|lightning ?attention")


def hybrid_mamba(name) -> bool:
    """Whether a ``model`` (or ``attention``) cell names a hybrid Mamba-2 or linear-attention model."""
    return bool(re.search(rf"(?<![a-z0-9])(?:{HYBRID_MAMBA})", _spelling(name)))


@functools.cache
def hybrid_layers(key: str) -> MappingProxyType | None:
    """A hybrid catalog model's layer pattern and Mamba-2 shape (the ``model`` fields no runs
    column states) and its multi-token-prediction depth, read-only; None for a transformer."""
    m = load_option("model", key)
    if m.layer_pattern is None:
        return None
    fields = ("layer_pattern", "mamba_heads", "mamba_head_dim", "mamba_state", "mamba_groups", "glu",
              "tied_embeddings", "learned_positions", "mtp_layers")
    return MappingProxyType({k: m[k] for k in fields} | {"n_layers": m.n_layers})


@functools.cache
def latent_size(key: str) -> int:
    """A catalog MoE's latent expert width (``model.moe_latent_size``, model.latent; 0: none), which
    no runs column states."""
    return int(load_option("model", key).moe_latent_size)


@functools.cache
def sliding_window(key: str) -> tuple[int, float]:
    """A catalog model's sliding window (``model.attention_window``, model.window; 0: none) and the
    share of its layers that use it, which no runs column states."""
    m = load_option("model", key)
    return int(m.attention_window), m.window_layers / m.n_layers


def hybrid_keys() -> list[str]:
    """The catalog's hybrid Mamba-2 models."""
    return [k for k in NAMES if hybrid_layers(k) is not None]


def _spelling(name) -> str:
    """A cell lower-cased, separators as single spaces, "405 B" as "405b"."""
    text = re.sub(r"[\s_\-]+", " ", str(name).strip().lower())
    return re.sub(r"(\d) b\b", r"\1b", text)


def catalog_model(name, params_b=None) -> str | None:
    """The catalog key whose model a ``model`` cell names, or None; a cell that names the family
    alone ("Llama 3.1", "Nemotron4": dgxc-benchmarking prints the size in a column of its own) is
    read with the row's ``params_b`` appended."""
    key = _named(_spelling(name))
    if key is None and _number(params_b):
        key = _named(_spelling(f"{name} {float(params_b):g}b"))
    return key


def _named(text: str) -> str | None:
    return next((key for key, pattern in NAMES.items()
                 if re.search(rf"(?<![a-z0-9])(?:{pattern})(?![a-z0-9])", text)), None)


def _number(cell) -> bool:
    try:
        return float(cell) > 0
    except (TypeError, ValueError):
        return False


@functools.cache  # read once per model: validate places a row once per candidate split
def architecture_cells(key: str) -> MappingProxyType:
    """The runs-CSV architecture columns of catalog model ``key`` (runs_moe_dev.csv's
    conventions: ``qk_head_dim`` without the RoPE part under MLA, ``attention`` gqa or mla),
    read-only."""
    m = load_option("model", key)
    mla = m.kv_lora_rank > 0
    cells = {"layers": m.n_layers, "hidden": m.hidden, "ffn_hidden": m.ffn_hidden, "heads": m.n_heads,
             "kv_heads": m.n_kv_heads or m.n_heads, "vocab": m.vocab, "seq_len": m.seq_len,
             "experts": m.n_experts, "top_k": m.top_k, "moe_ffn_hidden": m.moe_ffn_hidden or m.ffn_hidden,
             "shared_experts": m.n_shared_experts, "dense_layers": m.n_dense_layers,
             "attention": "mla" if mla else "gqa"}
    if m.head_dim is not None:
        cells["qk_head_dim"] = m.head_dim - m.qk_rope_head_dim
    if mla:
        cells.update(q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank, qk_rope_head_dim=m.qk_rope_head_dim,
                     v_head_dim=m.v_head_dim or m.head_dim)
    return MappingProxyType(cells)
