"""One training step as a sum of terms: each effect a function returning its raw time and the
part of it left on the critical path (``Term``), all in seconds.

Per micro-batch on the slowest pipeline stage: ``tensor_parallel``, ``context_parallel``,
``expert_parallel``, ``pipeline_p2p``, ``offload``, ``host``. Once per step: ``data_parallel``,
``zero3``, ``optimizer``. ``step`` composes them into the parts of the step time
(``StepParts``, in the order they are summed) and the raw communication behind them.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtri

from . import comm as K
from . import compute as C
from . import ep_overlap as Eo
from . import experts as E
from . import flops as Fl
from . import host as H
from . import hybrid as Hy
from . import latent as La
from . import mamba as Mb
from . import megatron_fsdp as Mf
from . import memory as Mem
from . import offload as O
from . import pipeline as P
from . import recompute_modules as Rm
from . import schedules as S
from . import zero3_gathers as Z3
from .types import Config

Array = jax.Array


class Term(NamedTuple):
    """One effect's time, s: ``raw`` as if alone, ``exposed`` what the step waits for."""

    raw: Array
    exposed: Array


class Stage(NamedTuple):
    """What every term reads of the slowest stage's micro-batch."""

    layers: Array  # layers per (virtual) stage
    compute_s: Array  # compute per micro-batch on the slowest stage
    core_s: Array  # one layer's attention core
    elementwise_s: Array  # one layer's elementwise work
    column_s: Array  # one layer's column-parallel GEMMs (QKV, MLP up)
    gemm_s: Array  # one layer's GEMMs
    tokens: Array  # tokens per micro-batch on one CP rank
    act_bytes: Array  # one layer's bf16 activations of those tokens
    recompute_full: Array  # share of the layers recomputed whole
    mp_overlap: Array  # the overlap of TP collectives and p2p with the GEMMs (0 without)
    dualpipe: Array  # DualPipe hides dispatch and sends (model.schedules)
    moe: Array  # 1 for an MoE model
    moe_layers: Array  # MoE layers per stage
    mixer_fwd_s: Array
    mlp_fwd_s: Array
    mem: Mem.Memory


class StepParts(NamedTuple):
    """The parts of the step time, s, in the order they are summed (Estimate.step_s)."""

    compute_s: Array
    bubble_s: Array
    tp_comm_s: Array
    cp_comm_s: Array
    ep_comm_s: Array
    pp_comm_s: Array
    host_s: Array  # launch-bound stages: the host's time beyond the GPU's (model.host)
    offload_s: Array  # activation copies to and from host memory not hidden by compute (model.offload)
    dp_comm_s: Array  # exposed (not hidden behind backward)
    zero3_comm_s: Array  # exposed parameter gathers
    optimizer_s: Array
    straggler_s: Array
    serial_s: Array


class Step(NamedTuple):
    parts: StepParts
    step_s: Array  # the sum of parts
    compute_step_s: Array  # compute and optimizer alone: no communication, bubble or stragglers
    comm_raw_s: Array  # every collective as if alone, per step
    comm_exposed_s: Array  # their exposed part, per step
    dp_comm_raw_s: Array  # the gradient sync before overlap
    owned_params: Array  # parameters whose optimizer state this GPU updates
    mem: Mem.Memory


def overlap(comm_s, window_s, eta):
    """Exposed part of communication overlapped with a compute window:
    tau_comm - eta min(tau_comp, tau_comm) (MISSION step-time overlap model)."""
    return comm_s - eta * jnp.minimum(window_s, comm_s)


def expected_max_std_normal(n):
    """E[max of n iid N(0,1)] by Blom's approximation Phi^-1((n - 0.375)/(n + 0.25))
    (Blom 1958; David & Nagaraja, Order Statistics, 3rd ed., Sec. 4.5). 0 for n = 1."""
    return ndtri((n - 0.375) / (n + 0.25))


