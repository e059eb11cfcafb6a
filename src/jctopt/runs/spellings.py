"""How benchmark tables spell a run: the text of a runs-CSV cell read as the model's value.

Sources print the same GPU, precision, fabric or setting in many ways ("NVIDIA H100 80GB
HBM3", "FP8-CS", "8x 400G NDR InfiniBand", "ZeRO-1", "1,024 GPUs"); these pure functions read
them, and name what they cannot read (RowError). ``validate`` maps what they return onto the
catalog and the documented defaults.
"""

from __future__ import annotations

import re

from ..model.recompute_modules import MODULES as MEGATRON_MODULES


class RowError(Exception):
    """This row cannot be placed; the message becomes its ``reason``."""


# The gpu column as sources print it -> the catalog key. Case, "-" or " " for "_", a
# parenthesis, and words naming the vendor, the system, the architecture or the memory
# technology ("NVIDIA", "AMD Instinct", "DGX-", "HGX", "Grace Blackwell Superchip", "Blackwell
# Ultra", "HBM3e", "NVL72", "OAM", "rack", "8-GPU", AC/LC cooling) are spelling, as are SXM (to
# SXM6) and a memory size on parts sold in one size ("H200 SXM 141GB" is h200). Other words
# name another part ("H100 PCIe", "H100 NVL", "A100 PCIe") and keep the row out of the catalog.
# An A100 of unstated memory, and an H100 of unstated form factor (no SXM, DGX or HGX), are
# assumed to be the 80 GB SXM part (the A100 40GB has the same peak and slower HBM, 1.56 vs 2.0
# TB/s; an H100 PCIe would be slower), and the row is marked as defaulted.
GPU_NOISE = {"nvidia", "amd", "instinct", "tesla", "dgx", "hgx", "ampere", "hopper", "grace", "blackwell", "ultra",
             "superchip", "hbm2", "hbm2e", "hbm3", "hbm3e", "nvl72", "oam", "rack", "tray", "node", "board", "baseboard",
             "system", "server", "gpu", "gpus", "ac", "lc", "gb"}
A100_CLASS = "a100_class"  # a source's "A100-class" GPU: the 80 GB part, assumed


def row_gpu(value) -> tuple[str, bool]:
    """(catalog key, whether an assumption stood in for an unstated memory or form factor) for
    a CSV gpu cell; the key may still be missing from the catalog (row_config says so)."""
    # A count of GPUs before or after the part ("8x H100", "B300 x 8"; not MI300X's X) is not its name.
    named = re.sub(r"^\s*\d+\s*[x\u00d7]\s*|\s+[x\u00d7]\s*\d+\s*$", " ", str(value), flags=re.IGNORECASE)
    key = re.sub(r"[\s\-]+", "_", re.sub(r"\([^)]*\)", " ", named).strip().lower())
    if key == A100_CLASS:
        return "a100_80gb", True
    words = [w for w in key.split("_") if w]
    system = bool({"dgx", "hgx"} & set(words))  # a DGX/HGX board holds SXM parts
    words = [w for w in words if w not in GPU_NOISE]
    if not words:
        return key, False
    part, rest = words[0], set(words[1:])
    memory = {w for w in rest if re.fullmatch(r"[0-9]+(gb?)?", w)}  # a size, or a bare number ("8-GPU")
    sxm = {w for w in rest if re.fullmatch(r"sxm[0-9]*", w)}  # SXM4 (A100) to SXM6 (Blackwell)
    other = rest - memory - sxm
    if other:  # another part of the same name (PCIe, NVL)
        return "_".join([part, *sorted(other)]), False
    if part == "a100":
        size = {re.match(r"[0-9]+", w).group() for w in memory}
        return ("a100_40gb", False) if "40" in size else ("a100_80gb", "80" not in size)
    if part == "h100":
        return "h100_sxm", not (sxm or system)
    return part, False


