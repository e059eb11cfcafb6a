"""``jctopt --help``: every config group, its options, and each key with its value and the
one-line description its schema declares (the field's trailing comment, else the comment block
above it), read from ``schema.py`` and ``task_schemas.py`` themselves so that the two never part."""

from __future__ import annotations

import dataclasses
import inspect
import io
import textwrap
import tokenize
import typing

from omegaconf import DictConfig, OmegaConf

from . import schema
from .catalog import catalog_names

CATALOG_GROUPS = ("model", "gpu", "fabric", "cluster", "layout", "training", "stack", "job", "space", "task")


def field_docs(cls: type) -> dict[str, str]:
    """{field: description} of a dataclass from its source: the trailing comment of the field's
    line, else the comment lines right above it."""
    lines = inspect.getsource(cls).splitlines()
    comments: dict[int, str] = {}  # line index -> comment text
    for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0] - 1] = tok.string.lstrip("#").strip()
    names = {f.name for f in dataclasses.fields(cls)}
    docs = {}
    for i, line in enumerate(lines):
        name = line.strip().split(":", 1)[0]
        if name not in names or not line.startswith("    ") or line.startswith("     "):
            continue
        if i in comments and not line.lstrip().startswith("#"):
            docs[name] = comments[i]
            continue
        above, j = [], i - 1
        while j >= 0 and lines[j].lstrip().startswith("#"):
            above.insert(0, comments[j])
            j -= 1
        if above:
            docs[name] = " ".join(above)
    return docs


def help_text(cfg: DictConfig, width: int = 100) -> str:
    """The help page for a composed config: groups and options, then each group's keys."""
    out = ["jctopt task=<name> [group=option ...] [key=value ...]   (-m: a multirun; --hydra-help: Hydra's flags)",
           "", "Groups (group=option):"]
    for group in CATALOG_GROUPS:
        out += textwrap.wrap(", ".join(catalog_names(group)), width, initial_indent=f"  {group}: ",
                             subsequent_indent=" " * (len(group) + 4))
    out += ["", "Keys (key=value), with this configuration's values:"]
    hints = typing.get_type_hints(schema.AppConf)
    for top in (f.name for f in dataclasses.fields(schema.AppConf)):
        kind = hints[top]
        if not dataclasses.is_dataclass(kind):
            doc = field_docs(schema.AppConf).get(top, "")
            out += _entry(top, OmegaConf.select(cfg, top), doc, width, indent="  ")
            continue
        out.append(f"  {top}:")
        docs = field_docs(kind)
        for f in dataclasses.fields(kind):
            doc = docs.get(f.name, "")
            if "range" in f.metadata:  # the allowed values the schema declares (schema.ranged)
                doc = f"{doc} [allowed: {f.metadata['range'].what}]".strip()
            out += _entry(f.name, OmegaConf.select(cfg, f"{top}.{f.name}", default=None), doc, width, indent="    ")
    return "\n".join(out)


def _shown(value) -> str:
    """A value as it is typed on the command line (null, true, [a, b], {k: v})."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    return str(value)


def _entry(name: str, value, doc: str, width: int, indent: str) -> list[str]:
    if isinstance(value, DictConfig) or OmegaConf.is_list(value):
        value = OmegaConf.to_container(value, resolve=True)
    if name == "task" and isinstance(value, dict):
        value = value.get("name")
    head = f"{indent}{name} = {_shown(value)}"
    if not doc:
        return [head]
    return [head] + textwrap.wrap(doc, width, initial_indent=indent + "    ", subsequent_indent=indent + "    ")
