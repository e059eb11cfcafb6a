"""Give every shipped run a ``stack`` column: the software stack that measured it.

The framework a row ran is written in its ``source`` and ``container_or_version`` cells as prose;
this script reads that prose once, here, and writes the answer as data, so that nothing at
prediction time has to. Its output is committed; run it again after adding rows:

    python scripts/label_stacks.py          # rewrites src/jctopt/data/validation/runs_*.csv
    python scripts/label_stacks.py --check  # exit 1 if a file's stack column is not what it would write

Every other cell is kept byte for byte. The labels name conf/stack files where one exists.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

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


def stack_of(source: str, container: str) -> str:
    text = f"{source} {container}".lower()
    for pattern, stack in RULES:
        if re.search(pattern, text):
            return stack
    raise SystemExit(f"no stack for source {source!r} (container {container!r}): add a rule to RULES")


def labelled(path: Path) -> str:
    raw = path.read_text()
    rows = list(csv.reader(io.StringIO(raw)))
    header = rows[0]
    if "stack" not in header:
        header.append("stack")
        rows[1:] = [r + [""] for r in rows[1:]]
    col = {name: i for i, name in enumerate(header)}
    for r in rows[1:]:
        container = r[col["container_or_version"]] if "container_or_version" in col else ""
        r[col["stack"]] = stack_of(r[col["source"]], container)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def main(argv: list[str]) -> int:
    stale = []
    for path in sorted(DATA.glob("runs_*.csv")):
        text = labelled(path)
        if text != path.read_text():
            stale.append(path.name)
            if "--check" not in argv:
                path.write_text(text)
    if "--check" in argv and stale:
        print(f"stack column out of date: {', '.join(stale)} (python scripts/label_stacks.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
