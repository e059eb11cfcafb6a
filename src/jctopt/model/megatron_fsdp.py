"""ZeRO-3 by Megatron-FSDP: how much of its collectives hide behind compute.

Every ZeRO-3 implementation gathers a layer's parameters before its forward and backward and
reduce-scatters its gradients after (Rajbhandari et al. 2020 Sec. 7.2.2); what differs is how
much of that traffic the compute covers, the eta of the step-time overlap model
(tau_comm - eta min(tau_comp, tau_comm), MISSION). PyTorch FSDP and DeepSpeed issue each gather
from the layer's own hooks and the layer waits for it: ``training.zero3_overlap_eta``, fitted by
`calibrate` on their rows (0.52). Megatron-FSDP, the ZeRO-3 of the Megatron-Core stacks (NeMo,
Megatron-Bridge: ``use_megatron_fsdp``), prefetches the next unit's gather while the current
one computes, from two persistent buffers (double buffering), on its own streams and
communicators for gathers and reduce-scatters, with NCCL user buffers and, on NVLink-switch
domains, SHARP collectives that take 1-6 SMs from the GEMMs instead of 16-32 (Megatron-LM
docs/user-guide/features/megatron_fsdp.md and megatron/core/distributed/fsdp/src/docs/
runtime_schedule.md @d98e8a6: "pre-fetched, which ideally hides the communication latency
required for FSDP behind model computation kernels"). Its eta is the model's uncalibrated
assumption, 0.9, not fitted: `calibrate`'s zero3_overlap_eta no longer reaches these rows.
Checked on them (NeMo 25.04/25.07 on GB200, Llama 3 70B/3.1 405B, runs_dev2.csv): README.
"""

from __future__ import annotations

import jax.numpy as jnp

from .types import Training

# Fraction of the compute window that hides Megatron-FSDP's gathers and reduce-scatters: the
# spec value of training.zero3_overlap_eta (conf/calibration.yaml "spec"), an assumption.
MEGATRON_FSDP_OVERLAP_ETA = 0.9


def zero3_overlap_eta(t: Training):
    """eta of ZeRO-3's collectives: Megatron-FSDP's where the run uses it, else the fitted one."""
    return jnp.where(t.megatron_fsdp > 0, MEGATRON_FSDP_OVERLAP_ETA, t.zero3_overlap_eta)
