"""Where an MoE layer's experts live: the expert-parallel grid of Megatron-Core's MoE parallel
folding (Liu et al. 2025, "MoE Parallel Folding", arXiv:2504.14960, Sec. 3).

Attention splits the tp x cp x dp ranks of a pipeline stage into TP, CP and DP groups; the
expert layers split the same ranks again into etp x ep x edp, expert-TP innermost. Without
folding etp = tp and EP is carved from the data-parallel ranks; with etp = 1 the experts stay
whole and EP may span the TP ranks too (ep up to tp x cp x dp). Each GPU holds n_experts / ep
experts, 1/etp of each.
"""

from __future__ import annotations

from .types import Layout, ModelSpec, Training


def expert_data_parallel(lay: Layout, dp):
    """edp: replicas of one expert shard, tp x cp x dp / (etp x ep)."""
    return dp * lay.cp * lay.tp / (lay.etp * lay.ep)


def ep_stride(lay: Layout):
    """Rank distance between members of an EP group: the expert-TP ranks lie between them."""
    return lay.etp


def edp_stride(lay: Layout):
    """Rank distance between replicas of one expert shard."""
    return lay.etp * lay.ep


def busiest_rank_tokens(t: Training):
    """The busiest expert-parallel rank's tokens over the mean: ``training.moe_imbalance``.

    Every MoE layer synchronises its EP group twice per pass (dispatch, combine), so the layer
    waits on the rank that receives the most tokens: its grouped GEMMs and its share of the
    all-to-all scale with that excess (GShard, Lepikhin et al. 2020, Sec. 2.2, and Switch
    Transformer, Fedus et al. 2022, Sec. 2.2: the capacity factor bounds it). Forced balance, as
    benchmark runs force it, is 1; Megatron-Core's ``--moe-expert-capacity-factor`` with
    ``--moe-pad-expert-input-to-capacity`` pads every expert's input to that factor times the
    mean, which costs the same as an imbalance of the factor."""
    return t.moe_imbalance


def tokens_per_local_expert(tokens, m: ModelSpec, tp, ep, etp):
    """Tokens one GPU runs through each of its n_experts / ep experts per micro-batch under
    balanced routing (GShard, Lepikhin et al. 2020): the stage's tp x cp x dp ranks hold
    dp x (b s) tokens, top_k copies each, spread over n_experts experts and each expert's edp
    replicas; ``tokens`` = b s / cp, a GPU's share of the sequence."""
    return tokens * m.top_k * ep * etp / (tp * m.n_experts)
