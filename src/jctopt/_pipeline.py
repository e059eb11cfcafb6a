"""How a model's layers fall on the pipeline stages.

When ``pp x vpp`` divides the layers, every virtual stage holds ``L / (pp vpp)`` of them and
the last stage also computes the output logits and the loss (Megatron's default split).

When it does not (Llama 3.1 405B's 126 layers on PP 8, or PP 8 x VP 8), the frameworks count
the input embedding and the loss as one layer each and balance ``L + 2`` units over the
``pp x vpp`` virtual stages: Megatron-Core's ``--account-for-embedding-in-pipeline-split`` and
``--account-for-loss-in-pipeline-split`` (126 + 2 = 128 = 8 x 8 x 2 in NVIDIA's Llama 3.1 405B
recipes), torchtitan's pipeline split with ``input_weight = output_weight = 1``. A pipeline
rank then holds at most ``vpp x ceil((L + 2) / (pp vpp))`` units; the last rank gives one of
them to the logits and loss.
"""

from __future__ import annotations

import jax.numpy as jnp

# Units the embedding and the loss count for in an uneven split (one layer each).
EMBEDDING_AND_LOSS_UNITS = 2.0


def is_even(n_layers, pp, vpp):
    """1 where ``pp x vpp`` divides the layers (float, so that it broadcasts in jnp.where)."""
    per_chunk = n_layers / (pp * vpp)
    return jnp.abs(per_chunk - jnp.round(per_chunk)) < 1e-6


def stage_layers(n_layers, pp, vpp):
    """(middle, last): transformer layers on the busiest pipeline rank without the logits and
    on the rank that also computes the logits and the loss (both ``L / pp`` when even)."""
    even = is_even(n_layers, pp, vpp)
    units = vpp * jnp.ceil((n_layers + EMBEDDING_AND_LOSS_UNITS) / (pp * vpp) - 1e-9)
    middle = jnp.where(even, n_layers / pp, units)
    last = jnp.where(even, n_layers / pp, units - 1.0)
    return middle, last


def fits(n_layers, pp, vpp):
    """Every virtual stage holds at least one unit: a layer, or the embedding or the loss
    (an even split needs ``pp vpp <= L``, which ``pp vpp`` dividing ``L`` implies). Plain
    arithmetic: serves Python ints, numpy and jax arrays alike."""
    return pp * vpp <= n_layers + EMBEDDING_AND_LOSS_UNITS
