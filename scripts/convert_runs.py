"""Write what the shipped runs' prose says about their software as columns, once, here.

The framework a row ran, what its recipe overlapped, fused or offloaded, and the hardware it
states apart from the catalog are written in its ``source``, ``container_or_version``, ``notes``
and ``derivation`` cells as prose. This script reads that prose with the rules of
``runs_rules.py`` and writes the answer as data (the columns of ``jctopt.runs.columns``), so that
nothing at prediction time reads a note; the notes stay as provenance. Its output is committed;
run it again after adding rows:

    python scripts/convert_runs.py          # rewrites src/jctopt/data/validation/runs_*.csv
    python scripts/convert_runs.py --check  # exit 1 if a file is not what it would write

A flag is written only where the rules' value differs from the row's stack file (conf/stack)
and the flag matters for the row's layout (TP overlaps at tp or pp > 1, ZeRO-3 flags at stage
3, MoE flags on MoE models); a blank cell the notes fill (recompute, zero_stage) is filled. Every
other cell is kept byte for byte, as is a flag cell the rules leave alone.
"""

from __future__ import annotations

import csv
import io
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runs_rules as rules  # noqa: E402

from jctopt.config import PRECISION  # noqa: E402
from jctopt.config.catalog import compose, load_option  # noqa: E402
from jctopt.runs.catalog_models import catalog_model, hybrid_layers  # noqa: E402
from jctopt.runs.cells import _blank  # noqa: E402
from jctopt.runs.columns import DEFAULT_STACK, FLAG_COLUMNS  # noqa: E402
from jctopt.runs.read import read_runs  # noqa: E402
from jctopt.runs.row import row_config  # noqa: E402
from jctopt.runs.spellings import RowError  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "src" / "jctopt" / "data" / "validation"
# (pattern on source + container_or_version, stack), first match wins.
RULES = (
    (r"torchtitan", "torchtitan"),
    (r"automodel", "nemo_automodel"),  # NeMo AutoModel: PyTorch-native FSDP2, not Megatron-Core
    (r"llm-foundry", "llm_foundry"),
    (r"maximizing training throughput using pytorch fsdp", "pytorch_fsdp"),
    (r"deepspeed|gpt-neox", "deepspeed_zero"),  # GPT-NeoX runs on DeepSpeed (Black et al. 2022)
    (r"jax[:/]|maxtext|\bpax", "maxtext"),  # NVIDIA's JAX containers: MaxText and Pax
    (r"deepseek-v3 technical report", "hai_llm"),  # DeepSeek's in-house HAI-LLM framework
    # The Megatron-LM papers (Shoeybi et al. 2019, Narayanan et al. 2021, Korthikanti et al. 2022).
    (r"shoeybi et al|narayanan et al|korthikanti et al", "megatron_lm"),
    # Megatron-Core and what runs on it (2023 on): NeMo, Megatron-Bridge, the Megatron-LM README's
    # MCore tables, NVIDIA's DGX Cloud NeMo recipes, the Nemotron reports, SimuMax's Megatron rows.
    (r"nemo|megatron|nemotron|simumax|dgxc", "megatron_core"),
)
# The columns this script owns, in the order they are added to a file.
OWNED = ("stack", "schedule", "offload_available", "moe_layers_graphed", "nvfp4_bf16_share", "recompute_modules",
         "gpu_power_limit_w", "hbm_gb", "hbm_tbps", *FLAG_COLUMNS)
# Flags that matter only for some layouts: (the flag) -> whether it matters for config ``c``.
MATTERS = {
    "mp_comm_overlap": lambda c: c.layout.tp > 1 or c.layout.pp > 1,
    "tp_async_backward": lambda c: c.layout.tp > 1,
    "fp8_attention": lambda c: PRECISION[c.training.precision] >= 1,
    **{k: (lambda c: c.training.zero_stage >= 3)
       for k in ("megatron_fsdp", "hybrid_shard", "zero3_collectives_per_layer", "zero3_regather")},
    **{k: (lambda c: c.model.n_experts > 1)
       for k in ("ep_comm_overlap", "ep_two_hop", "moe_imbalance", "moe_router_graphed")},
}


def stack_of(source: str, container: str) -> str | None:
    """The stack RULES name for a source; None where none does."""
    text = f"{source} {container}".lower()
    return next((stack for pattern, stack in RULES if re.search(pattern, text)), None)