# InfiniBand generations -> Gbit/s per port, where a free-text inter_node names no rate.
IB_GENERATION_GBIT = {"edr": 100.0, "hdr": 200.0, "ndr": 400.0, "xdr": 800.0}
# ConnectX generations -> Gbit/s per port (NVIDIA ConnectX-6 HDR, ConnectX-7 NDR, ConnectX-8 XDR
# product briefs), where a cell names the NIC and no rate.
CONNECTX_GBIT = {"6": 200.0, "7": 400.0, "8": 800.0}
# Words that name a fabric's kind. ConnectX NICs and Quantum switches run InfiniBand in NVIDIA's
# reference systems (DGX user guides); AWS EFA (SRD) and HPE Slingshot are RDMA over Ethernet,
# priced as RoCE (the catalog's roce400 NIC efficiency is fitted to an EFA sweep, collectives.csv);
# GPUDirect-TCPX/TCPXO is TCP.
IB_WORDS = {"ib", "infiniband", "quantum", "connectx", "cx", *IB_GENERATION_GBIT}
ROCE_WORDS = {"roce", "rocev", "ethernet", "spectrum", "efa", "slingshot", "gbe"}
TCP_WORDS = {"tcp", "tcpx", "tcpxo"}
# Cells that name no scale-out fabric: an NVLink domain alone, however spelled ("NVLink5",
# "nvlink_nvl72 (IMEX partition)", "NVL72", "MNNVL"), or nothing ("none", "n/a"). The row takes
# the GPU's reference fabric as where the cell is blank (DEFAULTS["inter_node"]).
NO_FABRIC = re.compile(r"^(?:nvlink\d*|nvl\d*|mnnvl|multi.?node nvlink|none|n/?a|-|single.?node|intra.?node)"
                       r"(?![a-z0-9])")
# The fastest NIC port in the catalog (Gbit/s): a larger rate in a cell without a NIC count is
# the node's total ("EFA 3200 Gbps": 8 x 400).
MAX_NIC_GBIT = 800.0


def free_text_fabric(text: str) -> tuple[str, float | None, int | None] | None:
    """(ib | roce | tcp, Gbit/s per NIC or None where unnamed, NICs per node or None) of an
    inter_node cell written out in words ("8x 400G NDR InfiniBand", "RoCEv2 400 Gb/s x 8", "IB
    HDR", "ConnectX-7", "AWS EFA 3200 Gbps", "100 Gb/s Ethernet TCP"); None when the cell names
    no fabric kind. Ethernet with RDMA (RoCE, Spectrum-X, EFA, Slingshot) prices as RoCE, Ethernet
    over TCP as the catalog's TCP fabric."""
    words = set(re.findall(r"[a-z]+", text))
    generation = next((g for g in IB_GENERATION_GBIT if g in words), None)
    # The rate: a number of Gbit/s, a switch family's ("Quantum-X800"), the IB generation's, the NIC's.
    rate = (re.search(r"(\d+)\s*g(?:be|b(?:it)?(?:/s|ps)?)?(?![a-z])", text)
            or re.search(r"(?:quantum|spectrum)\W*x\W*(\d{3,4})\b", text))
    connectx = re.search(r"(?:connectx|cx)\W*([678])\b", text)
    gbit = (float(rate.group(1)) if rate else IB_GENERATION_GBIT.get(generation)
            or (CONNECTX_GBIT[connectx.group(1)] if connectx else None))
    if words & IB_WORDS:
        kind = "ib"
    elif words & TCP_WORDS:
        kind = "tcp"
    elif words & ROCE_WORDS:
        kind = "roce"
    elif rate:
        kind = "reference"  # a rate alone ("8x400Gb/s"): the kind of the GPU's reference fabric
    else:
        return None
    # A NIC count (at most two digits) before "x" and not glued to a word ("8x 400G", not
    # "ndr400 x8"), after it, or per node.
    parts = re.sub(r"(?:connectx|cx|quantum|spectrum)\W*x?\W*\d+", " ", text)  # part names hold no count
    count = re.search(r"(?<![a-z\d])(\d{1,2})\s*x(?![a-z])|(?<![a-z])x\s*(\d{1,2})(?!\s*g|\d)"
                      r"|(\d{1,2})\s*(?:nics?\s*)?per\s*node", parts)
    nics = int(next(g for g in count.groups() if g)) if count else None
    return kind, gbit, nics


