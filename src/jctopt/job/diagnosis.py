"""Plain-words diagnosis of one estimate, and the single change that would help most.

The advice is measured, not guessed: every candidate change is evaluated with the model
itself (one batched call) and the one that lowers the expected JCT most is reported.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..config.cache import ExportedKernel
from ..model import attention as A
from ..model import flops as Fl
from ..model import pipeline as P
from ..model import recompute_modules as Rm
from ..model.schedules import ONE_F_ONE_B, ZB_H1
from ..model.types import Config
from .jct import Estimate, Reason, estimate_batch

# Seed 001: efficiency < 70 % is communication-bound, > 85 % compute-bound.
COMM_BOUND, COMPUTE_BOUND = 0.70, 0.85

OVERHEADS = {
    "bubble_s": "pipeline bubble",
    "tp_comm_s": "TP communication",
    "cp_comm_s": "CP communication",
    "ep_comm_s": "EP all-to-all",
    "pp_comm_s": "PP send/recv",
    "host_s": "host launch time (launch-bound MoE layers)",
    "offload_s": "activation offload copies (exposed)",
    "dp_comm_s": "DP gradient sync (exposed)",
    "zero3_comm_s": "ZeRO-3 parameter gathers (exposed)",
    "straggler_s": "stragglers",
    "serial_s": "serial (Amdahl) time",
}

# The batched model over the candidate changes, loaded untraced on later runs (config.cache).
_estimate_changes = ExportedKernel(estimate_batch, "estimate_batch")


class Change(NamedTuple):
    label: str
    apply: Callable[[Config], Config]
    applicable: Callable[[Config], bool]


def _tr(cfg: Config, **kw) -> Config:
    return cfg._replace(train=cfg.train._replace(**kw))


# Megatron-Core's output-discarding recompute modules and the attention core (model.recompute_modules).
LIGHT_MODULES = ("core_attn", "mla_up_proj", "layernorm", "moe_act")


def _modules(names) -> dict:
    """Training's module flags with ``names`` recomputed and no other."""
    return {f"recompute_{n}": jnp.asarray(float(n in names)) for n in Rm.MODULES}


CHANGES = [
    Change("gradient accumulation x2 (global batch x2, one sync per twice the tokens)",
           lambda c: _tr(c, global_batch=c.train.global_batch * 2), lambda c: True),
    Change("a fabric with 2x the NIC bandwidth (e.g. 400G -> 800G)",
           lambda c: c._replace(fabric=c.fabric._replace(nic_gbit=c.fabric.nic_gbit * 2)),
           lambda c: c.layout.n_gpus > c.cluster.gpus_per_node),
    Change("in-network reduction (IB SHARP) on the scale-out fabric",
           lambda c: c._replace(fabric=c.fabric._replace(sharp=jnp.asarray(1.0))),
           lambda c: c.fabric.sharp < 1 and c.layout.n_gpus > c.cluster.gpus_per_node),
    Change("interleaved pipeline schedule (virtual stages x2)",
           lambda c: c._replace(layout=c.layout._replace(vpp=c.layout.vpp * 2)),
           lambda c: c.layout.pp > 1),
    Change("zero-bubble pipeline schedule ZB-H1 (weight gradients fill the bubble)",
           lambda c: c._replace(layout=c.layout._replace(schedule=jnp.asarray(float(ZB_H1)))),
           lambda c: c.layout.pp > 1 and c.layout.vpp == 1 and c.layout.schedule == ONE_F_ONE_B),
    Change("selective instead of full activation recompute",
           lambda c: _tr(c, recompute=jnp.asarray(1.0)), lambda c: c.train.recompute >= 2),
    Change("selective recompute of Megatron's light modules (training.recompute_modules: core_attn, layernorm, "
           "moe_act, and mla_up_proj under MLA)",
           lambda c: _tr(c, recompute=jnp.asarray(1.0), **_modules(LIGHT_MODULES)),
           lambda c: c.train.recompute >= 1 and (c.model.n_experts > 1 or c.model.kv_lora_rank > 0)),
    Change("offloading the recomputed layers' activations to host memory instead (training.offload_layers)",
           lambda c: _tr(c, recompute=jnp.asarray(0.0), offload_layers=Fl.full_recompute_share(c.train)
                         * P.stage_layers(c.model.n_layers, c.layout.pp, c.layout.vpp, c.model.mtp_layers)[0]),
           lambda c: c.train.recompute > 1),
    Change("micro-batch x2", lambda c: _tr(c, micro_batch=c.train.micro_batch * 2), lambda c: True),
    Change("fp8 GEMMs", lambda c: _tr(c, low_precision=jnp.asarray(1.0)),
           lambda c: c.train.low_precision < 1 and c.gpu.peak_fp8_tflops > 0),
    Change("FP8 attention (Transformer Engine's fp8_dot_product_attention: training.fp8_attention)",
           lambda c: _tr(c, fp8_attention=jnp.asarray(1.0)),
           lambda c: (c.train.fp8_attention < 1)
           & (A.fp8_speedup(c.model, c.gpu, _tr(c, fp8_attention=jnp.asarray(1.0)).train) > 1)),
    Change("fp8 gradient compression on the wire (0.5x bytes)",
           lambda c: _tr(c, grad_compression=c.train.grad_compression * 0.5),
           lambda c: c.train.grad_compression > 0.5),
    Change("a full-iteration CUDA graph (no launches: training.moe_host_s = 0)",
           lambda c: _tr(c, moe_host_s=jnp.asarray(0.0)), lambda c: c.train.moe_host_s > 0 and c.model.n_experts > 1),
    Change("asynchronous checkpoints",
           lambda c: c._replace(job=c.job._replace(ckpt_async=jnp.asarray(1.0))),
           lambda c: c.job.ckpt_async < 1),
]


