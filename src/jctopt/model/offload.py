"""Activation offloading: a stage keeps the stored activations of some of its layers in host
memory instead of HBM, and pays for the copies over the GPU's host link where they do not
hide behind compute.

Megatron-Core's ``--cpu-offloading`` / ``--cpu-offloading-num-layers`` (``cpu_offloading_num_layers``
in Megatron-Bridge recipes, ``activation_offload_layers`` in NeMo's performance configs) copies
each offloaded layer's saved activations to the host on a side stream as the forward pass
leaves the layer, and back ahead of its backward pass. NVIDIA's GB200/GB300 recipes for
Llama 3 70B under Megatron-FSDP offload 40 and 20 of the 80 layers instead of recomputing them
(Megatron-Bridge ``perf_recipes/llama/gb200/llama3.py`` and ``gb300/llama3.py``: no recompute),
and NeMo's GB200 configuration of Llama 3.1 405B offloads 95 of 126
(``scripts/performance/recommended_model_configs/model_configs_gb200.csv``): on a Grace
superchip the copies ride NVLink-C2C, an order of magnitude faster than PCIe.
"""

from __future__ import annotations

import jax.numpy as jnp

from .types import GPUSpec, Training

# Share of a micro-batch's compute during which the copies can run: the forward pass (a third
# of the compute) for the copies out, the backward pass (two thirds) for the copies back.
FORWARD_SHARE, BACKWARD_SHARE = 1.0 / 3.0, 2.0 / 3.0


def offloaded_share(t: Training, stage_layers):
    """Share of the busiest stage's layers whose stored activations live in host memory."""
    return jnp.clip(t.offload_layers / jnp.maximum(stage_layers, 1.0), 0.0, 1.0)


def link_time(nbytes, g: GPUSpec):
    """Seconds to copy ``nbytes`` one way over the GPU's host link (GB/s per direction)."""
    return nbytes / (1e9 * g.host_link_gbps)


def exposed_time(nbytes_per_micro_batch, compute_per_micro_batch, g: GPUSpec):
    """Seconds per micro-batch the copies add to the stage: out during the forward pass, back
    during the backward pass, each exposed where it outlasts its window."""
    copy = link_time(nbytes_per_micro_batch, g)
    return (jnp.maximum(copy - FORWARD_SHARE * compute_per_micro_batch, 0.0)
            + jnp.maximum(copy - BACKWARD_SHARE * compute_per_micro_batch, 0.0))
