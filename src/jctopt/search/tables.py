"""What the device decodes design-space points from: catalog entries as arrays, checkpoint and
recompute choices as model inputs, and a base configuration with one point's choices."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..config import NODE_FIELDS, load_option, recompute_choice
from ..model import recompute_modules as Rm
from ..model.types import Config, FabricSpec, GPUSpec, Layout


def catalog_arrays(group: str, names: list[str], cls, dtype, overrides: dict | None = None) -> NamedTuple:
    """Catalog entries as one pytree of (len(names),) arrays, with ``overrides[name][field]``."""
    overrides = overrides or {}
    confs = [load_option(group, n) for n in names]
    return cls(**{f: jnp.asarray([float(overrides.get(n, {}).get(f, c[f])) for n, c in zip(names, confs)],
                                 dtype=dtype) for f in cls._fields})


def node_arrays(names: list[str], nodes: dict | None, base: Config, dtype) -> dict[str, jax.Array]:
    """Each GPU's node (NODE_FIELDS: {field: (len(names),) array}): ``nodes[name]`` (the space's,
    search.space.build_space), else the base config's cluster."""
    return {f: jnp.asarray(v, dtype) for f, v in _node_values(names, nodes, base).items()}


def _node_values(names: list[str], nodes: dict | None, base: Config) -> dict[str, list[float]]:
    return {f: [float(nodes[n][f]) if nodes and n in nodes else float(getattr(base.cluster, f)) for n in names]
            for f in NODE_FIELDS}


def space_nodes(names: list[str], nodes: dict | None, base: Config, dtype) -> tuple[dict, Config, bool]:
    """(``node_arrays``, base, whether the GPUs' nodes differ): where they are all the same, the
    base's cluster takes that node, as scalars the compiled sweep keeps out of its lanes. (Compared
    on the host: a device comparison would compile a kernel of its own on every run.)"""
    values = _node_values(names, nodes, base)
    node = {f: jnp.asarray(v, dtype) for f, v in values.items()}
    if any(len(set(v)) > 1 for v in values.values()):
        return node, base, True
    return node, base._replace(cluster=base.cluster._replace(**{k: v[0] for k, v in values.items()})), False


def ckpt_arrays(intervals_s, dtype) -> tuple[jax.Array, jax.Array]:
    """(ckpt_auto, ckpt_interval_s) model inputs from intervals in s, NaN meaning Daly's optimum."""
    auto = [1.0 if math.isnan(c) else 0.0 for c in intervals_s]
    return jnp.asarray(auto, dtype), jnp.asarray([1.0 if math.isnan(c) else c for c in intervals_s], dtype)


def with_choices(base: Config, gpu: GPUSpec, fabric: FabricSpec, layout: Layout, *, global_batch, micro_batch,
                 recompute, zero_stage, low_precision, mxfp8, ckpt_auto, ckpt_interval_s,
                 recompute_modules=None, node=None) -> Config:
    """``base`` with the choices of one design-space point (scalars) or of a batch ((n,) arrays);
    ``recompute_modules``: the module flags ((..., len(MODULES)), model.recompute_modules), None keeps the base's;
    ``node``: the GPU's node ({NODE_FIELDS: value}, ``node_arrays``), None keeps the base's cluster."""
    modules = {} if recompute_modules is None else {
        f"recompute_{name}": recompute_modules[..., i] for i, name in enumerate(Rm.MODULES)}
    return base._replace(
        gpu=gpu, fabric=fabric, layout=layout, cluster=base.cluster._replace(**(node or {})),
        train=base.train._replace(global_batch=global_batch, micro_batch=micro_batch, recompute=recompute,
                                  zero_stage=zero_stage, low_precision=low_precision, mxfp8=mxfp8, **modules),
        job=base.job._replace(ckpt_auto=ckpt_auto, ckpt_interval_s=ckpt_interval_s),
    )


def recompute_tables(choices: list[str], base: Config, dtype) -> tuple[jax.Array, jax.Array]:
    """(Training.recompute, module flags) of each recompute choice; plain ``selective`` keeps the
    base configuration's modules (training.recompute_modules)."""
    base_modules = [name for name in Rm.MODULES if float(getattr(base.train, f"recompute_{name}")) > 0]
    parsed = [recompute_choice("space.recompute", c, base_modules) for c in choices]
    return jnp.asarray([p[0] for p in parsed], dtype), jnp.asarray([p[1] for p in parsed], dtype)