def best_change(cfg: Config, base_jct: float) -> tuple[str, float] | None:
    """(label, new JCT in s) of the candidate change that lowers expected JCT most."""
    candidates = [ch for ch in CHANGES if bool(ch.applicable(cfg))]
    if not candidates:
        return None
    variants = [ch.apply(cfg) for ch in candidates]
    batch = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x, dtype=jnp.float64) for x in xs]),
                         *variants)
    out = _estimate_changes(batch)
    jct = np.where(np.asarray(out.feasible), np.asarray(out.jct_s), np.inf)
    i = int(np.argmin(jct))
    if not np.isfinite(jct[i]) or jct[i] >= base_jct:
        return None
    return candidates[i].label, float(jct[i])


def diagnose(cfg: Config, est: Estimate) -> str:
    """A few sentences: what bounds this job, and the change that would help most."""
    e = {k: float(np.asarray(v)) for k, v in est._asdict().items()}
    if not e["feasible"]:
        reason = Reason(int(e["reason"]))
        if reason == Reason.MEMORY:
            text = (f"does not fit: {e['mem_total'] / 1e9:.1f} GB needed per GPU, "
                    f"{e['mem_capacity'] / 1e9:.0f} GB available; raise tp/pp, ZeRO stage, recompute or "
                    "activation offloading.")
            if best := best_change(cfg, np.inf):  # the candidate change that fits and runs fastest
                text += f" Fits with {best[0]}: JCT {best[1] / 86400:.1f} days."
            return text
        return f"infeasible: {reason.name.lower().replace('_', ' ')}."
    step = e["step_s"]
    name, worst = max(((OVERHEADS[k], e[k]) for k in OVERHEADS), key=lambda kv: kv[1])
    share = worst / step
    if e["efficiency"] < COMM_BOUND:
        verdict = f"communication wall (efficiency {e['efficiency']:.0%})"
    elif e["efficiency"] > COMPUTE_BOUND:
        verdict = f"compute-bound (efficiency {e['efficiency']:.0%})"
    else:
        verdict = f"balanced (efficiency {e['efficiency']:.0%})"
    text = f"{verdict}: the largest overhead is {name}, {share:.0%} of the step."
    fail_share = 1.0 - e["train_s"] / e["jct_s"]
    if fail_share > share:
        text += f" Checkpoints and failures add {fail_share:.0%} to the job."
    best = best_change(cfg, e["jct_s"])
    if best:
        label, jct = best
        text += f" Most helpful change: {label}, JCT {e['jct_s'] / 86400:.1f} -> {jct / 86400:.1f} days."
    return text