def stage(cfg: Config, dp, n_micro) -> Stage:
    """Compute per micro-batch on the slowest stage: the last (logits, loss) or, split unevenly,
    a middle one; and what the terms below read of its layers."""
    m, g, f, c, lay, t, job = cfg
    layers, layers_last = P.stage_layers(m.n_layers, lay.pp, lay.vpp, m.mtp_layers)
    # Multi-token-prediction modules (a layer and an output head each) sit on the last stage.
    t_comp_mb = jnp.maximum(C.microbatch_compute_time(m, g, t, lay.tp, lay.cp, layers, 0.0, lay.ep, lay.etp),
                            C.microbatch_compute_time(m, g, t, lay.tp, lay.cp, layers_last + m.mtp_layers,
                                                      1.0 + m.mtp_layers, lay.ep, lay.etp))
    _, core, elem = C.layer_times(m, g, t, lay.tp, lay.cp, lay.ep, lay.etp)
    column, row = C.layer_gemm_times(m, g, t, lay.tp, lay.cp, lay.ep, lay.etp)
    gemm = column + row
    tokens = t.micro_batch * t.seq_len / lay.cp
    moe = jnp.where(m.n_experts > 1, 1.0, 0.0)
    mixer_fwd, mlp_fwd = C.layer_block_times(m, g, t, lay.tp, lay.cp, gemm, core, elem)
    return Stage(
        layers=layers, compute_s=t_comp_mb, core_s=core, elementwise_s=elem, column_s=column, gemm_s=gemm,
        tokens=tokens, act_bytes=2.0 * tokens * m.hidden, recompute_full=Fl.full_recompute_share(t),
        # With mp_comm_overlap the collectives are split into chunks pipelined with the GEMMs
        # that produce and consume them (Transformer Engine userbuffers, Megatron --tp-comm-overlap;
        # Wang et al. 2023, "Overlap communication with dependent computation").
        mp_overlap=jnp.where(t.mp_comm_overlap > 0, t.overlap_eta, 0.0),
        dualpipe=S.hides_dispatch(lay.schedule, lay.pp), moe=moe,
        moe_layers=moe * layers * Fl.moe_layer_fraction(m), mixer_fwd_s=mixer_fwd, mlp_fwd_s=mlp_fwd,
        mem=Mem.memory(m, lay, t, dp, n_micro, c.gpus_per_node))


def tensor_parallel(cfg: Config, st: Stage) -> Term:
    """TP, in all-reduces of the layer's activations (SP's all-gather + reduce-scatter pairs move
    the same bytes): 2 forward (row-parallel outputs), 2 more when recomputing, 2 backward
    (column-parallel input gradients) per layer (Shoeybi 2019 Fig. 4); one each per mixer and per
    MLP in a hybrid's single-purpose layers (model.hybrid.sublayers)."""
    m, g, f, c, lay, t, _ = cfg
    tp_ar = K.all_reduce(st.act_bytes, lay.tp, 1.0, g, f, c)
    per_layer = Hy.sublayers(m)
    # torchtitan's per-op recompute gathers a selective layer's SP inputs again (its all-gathers,
    # half of each all-reduce's bytes, are not saved; its reduce-scatters are: model.sac).
    per_op = (t.recompute >= 1) & (t.selective_op > 0) & (t.seq_parallel > 0)
    sac_regather = (1.0 - st.recompute_full) * jnp.where(per_op, 0.5, 0.0)
    # A recomputed MLP or MoE layer runs its own forward collective again (model.recompute_modules).
    module_tp = (1.0 - st.recompute_full) * Rm.repeated_tp_share(t, Fl.dense_mlp_fraction(m), Fl.moe_layer_fraction(m))
    n_tp_forward = st.layers * (per_layer * (1.0 + st.recompute_full + sac_regather) + module_tp)
    tp_raw = (n_tp_forward + per_layer * st.layers) * tp_ar
    gemm_window = st.layers * (3.0 + st.recompute_full) * st.gemm_s
    # Without mp_comm_overlap, Megatron's column-parallel backward (--async-tensor-model-parallel-
    # allreduce in the code of Korthikanti et al. 2022, megatron/mpu/layers.py) starts the input-
    # gradient all-reduce and computes the weight gradient meanwhile; under SP it re-gathers the
    # layer input behind the data-gradient GEMM and reduce-scatters behind the weight gradient,
    # leaving the row-parallel layers' output-gradient all-gathers (one all-reduce's bytes per
    # layer) exposed. What the GEMMs cover is hidden whole: Korthikanti et al. 2022 Table 4 (22B
    # layer) measures the backward at 11.9 ms, with SP 11.8 ms, what its GEMMs, core and
    # elementwise ops take alone (+ SP's exposed all-gathers).
    sp = jnp.where(t.seq_parallel > 0, 1.0, 0.0)
    hidden_bwd = per_layer * st.layers * tp_ar
    async_bwd = (sp * per_layer / 2.0 * st.layers * tp_ar
                 + overlap(hidden_bwd, (1.0 + sp) * st.layers * st.column_s, 1.0))
    tp_async = n_tp_forward * tp_ar + async_bwd
    exposed = jnp.where((t.tp_async_backward > 0) & (t.mp_comm_overlap < 1), tp_async,
                        overlap(tp_raw, gemm_window, st.mp_overlap))
    return Term(tp_raw, exposed)