# The precision column as sources print it -> the model's precision. Case, a trailing
# "(inferred)" / "(unverified)", and "_" or " " for "-" are ignored. FP8 "CS" is current
# (per-tensor) scaling, "DS" delayed scaling (Transformer Engine's recipes), "tensorwise" and
# "rowwise" torchao's float8 scalings, "MX" and MXFP8 Blackwell's 32-element block scaling,
# "blockwise" DeepSeek-V3's 128-element blocks, "alt" a recipe variant: all but MXFP8 run as fp8.
PRECISIONS = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "fp16-or-bf16": "bf16", "fp8": "fp8",
              "float8": "fp8", "fp8-cs": "fp8", "fp8-ds": "fp8", "fp8-delayed": "fp8", "fp8-current": "fp8",
              "fp8-tensorwise": "fp8", "float8-tensorwise": "fp8", "fp8-rowwise": "fp8", "float8-rowwise": "fp8",
              "fp8-blockwise": "fp8", "fp8-alt": "fp8", "mxfp8": "mxfp8", "fp8-mx": "mxfp8", "nvfp4": "nvfp4",
              "fp4": "nvfp4"}


# Mixed-precision spellings that name no dtype: NVIDIA Apex AMP's opt levels (O1: autocast, O2:
# fp16 model with fp32 master weights) and PyTorch's torch.cuda.amp run fp16 unless told bf16
# (autocast's CUDA default dtype is float16). With a dtype beside them ("AMP bf16") they refine it.
AMP_WORDS = {"amp", "o1", "o2", "apex", "autocast"}
# FP8 GEMMs with BF16 master weights and the rest in BF16, as Transformer Engine recipes are
# spelled ("BF16+FP8", Megatron-Bridge's bf16_with_fp8_* mixed precision): the GEMMs run fp8. A
# slash ("FP8/BF16") reads as either one, and is refused.
BF16_WITH_FP8 = re.compile(r"^\s*(?:bf16\s*\+\s*fp8|fp8\s*\+\s*bf16|bf16[_ -]with[_ -]fp8)\b")
# Full-precision training, whose GEMMs the model does not price (tensor-core bf16/fp16/fp8/fp4 only).
FULL_PRECISION = {"fp32", "float32", "tf32"}


def row_precision(value) -> str:
    """The model's precision for a CSV cell, or RowError naming the accepted spellings."""
    text = str(value).strip().lower()
    if BF16_WITH_FP8.match(text):
        return "fp8"
    words = set(re.findall(r"[a-z0-9]+", text))
    if words & FULL_PRECISION and not words & set(PRECISIONS):
        raise RowError(f"precision={value!r} is not modelled: fp32 and tf32 GEMMs are not priced "
                       f"(the model covers {', '.join(sorted(set(PRECISIONS.values())))})")
    if words & AMP_WORDS:
        dtypes = {PRECISIONS[w] for w in words if w in PRECISIONS}
        if not dtypes:
            return "fp16"
        if len(dtypes) == 1:
            return dtypes.pop()
    key = re.sub(r"[_\s+/]+", "-", re.sub(r"\s*\([^)]*\)\s*$", "", text))
    key = re.sub(r"^(fp8|float8)(cs|ds|mx)$", r"\1-\2", key)  # recipe names: "fp8cs", "fp8mx"
    if key not in PRECISIONS:  # a qualified precision ("FP8 hybrid", "BF16 mixed", "mixed FP8"); FP8 with MX is MXFP8
        words = key.split("-")
        # a word that only refines another ("fp8-mxfp8": MX-scaled fp8) names one precision;
        # two precisions named ("BF16+FP8") say not which the GEMMs ran: refused, not guessed
        named = {PRECISIONS[w] for w in words if w in PRECISIONS}
        named = {"mxfp8"} if named == {"fp8", "mxfp8"} else named
        key = "mxfp8" if "mx" in words and {"fp8", "float8"} & set(words) else named.pop() if len(named) == 1 else key
    if PRECISIONS.get(key) == "fp8" and re.search(r"\(\s*mx", text):  # "FP8 (MXFP8)", "fp8 (MX scaling)"
        key = "mxfp8"
    if key not in PRECISIONS:
        raise RowError(f"precision={value!r} is not modelled ({', '.join(PRECISIONS)}; any case, "
                       "a trailing '(inferred)' ignored)")
    return PRECISIONS[key]


