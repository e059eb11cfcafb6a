"""The design space a sweep evaluates, enumerated lazily so it is never held in memory.

A space is the product of two parts:

* **layout rows** ``(n_gpus, tp, pp, cp, ep, etp, vpp, schedule, micro_batch[, accum])`` that divide the
  model (heads, layers, sequence, experts) and the GPU count, with the data-parallel size
  derived and the global batch either fixed (accumulation solved, rows where it does not
  divide are left out) or ``dp x micro_batch x accum``;
* **inner axes** whose every combination is valid: gpu, fabric, precision, recompute, ZeRO
  stage, checkpoint interval.

Configuration ``i`` is layout row ``i // inner_size`` with inner combination
``i % inner_size`` (mixed radix, ``INNER_AXES[0]`` slowest). The layout rows of one GPU
count are recomputed on demand from a small table of per-model-valid splits, so memory is
O(splits + GPU counts) whatever the size of the space; a chunk of ``S`` consecutive
configurations needs at most ``S // inner_size + 2`` layout rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

from ..config import (
    NODE_FIELDS,
    PRECISION,
    ConfigError,
    as_dict,
    catalog_names,
    check_ranges,
    layer_counts,
    load_option,
    node_problem,
    recompute_choice,
    with_host_mtbf,
    zero_shard_code,
)
from ..model import pipeline, schedules

INNER_AXES = ("gpu", "fabric", "precision", "recompute", "zero_stage", "zero_shard", "ckpt_interval_s")
SPLIT_AXES = ("tp", "pp", "cp", "ep", "etp", "vpp", "schedule", "micro_batch", "accum")
DIVISOR_OF = {"tp": "n_heads", "pp": "n_layers", "cp": "seq_len", "ep": "n_experts"}
MAX_SPLITS = 2**26  # per-model split combinations before filtering; beyond this, narrow the space
OPTIMAL = "optimal"  # checkpoint interval: Daly's optimum for each configuration


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _parse_range(key: str, spec: str) -> list[int]:
    """``"from:to:step"`` (arithmetic, inclusive) or ``"from:to:xF"`` (geometric)."""
    parts = spec.split(":")
    try:
        lo, hi = int(parts[0]), int(parts[1])
        geometric = parts[2].startswith("x")
        step = int(parts[2][1:] if geometric else parts[2])
        if len(parts) != 3 or lo <= 0 or hi < lo or step <= 0 or (geometric and step == 1):
            raise ValueError
    except (ValueError, IndexError):
        raise ConfigError(f"space.{key}={spec!r} is not allowed: 'from:to:step' or 'from:to:xfactor' "
                          "with positive integers, from <= to, factor > 1") from None
    if not geometric:
        return list(range(lo, hi + 1, step))
    values = [lo]
    while values[-1] * step <= hi:
        values.append(values[-1] * step)
    return values


def int_axis(key: str, spec: Any, model: Mapping[str, int] | None = None) -> np.ndarray:
    """Sorted unique positive integers from an integer, a list, ``"from:to:step"``,
    ``"from:to:xfactor"`` or ``"divisors"``; errors name ``space.<key>`` and the value."""
    if isinstance(spec, ListConfig):
        spec = OmegaConf.to_container(spec, resolve=True)
    if spec == "divisors" and key in DIVISOR_OF and model is not None:
        values = _divisors(int(model[DIVISOR_OF[key]]))
    elif isinstance(spec, str) and ":" in spec:
        values = _parse_range(key, spec)
    elif isinstance(spec, int) and not isinstance(spec, bool):
        values = [spec]
    elif isinstance(spec, list):
        values = spec
    else:
        allowed = "an integer, a list of positive integers, 'from:to:step' or 'from:to:xfactor'"
        if key in DIVISOR_OF:
            allowed += f" or 'divisors' (of model.{DIVISOR_OF[key]})"
        raise ConfigError(f"space.{key}={spec!r} is not allowed: {allowed}")
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise ConfigError(f"space.{key}={spec!r} is not allowed: a non-empty set of positive integers")
    return np.unique(np.asarray(values, dtype=np.int64))


SAME_AS_TP = "tp"  # space.etp entry: expert tensor parallelism equal to tp (no MoE parallel folding)


def etp_axis(spec: Any) -> np.ndarray:
    """``space.etp``: positive integers and/or ``"tp"`` (stored as 0, resolved per split)."""
    if isinstance(spec, ListConfig):
        spec = OmegaConf.to_container(spec, resolve=True)
    entries = spec if isinstance(spec, list) else [spec]
    if not entries or not all(e == SAME_AS_TP or (isinstance(e, int) and not isinstance(e, bool) and e > 0)
                              for e in entries):
        raise ConfigError(f"space.etp={spec!r} is not allowed: '{SAME_AS_TP}' (expert tensor parallelism equal "
                          "to tp), a positive integer, or a list of them")
    return np.unique(np.asarray([0 if e == SAME_AS_TP else e for e in entries], dtype=np.int64))


def schedule_axis(spec: Any) -> np.ndarray:
    """``space.schedule``: pipeline schedule names (``model.schedules.SCHEDULES``) as their codes."""
    if isinstance(spec, ListConfig):
        spec = OmegaConf.to_container(spec, resolve=True)
    names = _choices("schedule", spec if isinstance(spec, list) else [spec], tuple(schedules.SCHEDULES))
    return np.unique(np.asarray([schedules.SCHEDULES[n] for n in names], dtype=np.int64))


def _choices(key: str, values: Any, allowed: Mapping | tuple) -> list:
    values = list(values)
    if not values:
        raise ConfigError(f"space.{key}=[] is not allowed: at least one of {', '.join(map(str, allowed))}")
    for v in values:
        if v not in allowed:
            raise ConfigError(f"space.{key} entry {v!r} is not allowed: one of {', '.join(map(str, allowed))}")
    if len(set(values)) != len(values):
        raise ConfigError(f"space.{key}={values!r} is not allowed: entries must be unique")
    return values


def zero_shard_choices(values: Any) -> list[str]:
    """``space.zero_shard``: layout.zero_shard values (stack | node | all | N ranks), as typed; a
    group that does not tile a layout's dp x cp masks that layout (job.jct.layout_checks)."""
    names = [str(v).strip().lower() for v in ([values] if isinstance(values, (str, int)) else values)]
    for v in names:
        try:
            zero_shard_code(v)
        except ConfigError:
            raise ConfigError(f"space.zero_shard entry {v!r} is not allowed: stack | node | all | "
                              "a number of data-parallel ranks >= 1") from None
    return _choices("zero_shard", names, tuple(dict.fromkeys(names)))