def context_parallel(cfg: Config, st: Stage) -> Term:
    """CP: K and V of the full sequence gathered forward, gathered + reduce-scattered backward,
    hidden behind the attention core (ring attention, Liu et al. 2023)."""
    m, g, f, c, lay, t, _ = cfg
    kv_bytes = 2.0 * t.micro_batch * t.seq_len * m.n_kv_heads * (m.head_dim + m.v_head_dim) / lay.tp
    cp_raw = st.layers * Hy.attention_share(m) * 3.0 * K.all_gather(kv_bytes, lay.cp, lay.tp, g, f, c)
    # A Mamba-2 mixer under CP scans whole sequences on a share of the heads: an all-to-all of
    # in_proj's output before the convolution and one of y after the scan, forward and
    # backward (Megatron-Core ``MambaContextParallel``, megatron/core/ssm/mamba_context_parallel.py).
    mixer_bytes = 2.0 * st.tokens * (Mb.in_proj_width(m) + Mb.inner_width(m)) / lay.tp
    cp_raw += st.layers * Hy.mamba_share(m) * 2.0 * K.all_to_all(mixer_bytes, lay.cp, lay.tp, g, f, c)
    return Term(cp_raw, overlap(cp_raw, st.layers * 3.0 * st.core_s, t.overlap_eta))


class Dispatch(NamedTuple):
    """One MoE layer's all-to-all (s) and how many more a recomputed forward repeats."""

    all_to_all_s: Array
    repeated: Array


def expert_dispatch(cfg: Config, st: Stage) -> Dispatch:
    """EP: one dispatch (or combine) all-to-all of an MoE layer (GShard, Lepikhin et al. 2020)."""
    m, g, f, c, lay, t, _ = cfg
    # Each TP rank dispatches its sequence-parallel share of the tokens (Megatron-Core's token
    # dispatchers run on the SP-split hidden states; MoE with TP requires SP), each as wide as
    # the experts read it (LatentMoE: the latent, model.latent).
    token_bytes = 2.0 * st.tokens / jnp.where(t.seq_parallel > 0, lay.tp, 1.0) * La.routed_width(m)
    flat = K.all_to_all(token_bytes * m.top_k, lay.ep, E.ep_stride(lay), g, f, c)
    two_hop = K.all_to_all_two_hop(token_bytes, m.top_k, lay.ep, E.ep_stride(lay), g, f, c)
    # The busiest rank receives (and sends back) its excess of tokens: the layer waits on it (model.experts).
    a2a = jnp.where(t.ep_two_hop > 0, two_hop, flat) * E.busiest_rank_tokens(t)
    # Again in a recomputed forward (of the whole layer, or of the MoE layer alone: model.recompute_modules).
    return Dispatch(a2a, 2.0 * st.recompute_full + (1.0 - st.recompute_full) * Rm.repeated_all_to_alls(t))


