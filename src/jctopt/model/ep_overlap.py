"""How much of an MoE layer's all-to-all time Megatron-Core's 1F1B expert-parallel overlap hides.

``--overlap-moe-expert-parallel-comm`` (Megatron-Bridge ``overlap_moe_expert_parallel_comm``)
runs the forward of one micro-batch beside the backward of another, layer by layer, and places
each of the four all-to-alls of the pair on the communication stream beside one block of the
other pass's compute (Megatron-LM ``megatron/core/models/common/model_chunk_schedule_plan.py``
@d98e8a64, ``TransformerLayerSchedulePlan.run``):

    comm stream:  combine_bwd      | dispatch_fwd | dispatch_bwd              | combine_fwd
    comp stream:  pre_dispatch_fwd | mlp_bwd      | mlp_bwd_dw + mlp_fwd      | pre_dispatch_bwd

An all-to-all longer than the block beside it shows the difference; a short one is hidden
whole. pre_dispatch is the layer's mixer block (attention, its norm and the router), mlp its
experts; the backward's data and weight gradients each take a forward's time (Narayanan et al.
2021 Sec. 5.1), the attention core its backward factor. Where the all-to-all is short against
every block (inside an NVLink domain) nothing shows; where it crosses a scale-out fabric it
can outlast the mixer block even while the whole layer's compute would cover it. A hybrid's
blocks are its layers' share-weighted averages (model.hybrid), as everywhere in the step model, though
its MoE layers carry no mixer of their own.
"""

from __future__ import annotations

import jax.numpy as jnp


def exposed_per_layer(a2a_s, mixer_fwd_s, mlp_fwd_s, core_s, core_backward_factor):
    """Exposed time (s) of one MoE layer's four all-to-alls (``a2a_s`` each: dispatch or combine,
    forward or backward) beside the other micro-batch's blocks (module docstring)."""
    mixer_bwd = 2.0 * mixer_fwd_s + (core_backward_factor - 2.0) * core_s
    windows = (mixer_fwd_s, mlp_fwd_s, 2.0 * mlp_fwd_s, mixer_bwd)  # mlp_bwd = dgrad; dw + fwd
    return sum(jnp.maximum(a2a_s - w, 0.0) for w in windows)