def _recompute_choices(values: Any, model: DictConfig) -> list[str]:
    """The recompute axis: none, selective (the training config's modules), full, or selective
    recompute of named Megatron-Core modules (``selective:moe_act,layernorm``, model.recompute_modules)."""
    values = [str(v) for v in list(values)]
    if not values:
        raise ConfigError("space.recompute=[] is not allowed: at least one of none, selective, full")
    for v in values:
        recompute_choice("space.recompute", v, ["core_attn"])
        if "mla_up_proj" in v.partition(":")[2] and not model.kv_lora_rank:
            raise ConfigError(f"space.recompute entry {v!r} is not allowed: mla_up_proj needs multi-latent "
                              f"attention (model.kv_lora_rank > 0; model={model.name})")
    if len(set(values)) != len(values):
        raise ConfigError(f"space.recompute={values!r} is not allowed: entries must be unique")
    return values


def ckpt_values(values: Any) -> list[float]:
    """Checkpoint intervals in s; NaN stands for 'optimal' (Daly, per configuration)."""
    out = []
    for v in list(values):
        if v == OPTIMAL:
            out.append(math.nan)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            out.append(float(v))
        else:
            raise ConfigError(f"space.ckpt_interval_s entry {v!r} is not allowed: '{OPTIMAL}' or seconds > 0")
    if not out:
        raise ConfigError(f"space.ckpt_interval_s=[] is not allowed: at least one entry ('{OPTIMAL}' or seconds)")
    return out