def expert_parallel(cfg: Config, st: Stage, d: Dispatch) -> Term:
    """Dispatch and combine, forward and backward, and again in a recomputed forward.
    DeepSeek-V3's DualPipe hides them up to the compute window (report Sec. 3.2.1: "both
    all-to-all and PP communication can be fully hidden"); Megatron-Core's 1F1B all-to-all
    overlap (--overlap-moe-expert-parallel-comm) hides each beside one block of the other
    micro-batch's layer (model.ep_overlap), a recomputed forward's not at all."""
    t = cfg.train
    ep_raw = st.moe_layers * (4.0 + d.repeated) * d.all_to_all_s
    paired = st.moe_layers * (Eo.exposed_per_layer(d.all_to_all_s, st.mixer_fwd_s, st.mlp_fwd_s, st.core_s,
                                                   C.core_backward_factor(t))
                              + d.repeated * d.all_to_all_s)
    exposed = jnp.where(st.dualpipe, overlap(ep_raw, st.compute_s, 1.0),
                        jnp.where(t.ep_comm_overlap > 0, paired, ep_raw))
    return Term(ep_raw, exposed)


def pipeline_p2p(cfg: Config, st: Stage, dp) -> Term:
    """PP: activation forward, gradient backward per virtual stage. Each TP rank sends 1/tp of
    it; without SP the receivers all-gather the rest over NVLink (scatter/gather optimization,
    Narayanan et al. 2021 Sec. 4.1); with SP the stage input is already split."""
    m, g, f, c, lay, t, _ = cfg
    crosses = lay.tp * lay.cp * dp >= g.nvlink_domain
    regather = jnp.where(t.seq_parallel > 0, 0.0, K.all_gather(st.act_bytes, lay.tp, 1.0, g, f, c))
    send = K.p2p(st.act_bytes / lay.tp, crosses, g, f, c) + regather
    pp_raw = jnp.where(lay.pp > 1, 2.0 * lay.vpp * send, 0.0)
    # Interleaved schedules post the next chunk's sends/receives during this chunk's compute
    # (Megatron --overlap-p2p-communication); 1F1B waits for them. DualPipe hides them behind
    # the other direction's compute (model.schedules).
    eta = jnp.where(st.dualpipe, 1.0, jnp.where(lay.vpp > 1, st.mp_overlap, 0.0))
    return Term(pp_raw, overlap(pp_raw, st.compute_s, eta))


def offload(cfg: Config, st: Stage) -> Array:
    """Offloaded activations go to host memory during the forward pass and come back for the
    backward pass (model.offload): the exposed copies of one micro-batch's stored activations."""
    return O.exposed_time(st.mem.offloaded_per_micro_batch, st.compute_s, cfg.gpu)


def host(cfg: Config, st: Stage, d: Dispatch, gpu_s) -> Array:
    """A stage cannot finish a micro-batch before the host has launched it, nor an MoE block
    before its launches after the dispatcher's sync (model.host); the block's GPU work: its
    experts, its dispatch and combine. Where the all-to-alls overlap another micro-batch, its
    queued blocks cover the sync (model.host)."""
    m, t = cfg.model, cfg.train
    moe_block_forward = st.mlp_fwd_s + 2.0 * d.all_to_all_s
    # The forward, and any recomputed one (two all-to-alls each).
    moe_forwards = jnp.where(st.dualpipe | (t.ep_comm_overlap > 0), 0.0, 1.0 + 0.5 * d.repeated)
    return H.host_time(m, t, st.layers, st.moe_layers, moe_block_forward, moe_forwards, gpu_s)


def dp_overlap_eta(cfg: Config):
    """How much of the data-parallel collectives hides. Megatron-LM before Megatron-Core's
    --overlap-grad-reduce all-reduced after the backward (Korthikanti et al. 2022 Sec. 6.3: "no
    overlap"); PyTorch DDP and FSDP overlap. The same switch governs the ZeRO-3 prefetch.
    ZeRO-3's collectives (its gathers, reduce-scatters and HYBRID_SHARD's replica all-reduce, all
    issued from FSDP's per-layer hooks) hide less of themselves than DDP's buckets: each layer
    waits for its gathered weights. Calibrated apart (conf/calibration.yaml: 0.91 vs 0.43 on
    runs_dev.csv); Megatron-FSDP's prefetch hides more (model.megatron_fsdp)."""
    t = cfg.train
    z3 = jnp.where(t.zero_stage >= 3, 1.0, 0.0)
    return jnp.where(t.dp_overlap > 0, jnp.where(z3 > 0, Mf.zero3_overlap_eta(t), t.overlap_eta), 0.0)


