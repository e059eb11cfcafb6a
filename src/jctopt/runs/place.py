"""Placing a row the run left partly unstated: the fastest split, EP, interleaving that fits."""

from __future__ import annotations

import copy
import math

import jax
import jax.numpy as jnp
import pandas as pd
from omegaconf import DictConfig

from ..config import RECOMPUTE as RECOMPUTE_LEVEL
from ..config import ConfigError, to_config
from ..job.jct import Reason, estimate, unmasked_step
from .cells import _blank, _int, _split_blank
from .columns import flag
from .row import row_config
from .spellings import (
    RowError,
)


def place_rows(cfg: DictConfig, table: pd.DataFrame) -> tuple[list[dict], list[int], list]:
    """(one record per row: id, source, measured time, the stack it ran, defaults_used or reason, and
    chosen_by_speed: whether a blank cell took the value the model finds fastest, a split, an
    interleaving depth or offloading; positions of the placed rows; their model configurations)."""
    base = copy.deepcopy(cfg)
    configs, index, rows = [], [], []
    for i, row in enumerate(table.to_dict("records")):
        out = {"id": row["id"], "source": row.get("source"), "measured_iter_time_s": row.get("measured_iter_time_s"),
               "gpu": row.get("gpu"), "model": row.get("model")}
        try:
            _check_measured(row)
            if _split_blank(row):
                config, rc, used = _fastest_split(base, row)
                chosen = True
            elif _interleaving_depth_unstated(row):
                config, rc, used = _fastest_interleaving(base, row)
                chosen = float(config.layout.vpp) > 1
            else:
                config, rc, used = _place(base, row)
                chosen = "offload_layers" in used
            chosen = chosen or _ep_unstated(row, rc)
            measured = _measured_from_throughput(row, rc)
            if measured is not None:
                out["measured_iter_time_s"] = measured
                used = [*used, "measured_iter_time_s"]
            configs.append(config)
            index.append(i)
            out["gpu"], out["stack"] = rc.gpu.name, rc.training.stack
            out["defaults_used"] = ",".join(sorted(set(used)))
            out["chosen_by_speed"] = chosen
        except (RowError, ConfigError, ValueError, TypeError) as err:
            out["reason"] = str(err)
        rows.append(out)
    return rows, index, configs


def _check_measured(row: dict) -> None:
    """A stated step time that is a number must be a time: > 0 and finite, else it is the row's
    reason (a median error of inf otherwise). A cell that is no number at all stays out of
    the comparison only (``predict.run_validate``); a blank one is implied by the throughput."""
    v = row.get("measured_iter_time_s")
    if _blank(v):
        return
    x = pd.to_numeric(v, errors="coerce")
    if not pd.isna(x) and not (math.isfinite(float(x)) and x > 0):
        raise RowError(f"measured_iter_time_s={v!r}: a measured step time is a finite number of seconds > 0")


