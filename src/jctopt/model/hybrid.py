"""How a model's layers divide into sequence mixers and MLPs.

A transformer layer holds an attention mixer and an MLP. A hybrid model (NVIDIA Nemotron-H,
Nemotron 3) stacks single-purpose layers instead, written as Megatron-Core's hybrid layer
pattern, one character per layer: ``M`` a Mamba-2 mixer, ``*`` attention, ``-`` a dense MLP,
``E`` routed experts (Megatron-Core ``megatron/core/ssm/mamba_hybrid_layer_allocation.py``;
Nemotron-H 8B: ``M-M-M-M*-...``, 52 layers = 24 M + 4 * + 24 -).

The model prices a layer averaged over the stack, so each kind enters as its count over the
layers: a transformer has attention and an MLP in every layer (shares 1, 1, no Mamba), a
hybrid's shares sum to 1. Each mixer and MLP has its own pre-norm and residual add, and its
own tensor-parallel collective.
"""

from __future__ import annotations

from .types import ModelSpec

MAMBA, ATTENTION, DENSE_MLP, MOE = "M", "*", "-", "E"
PATTERN_SYMBOLS = MAMBA + ATTENTION + DENSE_MLP + MOE


def pattern_counts(pattern: str) -> dict[str, int]:
    """Layers of each kind in a hybrid layer pattern (checked by ``config.checks``)."""
    return {
        "attention_layers": pattern.count(ATTENTION),
        "mamba_layers": pattern.count(MAMBA),
        "mlp_layers": pattern.count(DENSE_MLP) + pattern.count(MOE),
        "dense_mlp_layers": pattern.count(DENSE_MLP),
    }


def attention_share(m: ModelSpec):
    """Attention mixers per layer: 1 in a transformer."""
    return m.attention_layers / m.n_layers


def mamba_share(m: ModelSpec):
    """Mamba-2 mixers per layer: 0 in a transformer."""
    return m.mamba_layers / m.n_layers


def mlp_share(m: ModelSpec):
    """MLPs (dense or routed) per layer: 1 in a transformer."""
    return m.mlp_layers / m.n_layers


def sublayers(m: ModelSpec):
    """Mixers and MLPs per layer, each with a pre-norm, a residual add and one tensor-parallel
    all-reduce forward (Shoeybi et al. 2019, Fig. 4): 2 in a transformer, 1 in a hybrid."""
    return attention_share(m) + mamba_share(m) + mlp_share(m)
