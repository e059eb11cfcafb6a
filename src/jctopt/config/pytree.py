"""A checked config as the float pytree the JAX model consumes (``to_config``)."""

from __future__ import annotations

import jax.numpy as jnp
from omegaconf import DictConfig, OmegaConf

from ..model import recompute_modules, schedules
from ..model.types import ClusterSpec, Config, FabricSpec, GPUSpec, Job, Layout, ModelSpec, Training
from .checks import check, layer_counts
from .choices import PRECISION, RECOMPUTE, SELECTIVE_AC, is_mxfp8, zero_shard_code

# The cluster fields that follow the GPU in a design space of several (search.space: each its own node).
NODE_FIELDS = ("gpus_per_node", "nics_per_node", "mtbf_node_h")


def with_host_mtbf(cluster: dict, tray_gpus: int | None) -> dict:
    """``cluster`` (resolved) with mtbf_node_h per node: it is a host's, and a node that is a whole
    NVL72 rack (gpus_per_node 72) holds 18 compute trays, each a host with its own CPUs, memory
    and software (conf/gpu tray_gpus)."""
    if tray_gpus and cluster["gpus_per_node"] > tray_gpus:
        return dict(cluster, mtbf_node_h=cluster["mtbf_node_h"] / (cluster["gpus_per_node"] / tray_gpus))
    return cluster


def cluster_with(cfg: DictConfig, gpu: DictConfig) -> dict:
    """The composed cluster group resolved with ``gpu`` in place of ``cfg.gpu``: a node shape the
    cluster derives from the GPU (conf/cluster/default.yaml: ``${tray_or:${gpu.tray_gpus},8}``)
    follows it, a value set outright (``cluster.gpus_per_node=8``) stays."""
    probe = OmegaConf.create({"gpu": OmegaConf.to_container(gpu, resolve=True),
                              "cluster": OmegaConf.to_container(cfg.cluster, resolve=False)})
    return OmegaConf.to_container(probe.cluster, resolve=True)


def _floats(cls, values: dict):
    return cls(**{k: jnp.asarray(float(values[k])) for k in cls._fields})


def to_config(cfg: DictConfig, layout: bool = True) -> Config:
    """A checked Hydra config as a pytree of float scalars (``layout=False``: the layout
    group is neither checked nor meaningful, a design space supplies it)."""
    check(cfg, layout=layout)
    c = OmegaConf.to_container(cfg, resolve=True)
    model = dict(c["model"])
    model["n_kv_heads"] = model["n_kv_heads"] or model["n_heads"]
    model["head_dim"] = model["head_dim"] or model["hidden"] / model["n_heads"]
    model["moe_ffn_hidden"] = model["moe_ffn_hidden"] or model["ffn_hidden"]
    model["v_head_dim"] = model["v_head_dim"] or model["head_dim"]
    model.update(layer_counts(model))
    tr = dict(c["training"])
    training = dict(tr, seq_len=model["seq_len"], recompute=RECOMPUTE[tr["recompute"]],
                    selective_op=SELECTIVE_AC[tr["selective_ac"]], low_precision=PRECISION[tr["precision"]],
                    mxfp8=is_mxfp8(tr["precision"]),
                    **{f"recompute_{name}": float(name in tr["recompute_modules"])
                       for name in recompute_modules.MODULES})
    cluster = with_host_mtbf(dict(c["cluster"], gpu_power_limit_w=c["cluster"]["gpu_power_limit_w"] or 0.0),
                             c["gpu"].get("tray_gpus"))
    interval = c["job"]["ckpt_interval_s"]
    job = dict(c["job"], ckpt_auto=1.0 if interval is None else 0.0,
               ckpt_interval_s=1.0 if interval is None else interval)
    return Config(
        model=_floats(ModelSpec, model), gpu=_floats(GPUSpec, c["gpu"]),
        fabric=_floats(FabricSpec, c["fabric"]),
        cluster=_floats(ClusterSpec, cluster),
        layout=_floats(Layout, dict(c["layout"], etp=c["layout"].get("etp") or c["layout"]["tp"],
                                    schedule=schedules.SCHEDULES[c["layout"].get("schedule", "1f1b")],
                                    zero_shard=zero_shard_code(c["layout"].get("zero_shard", "stack")))),
        train=_floats(Training, training), job=_floats(Job, job),
    )