# The recompute column's first word (sources annotate it: "selective:mla_up_proj", "none (mode
# none)", "selective_op") -> the model's mode; "no" / "off" as tables print a disabled option.
# "Off" in any spelling is none.
RECOMPUTE = {"none": "none", "no": "none", "off": "none", "false": "none", "disabled": "none", "0": "none",
             "selective": "selective", "full": "full"}
# A boolean "on" says not which granularity (Megatron's --recompute-activations is selective,
# AutoModel's activation_checkpointing whole layers): the least recompute that fits from
# selective, as a blank cell is the least from none.
RECOMPUTE_ON = {"yes", "on", "true", "enabled", "1"}
# A cell that lists Megatron-Core's --recompute-modules without the granularity ("mla_up_proj,mlp,
# moe", "core_attn") names selective recompute, which those modules refine; first words as read.
RECOMPUTE_MODULES = {"core", "mla", "mlp", "moe", "layernorm", "shared", "norm", "act"}
# Short module names as lists print them ("norm, act"): Megatron-Core's layernorm and moe_act.
MODULE_ALIASES = {"norm": "layernorm", "act": "moe_act"}
# Flags that name a granularity: Megatron-LM's --recompute-activations is selective recompute
# (megatron/training/arguments.py: it sets --recompute-granularity selective); DeepSpeed's
# activation checkpointing with partition_activations checkpoints whole layers (full), their
# saved inputs partitioned across the model-parallel ranks.
RECOMPUTE_FLAGS = ((re.compile(r"-*recompute[-_]activations\b"), "selective"),
                   (re.compile(r"\bpartition[-_]activations\b"), "full"))
# Words around the mode that name the feature, not its granularity ("activation checkpointing
# (full)", "AC: selective", "recompute_granularity=full"), and the words of selective
# checkpointing's abbreviations ("SAC", torchtitan's "per-op SAC").
RECOMPUTE_NOISE = {"activation", "activations", "checkpointing", "checkpoint", "recompute", "recomputation",
                   "granularity", "ac", "mode", "per"}
SELECTIVE_WORDS = {"sac", "op"}


def recompute_mode(cell) -> str:
    """The recompute cell's mode word: its first word that is not RECOMPUTE_NOISE ("none
    (--recompute-granularity full ...)" is none), Megatron's module names and SAC's words as
    "selective"; a word that names no mode is returned for the caller to refuse."""
    for flag, mode in RECOMPUTE_FLAGS:
        if flag.search(str(cell).lower()):
            return mode
    words = [re.sub(r"^([01])\.0$", r"\1", w) for w in re.findall(r"[a-z0-9.]+", str(cell).lower())]
    for word in words:
        if word in RECOMPUTE_NOISE:
            continue
        return "selective" if word in RECOMPUTE_MODULES | SELECTIVE_WORDS else word
    return ""


# Megatron-Core's --recompute-modules as rows print them: in the recompute cell
# ("selective:mla_up_proj,mlp") or the notes ("recompute_modules=[layernorm, moe_act, moe]"),
# and the prose of a report ("RMSNorm and MLA up-projection recomputed", DeepSeek-V3 Sec. 3.2.3).
# Megatron's other modules, of architectures outside the catalog (Gated DeltaNet / DeltaProduct,
# DeepSeek-V4's hyper-connections): named, they are refused, not dropped.
OTHER_MEGATRON_MODULES = ("gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc")
MODULE_PROSE = {"layernorm": r"\b(?:rms ?norm|layer ?norm)s?\b", "mla_up_proj": r"\bmla up.?proj(?:ection)?s?\b",
                "core_attn": r"\b(?:core attention|attention core)\b"}