@dataclass(frozen=True)
class Space:
    """A design space (host side). ``size`` configurations, ``n_rows`` layout rows."""

    name: str
    n_gpus: np.ndarray  # (n_counts,) int64
    splits: dict[str, np.ndarray]  # SPLIT_AXES -> (n_splits,) int64, each valid for the model
    global_batch: int | None  # fixed global batch (sequences) or None: dp x micro_batch x accum
    inner: dict[str, list]  # INNER_AXES -> values (names, ints, seconds with NaN = optimal)
    counts: np.ndarray  # (n_counts,) valid splits per GPU count
    offsets: np.ndarray  # (n_counts + 1,) first layout row of each GPU count
    gpu_overrides: dict = None  # {gpu name: {GPUSpec field: value}} replacing catalog values
    nodes: dict = None  # {gpu name: {NODE_FIELDS: value}} each GPU's own node; None: the base config's for all

    @property
    def inner_shape(self) -> tuple[int, ...]:
        return tuple(len(self.inner[a]) for a in INNER_AXES)

    @property
    def inner_size(self) -> int:
        return math.prod(self.inner_shape)

    @property
    def n_rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def size(self) -> int:
        return self.n_rows * self.inner_size

    def n_chunks(self, chunk_size: int) -> int:
        return -(-self.size // chunk_size)

    def rows_per_chunk(self, chunk_size: int) -> int:
        """Most layout rows any chunk of ``chunk_size`` configurations touches."""
        return chunk_size // self.inner_size + 2

    def _valid(self, n: int) -> np.ndarray:
        return np.logical_and.reduce(list(_count_rules(n, self.splits, self.global_batch).values()))

    def split_rows(self, count_index: int) -> np.ndarray:
        """Indices into ``splits`` that are valid with ``n_gpus[count_index]`` GPUs."""
        return np.flatnonzero(self._valid(int(self.n_gpus[count_index])))

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Layout rows ``[start, stop)`` as (GPU-count index, split index), int32 arrays."""
        stop = min(stop, self.n_rows)
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        counts_idx, split_idx = [], []
        row = start
        k = first
        while row < stop:
            lo, hi = int(self.offsets[k]), int(self.offsets[k + 1])
            if hi > row:
                take = self.split_rows(k)[row - lo:min(stop, hi) - lo]
                counts_idx.append(np.full(take.size, k, dtype=np.int32))
                split_idx.append(take.astype(np.int32))
                row += take.size
            k += 1
        if not counts_idx:
            return np.zeros(0, np.int32), np.zeros(0, np.int32)
        return np.concatenate(counts_idx), np.concatenate(split_idx)

    def describe(self) -> str:
        axes = [f"{len(self.n_gpus)} GPU counts"] + [f"{len(v)} {a}" for a, v in self.inner.items()]
        return (f"space '{self.name}': {self.size:,} configurations = {self.n_rows:,} valid layouts "
                f"({len(self.splits['tp']):,} model-valid splits x {', '.join(axes)})")


def build_space(space: DictConfig, model: DictConfig, global_batch: int,
                cluster_of: Callable[[DictConfig], dict] | None = None) -> Space:
    """The design space of ``space`` (a ``SpaceConf``) for one model. ``cluster_of``: the cluster
    group resolved for a GPU's catalog entry (``functools.partial(config.cluster_with, cfg)``),
    giving each GPU of the space its own node (an HGX server, an NVL72 tray) and refusing one the
    cluster's nodes cannot hold; None leaves the nodes to the base config."""
    dims = {"n_heads": model.n_heads, "n_layers": model.n_layers, "seq_len": model.seq_len,
            "n_experts": model.n_experts,
            "mamba_groups": model.mamba_groups if layer_counts(model)["mamba_layers"] else None}
    n_gpus = int_axis("n_gpus", space.n_gpus)
    axes = {k: int_axis(k, space[k], dims) for k in SPLIT_AXES if k not in ("accum", "etp", "schedule")}
    axes["etp"] = etp_axis(space.get("etp", SAME_AS_TP))
    if model.n_experts == 1 and axes["etp"].any():  # an integer entry would run as tp, labelled otherwise
        raise ConfigError(f"space.etp={OmegaConf.to_container(space).get('etp')!r} is not allowed: "
                          f"[{SAME_AS_TP}] with a dense model (model={model.name} has no experts to split)")
    axes["schedule"] = schedule_axis(space.get("schedule", ["1f1b"]))
    fixed = space.accum is None
    axes["accum"] = np.ones(1, np.int64) if fixed else int_axis("accum", space.accum)
    n_raw = math.prod(v.size for v in axes.values())
    if n_raw > MAX_SPLITS:
        raise ConfigError(f"space: {' x '.join(str(v.size) for v in axes.values())} = {n_raw:,} "
                          f"split combinations ({', '.join(SPLIT_AXES)}) is more than {MAX_SPLITS:,}; "
                          "narrow one of these axes")
    axes = {k: axes[k] for k in SPLIT_AXES}
    grids = np.meshgrid(*axes.values(), indexing="ij")
    splits = _collapse_equivalent({k: g.ravel() for k, g in zip(axes, grids)}, dims["n_experts"])
    ok = np.logical_and.reduce(list(_model_rules(dims, splits).values()))
    raw, splits = splits, {k: v[ok] for k, v in splits.items()}

    gpus = _choices("gpu", space.gpu, tuple(catalog_names("gpu")))
    fabrics = _choices("fabric", space.fabric, tuple(catalog_names("fabric")))
    nodes = {}
    for name in gpus:
        g = load_option("gpu", name)  # raises on an unknown name
        check_ranges("gpu", g, where=f"space.gpu entry {name!r}: ")
        if cluster_of is None:
            continue
        cluster = cluster_of(g)
        if (problem := node_problem(g, cluster)) is not None:
            key, value, allowed = problem
            what = "the node size must be" if key == "cluster.gpus_per_node" else "it needs"
            raise ConfigError(f"space.gpu entry {name!r} is not allowed with {key}={value!r}: {what} {allowed}")
        node = with_host_mtbf(cluster, g.tray_gpus)
        nodes[name] = {k: node[k] for k in NODE_FIELDS}
    for name in fabrics:
        load_option("fabric", name)
    overrides = gpu_overrides(space, gpus)
    inner = {
        "gpu": gpus,
        "fabric": fabrics,
        "precision": _choices("precision", space.precision, tuple(PRECISION)),
        "recompute": _recompute_choices(space.recompute, model),
        "zero_stage": _choices("zero_stage", space.zero_stage, (0, 1, 2, 3)),
        "zero_shard": zero_shard_choices(space.get("zero_shard") or ["stack"]),
        "ckpt_interval_s": ckpt_values(space.ckpt_interval_s),
    }
    proto = Space(space.name, n_gpus, splits, int(global_batch) if fixed else None, inner,
                  np.zeros(n_gpus.size, np.int64), np.zeros(n_gpus.size + 1, np.int64))
    counts = np.array([proto._valid(int(n)).sum() for n in n_gpus], dtype=np.int64)
    if not counts.sum():
        raise ConfigError(_why_empty(model, dims, raw, splits, n_gpus, proto.global_batch))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return Space(space.name, n_gpus, splits, proto.global_batch, inner, counts, offsets, overrides,
                 nodes if cluster_of is not None else None)


def _collapse_equivalent(splits: dict, n_experts: int) -> dict:
    """``"tp"`` entries of etp (0) become each split's tp; a dense model has no experts to
    split, so its etp is tp throughout; without a pipeline every schedule is 1F1B. Splits that
    become equal are kept once, first first."""
    out = dict(splits)
    out["etp"] = np.where((splits["etp"] == 0) | (n_experts == 1), splits["tp"], splits["etp"])
    out["schedule"] = np.where(splits["pp"] == 1, schedules.ONE_F_ONE_B, splits["schedule"])
    _, first = np.unique(np.stack([out[k] for k in SPLIT_AXES], axis=1), axis=0, return_index=True)
    keep = np.sort(first)
    return {k: v[keep] for k, v in out.items()}


def _model_rules(dims: dict, s: dict) -> dict[str, np.ndarray]:
    """Model divisibility, rule -> which splits pass (Megatron: heads over tp, sequence over
    cp, experts over ep, each expert over etp within tp; layers over pp x vpp, evenly or not:
    model.pipeline; Mamba-2 groups over tp; as config.check_layout)."""
    mamba = {} if dims.get("mamba_groups") is None else {
        f"space.tp must divide model.mamba_groups={dims['mamba_groups']}": dims["mamba_groups"] % s["tp"] == 0}
    return mamba | {
        f"space.tp must divide model.n_heads={dims['n_heads']}": dims["n_heads"] % s["tp"] == 0,
        f"space.pp x space.vpp must be at most model.n_layers + 2 = {dims['n_layers'] + 2}":
            pipeline.fits(dims["n_layers"], s["pp"], s["vpp"]),
        "space.vpp > 1 needs space.pp > 1": (s["vpp"] == 1) | (s["pp"] > 1),
        f"space.cp must divide model.seq_len={dims['seq_len']}": dims["seq_len"] % s["cp"] == 0,
        f"space.ep must divide model.n_experts={dims['n_experts']}": dims["n_experts"] % s["ep"] == 0,
        "space.etp must divide tp": s["tp"] % s["etp"] == 0,
        "space.schedule must run on pp x vpp (zb_h1, dualpipe: vpp 1; zb_v: vpp 2; dualpipe: even pp)":
            schedules.valid(s["schedule"], s["pp"], s["vpp"]),
    }


def _count_rules(n, s: dict, global_batch: int | None) -> dict[str, np.ndarray]:
    """A GPU count's rules, rule -> which splits pass with ``n`` GPUs (n broadcasts)."""
    per_replica = s["tp"] * s["pp"] * s["cp"]
    dp = np.maximum(n // per_replica, 1)  # counts below tp pp cp fail the first rule
    rules = {"space.n_gpus must be a multiple of tp x pp x cp": n % per_replica == 0,
             "space.ep x etp must divide tp x cp x dp": (s["tp"] * s["cp"] * dp) % (s["ep"] * s["etp"]) == 0}
    if global_batch is not None:
        rules[f"training.global_batch={global_batch} must be a multiple of dp x micro_batch"] = \
            global_batch % (dp * s["micro_batch"]) == 0
    return rules


def _why_empty(model: DictConfig, dims: dict, raw: dict, splits: dict, n_gpus: np.ndarray,
               global_batch: int | None) -> str:
    """Why a space holds no valid layout: the rule that removes the most candidates, among the
    model's (over every split combination) or, when some split fits the model, the GPU
    count's (over every GPU count x model-valid split)."""
    if splits["tp"].size:
        rules = _count_rules(n_gpus[:, None], {k: v[None, :] for k, v in splits.items()}, global_batch)
        what = f"{n_gpus.size * splits['tp'].size:,} GPU-count x split candidates (space.n_gpus={n_gpus.tolist()})"
    else:
        rules, what = _model_rules(dims, raw), f"{raw['tp'].size:,} split combinations"
    worst, removed = max(((rule, int((~passes).sum())) for rule, passes in rules.items()), key=lambda x: x[1])
    return (f"the space holds no valid layout for model={model.name}: of {what}, none passes every rule; "
            f"the rule removing the most, {removed:,} of them: {worst}")


def gpu_overrides(space: DictConfig, gpus: list[str]) -> dict:
    """``space.gpu_overrides`` checked: names in ``space.gpu``, fields of the GPU schema, values
    in the ranges the schema declares for ``gpu.<field>`` (config.schema.ranged), else >= 0."""
    from ..config.schema import NON_NEGATIVE, GPUConf, ranges
    from ..model.types import GPUSpec

    allowed = ranges(GPUConf)
    out = as_dict(space.get("gpu_overrides"))
    for name, fields in out.items():
        if name not in gpus:
            raise ConfigError(f"space.gpu_overrides.{name} is not allowed: {name!r} is not in space.gpu={gpus}")
        for key, value in fields.items():
            if key not in GPUSpec._fields:
                raise ConfigError(f"space.gpu_overrides.{name}.{key} is not allowed: one of {', '.join(GPUSpec._fields)}")
            if not (bounds := allowed.get(key, NON_NEGATIVE)).allows(value):
                raise ConfigError(f"space.gpu_overrides.{name}.{key}={value!r} is not allowed: {bounds.what}")
    return out