def data_parallel(cfg: Config, st: Stage, dp) -> Term:
    """The gradient sync, once per step, all-reduced across the replicas: whole with DDP and
    ZeRO-1/2 sharded over every rank, the shard with ZeRO-3 over a sub-group (HYBRID_SHARD), not
    at all with plain ZeRO-3 (its reduce-scatter per micro-batch, ``zero3``, leaves each shard
    summed on its owner). ZeRO-1/2 over a sub-group of S ranks (``layout.zero_shard``) reduce-
    scatters inside it, all-reduces each 1/S shard across the replicas and all-gathers the updated
    parameters inside it (ZeRO++ hpZ, arXiv:2306.10209 Sec. 3.2; InternEvo, arXiv:2401.09149): the
    reduce-scatter and the all-gather move a ring all-reduce's bytes over the group (Thakur et al.
    2005), so the sub-group costs one all-reduce there. Dense parameters over dp x cp, experts over
    the expert-data-parallel group."""
    g, f, c, lay, t = cfg.gpu, cfg.fabric, cfg.cluster, cfg.layout, cfg.train
    mem = st.mem
    dense, expert = mem.dense_params, mem.expert_params
    wire = t.grad_bytes * t.grad_compression
    z3 = t.zero_stage >= 3
    zero12 = (t.zero_stage >= 1) & ~z3
    dense_group = dp * lay.cp
    edp_group = jnp.maximum(E.expert_data_parallel(lay, dp), 1.0)  # replicas of one expert shard

    def sync(nbytes, group, shard, stride):
        sub = zero12 & (shard < group * (1.0 - 1e-9))  # ZeRO-1/2 over a strict sub-group
        replica = jnp.where(z3 | sub, shard, 1.0)  # across replicas: 1/S of the bytes, group/S ranks S apart
        across = K.all_reduce(nbytes / replica, group / replica, stride * replica, g, f, c)
        return across + jnp.where(sub, K.all_reduce(nbytes, shard, stride, g, f, c), 0.0)

    grad_sync = (sync(wire * dense, dense_group, mem.shard_dense, lay.tp)
                 + st.moe * sync(wire * expert, edp_group, mem.shard_expert, E.edp_stride(lay)))
    # DDP buckets: the last bucket cannot overlap; the rest hides behind the last backward.
    last_bucket = jnp.minimum(1e6 * t.bucket_mparams / (dense + expert), 1.0) * grad_sync
    backward_window = 2.0 / 3.0 * st.compute_s
    return Term(grad_sync, last_bucket + overlap(grad_sync - last_bucket, backward_window, dp_overlap_eta(cfg)))


def zero3(cfg: Config, st: Stage, n_micro) -> Term:
    """ZeRO-3, per step: every micro-batch gathers each layer's parameters forward and again
    backward, and reduce-scatters its gradients, over the shard group, prefetched behind compute
    (Rajbhandari et al. 2020 Sec. 7.2.2: 3x the parameter bytes per pass, vs 2x for DDP). Layer
    by layer, so the ring latency is paid per collective: one per layer with FSDP (a flat
    parameter per wrapped block, Zhao et al. 2023 Sec. 3.2), one per partitioned tensor with
    DeepSpeed ZeRO-3 (``zero3_collectives_per_layer``). The bytes split over them."""
    g, f, c, lay, t = cfg.gpu, cfg.fabric, cfg.cluster, cfg.layout, cfg.train
    mem = st.mem
    wire = t.grad_bytes * t.grad_compression
    z3 = jnp.where(t.zero_stage >= 3, 1.0, 0.0)

    def layer_by_layer(nbytes, group, stride):
        n = st.layers * t.zero3_collectives_per_layer
        return n * K.all_gather(nbytes / n, group, stride, g, f, c)

    def one_pass(bytes_per_param):
        return (layer_by_layer(bytes_per_param * mem.dense_params, mem.shard_dense, lay.tp)
                + st.moe * layer_by_layer(bytes_per_param * mem.expert_params, mem.shard_expert, E.edp_stride(lay)))

    # Under pipeline parallelism FSDP2 keeps a stage's weights gathered across its micro-batches
    # and syncs the accumulated gradients once (torchtitan apply_fsdp: reshard_after_forward
    # False "to avoid per-microbatch all-gathers" when PP is on; torch.distributed.pipelining
    # defers the reduce-scatter to the last micro-batch): one gather and one reduce-scatter
    # per step. DeepSpeed's ZeRO-3 does not run with PP; it gathers again for a recomputed
    # forward (model.zero3_gathers).
    gathered = lay.pp > 1
    gathers = Z3.gathers_per_micro_batch(t, st.recompute_full)
    gather_raw = z3 * jnp.where(gathered, one_pass(Mem.WEIGHT_BYTES) + one_pass(wire),
                                gathers * one_pass(Mem.WEIGHT_BYTES) + one_pass(wire))
    times = jnp.where(gathered, 1.0, n_micro)
    return Term(times * gather_raw, times * overlap(gather_raw, st.compute_s, dp_overlap_eta(cfg)))


