"""Megatron-Core's selective recompute by module: what a layer repeats in its backward pass and
which activations it does not keep.

Megatron-Core's ``recompute_modules`` (megatron/core/transformer/transformer_config.py
@d98e8a6; default ``["core_attn"]``, Korthikanti et al. 2022's selective recompute) names the
submodules that selective recompute repeats:

- ``core_attn``: the attention core (``model.memory``: the stored scores, where a kernel keeps them);
- ``mla_up_proj``: MLA's up-projections of the query and key-value latents and the RoPE
  application (DeepSeek-V3 report Sec. 3.2.3): the per-head Q, K and V are not kept;
- ``layernorm``: the two pre-norms: their outputs, which the following linears would keep as
  their bf16 inputs, are not kept;
- ``moe_act``: the routed experts' activation: its output, fc2's input, is not kept;
- ``mlp``, ``moe``, ``shared_experts``: the dense MLP, the whole MoE layer (router, dispatch,
  experts, combine: its two all-to-alls run again) and the shared experts, each checkpointed at
  its input: none of their inner activations is kept.

The first four discard their outputs after use and recompute them just before the backward
needs them; the last three recompute their forward whole. Each module is a flag on
``Training`` (1 recomputed); they apply to selective recompute on Megatron stacks
(``recompute`` 1, ``selective_op`` 0). Full recompute repeats everything anyway.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from .types import ModelSpec, Training

# Megatron-Core's names, in the order of the Training flags (``recompute_<name>``).
MODULES = ("core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe", "shared_experts")


class ModuleParts(NamedTuple):
    """Forward work of one layer (averaged over the layers, as model.compute's per-layer terms), per
    module: seconds for a step's time, FLOPs for its count."""
    core_attn: object
    mla_up_proj: object
    layernorm: object
    moe_act: object
    mlp: object
    moe: object
    shared_experts: object


def flags(t: Training) -> ModuleParts:
    """The run's module flags (1 recomputed, 0 kept) where selective recompute is Megatron's by
    module; all 0 otherwise (no recompute, torchtitan's per-op policy). The routed experts'
    activation and the shared experts are parts of the MoE layer: recomputed with it, they
    are not counted again."""
    by_module = jnp.where((t.recompute >= 1) & (t.selective_op < 1), 1.0, 0.0)
    on = {name: by_module * getattr(t, f"recompute_{name}") for name in MODULES}
    outside_moe = 1.0 - on["moe"]
    return ModuleParts(**dict(on, moe_act=on["moe_act"] * outside_moe,
                              shared_experts=on["shared_experts"] * outside_moe))


def repeated_forward(t: Training, parts: ModuleParts):
    """Forward work a selectively recomputed layer repeats: the flagged modules' parts."""
    return sum(f * p for f, p in zip(flags(t), parts))


def mla_up_params(m: ModelSpec):
    """Weights of MLA's two up-projections (DeepSeek-V2, arXiv:2405.04434, Eqs. 12-13 and 17):
    the query latent to every head's query (q_lora_rank x heads x head_dim) and the key-value
    latent to every head's key without its RoPE part and value; 0 without MLA."""
    up_q = m.q_lora_rank * m.n_heads * m.head_dim
    up_kv = m.kv_lora_rank * m.n_heads * (m.head_dim - m.qk_rope_head_dim + m.v_head_dim)
    return jnp.where(m.kv_lora_rank > 0, up_q + up_kv, 0.0)


def repeated_all_to_alls(t: Training):
    """All-to-alls an MoE layer runs again per micro-batch under selective recompute: dispatch
    and combine of the recomputed MoE forward."""
    return 2.0 * flags(t).moe


def repeated_tp_share(t: Training, dense_mlp_share, moe_share):
    """Of a layer's forward TP collectives (one per mixer and one per MLP), the share a
    selectively recomputed layer runs again: its recomputed MLP's (the dense MLP's, the MoE
    layer's), each weighted by its share of the layers."""
    f = flags(t)
    return f.mlp * dense_mlp_share + f.moe * moe_share
