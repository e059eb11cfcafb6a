"""Evaluate a design space chunk by chunk through one compiled ``jit(vmap(estimate))``.

Each chunk is ``chunk_size`` consecutive configurations. The host sends only the chunk's
offset and its few layout rows; configurations are decoded on the device (mixed radix over
the inner axes, gathers from small catalog tables), evaluated, and reduced there to a keep
mask (feasible, top-k, Pareto, best per group) so that only kept rows ever come back. The
lanes of a chunk are split across every local JAX device with ``shard_map``; several hosts
split the chunks between them (``chunks_for_process``).

Per-shard reductions return candidates (a superset of the chunk's answer); ``reduce_rows``
gives the exact answer on the union, so the result does not depend on the device count.
"""

from __future__ import annotations

import collections
import functools
import math
import threading
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..config import (
    PRECISION,
    ConfigError,
    cluster_with,
    is_mxfp8,
    to_config,
    zero_shard_code,
)
from ..config.cache import ExportedKernel
from ..job.jct import Estimate, Reason, estimate
from ..model.schedules import SCHEDULES
from ..model.types import Config, FabricSpec, GPUSpec, Layout
from .reduce import pareto_mask, reduce_rows
from .space import INNER_AXES, SPLIT_AXES, Space, build_space
from .tables import catalog_arrays, ckpt_arrays, recompute_tables, space_nodes, with_choices

KEEP_MODES = ("feasible", "all", "top_k", "pareto", "best_per_group")
OBJECTIVES = ("cost_usd", "jct_s", "energy_kwh", "energy_usd", "gpu_hours")
GROUP_AXES = ("n_gpus",) + INNER_AXES
ROW_BATCH = 4096  # kept rows re-evaluated in full per compiled call (one fixed size)


class Tables(NamedTuple):
    """Catalog values the device decodes configurations from (replicated on every device)."""

    gpu: GPUSpec  # leaves (n_gpu_types,)
    node: dict  # NODE_FIELDS -> (n_gpu_types,): each GPU's own node (tables.node_arrays)
    fabric: FabricSpec  # leaves (n_fabrics,)
    n_gpus: jax.Array  # (n_counts,)
    splits: dict  # SPLIT_AXES -> (n_splits,)
    low_precision: jax.Array  # (n_precisions,)
    mxfp8: jax.Array  # (n_precisions,) 1 = block-scaled fp8
    recompute: jax.Array
    recompute_modules: jax.Array  # (n_recompute, len(model.recompute_modules.MODULES)) module flags
    zero_stage: jax.Array
    zero_shard: jax.Array  # (n_shard_groups,) layout.zero_shard codes (config.choices.zero_shard_code)
    ckpt_auto: jax.Array  # 1 = Daly optimum
    ckpt_s: jax.Array
    global_batch: jax.Array  # () sequences, used when the space fixes the global batch


class Rows(NamedTuple):
    """The layout rows one chunk touches, padded to a fixed length."""

    count_idx: jax.Array  # (rows,) int32 index into Tables.n_gpus
    split_idx: jax.Array  # (rows,) int32 index into Tables.splits


def chunks_for_process(n_chunks: int, process_index: int, process_count: int) -> range:
    """Chunks one host evaluates when ``process_count`` hosts share a sweep (round robin)."""
    return range(process_index, n_chunks, process_count)


# Configurations per compiled call where sweep.chunk_size is null (benchmarks/chunk_size.py:
# the throughput benchmark's GPT-3 175B space, keep=top_k). CPU devices: 262,144 for all of them
# together (README's benchmark). A GPU keeps gaining from longer chunks: on one H200 (jax 0.11.2,
# 2026-11-26) 12.0M configurations/s at 262,144, 51M at 1,048,576, 100M at 2,097,152, 160M at
# 4,194,304 and 187M at 8,388,608, with 0.02 / 0.09 / 0.19 / 0.60 / 0.76 GiB of device memory at
# peak. 4,194,304 per accelerator keeps most of that gain while a chunk's frame (keep=all or
# feasible brings every configuration's row to the host) stays a few million rows.
CPU_CHUNK = 262144
ACCELERATOR_CHUNK = 4194304


def default_chunk_size(devices) -> int:
    """Configurations per chunk for these devices when the user sets none."""
    if all(d.platform == "cpu" for d in devices):
        return CPU_CHUNK
    return ACCELERATOR_CHUNK * len(devices)


