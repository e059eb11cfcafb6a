"""Sliding-window attention: the share of the causal square a windowed layer's flash kernel costs.

A layer with a window of ``w`` tokens lets each query attend to itself and the ``w - 1`` tokens
before it (Beltagy et al. 2020, "Longformer", Sec. 3.1; Mistral 7B, Jiang et al. 2023, Sec. 2;
gpt-oss alternates 128-token banded layers with dense causal ones, model card arXiv:2508.10925).
A flash kernel (FlashAttention-2, Dao 2023, Alg. 1 and Sec. 3.3) works in tiles of
``KEY_BLOCK`` keys: a block of queries visits every key block its band overlaps, the band's
ceil((w - 1) / B) full blocks and the diagonal one, which, as in a causal layer, runs half
masked; and each query tile pays a fixed cost (loading Q, the softmax epilogue, writing O and
its log-sum-exp, the backward's extra passes) that a causal layer spreads over s / (2 B) key
blocks and the calibrated attention rate already holds, but a band of two blocks does not.
A windowed layer then costs the causal layer's time at ``visited_keys_per_query`` / (s / 2) of
its FLOPs (model.attention: the same rate, the same fixed cost per call), never more than causal.

The tile cost, ``QUERY_TILE_KEYS``, is what cuDNN's SDPA training benchmark needs beyond the
block visits to run gpt-oss's windowed layer (w = 128, d = 64, 2 sequences x 128 heads,
s = 4096, bf16, forward + backward) in 0.675 ms on a GB200 and 0.644 ms on a GB300
(NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/gpt_oss/gb{200,300} @3929da2):
269 and 314 keys at each GPU's attention rate, 290 taken. The same benchmark's other lengths
test it: s = 2048 / 8192 / 16384 on GB200, 0.346 / 1.325 / 2.640 ms measured, 0.40 / 1.30 /
2.51 predicted (s = 32768, 6.33 ms, runs a forward 3.2x its 16384 one: not a linear band).
"""

from __future__ import annotations

import jax.numpy as jnp

KEY_BLOCK = 128.0  # keys per flash tile (FlashAttention-2's and cuDNN's 128-wide key blocks)
QUERY_TILE_KEYS = 290.0  # fixed cost of a query tile, in keys of work (module docstring)


def visited_keys_per_query(window, seq_len):
    """Keys of work per query in a windowed layer's flash kernel (see the module docstring);
    ``window`` 0 (none) or one at least as long as the sequence: the causal s / 2."""
    causal = seq_len / 2.0
    blocks = jnp.ceil(jnp.maximum(window - 1.0, 0.0) / KEY_BLOCK) + 0.5
    banded = KEY_BLOCK * blocks + QUERY_TILE_KEYS
    return jnp.where((window > 0) & (window < seq_len), jnp.minimum(banded, causal), causal)


def square_share(window, seq_len):
    """The share of the full s x s square a windowed layer's kernel costs (1/2 for causal)."""
    return visited_keys_per_query(window, seq_len) / seq_len
