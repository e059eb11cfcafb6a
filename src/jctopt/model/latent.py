"""Latent mixture-of-experts: routed experts that work in a narrower width than the model.

NVIDIA Nemotron 3 Super's LatentMoE, Megatron-Core's ``MoELayer`` with ``moe_latent_size``
(``router_and_preprocess``: the router reads the hidden state, ``fc1_latent_proj`` maps it from
h down to the latent width l before the dispatch; ``combine``: ``fc2_latent_proj`` maps the
combined expert outputs from l back to h; the shared experts read the hidden state). So the
dispatched and combined tokens, their permutation, and the routed experts' inputs and outputs
are l wide; each routed layer adds two l x h projections that every token passes through
once. Megatron-Bridge counts the FLOPs the same way (``training/utils/flop_utils.py``,
``moe_layer_flops``: routed experts on ``moe_latent_size``, plus 4 b s h l for the two
projections). ``moe_latent_size`` 0: no latent projection, the experts work in h.
"""

from __future__ import annotations

import jax.numpy as jnp

from .types import ModelSpec


def routed_width(m: ModelSpec):
    """Width of what a routed expert reads and writes, and of a dispatched token: the latent
    width where the model has one, else the hidden size."""
    return jnp.where(m.moe_latent_size > 0, m.moe_latent_size, m.hidden)


def projection_params(m: ModelSpec):
    """Weights of one routed layer's two latent projections (h x l each); 0 without them."""
    return 2.0 * m.hidden * m.moe_latent_size
