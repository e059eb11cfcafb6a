"""Pipeline schedules: the bubble, the micro-batches in flight and the parameter copies each
one costs (``layout.schedule``).

A stage's work on one micro-batch splits into F (forward), B (backward for the inputs,
including any recompute) and W (backward for the weights: the weight-gradient GEMMs, as many
FLOPs as the forward GEMMs). The zero-bubble schedules move W into the bubbles
(``bubble_time``, in seconds):

* ``1f1b``: PipeDream-flush 1F1B, ``(p - 1) / v`` (interleaved with ``v = vpp`` chunks per rank;
  Narayanan et al. 2021, Sec. 2.2); ``p`` micro-batches in flight on the first stage, times
  ``1 + (p - 1) / (p v)`` interleaved (Korthikanti et al. 2022, Sec. 4.2.3).
* ``zb_h1``: ZB-H1 (Qi et al. 2024, arXiv:2401.10241, Sec. 2.1): ``(p - 1)(F + B - W)``, a
  third of 1F1B's when F = B = W; peak memory that of 1F1B. One chunk per rank.
* ``zb_v``: ZB-V (ibid., Sec. 6): two chunks per rank in a V, each of half a stage; zero
  bubble when F = B = W, peak memory ``p`` micro-batches as 1F1B, twice the pipeline sends
  (our ``vpp = 2``). For unequal times ``(p - 1)(F_c + B_c - 2 W_c)`` in chunk times (the
  table of arXiv:2510.27257 without its TP all-reduce term; the ZB paper gives no closed form).
* ``dualpipe``: DualPipe (DeepSeek-V3 report, arXiv:2412.19437, Table 2): micro-batches enter
  from both ends, each rank holds two stages (parameters x2), bubble
  ``(p/2 - 1)(F&B + B_full - 3W)`` with ``F&B = F + B_full`` (a forward and a backward chunk
  overlapped: their compute adds, their communication hides), ``B_full = B + W``; ``p + 1``
  micro-batches in flight. It overlaps the all-to-all and the pipeline sends with the other
  direction's compute (Sec. 3.2.1). Needs an even ``p`` and an even number of at least ``2p``
  micro-batches (deepseek-ai/DualPipe, ``DualPipe.step`` asserts).
"""

from __future__ import annotations

import jax.numpy as jnp

# layout.schedule names -> codes (a float in the Layout pytree)
SCHEDULES = {"1f1b": 0, "zb_h1": 1, "zb_v": 2, "dualpipe": 3}
ONE_F_ONE_B, ZB_H1, ZB_V, DUALPIPE = range(4)

# Chunks per rank each schedule is defined for (None: any vpp; 1F1B interleaves with vpp > 1).
CHUNKS = {"1f1b": None, "zb_h1": 1, "zb_v": 2, "dualpipe": 1}


def requirement(name: str, pp: int, vpp: int, n_micro: float) -> str | None:
    """Why ``name`` cannot run with ``pp`` ranks of ``vpp`` chunks and ``n_micro`` micro-batches
    per step, or None when it can (plain Python, for the config checks)."""
    chunks = CHUNKS[name]
    if pp > 1 and chunks is not None and vpp != chunks:
        return f"layout.vpp={chunks} ({name} runs {chunks} chunk{'s' if chunks > 1 else ''} per pipeline rank)"
    if pp > 1 and name == "dualpipe" and (pp % 2 or n_micro % 2 or n_micro < 2 * pp):
        return (f"an even layout.pp and an even number of at least 2 x pp micro-batches per step "
                f"(here pp={pp}, {n_micro:g} micro-batches)")
    return None


def valid(schedule, pp, vpp):
    """The schedule runs on ``pp`` ranks of ``vpp`` chunks (numpy or jax arrays)."""
    one_chunk = vpp == 1
    return ((pp == 1) | (schedule == ONE_F_ONE_B)
            | ((schedule == ZB_H1) & one_chunk)
            | ((schedule == ZB_V) & (vpp == 2))
            | ((schedule == DUALPIPE) & one_chunk & (pp % 2 == 0)))


def enough_micro_batches(schedule, pp, n_micro):
    """DualPipe feeds both ends: an even number of at least 2 pp micro-batches."""
    dualpipe = (schedule == DUALPIPE) & (pp > 1)
    return ~dualpipe | ((n_micro >= 2.0 * pp) & (n_micro % 2 == 0))


def bubble_time(schedule, pp, vpp, microbatch_s, compute_s, forward_s, weight_grad_s):
    """Pipeline bubble per step (s). ``microbatch_s``: one micro-batch on the busiest stage,
    exposed communication included; ``compute_s`` its compute, of which ``forward_s`` is the
    forward (F) and ``weight_grad_s`` the weight gradients (W). 1F1B idles ``(p - 1) / v``
    micro-batches; the zero-bubble schedules fill their bubbles with W passes, pure compute:
    ZB-H1 ``(p - 1)(t - 2W)`` (= F + B - W), ZB-V ``(p - 1)(t - 3W) / 2`` (chunks of half a
    stage), DualPipe ``(p/2 - 1)(t + B_full - 3W)`` with ``B_full = compute - F``."""
    t, w = microbatch_s, weight_grad_s
    one_f_one_b = (pp - 1.0) / vpp * t
    zb_h1 = (pp - 1.0) * (t - 2.0 * w)
    zb_v = (pp - 1.0) * (t - 3.0 * w) / 2.0
    dualpipe = (pp / 2.0 - 1.0) * (t + compute_s - forward_s - 3.0 * w)
    out = jnp.where(schedule == ZB_H1, zb_h1,
                    jnp.where(schedule == ZB_V, zb_v,
                              jnp.where(schedule == DUALPIPE, dualpipe, one_f_one_b)))
    return jnp.where(pp > 1, jnp.maximum(out, 0.0), 0.0)


def in_flight(schedule, pp, vpp, n_micro):
    """Micro-batches whose activations the busiest rank holds, in units of one stage's."""
    interleave = jnp.where((schedule == ONE_F_ONE_B) & (vpp > 1), 1.0 + (pp - 1.0) / (pp * vpp), 1.0)
    dualpipe = (schedule == DUALPIPE) & (pp > 1)
    return jnp.where(dualpipe, jnp.minimum(pp + 1.0, n_micro), jnp.minimum(pp, n_micro) * interleave)


def parameter_copies(schedule, pp):
    """Copies of its stage's parameters each rank holds: 2 under DualPipe (two stages per rank)."""
    return jnp.where((schedule == DUALPIPE) & (pp > 1), 2.0, 1.0)


def hides_dispatch(schedule, pp):
    """DualPipe overlaps the MoE all-to-all and the pipeline sends with the other direction's
    compute (DeepSeek-V3 report Sec. 3.2.1: "fully hidden")."""
    return (schedule == DUALPIPE) & (pp > 1)
