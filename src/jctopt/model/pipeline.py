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

A model with multi-token-prediction modules (DeepSeek-V3) carries them on the last stage, after
the loss's output head; NVIDIA's DeepSeek-V3 layouts balance the split around them
(Megatron-Bridge recipes/deepseek/deepseek_v3.py, ``pipeline_model_parallel_layout``: PP 16 is
embedding + 4 layers, 14 x 4 layers, then 1 layer + MTP + loss). Every layout there is
reproduced by counting the loss as one unit, each MTP module as two (its layer and its output
head) and the embedding as none: 61 + 1 + 2 = 64 units, 4 per stage, the last stage's 4 - 3 = 1
layer.
"""

from __future__ import annotations

import jax.numpy as jnp

# Units the embedding and the loss count for in an uneven split (one layer each).
EMBEDDING_AND_LOSS_UNITS = 2.0


def is_even(n_layers, pp, vpp):
    """1 where ``pp x vpp`` divides the layers (float, so that it broadcasts in jnp.where)."""
    per_chunk = n_layers / (pp * vpp)
    return jnp.abs(per_chunk - jnp.round(per_chunk)) < 1e-6


def split_units(mtp_layers):
    """Units an uneven split spends beside the transformer layers, and those of them the last
    rank holds: embedding and loss (2, 1) without MTP; loss and MTP modules (1 + 2 mtp, both)
    with it."""
    with_mtp = mtp_layers > 0
    extra = jnp.where(with_mtp, 1.0 + 2.0 * mtp_layers, EMBEDDING_AND_LOSS_UNITS)
    on_last = jnp.where(with_mtp, 1.0 + 2.0 * mtp_layers, 1.0)
    return extra, on_last


def stage_layers(n_layers, pp, vpp, mtp_layers=0.0):
    """(middle, last): transformer layers (MTP modules not counted) on the busiest pipeline rank
    without the logits and on the rank that also computes the logits, the loss and the MTP
    modules (both ``L / pp`` when even)."""
    even = is_even(n_layers, pp, vpp)
    extra, on_last = split_units(mtp_layers)
    units = vpp * jnp.ceil((n_layers + extra) / (pp * vpp) - 1e-9)
    middle = jnp.where(even, n_layers / pp, units)
    last = jnp.where(even, n_layers / pp, jnp.maximum(units - on_last, 0.0))
    return middle, last


def fits(n_layers, pp, vpp):
    """Every virtual stage holds at least one unit: a layer, or the embedding or the loss
    (an even split needs ``pp vpp <= L``, which ``pp vpp`` dividing ``L`` implies). Plain
    arithmetic: serves Python ints, numpy and jax arrays alike."""
    return pp * vpp <= n_layers + EMBEDDING_AND_LOSS_UNITS