def recompute_modules(cell) -> list[str] | None:
    """The Megatron modules a cell names (the recompute cell of a selective-recompute row, or its
    ``recompute_modules`` cell): module names, else the prose of MODULE_PROSE; None where it
    names none (Megatron's default, core_attn). RowError for a module outside the catalog's
    architectures."""
    text = str(cell).lower()
    names = re.findall(r"\b(" + "|".join(MEGATRON_MODULES + OTHER_MEGATRON_MODULES) + r")\b", text)
    if not names:
        names = [MODULE_ALIASES[w] for w in re.findall(r"[a-z_]+", text) if w in MODULE_ALIASES]
    if not names:
        names = [name for name, pattern in MODULE_PROSE.items() if re.search(pattern, text)]
    if unknown := [n for n in names if n not in MEGATRON_MODULES]:
        raise RowError(f"recompute module {unknown[0]!r} is not modelled ({', '.join(MEGATRON_MODULES)})")
    return sorted(set(names), key=MEGATRON_MODULES.index) or None


# Switch words as cells and settings print them.
BOOLEAN_WORDS = {"true": True, "yes": True, "on": True, "enabled": True, "1": True,
                 "false": False, "no": False, "off": False, "disabled": False, "0": False}


# Words that tables print in integer columns: sequence parallelism as a flag; the optimizer
# sharding by name (ZeRO-n; Megatron's distributed optimizer shards the optimizer state, ZeRO-1;
# PyTorch FSDP/FSDP2 and HSDP shard parameters too, ZeRO-3; DDP shards nothing).
SP_WORDS = {word: str(int(on)) for word, on in BOOLEAN_WORDS.items()} | {"none": "0"}
ZERO_WORDS = [(r"zero\W*(?:stage\W*)?([0-3])\b", None), (r"\b(?:fsdp2?|hsdp|full.?shard|hybrid.?shard)\b", "3"),
              (r"\bdist(?:ributed)?.?opt(?:imizer)?\b", "1"), (r"^(?:ddp|none|no|off|false)$", "0")]


# The unit a count may carry in its cell (only its own: "2 nodes" is not 2 GPUs).
COUNT_UNITS = {"num_gpus": "gpus?", "gpus_per_node": "gpus?", "seq_len": "tokens?",
               "global_batch": "sequences?|seqs?|samples?", "micro_batch": "sequences?|seqs?|samples?",
               "layers": "layers?"}


def word_value(key: str, text: str) -> str | None:
    """The integer (as text) a word in integer column ``key`` stands for (SP_WORDS, ZERO_WORDS), or None."""
    if key == "sp":
        return SP_WORDS.get(text)
    if key == "zero_stage":
        for pattern, value in ZERO_WORDS:
            if m := re.search(pattern, text):
                return value or m.group(1)
    return None


# Words of an attention cell: MLA (DeepSeek's latent attention, with or without DSA), else the
# softmax attention of GQA's shapes (multi-head, multi-query, grouped-query, full, a sliding
# window, chunked); linear-attention and Mamba hybrids are refused earlier (hybrid_mamba).
MLA_WORDS = {"mla", "latent", "dsa"}
GQA_WORDS = {"gqa", "mha", "mqa", "grouped", "group", "multi", "query", "full", "causal", "dense", "standard",
             "swa", "sliding", "window", "chunked", "local", "irope", "nope", "rope", "softmax", "attention", "sdpa",
             "gated", "sinks"}


def attention_kind(cell: str) -> str | None:
    """"mla" or "gqa" for an attention cell (lower case) that names one (MLA_WORDS, GQA_WORDS);
    None otherwise."""
    if cell in ("gqa", "mla"):
        return cell
    words = set(re.findall(r"[a-z]+", cell))
    return "mla" if words & MLA_WORDS else "gqa" if words & GQA_WORDS else None