def build(cfg, devices: list | None = None) -> tuple[Space, "Engine"]:
    """The space and evaluator a composed config describes (``cfg.space``, ``cfg.sweep``)."""
    space = build_space(cfg.space, cfg.model, cfg.training.global_batch, functools.partial(cluster_with, cfg))
    sw = cfg.sweep
    engine = Engine(space, to_config(cfg, layout=False), chunk_size=sw.chunk_size, dtype=sw.dtype,
                    keep=sw.keep, objective=sw.objective, top_k=sw.top_k, group_by=tuple(sw.group_by),
                    max_days=sw.max_days, max_free_days=sw.max_free_days, devices=devices)
    return space, engine


class Decoding(NamedTuple):
    """What decides how a chunk's configurations are decoded (hashable: the static argument
    of the module-level kernels, so Engines alike share one compilation per process).
    Everything continuous (catalog values, the base config) is an array argument instead."""

    inner_shape: tuple[int, ...]  # radices of INNER_AXES
    fixed_batch: bool  # the global batch is fixed (Tables.global_batch), else dp x mb x accum
    node_per_gpu: bool = False  # the space's GPUs have different nodes (Tables.node; tables.space_nodes)

    @property
    def inner_size(self) -> int:
        return math.prod(self.inner_shape)


class Kernel(NamedTuple):
    """What decides the traced program of a chunk's on-device reduction (hashable, static).
    The objective and the deadline are array arguments: one program serves them all. The
    failure-free-time filter is traced only where asked for (it halves the CPU rate)."""

    decoding: Decoding
    keep: str
    top_k: int
    groups: tuple[tuple[str, int], ...]  # best_per_group: (axis, number of values) per axis
    mesh: Mesh  # the devices a chunk's lanes are split over
    free_filter: bool = False  # sweep.max_free_days set


# Traces per Kernel in this process: a guard against retracing (tests/test_sweep.py).
TRACES: collections.Counter = collections.Counter()


def _decode(dec: Decoding, local, rows: Rows, tables: Tables, base: Config):
    """Configuration number ``local`` of a chunk (counted from its first layout row)."""
    row = local // dec.inner_size
    rest = local % dec.inner_size
    digits = {}
    for axis, radix in reversed(list(zip(INNER_AXES, dec.inner_shape))):
        digits[axis] = rest % radix
        rest = rest // radix
    count_i, split_i = rows.count_idx[row], rows.split_idx[row]
    s = {k: v[split_i] for k, v in tables.splits.items()}
    n = tables.n_gpus[count_i]
    dp = n / (s["tp"] * s["pp"] * s["cp"])
    global_batch = tables.global_batch if dec.fixed_batch else dp * s["micro_batch"] * s["accum"]
    gi, fi = digits["gpu"], digits["fabric"]
    ci = digits["ckpt_interval_s"]
    cfg = with_choices(
        base, jax.tree.map(lambda a: a[gi], tables.gpu), jax.tree.map(lambda a: a[fi], tables.fabric),
        Layout(n_gpus=n, tp=s["tp"], pp=s["pp"], cp=s["cp"], ep=s["ep"], vpp=s["vpp"], etp=s["etp"],
               schedule=s["schedule"], zero_shard=tables.zero_shard[digits["zero_shard"]]),
        global_batch=global_batch, micro_batch=s["micro_batch"], recompute=tables.recompute[digits["recompute"]],
        zero_stage=tables.zero_stage[digits["zero_stage"]], low_precision=tables.low_precision[digits["precision"]],
        mxfp8=tables.mxfp8[digits["precision"]],
        ckpt_auto=tables.ckpt_auto[ci], ckpt_interval_s=tables.ckpt_s[ci],
        recompute_modules=tables.recompute_modules[digits["recompute"]],
        node={k: v[gi] for k, v in tables.node.items()} if dec.node_per_gpu else None)
    index = dict(digits, n_gpus=count_i, split=split_i)
    return cfg, index


def _decode_and_estimate(dec: Decoding, local, rows, tables, base):
    cfg, index = _decode(dec, local, rows, tables, base)
    return index, estimate(cfg)


@functools.partial(jax.jit, static_argnums=0)
def decode_batch(dec: Decoding, local, rows, tables, base) -> Config:
    """The configurations numbered ``local`` ((n,) int32) of a chunk, as a batched Config."""
    return jax.vmap(lambda i: _decode(dec, i, rows, tables, base)[0])(local)


@functools.partial(jax.jit, static_argnums=0)
def _full(dec: Decoding, local, rows, tables, base):
    """Index digits and full estimates of the configurations ``local`` ((n,) int32)."""
    return jax.vmap(_decode_and_estimate, in_axes=(None, 0, None, None, None))(dec, local, rows, tables, base)


