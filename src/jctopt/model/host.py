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
waits for it). Except in each MoE forward: Megatron-Core's all-to-all dispatcher copies the
token counts to the host and synchronizes the stream before the dispatch ("A synchronization is
needed before expert parallel AlltoAll communication to get the `input_splits` and
`output_splits` CPU values", megatron/core/transformer/moe/token_dispatcher.py @d98e8a6;
DeepEP's dispatch waits for its received-token counts too). The GPU's queue is then empty: the
launches of the MoE block that follows are hidden only by that block's own GPU time, however
long the attention before it ran. The backward reuses the counts and syncs nowhere. HybridEP
syncs too where no static token budget is set ("HybridEP sizes buffers dynamically (CPU sync in
dispatch)", the same file). Where the all-to-alls are overlapped with another micro-batch
(Megatron-Core's 1F1B EP overlap, DualPipe), that micro-batch's queued blocks keep the GPU busy
through the sync: Megatron-Bridge's EP-overlap A/B (skills/nemo-mbridge-perf-expert-parallel-
overlap/SKILL.md @067f987df0, Qwen3-30B-A3B, 16 H100, HybridEP) measured the GPU active 22.82 s of
a 24.71 s step with the overlap off and 21.22 s of the 20.99 s with it on (no idle left).

Transformer Engine graphs over the router and the dispatcher's preprocessing (``moe_router``,
``moe_preprocess`` scopes; ``moe_router_graphed``) let the host keep ahead of the GPU (the same
A/B: far from the eager floor) but not through the sync, which the graphs do not remove.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import flops as Fl
from .types import ModelSpec, Training

# Share of an MoE layer's launches in its forward: the backward runs two GEMMs (data and weight
# gradients) for each forward GEMM and the autograd functions of every other kernel, about
# twice the forward's launches (assumption).
FORWARD_LAUNCH_SHARE = 1.0 / 3.0


def launch_floor(m: ModelSpec, t: Training, layers_on_stage):
    """Host time (s) to launch one micro-batch's forward and backward through a stage's MoE
    layers; 0 for a dense model."""
    return jnp.where(m.n_experts > 1, layers_on_stage * Fl.moe_layer_fraction(m) * t.moe_host_s, 0.0)


def host_time(m: ModelSpec, t: Training, layers_on_stage, moe_layers, moe_block_forward_s, forwards, gpu_s):
    """Host time (s) a stage's micro-batch adds to its GPU time ``gpu_s``: in each of ``forwards``
    exposed MoE forwards (1, 2 when the layer is recomputed; 0 where another micro-batch's work
    covers the sync) the forward launches of every one of its ``moe_layers`` MoE layers beyond
    the MoE block's GPU forward time ``moe_block_forward_s``, since the dispatcher's sync left the
    host no lead; the backward launches beyond the backward GPU time (the same share of ``gpu_s``:
    the host runs ahead through the backward), none where the router is graphed."""
    synced = forwards * moe_layers * jnp.maximum(FORWARD_LAUNCH_SHARE * t.moe_host_s - moe_block_forward_s, 0.0)
    floor_gap = jnp.where(t.moe_router_graphed > 0, 0.0, launch_floor(m, t, layers_on_stage) - gpu_s)
    ahead = (1.0 - FORWARD_LAUNCH_SHARE) * jnp.maximum(floor_gap, 0.0)
    return synced + ahead  # 0 for a dense model: no MoE layers, no floor
