"""One cell of a row as a number: blanks, counts and the batch they make."""

from __future__ import annotations

import math
import re

import numpy as np
from omegaconf import DictConfig

from .defaults import DEFAULTS
from .spellings import (
    COUNT_UNITS,
    RowError,
    word_value,
)

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