def _scan_shard(kernel: Kernel, lanes, offset, n_valid, rows, tables, base, objective, max_jct_s, max_free_s):
    """One device's lanes of a chunk: the keep mask and the count of configurations per Reason."""
    local = lanes + offset
    index, est = jax.vmap(_decode_and_estimate, in_axes=(None, 0, None, None, None))(
        kernel.decoding, local, rows, tables, base)
    valid = lanes < n_valid
    obj = jnp.stack([getattr(est, o) for o in OBJECTIVES])[objective]
    ok = valid & est.feasible & (jnp.isinf(max_jct_s) | (est.jct_s <= max_jct_s))  # inf: no deadline
    if kernel.free_filter:
        ok = ok & (est.steps * est.step_s * (1.0 + est.ckpt_write_s / est.ckpt_interval_s) <= max_free_s)
    obj = jnp.where(ok, obj, jnp.inf)
    if kernel.keep == "all":
        keep = valid
    elif kernel.keep == "feasible":
        keep = ok
    elif kernel.keep == "top_k":
        _, top = jax.lax.top_k(-obj, min(kernel.top_k, lanes.shape[0]))
        keep = jnp.zeros_like(ok).at[top].set(ok[top])
    elif kernel.keep == "pareto":
        keep = pareto_mask(jnp.where(ok, est.jct_s, jnp.inf), obj) & ok
    else:  # best_per_group
        gid, n_groups = jnp.zeros_like(lanes), 1
        for axis, size in kernel.groups:
            gid, n_groups = gid * size + index[axis], n_groups * size
        best = jax.ops.segment_min(obj, gid, num_segments=n_groups)
        keep = ok & (obj <= best[gid])
    reasons = jnp.where(valid, est.reason, len(Reason))
    counts = jnp.zeros(len(Reason) + 1, jnp.int32).at[reasons].add(1)[: len(Reason)]
    return keep, jax.lax.psum(counts, "d")


@functools.partial(jax.jit, static_argnums=0)
def _scan(kernel: Kernel, lanes, offset, n_valid, rows, tables, base, objective, max_jct_s, max_free_s):
    """A whole chunk, its lanes split over ``kernel.mesh``: (keep mask, counts per Reason)."""
    TRACES[kernel] += 1
    return jax.shard_map(functools.partial(_scan_shard, kernel), mesh=kernel.mesh,
                         in_specs=(P("d"), P(), P(), P(), P(), P(), P(), P(), P()),
                         out_specs=(P("d"), P()))(lanes, offset, n_valid, rows, tables, base, objective, max_jct_s,
                                                  max_free_s)


# The kernels as later runs call them: loaded from the cache directory, untraced (config.cache).
scan_kernel = ExportedKernel(_scan, "engine_scan", static_argnums=(0,))
full_kernel = ExportedKernel(_full, "engine_full", static_argnums=(0,))


