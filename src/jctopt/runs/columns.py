"""The software a row states: its ``stack`` column and the flags its recipe sets apart from it.

A row runs with its stack's training flags (``conf/stack/<stack>.yaml``); a cell in one of the
``FLAG_COLUMNS`` (named as the training config names the flag) states what the run's recipe set
instead. A file without a ``stack`` column (a user's) takes ``stack=`` from the command line,
``generic`` where none is given.
"""

from __future__ import annotations

import math

from omegaconf import DictConfig

from ..config import ConfigError, load_option
from .cells import _blank
from .spellings import BOOLEAN_WORDS, RowError

# Training flags a row may state, with their type: what the recipe turned on or off.
FLAG_COLUMNS = {
    "flash_attention": bool, "fused_attention": bool, "fp8_attention": bool, "fused_elementwise": bool,
    "mp_comm_overlap": bool, "tp_async_backward": bool, "dp_overlap": bool,
    "megatron_fsdp": bool, "hybrid_shard": bool, "zero3_collectives_per_layer": int, "zero3_regather": bool,
    "ep_comm_overlap": bool, "ep_two_hop": bool, "moe_imbalance": float, "moe_router_graphed": bool,
    "offload_layers": int, "metric_loss_passes": int, "logit_bytes": float, "dropout": bool,
    "selective_ac": str,
}
SELECTIVE_AC = ("core_attention", "op")
# The stack a row without a stack cell runs when the command line names none (stack=none).
DEFAULT_STACK = "generic"


def row_stack(row: dict, command_line: str, used: list[str]) -> str:
    """The stack a row ran: its ``stack`` cell, else ``stack=`` of the command line, else
    ``DEFAULT_STACK`` (marked as defaulted)."""
    if not _blank(row.get("stack")):
        return str(row["stack"]).strip()
    used.append("stack")
    return command_line if command_line not in ("none", "", None) else DEFAULT_STACK


def apply_stack(training: DictConfig, name: str) -> None:
    """``training`` with the flags of stack ``name`` (conf/stack, or the user's config directory)."""
    try:
        entry = load_option("stack", name)
    except ConfigError as err:
        raise RowError(str(err)) from None
    for key, value in entry.items():
        training[key] = value


def flag(row: dict, key: str, kind=bool):
    """The value of flag column ``key`` a row states, as ``kind``; None where blank or absent;
    RowError naming the column and cell where it is not one."""
    v = row.get(key)
    if _blank(v):
        return None
    if kind is bool:
        word = str(v).strip().lower()
        word = {"1.0": "1", "0.0": "0"}.get(word, word)
        if isinstance(v, bool) or word in BOOLEAN_WORDS:
            return bool(v) if isinstance(v, bool) else BOOLEAN_WORDS[word]
        raise RowError(f"{key}={v!r} is not a switch (true/false, on/off, yes/no, 1/0)")
    if kind is str:
        word = str(v).strip().lower()
        if key == "selective_ac" and word not in SELECTIVE_AC:
            raise RowError(f"selective_ac={v!r} is not one of {', '.join(SELECTIVE_AC)}")
        return word
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise RowError(f"{key}={v!r} is not a number") from None
    if not math.isfinite(x) or x < 0 or (kind is int and x != int(x)):
        raise RowError(f"{key}={v!r} is not a {'whole ' if kind is int else ''}number >= 0")
    return kind(x)


def apply_flags(training: DictConfig, row: dict) -> None:
    """``training`` with every flag the row states (FLAG_COLUMNS)."""
    for key, kind in FLAG_COLUMNS.items():
        value = flag(row, key, kind)
        if value is not None:
            training[key] = value