def owned_params(cfg: Config, mem: Mem.Memory):
    """Parameters whose optimizer state this GPU updates (its ZeRO shard, or all)."""
    sharded = cfg.train.zero_stage >= 1
    return (mem.dense_params / jnp.where(sharded, mem.shard_dense, 1.0)
            + mem.expert_params / jnp.where(sharded, mem.shard_expert, 1.0))


def step(cfg: Config, dp, n_micro) -> Step:
    """The step time of one configuration and its parts, s (MISSION step-time model)."""
    g, c, lay = cfg.gpu, cfg.cluster, cfg.layout
    st = stage(cfg, dp, n_micro)
    d = expert_dispatch(cfg, st)
    tp, cp = tensor_parallel(cfg, st), context_parallel(cfg, st)
    ep, pp = expert_parallel(cfg, st, d), pipeline_p2p(cfg, st, dp)
    offload_mb = offload(cfg, st)
    gpu_mb = st.compute_s + tp.exposed + cp.exposed + ep.exposed + pp.exposed + offload_mb
    host_mb = host(cfg, st, d, gpu_mb)
    t_mb = gpu_mb + host_mb
    # Bubble per schedule (model.schedules): the zero-bubble ones fill it with the stage's weight-
    # gradient GEMMs (as many FLOPs as its forward GEMMs).
    bubble = S.bubble_time(lay.schedule, lay.pp, lay.vpp, t_mb, st.compute_s,
                           st.layers * (st.gemm_s + st.core_s + st.elementwise_s), st.layers * st.gemm_s)
    pipe = t_mb * n_micro + bubble
    # Stragglers: the step waits for the slowest of n_gpus ranks with N(1, cv) jitter.
    straggler = pipe * c.jitter_cv * expected_max_std_normal(lay.n_gpus)
    dpt, z3 = data_parallel(cfg, st, dp), zero3(cfg, st, n_micro)
    owned = owned_params(cfg, st.mem)
    optimizer = C.optimizer_time(owned, g)
    step_s = pipe + straggler + dpt.exposed + z3.exposed + optimizer + c.serial_s_per_step
    parts = StepParts(
        compute_s=n_micro * st.compute_s, bubble_s=bubble, tp_comm_s=n_micro * tp.exposed,
        cp_comm_s=n_micro * cp.exposed, ep_comm_s=n_micro * ep.exposed, pp_comm_s=n_micro * pp.exposed,
        host_s=n_micro * host_mb, offload_s=n_micro * offload_mb, dp_comm_s=dpt.exposed,
        zero3_comm_s=z3.exposed, optimizer_s=optimizer, straggler_s=straggler, serial_s=c.serial_s_per_step)
    return Step(
        parts=parts, step_s=step_s, compute_step_s=n_micro * st.compute_s + optimizer,
        comm_raw_s=n_micro * (tp.raw + cp.raw + ep.raw + pp.raw) + z3.raw + dpt.raw,
        comm_exposed_s=n_micro * (tp.exposed + cp.exposed + ep.exposed + pp.exposed) + dpt.exposed + z3.exposed,
        dp_comm_raw_s=dpt.raw, owned_params=owned, mem=st.mem)