class Engine:
    """An evaluator for one space and one base configuration. Its kernels are compiled once
    per process for each ``Decoding``/``Kernel`` and array shape, shared by every Engine alike."""

    def __init__(self, space: Space, base: Config, *, chunk_size: int | None = None, dtype: str = "float32",
                 keep: str = "feasible", objective: str = "cost_usd", top_k: int = 100,
                 group_by: tuple[str, ...] = ("gpu", "fabric", "n_gpus"), max_days: float | None = None,
                 max_free_days: float | None = None, devices: list | None = None):
        if keep not in KEEP_MODES:
            raise ConfigError(f"sweep.keep={keep!r} is not allowed: one of {', '.join(KEEP_MODES)}")
        if objective not in OBJECTIVES:
            raise ConfigError(f"sweep.objective={objective!r} is not allowed: one of {', '.join(OBJECTIVES)}")
        for axis in group_by:
            if axis not in GROUP_AXES:
                raise ConfigError(f"sweep.group_by entry {axis!r} is not allowed: one of {', '.join(GROUP_AXES)}")
        if dtype not in ("float32", "float64"):
            raise ConfigError(f"sweep.dtype={dtype!r} is not allowed: float32 | float64")
        self.devices = list(devices or jax.local_devices())
        n_dev = len(self.devices)
        if chunk_size is None:
            chunk_size = default_chunk_size(self.devices)
        if chunk_size <= 0:
            raise ConfigError(f"sweep.chunk_size={chunk_size} is not allowed: a positive number of configurations")
        if not top_k >= 1:
            raise ConfigError(f"sweep.top_k={top_k} is not allowed: an integer >= 1")
        for key, days in (("max_days", max_days), ("max_free_days", max_free_days)):
            if days is not None and not days > 0:
                raise ConfigError(f"sweep.{key}={days!r} is not allowed: a number of days > 0 or null")
        # Whole lanes per device; a space smaller than one chunk is evaluated in one right-sized chunk.
        chunk_size = min(-(-chunk_size // n_dev) * n_dev, -(-space.size // (256 * n_dev)) * 256 * n_dev)
        self.space, self.chunk_size, self.keep, self.objective = space, chunk_size, keep, objective
        self.top_k, self.group_by, self.max_days = top_k, tuple(group_by), max_days
        self.dtype = jnp.dtype(dtype)
        self.n_rows = space.rows_per_chunk(chunk_size)
        self.row_batch = min(ROW_BATCH, chunk_size)
        mesh = Mesh(np.array(self.devices), ("d",))
        sizes = {"n_gpus": len(space.n_gpus), **{a: len(space.inner[a]) for a in INNER_AXES}}
        node, base, per_gpu = space_nodes(space.inner["gpu"], space.nodes, base, self.dtype)
        self.decoding = Decoding(space.inner_shape, space.global_batch is not None, node_per_gpu=per_gpu)
        self.kernel = Kernel(self.decoding, keep, top_k,
                             tuple((a, sizes[a]) for a in self.group_by) if keep == "best_per_group" else (), mesh,
                             free_filter=max_free_days is not None)
        f = self.dtype
        inner = space.inner
        ckpt_auto, ckpt_s = ckpt_arrays(inner["ckpt_interval_s"], f)
        recompute, recompute_modules = recompute_tables(inner["recompute"], base, f)
        tables = Tables(
            gpu=catalog_arrays("gpu", inner["gpu"], GPUSpec, f, space.gpu_overrides),
            node=node,
            fabric=catalog_arrays("fabric", inner["fabric"], FabricSpec, f),
            n_gpus=jnp.asarray(space.n_gpus, f),
            splits={k: jnp.asarray(v, f) for k, v in space.splits.items()},
            low_precision=jnp.asarray([PRECISION[p] for p in inner["precision"]], f),
            mxfp8=jnp.asarray([is_mxfp8(p) for p in inner["precision"]], f),
            recompute=recompute, recompute_modules=recompute_modules,
            zero_stage=jnp.asarray(inner["zero_stage"], f),
            zero_shard=jnp.asarray([zero_shard_code(v) for v in inner["zero_shard"]], f),
            ckpt_auto=ckpt_auto, ckpt_s=ckpt_s,
            global_batch=jnp.asarray(space.global_batch or 0, f),
        )
        self._replicated = NamedSharding(mesh, P())
        self._warming = None
        self.tables = jax.device_put(tables, self._replicated)
        self.base = jax.device_put(jax.tree.map(lambda x: jnp.asarray(x, f), base), self._replicated)
        self.lanes = jax.device_put(jnp.arange(chunk_size, dtype=jnp.int32), NamedSharding(mesh, P("d")))
        self._objective = jnp.int32(OBJECTIVES.index(objective))
        self._max_jct_s = jnp.asarray(math.inf if max_days is None else max_days * 86400.0, f)
        self._max_free_s = jnp.asarray(math.inf if max_free_days is None else max_free_days * 86400.0, f)

    # --- host side ---------------------------------------------------------------------------

    def chunk_rows(self, chunk: int) -> tuple[int, int, Rows]:
        """(offset, n_valid, rows) of a chunk: offset is its first configuration's index
        relative to its first layout row."""
        start = chunk * self.chunk_size
        stop = min(start + self.chunk_size, self.space.size)
        inner = self.space.inner_size
        first_row = start // inner
        count_idx, split_idx = self.space.rows(first_row, (stop - 1) // inner + 1)
        pad = self.n_rows - count_idx.size
        rows = Rows(np.pad(count_idx, (0, pad), mode="edge"), np.pad(split_idx, (0, pad), mode="edge"))
        return start - first_row * inner, stop - start, rows

    def _warm_full(self, chunk: int):
        """The row kernel built in a thread while the chunk kernel is: XLA compiles without the GIL.
        Not a daemon: an exit waits for it rather than tear the interpreter down under XLA."""
        _, _, rows = self.chunk_rows(chunk)
        rows_dev = jax.device_put(Rows(*map(jnp.asarray, rows)), self._replicated)
        lanes = jnp.zeros(self.row_batch, jnp.int32)

        def build():
            try:
                jax.block_until_ready(full_kernel(self.decoding, lanes, rows_dev, self.tables, self.base))
            except Exception:  # noqa: BLE001 - the main thread's own call raises it, where it is handled
                pass

        thread = threading.Thread(target=build, name="build-row-kernel")
        thread.start()
        return thread

    def dispatch(self, chunk: int):
        """Start evaluating a chunk (asynchronous); pass the result to ``collect``."""
        offset, n_valid, rows = self.chunk_rows(chunk)
        rows_dev = jax.device_put(Rows(*map(jnp.asarray, rows)), self._replicated)
        keep, counts = scan_kernel(self.kernel, self.lanes, jnp.int32(offset), jnp.int32(n_valid), rows_dev,
                             self.tables, self.base, self._objective, self._max_jct_s, self._max_free_s)
        return chunk, offset, rows_dev, keep, counts

    def trace(self, chunk: int = 0) -> jax.stages.Traced:
        """The chunk kernel traced for ``chunk``: the work a run that loads the exported kernel
        (config.cache) skips. Traced afresh only where this process has not traced it yet."""
        offset, n_valid, rows = self.chunk_rows(chunk)
        rows_dev = jax.device_put(Rows(*map(jnp.asarray, rows)), self._replicated)
        return _scan.trace(self.kernel, self.lanes, jnp.int32(offset), jnp.int32(n_valid), rows_dev, self.tables,
                           self.base, self._objective, self._max_jct_s, self._max_free_s)

    def run(self, chunks):
        """Yield ``(chunk, rows, counts)`` for each chunk, the next one computing while the
        host collects this one."""
        chunks = list(chunks)
        if chunks and self._warming is None:
            self._warming = self._warm_full(chunks[0])
        pending = self.dispatch(chunks[0]) if chunks else None
        for i, chunk in enumerate(chunks):
            following = self.dispatch(chunks[i + 1]) if i + 1 < len(chunks) else None
            rows, counts = self.collect(pending)
            pending = following
            yield chunk, rows, counts

    def collect(self, pending) -> tuple[pd.DataFrame, np.ndarray]:
        """Kept rows of a dispatched chunk, in full, and its count of configurations per Reason."""
        chunk, offset, rows_dev, keep, counts = pending
        lanes = np.flatnonzero(np.asarray(keep))
        if self._warming is not None:
            self._warming.join()
        frames = []
        for lo in range(0, lanes.size, self.row_batch):
            batch = lanes[lo:lo + self.row_batch]
            padded = np.pad(batch, (0, self.row_batch - batch.size), mode="edge")
            index, est = full_kernel(self.decoding, jnp.asarray(padded + offset, jnp.int32), rows_dev, self.tables, self.base)
            frames.append(self._frame(chunk * self.chunk_size + batch, index, est, batch.size))
        df = pd.concat(frames, ignore_index=True) if frames else self._frame(np.zeros(0, np.int64), None, None, 0)
        return reduce_rows(df, self.keep, self.objective, self.top_k, self.group_by), np.asarray(counts)

    def _frame(self, config_id, index, est: Estimate | None, n: int) -> pd.DataFrame:
        sp = self.space
        cols: dict = {"config_id": np.asarray(config_id, np.int64)}
        if index is None:
            index = {k: np.zeros(0, np.int64) for k in ("n_gpus", "split") + INNER_AXES}
            est = Estimate(*([np.zeros(0)] * len(Estimate._fields)))
        ix = {k: np.asarray(v)[:n] for k, v in index.items()}
        for axis in ("gpu", "fabric", "precision", "recompute", "zero_shard"):
            cols[axis] = pd.Categorical.from_codes(ix[axis], categories=sp.inner[axis])
        cols["n_gpus"] = sp.n_gpus[ix["n_gpus"]]
        for k in SPLIT_AXES:
            if k != "accum":
                cols[k] = sp.splits[k][ix["split"]]
        cols["schedule"] = pd.Categorical.from_codes(cols["schedule"], categories=list(SCHEDULES))
        cols["zero_stage"] = np.asarray(sp.inner["zero_stage"], np.int64)[ix["zero_stage"]]
        ckpt = np.asarray(sp.inner["ckpt_interval_s"], np.float64)[ix["ckpt_interval_s"]]
        cols["ckpt_policy"] = pd.Categorical(np.where(np.isnan(ckpt), "daly", "fixed"), categories=["daly", "fixed"])
        for k, v in est._asdict().items():
            v = np.asarray(v)[:n]
            cols[k] = np.rint(v).astype(np.int64) if k in ("reason", "dp", "n_micro") else (
                v if v.dtype == bool else v.astype(np.float64))
        cols["reason"] = pd.Categorical.from_codes(cols["reason"], categories=[r.name for r in Reason])
        cols["global_batch"] = cols["dp"] * cols["micro_batch"] * cols["n_micro"]
        return pd.DataFrame(cols)
