"""A board power limit below TDP (``cluster.gpu_power_limit_w``, ``nvidia-smi -pl``) and the
tensor-core clock it leaves.

Dynamic power is ``C V^2 f`` and, along the DVFS curve, the voltage rises with the clock, so a
compute-bound GPU's dynamic power goes as ``f^3`` (the standard CMOS scaling); the static part
does not scale. A limit ``P`` below TDP then sustains
``f / f_TDP = ((P - P_static) / (TDP - P_static))^(1/3)`` of the clock. A limit throttles only
the work whose power reaches it: large GEMMs, which draw the full TDP (an H800's clock falls
from 1980 to 1575 MHz under overlapped GEMMs at its stock 700 W, deepseek-ai/DeepGEMM issue
#120), follow the clock; attention kernels (FlashAttention-2 at ~35 % of the tensor peak) and
HBM-bound work draw less and keep their speed. Example: Meta's Grand Teton H100s run at "the default 500W power limit"
(pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md): 0.88 of the 700 W clock.
"""

from __future__ import annotations

import jax.numpy as jnp

# Power a GPU draws with its clocks up and its tensor cores idle (W): engineering estimate from
# an A100 measured at 88 W idle (H. He, "Strangely, matrix multiplications on GPUs run faster
# when given predictable data", thonking.ai, 2024); assumed for every GPU.
STATIC_W = 90.0


def board_power_w(limit_w, tdp_w):
    """The board's power ceiling (W): the limit where one is set below TDP, else TDP
    (``limit_w`` 0: no limit)."""
    return jnp.where((limit_w > 0) & (limit_w < tdp_w), limit_w, tdp_w)


def clock_ratio(limit_w, tdp_w):
    """Sustained tensor-core clock under a power limit, as a share of the clock at TDP: 1 at
    the ceiling TDP (no limit, or one above TDP, which does not overclock)."""
    return ((board_power_w(limit_w, tdp_w) - STATIC_W) / (tdp_w - STATIC_W)) ** (1.0 / 3.0)