def cell_text(value) -> str:
    """A value as the CSV writes it: true/false, whole numbers without a point."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def settings(row: dict, base) -> dict:
    """The cells the notes fill or the rules set apart from the training flags."""
    stack = stack_of(str(row.get("source", "")), str(row.get("container_or_version", "") or ""))
    cells = {} if stack is None else {"stack": stack}  # None: the row's own stack cell, if any
    row = dict(row, **cells)
    filled = rules._settings_from_notes(row)
    cells.update({k: filled[k] for k in ("recompute", "zero_stage") if _blank(row.get(k)) and not _blank(filled.get(k))})
    year = rules.source_year(row)
    if _blank(row.get("sp")) and year < 2022 and (_blank(row.get("tp")) or float(row["tp"]) > 1):
        cells["sp"] = 0  # sequence parallelism came in 2022 (Korthikanti et al.)
    if _blank(row.get("zero_stage")) and "zero_stage" not in cells:
        stated = load_option("stack", row.get("stack") if not _blank(row.get("stack")) else DEFAULT_STACK)
        rule = 3 if rules._fsdp_native(row) else int(year >= 2023)  # the distributed optimizer from 2023
        if stated.get("zero_stage", base.training.zero_stage) != rule:
            cells["zero_stage"] = rule
    pipelined = not _blank(row.get("pp")) and float(row["pp"]) > 1
    if pipelined and (schedule := rules._schedule(row)) != "1f1b":
        cells["schedule"] = schedule
    if rules._interleaving_depth_unstated(row):
        cells["schedule"] = "interleaved"
    notes = str(row.get("notes", ""))
    if (rules._torchtitan_stack(row) and pipelined and _blank(row.get("vpp"))
            and re.search(r"interleaved 1f1b", notes, re.IGNORECASE)):
        cells["vpp"] = 2  # torchtitan builds two stages per rank for a looped schedule
    if fabric := rules.per_gpu_fabric(row):
        cells["inter_node"] = fabric
    cells.update(rules.stated_hardware(row))
    key = catalog_model(row.get("model", ""), row.get("params_b"))
    if (key is not None and hybrid_layers(key) and _blank(row.get("mtp_layers"))
            and not rules._megatron_core_stack(row)):
        cells["mtp_layers"] = 0  # NeMo AutoModel's hybrid benchmarks train no MTP heads
    recompute = cells.get("recompute", row.get("recompute"))
    if (listed := rules.notes_modules(notes)) and not rules.cell_modules(recompute):
        cells["recompute_modules"] = ",".join(listed)
    if (offloaded := rules._stated_offload_layers(row)) is not None:
        cells["offload_layers"] = offloaded
    elif _blank(recompute) and rules._megatron_core_stack(row) and rules.source_year(row) >= 2025:
        cells["offload_available"] = True  # the recipe may offload where recompute is not stated
    return cells


def torchtitan_micro_batch(row: dict, plain) -> int | None:
    """torchtitan's pipeline splits a replica's batch into pp micro-batches
    (pipeline_parallel_microbatches defaults to the pipeline degree, torchtitan 2024-12)."""
    lay, tr = plain.layout, plain.training
    replica = tr.global_batch * lay.tp * lay.pp * lay.cp // lay.n_gpus
    if rules._torchtitan_stack(row) and lay.pp > 1 and _blank(row.get("micro_batch")) and replica % lay.pp == 0:
        return replica // lay.pp
    return None


def converted(row: dict, base) -> dict:
    """The owned and filled cells of one row."""
    bare = {k: v for k, v in row.items() if k not in OWNED or k == "stack"}
    cells = settings(bare, base)
    row = {**bare, **cells}
    split_blank = all(_blank(row.get(k)) for k in ("tp", "pp", "dp"))
    try:
        plain, _ = row_config(base, dict(row, tp=1, pp=1) if split_blank else row)
    except RowError:
        return cells  # not placed: nothing of its software matters
    if plain.model.n_experts > 1 and rules._moe_layers_graphed(row):
        cells["moe_layers_graphed"] = True  # CUDA graphs over the MoE layers (model.host)
    if (micro := torchtitan_micro_batch(row, plain)) is not None:
        cells["micro_batch"] = micro
    flags, named = rules.legacy_training(row, plain, base.training)
    for key, value in flags.items():
        matters = split_blank or MATTERS.get(key, lambda c: True)(plain)
        if key == "selective_ac":
            matters = plain.training.recompute == "selective" or _blank(row.get("recompute"))
        if key == "nvfp4_bf16_share":
            if value is not None and not math.isclose(value, plain.training.nvfp4_bf16_share):
                cells[key] = value
        elif key in FLAG_COLUMNS and key not in cells and matters and (plain.training[key] != value or key in named):
            cells[key] = value
    return cells


def with_columns(row: dict, base) -> dict:
    """``row`` as the script writes it into a file: its owned cells (but a stack no rule names)
    those ``converted`` writes."""
    return {**{k: v for k, v in row.items() if k not in OWNED or k == "stack"}, **converted(row, base)}


def rewritten(path: Path, base) -> str:
    rows = list(csv.reader(io.StringIO(path.read_text())))
    header = rows[0]
    records = read_runs(path).to_dict("records")
    for r in records:
        if stack_of(str(r.get("source", "")), str(r.get("container_or_version", "") or "")) is None:
            raise SystemExit(f"{path.name}: no stack for row {r['id']!r} (source {r.get('source')!r}): add a rule to RULES")
    updates = [converted(r, base) for r in records]
    for name in OWNED + ("recompute", "zero_stage", "vpp", "micro_batch", "inter_node", "mtp_layers"):
        if name not in header and any(name in u for u in updates):
            header.append(name)
            rows[1:] = [r + [""] for r in rows[1:]]
    col = {name: i for i, name in enumerate(header)}
    for r, update in zip(rows[1:], updates):
        for name in OWNED:
            if name in col and name not in update and name not in FLAG_COLUMNS and name != "stack":
                r[col[name]] = ""
        for name, value in update.items():
            r[col[name]] = cell_text(value)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def main(argv: list[str]) -> int:
    base = compose(["task=validate"])
    stale = []
    for path in sorted(DATA.glob("runs_*.csv")):
        text = rewritten(path, base)
        if text != path.read_text():
            stale.append(path.name)
            if "--check" not in argv:
                path.write_text(text)
    if "--check" in argv and stale:
        print(f"columns out of date: {', '.join(stale)} (python scripts/convert_runs.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
