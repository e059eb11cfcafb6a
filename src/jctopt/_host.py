"""The host's pace: a pipeline stage cannot finish a micro-batch faster than the CPU launches it.

An MoE layer in eager PyTorch (Megatron-Core, Transformer Engine) launches hundreds of small
kernels per micro-batch: the router and its top-k, the permutation, the dispatcher's
collectives, and Transformer Engine's grouped linear, which quantizes and multiplies each local
expert apart; the token dispatcher also waits on the GPU for the token counts of the
all-to-all. Where the GPU work of a layer is short (few active parameters, one sequence per
micro-batch), the stage runs at the host's pace: Megatron-Bridge's CUDA-graph guide
(docs/training/cuda-graphs.md, "launch-bound training", "TE-scoped MoE paths", up to ~25 % off
the step) and the Megatron-LM MoE README ("CPU Overhead Bottleneck") name it; a full-iteration
CUDA graph replays the step without launches (``moe_host_s`` = 0).

The floor is ``moe_host_s`` per MoE layer of the stage: the stage's per-micro-batch time is the
larger of its GPU time and that floor (the host runs ahead of a busy GPU; a launch-bound one
waits for it).
"""

from __future__ import annotations

import jax.numpy as jnp

from . import _compute as C
from ._types import ModelSpec, Training


def launch_floor(m: ModelSpec, t: Training, layers_on_stage):
    """Host time (s) to launch one micro-batch's forward and backward through a stage's MoE
    layers; 0 for a dense model."""
    return jnp.where(m.n_experts > 1, layers_on_stage * C.moe_layer_fraction(m) * t.moe_host_s, 0.0)
