"""How a run's notes print a setting: a config's repr, YAML, a command-line flag, a remat policy
or a module list (read by runs_rules.py, for scripts/convert_runs.py)."""

from __future__ import annotations

import itertools
import re

from jctopt.model.recompute_modules import MODULES as MEGATRON_MODULES
from jctopt.runs.spellings import BOOLEAN_WORDS, OTHER_MEGATRON_MODULES, RowError


# A setting as a run's notes print it: a config's repr or YAML (``moe_a2a_overlap=True``,
# ``cfg.model.cpu_offloading_num_layers = 40``, ``use_megatron_fsdp: true``) or Megatron's
# command-line flag (``--overlap-moe-expert-parallel-comm``, ``--cpu-offloading-num-layers 40``);
# "_" and "-" alike, any case.
def notes_setting(notes, *names: str) -> tuple[str, bool] | None:
    """(value, given as a command-line flag) of the first of ``names`` the notes set: the word
    after ``=``, ``:`` or, for a flag, a space ("" for a flag given alone); None where the notes
    set none of them."""
    for name in names:
        words = r"[_-]".join(re.escape(w) for w in name.split("_"))
        m = re.search(rf"(?<![\w-])(--)?{words}(?![\w-])(?:\s*[=:]\s*|(?<=\S)\s+(?=\w))?['\"]?([\w.]*)",
                      str(notes), re.IGNORECASE)
        if m and (m.group(1) or m.group(2)):
            return m.group(2).lower(), bool(m.group(1))
    return None


def notes_switch(notes, *names: str) -> bool | None:
    """On or off as the notes set one of the boolean options ``names`` (a flag given alone or
    before another word: on); None where they set none."""
    setting = notes_setting(notes, *names)
    if setting is None:
        return None
    value, flag = setting
    return BOOLEAN_WORDS.get(value, True if flag else None)


# Paxml's remat policies as its runs' notes print them ("remat SAVE_QKV_OUT_PROJ", the experiment's
# CHECKPOINT_POLICY; any case), read as the Megatron modules the backward runs again (praxis
# AutodiffCheckpointType, google/praxis praxis/layers/checkpoint_policy.py @5ae5e1b):
# SAVE_QKV_OUT_PROJ keeps only the QKV and output projections' outputs (save_only_these_names), so
# the norms, the attention core and the MLP (its GEMMs and activation) run again; SAVE_DOT_ONLY
# (checkpoint_dots) keeps every matmul's output, so the norms and the attention core (Transformer
# Engine's fused kernel is a custom call, not a dot) run again; SAVE_NOTHING recomputes the whole
# layer, SAVE_EVERYTHING nothing.
PAX_REMAT = {"save_qkv_out_proj": "selective:layernorm,core_attn,mlp", "save_dot_only": "selective:layernorm,core_attn",
             "save_nothing": "full", "save_everything": "none"}


def pax_remat(notes) -> str | None:
    """The recompute cell a Paxml remat policy in the notes stands for (PAX_REMAT); None where the
    notes name none; RowError for a policy not modelled."""
    named = re.search(r"\b(?:remat|checkpoint_policy)\s*[=:]?\s*(save_[a-z_]+)\b", str(notes), re.IGNORECASE)
    if named is None:
        return None
    policy = named.group(1).lower()
    if policy not in PAX_REMAT:
        raise RowError(f"remat policy {named.group(1)!r} in the notes is not modelled ({', '.join(PAX_REMAT)})")
    return PAX_REMAT[policy]


# The notes' list: recompute_modules=[a, b] (a config's repr), recompute_modules: a, b, or
# Megatron's flag --recompute-modules a b.
MODULE_LIST = re.compile(r"recompute[_-]modules\s*[=:]?\s*(\[[^\]]*\]|[a-z_]+(?:\s*,\s*[a-z_]+)*(?:\s+[a-z_]+)*)",
                         re.IGNORECASE)


def notes_modules(notes) -> list[str]:
    """The Megatron modules the notes' ``recompute_modules`` lists (unbracketed: the module names
    up to the first other word); [] where they list none."""
    listed = MODULE_LIST.search(str(notes))
    if not listed:
        return []
    words = re.findall(r"[a-z_]+", listed.group(1).lower())
    if not listed.group(1).startswith("["):
        words = list(itertools.takewhile(lambda w: w in MEGATRON_MODULES + OTHER_MEGATRON_MODULES, words))
    return words