def _measured_from_throughput(row: dict, rc: DictConfig) -> float | None:
    """The step time (s) a row with a blank measured time implies by its stated global batch
    and tokens/s per GPU (DEFAULTS["measured_iter_time_s"]); None where the row states its time
    or lacks either."""
    if not _blank(row.get("measured_iter_time_s")) or _blank(row.get("global_batch")):
        return None
    try:
        tokens_per_s = float(row["tokens_per_s_per_gpu"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(tokens_per_s) and tokens_per_s > 0):
        return None
    return rc.training.global_batch * rc.model.seq_len / (tokens_per_s * rc.layout.n_gpus)


_estimate_one = jax.jit(estimate)


def _place(base: DictConfig, row: dict):
    """(model config, Hydra config, defaults used) of one row; a blank recompute is the least
    that fits, or, where the row's stack offloads activations and states no offload, the
    fewest offloaded layers that fit if the model finds that faster (DEFAULTS["offload_layers"]);
    a blank ep on an MoE model the fastest (DEFAULTS["ep"], _fastest_ep). Where a recipe offers
    offloading: the ``offload_available`` column (Megatron-Core's --cpu-offloading in NeMo's and
    Megatron-Bridge's 2025-2026 performance recipes)."""
    rc, used = row_config(base, row)
    if _ep_unstated(row, rc):
        return _fastest_ep(base, row, rc.model.n_experts)
    if "recompute" not in used:
        return to_config(rc), rc, used
    config = _least_recompute_that_fits(rc)
    if (config.train.recompute > 0 and _blank(row.get("recompute")) and flag(row, "offload_available")
            and _blank(row.get("offload_layers"))):
        offloaded = _fewest_offloaded_layers_that_fit(config, math.ceil(rc.model.n_layers / rc.layout.pp))
        if offloaded is not None and float(_estimate_one(offloaded).step_s) < float(_estimate_one(config).step_s):
            rc.training.recompute, rc.training.offload_layers = "none", int(offloaded.train.offload_layers)
            return offloaded, rc, used + ["offload_layers"]
    return config, rc, used


def _fewest_offloaded_layers_that_fit(config, stage_layers: int):
    """``config`` without recompute and with the fewest of the busiest stage's ``stage_layers``
    offloaded that fits in HBM and host memory; None when none does. Offloading more layers
    frees HBM but fills host memory, so the bisection runs on HBM alone (monotone) and host
    memory is checked once, at the fewest: where it overflows there, it overflows above too."""
    def offload(k):
        return config._replace(train=config.train._replace(recompute=jnp.asarray(RECOMPUTE_LEVEL["none"]),
                                                           offload_layers=jnp.asarray(float(k))))

    def fits_hbm(c):
        e = _estimate_one(c)
        return float(e.mem_total) <= float(e.mem_capacity)

    fewest = _fewest_layers_that_fit(offload, stage_layers, fits_hbm)
    return None if fewest is None or _reason(fewest) == Reason.MEMORY else fewest


def _fewest_layers_that_fit(config_with, layers: int, fits=None):
    """``config_with(k)`` for the fewest k in 1..layers that ``fits`` (default: fits in memory;
    bisection: more layers saved never needs more of what ``fits`` checks); None when even
    ``layers`` does not."""
    fits = fits or (lambda c: _reason(c) != Reason.MEMORY)
    if not fits(config_with(layers)):
        return None
    lo, hi = 0, layers  # config_with(lo) does not fit, config_with(hi) does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(config_with(mid)) else (mid, hi)
    return config_with(hi)


def _ep_unstated(row: dict, rc: DictConfig) -> bool:
    """Whether an MoE row leaves ep blank, so that it runs at its fastest (_fastest_ep)."""
    return _blank(row.get("ep")) and rc.model.n_experts > 1


def _fastest_ep(base: DictConfig, row: dict, n_experts: int):
    """``_place`` of an MoE row that states no ep, at the divisor of the experts of least
    predicted step time that fits in memory, else the fastest of all (DEFAULTS["ep"])."""
    divisors = [ep for ep in range(1, n_experts + 1) if n_experts % ep == 0]
    best, last_error = _fastest_placement(base, ((ep, dict(row, ep=ep)) for ep in divisors))
    if best is None:
        raise RowError(f"ep is blank and no divisor of the {n_experts} experts places"
                       + (f" (e.g. {last_error})" if last_error else ""))
    config, rc, used = best
    return config, rc, sorted(set(used) | {"ep"})


def _fastest_split(base: DictConfig, row: dict):
    """``_place`` of a row that states none of tp, pp, dp, at the (tp, pp) of least predicted
    step time that fits in memory (else the fastest of all): tp a power of two within the
    NVLink domain dividing the heads, pp any divisor of the GPUs left (DEFAULTS["tp"])."""
    n = _int(row, "num_gpus", [])
    splits = [(tp, pp) for tp in (1, 2, 4, 8, 16, 32, 64) for pp in range(1, n // tp + 1) if n % (tp * pp) == 0]
    best, last_error = _fastest_placement(base, ((split, dict(row, tp=split[0], pp=split[1])) for split in splits),
                                          keep=lambda split, rc: split[0] <= rc.gpu.nvlink_domain)
    if best is None:
        raise RowError(f"tp, pp and dp are blank and no split of num_gpus={n} divides the model and batch"
                       + (f" (e.g. {last_error})" if last_error else ""))
    config, rc, used = best
    return config, rc, sorted(set(used) | {"tp", "pp"})


def _fastest_placement(base: DictConfig, variants, keep=lambda key, rc: True):
    """((config, rc, used) of the variant row, given as (key, row), placed at the least predicted
    step time among those the model accepts, else among those that only lack memory, else among
    the rest (masked for another reason, as the row itself would be), or None; the last placement
    error). Variants that do not place, whose layout the model refuses (no framework runs them)
    or that ``keep`` refuses are skipped; ties go to the smaller key."""
    candidates, last_error = [], None
    for key, variant in variants:
        try:
            config, rc, used = _place(base, variant)
        except (RowError, ConfigError, ValueError, TypeError) as err:
            last_error = err  # this variant does not divide the model or the batch
            continue
        if not keep(key, rc):
            continue
        est = _estimate_one(config)
        reason = Reason(int(est.reason))
        if reason == Reason.LAYOUT:
            continue
        rank = {Reason.OK: 0, Reason.MEMORY: 1}.get(reason, 2)
        candidates.append((rank, float(unmasked_step(est)), key, (config, rc, used)))
    best = min(candidates, key=lambda c: c[:3], default=None)
    return (None if best is None else best[3]), last_error


def _fastest_interleaving(base: DictConfig, row: dict):
    """``_place`` of a row that ran an interleaved schedule of unstated depth, at the depth
    (2..MAX_INTERLEAVING chunks per rank, the layers split as the frameworks split them) of
    least predicted step time that fits in memory, else the fastest of all: a run's authors
    tune the depth for speed (DEFAULTS["vpp"]). Where no depth places, one chunk per rank."""
    depths = range(2, MAX_INTERLEAVING + 1)
    best, _ = _fastest_placement(base, ((vpp, dict(row, vpp=vpp)) for vpp in depths))
    if best is None:
        return _place(base, row)
    config, rc, used = best
    return config, rc, sorted(set(used) | {"vpp"})


MAX_INTERLEAVING = 16


def _interleaving_depth_unstated(row: dict) -> bool:
    """Whether the row ran an interleaved pipeline schedule of unstated depth: ``schedule``
    interleaved, pp > 1 and vpp blank."""
    try:
        pipelined = float(row.get("pp")) > 1
    except (TypeError, ValueError):
        pipelined = False  # a blank or unreadable pp: row_config says why
    return pipelined and _blank(row.get("vpp")) and str(row.get("schedule", "")).strip().lower() == "interleaved"


def _reason(config) -> Reason:
    return Reason(int(_estimate_one(config).reason))


def _least_recompute_that_fits(rc: DictConfig):
    """The row's model config with the least recompute that fits in memory: none (where the
    cell is blank; selective where it says recompute was on), selective, then whole-layer
    recompute of the fewest layers per stage (Megatron's block method,
    ``model.compute.full_recompute_share``), up to full; the first of these when nothing fits."""
    def fits(config):
        return _reason(config) != Reason.MEMORY

    first = to_config(rc)
    if fits(first):
        return first
    rc.training.recompute = "selective"
    selective = to_config(rc)
    if fits(selective):
        return selective

    def block(k):  # k of the busiest stage's layers recomputed whole
        return selective._replace(train=selective.train._replace(recompute=jnp.asarray(1.0 + k / layers)))

    layers = math.ceil(rc.model.n_layers / rc.layout.pp)
    blocked = _fewest_layers_that_fit(block, layers)
    return first if blocked is None else blocked
