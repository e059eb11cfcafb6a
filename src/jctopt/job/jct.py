"""The job-completion-time model for one configuration, and its batched form.

``estimate(cfg)`` is a pure function of a :class:`Config` of scalars; ``estimate_batch`` is
``jit(vmap(estimate))`` over a :class:`Config` of ``(n_cfg,)`` arrays. Infeasible
configurations are masked (``feasible == False``, ``reason != 0``, times = +inf); their
intermediate values are computed on safe stand-ins so gradients stay finite everywhere.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtri

from ..model import comm as K
from ..model import compute as C
from ..model import ep_overlap as Eo
from ..model import experts as E
from ..model import host as H
from ..model import hybrid as Hy
from ..model import latent as La
from ..model import mamba as Mb
from ..model import megatron_fsdp as Mf
from ..model import memory as Mem
from ..model import offload as O
from ..model import pipeline as P
from ..model import power as Pw
from ..model import recompute_modules as Rm
from ..model import schedules as S
from ..model import zero3_gathers as Z3
from ..model.types import Config
from . import reliability as R

# Checkpoint state: bf16 weights + fp32 master weights + Adam m and v = 14 bytes/parameter
# (ZeRO, Rajbhandari et al. 2020; BLOOM-176B: 2.3 TB, reliability.csv).
CKPT_BYTES_PER_PARAM = 14.0


class Reason(enum.IntEnum):
    """Why a configuration is masked (first failing check wins)."""

    OK = 0
    LAYOUT = 1  # GPUs, heads, layers, batch or experts do not divide
    PRECISION_UNSUPPORTED = 2  # fp8, MXFP8 or fp4 asked of a GPU without such tensor cores
    MEMORY = 3  # does not fit in HBM
    FAILURES = 4  # cluster fails faster than it can checkpoint: no progress


class Estimate(NamedTuple):
    feasible: jax.Array
    reason: jax.Array  # Reason code
    # layout derived
    dp: jax.Array
    n_micro: jax.Array  # micro-batches per step per pipeline (gradient accumulation)
    # per-step breakdown, seconds (sums to step_s)
    compute_s: jax.Array
    bubble_s: jax.Array
    tp_comm_s: jax.Array
    cp_comm_s: jax.Array
    ep_comm_s: jax.Array
    pp_comm_s: jax.Array
    host_s: jax.Array  # launch-bound stages: the host's time beyond the GPU's (model.host)
    offload_s: jax.Array  # activation copies to and from host memory not hidden by compute (model.offload)
    dp_comm_s: jax.Array  # exposed (not hidden behind backward)
    zero3_comm_s: jax.Array  # exposed parameter gathers
    optimizer_s: jax.Array
    straggler_s: jax.Array
    serial_s: jax.Array
    step_s: jax.Array
    dp_comm_raw_s: jax.Array  # before overlap
    # memory, bytes per GPU
    mem_weights: jax.Array
    mem_grads: jax.Array
    mem_optimizer: jax.Array
    mem_activations: jax.Array
    mem_total: jax.Array
    mem_capacity: jax.Array
    mem_host: jax.Array  # offloaded activations in host memory (model.offload)
    # whole job
    params: jax.Array
    model_flops_per_step: jax.Array
    hardware_flops_per_step: jax.Array
    steps: jax.Array
    theoretical_s: jax.Array  # compute only: no communication, no bubble, no failures
    train_s: jax.Array  # steps x step time + start-up, no failures
    ckpt_write_s: jax.Array  # training stall per checkpoint (delta)
    ckpt_interval_s: jax.Array  # compute time between checkpoints (tau)
    young_interval_s: jax.Array
    daly_interval_s: jax.Array
    mtbf_s: jax.Array
    restart_s: jax.Array
    n_checkpoints: jax.Array
    n_failures: jax.Array
    jct_s: jax.Array  # expected wall-clock, failures and lost work included
    efficiency: jax.Array  # theoretical_s / train_s
    mfu: jax.Array
    gamma: jax.Array  # raw communication / compute
    comm_share: jax.Array  # exposed communication / step
    gpu_hours: jax.Array
    cost_usd: jax.Array
    energy_kwh: jax.Array
    energy_usd: jax.Array


# The parts of Estimate.step_s (seconds). Their sum is the step time even where the
# configuration is masked (e.g. out of memory), which validation needs.
STEP_PARTS = ("compute_s", "bubble_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "host_s", "offload_s",
              "dp_comm_s",
              "zero3_comm_s", "optimizer_s", "straggler_s", "serial_s")


def unmasked_step(est: "Estimate"):
    """Step time (s) before feasibility masking: the sum of ``STEP_PARTS``."""
    return sum(getattr(est, k) for k in STEP_PARTS)


def _is_int(x):
    return jnp.abs(x - jnp.round(x)) < 1e-6


def expected_max_std_normal(n):
    """E[max of n iid N(0,1)] by Blom's approximation Phi^-1((n - 0.375)/(n + 0.25))
    (Blom 1958; David & Nagaraja, Order Statistics, 3rd ed., Sec. 4.5). 0 for n = 1."""
    return ndtri((n - 0.375) / (n + 0.25))


def overlap(comm_s, window_s, eta):
    """Exposed part of communication overlapped with a compute window:
    tau_comm - eta min(tau_comp, tau_comm) (MISSION step-time overlap model)."""
    return comm_s - eta * jnp.minimum(window_s, comm_s)


def layout_checks(cfg: Config, relaxed: bool = False):
    """(ok, dp, n_micro). ``relaxed``: GPU count and batch may be fractional (for gradient
    search over a continuous relaxation); only dp >= 1 and n_micro >= 1 are required."""
    m, lay, t = cfg.model, cfg.layout, cfg.train
    dp = lay.n_gpus / (lay.tp * lay.pp * lay.cp)
    n_micro = t.global_batch / (dp * t.micro_batch)
    if relaxed:
        return (dp >= 1.0) & (n_micro >= 1.0), dp, n_micro
    ok = (_is_int(dp) & (dp >= 1.0) & _is_int(n_micro) & (n_micro >= 1.0)
          & _is_int(m.n_heads / lay.tp) & P.fits(m.n_layers, lay.pp, lay.vpp)
          & ((m.mamba_layers == 0) | _is_int(m.mamba_groups / lay.tp))
          & _is_int(t.seq_len / lay.cp) & _is_int(m.n_experts / lay.ep) & _is_int(lay.tp / lay.etp)
          & _is_int(E.expert_data_parallel(lay, dp))
          & ((lay.vpp == 1.0) | (lay.pp > 1.0)) & S.valid(lay.schedule, lay.pp, lay.vpp)
          & S.enough_micro_batches(lay.schedule, lay.pp, n_micro))
    return ok, dp, n_micro


def estimate(cfg: Config, relaxed: bool = False) -> Estimate:
    """Expected job completion time and its breakdown for one configuration.

    ``relaxed=True`` treats the GPU count, dp and the number of micro-batches as continuous
    (no divisibility checks), for gradient search; round the result to a valid layout."""
    m, g, f, c, lay, t, job = cfg
    layout_ok, dp_raw, n_micro_raw = layout_checks(cfg, relaxed)
    # Safe stand-ins keep every intermediate finite on masked rows (double-where trick).
    dp = jnp.where(layout_ok, dp_raw, 1.0)
    n_micro = jnp.where(layout_ok, n_micro_raw, 1.0)
    precision_ok = (C.dense_peak_tflops(g, t) > 0) & ((t.mxfp8 <= 0) | (g.mxfp8_gemm_ratio > 0))
    # Stand-in peaks on masked rows, as above.
    g = g._replace(peak_fp8_tflops=jnp.where(precision_ok, g.peak_fp8_tflops, g.peak_bf16_tflops),
                   peak_fp4_tflops=jnp.where(precision_ok, g.peak_fp4_tflops, g.peak_bf16_tflops))
    # A power limit below TDP slows the large GEMMs with the clock (model.power); the peaks, and so
    # MFU's denominator, stay the spec's.
    clock = Pw.clock_ratio(c.gpu_power_limit_w, g.tdp_w)
    g = g._replace(matmul_eff=clock * g.matmul_eff, fp8_matmul_eff=clock * g.fp8_matmul_eff)

    # --- compute per micro-batch on the slowest stage: the last (logits, loss) or, split
    # unevenly, a middle one ---
    layers_per_stage, layers_last = P.stage_layers(m.n_layers, lay.pp, lay.vpp, m.mtp_layers)
    # Multi-token-prediction modules (a layer and an output head each) sit on the last stage.
    t_comp_mb = jnp.maximum(C.microbatch_compute_time(m, g, t, lay.tp, lay.cp, layers_per_stage, 0.0, lay.ep, lay.etp),
                            C.microbatch_compute_time(m, g, t, lay.tp, lay.cp, layers_last + m.mtp_layers,
                                                      1.0 + m.mtp_layers, lay.ep, lay.etp))
    _, core, elem = C.layer_times(m, g, t, lay.tp, lay.cp, lay.ep, lay.etp)
    column, row = C.layer_gemm_times(m, g, t, lay.tp, lay.cp, lay.ep, lay.etp)  # column-parallel: QKV, MLP up
    gemm = column + row

    # --- communication per micro-batch on the critical path ---
    tokens = t.micro_batch * t.seq_len / lay.cp
    act_bytes = 2.0 * tokens * m.hidden  # bf16 activations
    recompute_full = C.full_recompute_share(t)
    # TP, in all-reduces of the layer's activations (SP's all-gather + reduce-scatter pairs move
    # the same bytes): 2 forward (row-parallel outputs), 2 more when recomputing, 2 backward
    # (column-parallel input gradients) per layer (Shoeybi 2019 Fig. 4); one each per mixer
    # and per MLP in a hybrid's single-purpose layers (model.hybrid.sublayers).
    tp_ar = K.all_reduce(act_bytes, lay.tp, 1.0, g, f, c)
    per_layer = Hy.sublayers(m)
    # torchtitan's per-op recompute gathers a selective layer's SP inputs again (its all-gathers,
    # half of each all-reduce's bytes, are not saved; its reduce-scatters are: model.sac).
    per_op = (t.recompute >= 1) & (t.selective_op > 0) & (t.seq_parallel > 0)
    sac_regather = (1.0 - recompute_full) * jnp.where(per_op, 0.5, 0.0)
    # A recomputed MLP or MoE layer runs its own forward collective again (model.recompute_modules).
    module_tp = (1.0 - recompute_full) * Rm.repeated_tp_share(t, C.dense_mlp_fraction(m), C.moe_layer_fraction(m))
    n_tp_forward = layers_per_stage * (per_layer * (1.0 + recompute_full + sac_regather) + module_tp)
    tp_raw = (n_tp_forward + per_layer * layers_per_stage) * tp_ar
    # With mp_comm_overlap the collectives are split into chunks pipelined with the GEMMs
    # that produce and consume them (Transformer Engine userbuffers, Megatron --tp-comm-overlap;
    # Wang et al. 2023, "Overlap communication with dependent computation").
    mp_overlap = jnp.where(t.mp_comm_overlap > 0, t.overlap_eta, 0.0)
    gemm_window = layers_per_stage * (3.0 + recompute_full) * gemm
    # Without it, Megatron's column-parallel backward (--async-tensor-model-parallel-allreduce in
    # the code of Korthikanti et al. 2022, megatron/mpu/layers.py) starts the input-gradient
    # all-reduce and computes the weight gradient meanwhile; under SP it re-gathers the layer
    # input behind the data-gradient GEMM and reduce-scatters behind the weight gradient, leaving
    # the row-parallel layers' output-gradient all-gathers (one all-reduce's bytes per layer)
    # exposed. What the GEMMs cover is hidden whole: Korthikanti et al. 2022 Table 4 (22B layer)
    # measures the backward at 11.9 ms, with SP 11.8 ms, what its GEMMs, core and elementwise
    # ops take alone (+ SP's exposed all-gathers).
    sp = jnp.where(t.seq_parallel > 0, 1.0, 0.0)
    hidden_bwd = per_layer * layers_per_stage * tp_ar
    async_bwd = (sp * per_layer / 2.0 * layers_per_stage * tp_ar
                 + overlap(hidden_bwd, (1.0 + sp) * layers_per_stage * column, 1.0))
    tp_async = n_tp_forward * tp_ar + async_bwd
    tp_mb = jnp.where((t.tp_async_backward > 0) & (t.mp_comm_overlap < 1), tp_async,
                      overlap(tp_raw, gemm_window, mp_overlap))
    # CP: K and V of the full sequence gathered forward, gathered + reduce-scattered backward,
    # hidden behind the attention core (ring attention, Liu et al. 2023).
    kv_bytes = 2.0 * t.micro_batch * t.seq_len * m.n_kv_heads * (m.head_dim + m.v_head_dim) / lay.tp
    cp_raw = layers_per_stage * Hy.attention_share(m) * 3.0 * K.all_gather(kv_bytes, lay.cp, lay.tp, g, f, c)
    # A Mamba-2 mixer under CP scans whole sequences on a share of the heads: an all-to-all of
    # in_proj's output before the convolution and one of y after the scan, forward and
    # backward (Megatron-Core ``MambaContextParallel``, megatron/core/ssm/mamba_context_parallel.py).
    mixer_bytes = 2.0 * tokens * (Mb.in_proj_width(m) + Mb.inner_width(m)) / lay.tp
    cp_raw += layers_per_stage * Hy.mamba_share(m) * 2.0 * K.all_to_all(mixer_bytes, lay.cp, lay.tp, g, f, c)
    cp_mb = overlap(cp_raw, layers_per_stage * 3.0 * core, t.overlap_eta)
    # EP: dispatch + combine all-to-all forward and backward (GShard, Lepikhin et al. 2020).
    moe = jnp.where(m.n_experts > 1, 1.0, 0.0)
    # Each TP rank dispatches its sequence-parallel share of the tokens (Megatron-Core's token
    # dispatchers run on the SP-split hidden states; MoE with TP requires SP), each as wide as
    # the experts read it (LatentMoE: the latent, model.latent).
    token_bytes = 2.0 * tokens / jnp.where(t.seq_parallel > 0, lay.tp, 1.0) * La.routed_width(m)
    moe_layers = moe * layers_per_stage * C.moe_layer_fraction(m)
    flat = K.all_to_all(token_bytes * m.top_k, lay.ep, E.ep_stride(lay), g, f, c)
    two_hop = K.all_to_all_two_hop(token_bytes, m.top_k, lay.ep, E.ep_stride(lay), g, f, c)
    # The busiest rank receives (and sends back) its excess of tokens: the layer waits on it (model.experts).
    a2a = jnp.where(t.ep_two_hop > 0, two_hop, flat) * E.busiest_rank_tokens(t)
    # Dispatch and combine, forward and backward, and again in a recomputed forward (of the
    # whole layer, or of the MoE layer alone: model.recompute_modules).
    repeated_a2a = 2.0 * recompute_full + (1.0 - recompute_full) * Rm.repeated_all_to_alls(t)
    ep_raw = moe_layers * (4.0 + repeated_a2a) * a2a
    # DeepSeek-V3's DualPipe hides them up to the compute window (report Sec. 3.2.1: "both
    # all-to-all and PP communication can be fully hidden"); Megatron-Core's 1F1B all-to-all
    # overlap (--overlap-moe-expert-parallel-comm) hides each beside one block of the other
    # micro-batch's layer (model.ep_overlap), a recomputed forward's not at all.
    dualpipe = S.hides_dispatch(lay.schedule, lay.pp)
    mixer_fwd, mlp_fwd = C.layer_block_times(m, g, t, lay.tp, lay.cp, gemm, core, elem)
    paired = moe_layers * (Eo.exposed_per_layer(a2a, mixer_fwd, mlp_fwd, core, C.core_backward_factor(t))
                           + repeated_a2a * a2a)
    ep_mb = jnp.where(dualpipe, overlap(ep_raw, t_comp_mb, 1.0), jnp.where(t.ep_comm_overlap > 0, paired, ep_raw))
    # PP: activation forward, gradient backward per virtual stage. Each TP rank sends 1/tp of
    # it; without SP the receivers all-gather the rest over NVLink (scatter/gather
    # optimization, Narayanan et al. 2021 Sec. 4.1); with SP the stage input is already split.
    pp_stride = lay.tp * lay.cp * dp
    crosses = pp_stride >= g.nvlink_domain
    regather = jnp.where(t.seq_parallel > 0, 0.0, K.all_gather(act_bytes, lay.tp, 1.0, g, f, c))
    send = K.p2p(act_bytes / lay.tp, crosses, g, f, c) + regather
    pp_raw = jnp.where(lay.pp > 1, 2.0 * lay.vpp * send, 0.0)
    # Interleaved schedules post the next chunk's sends/receives during this chunk's compute
    # (Megatron --overlap-p2p-communication); 1F1B waits for them.
    # DualPipe hides them behind the other direction's compute (model.schedules).
    pp_mb = overlap(pp_raw, t_comp_mb, jnp.where(dualpipe, 1.0, jnp.where(lay.vpp > 1, mp_overlap, 0.0)))

    # Offloaded activations go to host memory during the forward pass and come back for the
    # backward pass (model.offload): the copies of one micro-batch's stored activations.
    mem = Mem.memory(m, lay, t, dp, n_micro, c.gpus_per_node)
    offload_mb = O.exposed_time(mem.offloaded_per_micro_batch, t_comp_mb, g)
    t_gpu_mb = t_comp_mb + tp_mb + cp_mb + ep_mb + pp_mb + offload_mb
    # A stage cannot finish a micro-batch before the host has launched it, nor an MoE block
    # before its launches after the dispatcher's sync (model.host); the block's GPU work: its experts,
    # its dispatch and combine. Where the all-to-alls overlap another micro-batch, its queued
    # blocks cover the sync (model.host).
    moe_block_forward = mlp_fwd + 2.0 * a2a
    # The forward, and any recomputed one (two all-to-alls each).
    moe_forwards = jnp.where(dualpipe | (t.ep_comm_overlap > 0), 0.0, 1.0 + 0.5 * repeated_a2a)
    host_mb = H.host_time(m, t, layers_per_stage, moe_layers, moe_block_forward, moe_forwards, t_gpu_mb)
    t_mb = t_gpu_mb + host_mb
    # Bubble per schedule (model.schedules): the zero-bubble ones fill it with the stage's weight-
    # gradient GEMMs (as many FLOPs as its forward GEMMs).
    bubble = S.bubble_time(lay.schedule, lay.pp, lay.vpp, t_mb, t_comp_mb,
                           layers_per_stage * (gemm + core + elem), layers_per_stage * gemm)
    pipe = t_mb * n_micro + bubble
    # Stragglers: the step waits for the slowest of n_gpus ranks with N(1, cv) jitter.
    straggler = pipe * c.jitter_cv * expected_max_std_normal(lay.n_gpus)

    # --- data-parallel gradient sync, once per step ---
    dense, expert = mem.dense_params, mem.expert_params
    wire = t.grad_bytes * t.grad_compression
    z3 = jnp.where(t.zero_stage >= 3, 1.0, 0.0)
    dp_group = dp * lay.cp
    edp_group = jnp.maximum(E.expert_data_parallel(lay, dp), 1.0)  # replicas of one expert shard
    # The gradients are all-reduced across the replicas: whole with DDP and ZeRO-1/2, the
    # node's shard with ZeRO-3 HYBRID_SHARD, not at all with plain ZeRO-3 (its reduce-scatter
    # per micro-batch, below, leaves each shard summed on its owner). Dense parameters over
    # dp x cp, experts over the expert-data-parallel group.
    shard_d = jnp.where(z3 > 0, mem.shard_dense, 1.0)
    shard_e = jnp.where(z3 > 0, mem.shard_expert, 1.0)
    grad_sync = (K.all_reduce(wire * dense / shard_d, dp_group / shard_d, lay.tp * shard_d, g, f, c)
                 + moe * K.all_reduce(wire * expert / shard_e, edp_group / shard_e, E.edp_stride(lay) * shard_e,
                                      g, f, c))
    # DDP buckets: the last bucket cannot overlap; the rest hides behind the last backward.
    bucket = jnp.minimum(1e6 * t.bucket_mparams / (dense + expert), 1.0)
    last_bucket = bucket * grad_sync
    backward_window = 2.0 / 3.0 * t_comp_mb
    # Megatron-LM before Megatron-Core's --overlap-grad-reduce all-reduced after the backward
    # (Korthikanti et al. 2022 Sec. 6.3: "no overlap"); PyTorch DDP and FSDP overlap. The same
    # switch governs the ZeRO-3 prefetch below. ZeRO-3's collectives (its gathers, reduce-
    # scatters and HYBRID_SHARD's replica all-reduce, all issued from FSDP's per-layer hooks)
    # hide less of themselves than DDP's buckets: each layer waits for its gathered weights.
    # Calibrated apart (conf/calibration.yaml: 0.91 vs 0.43 on runs_dev.csv); Megatron-FSDP's
    # prefetch hides more (model.megatron_fsdp).
    dp_eta = jnp.where(t.dp_overlap > 0, jnp.where(z3 > 0, Mf.zero3_overlap_eta(t), t.overlap_eta), 0.0)
    dp_exposed = last_bucket + overlap(grad_sync - last_bucket, backward_window, dp_eta)

    # ZeRO-3: every micro-batch gathers each layer's parameters forward and again backward,
    # and reduce-scatters its gradients, over the shard group, prefetched behind compute
    # (Rajbhandari et al. 2020 Sec. 7.2.2: 3x the parameter bytes per pass, vs 2x for DDP).
    # Layer by layer, so the ring latency is paid per collective: one per layer with FSDP (a
    # flat parameter per wrapped block, Zhao et al. 2023 Sec. 3.2), one per partitioned tensor
    # with DeepSpeed ZeRO-3 (`zero3_collectives_per_layer`). The bytes split over them.
    def layer_by_layer(nbytes, group, stride):
        n = layers_per_stage * t.zero3_collectives_per_layer
        return n * K.all_gather(nbytes / n, group, stride, g, f, c)

    def zero3_pass(bytes_per_param):
        return (layer_by_layer(bytes_per_param * dense, mem.shard_dense, lay.tp)
                + moe * layer_by_layer(bytes_per_param * expert, mem.shard_expert, E.edp_stride(lay)))

    # Under pipeline parallelism FSDP2 keeps a stage's weights gathered across its micro-batches
    # and syncs the accumulated gradients once (torchtitan apply_fsdp: reshard_after_forward
    # False "to avoid per-microbatch all-gathers" when PP is on; torch.distributed.pipelining
    # defers the reduce-scatter to the last micro-batch): one gather and one reduce-scatter
    # per step. DeepSpeed's ZeRO-3 does not run with PP; it gathers again for a recomputed
    # forward (model.zero3_gathers).
    gathered = lay.pp > 1
    gathers = Z3.gathers_per_micro_batch(t, recompute_full)
    gather_raw = z3 * jnp.where(gathered, zero3_pass(Mem.WEIGHT_BYTES) + zero3_pass(wire),
                                gathers * zero3_pass(Mem.WEIGHT_BYTES) + zero3_pass(wire))
    z3_exposed = jnp.where(gathered, 1.0, n_micro) * overlap(gather_raw, t_comp_mb, dp_eta)
    sharded = t.zero_stage >= 1
    owned_params = (dense / jnp.where(sharded, mem.shard_dense, 1.0)
                    + expert / jnp.where(sharded, mem.shard_expert, 1.0))  # optimizer state this GPU updates
    optimizer = C.optimizer_time(owned_params, g)

    step = pipe + straggler + dp_exposed + z3_exposed + optimizer + c.serial_s_per_step
    compute_step = n_micro * t_comp_mb + optimizer

    # --- whole job ---
    params = C.total_params(m, t.seq_len)
    steps = job.tokens / (t.global_batch * t.seq_len)
    train = steps * step + c.init_s
    theoretical = steps * compute_step
    n_nodes = lay.n_gpus / c.gpus_per_node
    n_nics = n_nodes * c.nics_per_node
    # Two-tier fat tree: leaves with half their ports down, half as many spines.
    n_switches = jnp.where(n_nodes > 1.0, 1.5 * n_nics / (c.switch_radix / 2.0), 0.0)
    mtbf = R.cluster_mtbf(lay.n_gpus, n_nodes, n_nics, n_switches, g.mtbf_gpu_h, c.mtbf_node_h,
                          f.mtbf_nic_h, f.mtbf_switch_h)
    ckpt_bytes = CKPT_BYTES_PER_PARAM * params
    t_sync = ckpt_bytes / (1e9 * c.storage_write_gbps)
    # Async (seed 001): stall = max(T_copy of this GPU's shard through HBM, T_flush to staging).
    t_copy = CKPT_BYTES_PER_PARAM * owned_params / C.hbm_rate(g)
    t_flush = ckpt_bytes / (1e9 * c.staging_gbps)
    delta = jnp.where(job.ckpt_async > 0, jnp.maximum(t_copy, t_flush), t_sync)
    restart = R.recovery_time(c.t_drain_s, c.t_provision_s, ckpt_bytes / (1e9 * c.storage_read_gbps),
                              c.t_reinit_s)
    daly = R.daly_interval(delta, mtbf)
    tau = jnp.where(job.ckpt_auto > 0, daly, job.ckpt_interval_s)
    solve = steps * step
    wall, progress_ok = R.expected_wall_time(solve, tau, delta, restart, mtbf)
    jct = wall + c.init_s

    mem_ok = (mem.total <= 1e9 * g.hbm_gb) & (mem.host <= 1e9 * g.host_mem_gb)
    reason = jnp.where(~layout_ok, Reason.LAYOUT,
                       jnp.where(~precision_ok, Reason.PRECISION_UNSUPPORTED,
                                 jnp.where(~mem_ok, Reason.MEMORY,
                                           jnp.where(~progress_ok, Reason.FAILURES, Reason.OK))))
    feasible = reason == Reason.OK

    model_flops = C.model_flops_per_step(m, t)
    comm_exposed = n_micro * (tp_mb + cp_mb + ep_mb + pp_mb) + dp_exposed + z3_exposed
    comm_raw = (n_micro * (tp_raw + cp_raw + ep_raw + pp_raw) + jnp.where(gathered, 1.0, n_micro) * gather_raw
                + grad_sync)
    hours = lay.n_gpus * jct / 3600.0
    energy = hours * Pw.board_power_w(c.gpu_power_limit_w, g.tdp_w) * c.power_frac * c.pue / 1000.0
    peak = 1e12 * C.dense_peak_tflops(g, t)

    def masked(x):
        return jnp.where(feasible, x, jnp.inf)

    return Estimate(
        feasible=feasible, reason=reason.astype(jnp.int32), dp=dp_raw, n_micro=n_micro_raw,
        compute_s=n_micro * t_comp_mb, bubble_s=bubble, tp_comm_s=n_micro * tp_mb,
        cp_comm_s=n_micro * cp_mb, ep_comm_s=n_micro * ep_mb, pp_comm_s=n_micro * pp_mb, host_s=n_micro * host_mb,
        offload_s=n_micro * offload_mb,
        dp_comm_s=dp_exposed, zero3_comm_s=z3_exposed, optimizer_s=optimizer,
        straggler_s=straggler, serial_s=c.serial_s_per_step, step_s=masked(step),
        dp_comm_raw_s=grad_sync,
        mem_weights=mem.weights, mem_grads=mem.grads, mem_optimizer=mem.optimizer,
        mem_activations=mem.activations, mem_total=mem.total, mem_capacity=1e9 * g.hbm_gb,
        mem_host=mem.host,
        params=params, model_flops_per_step=model_flops,
        hardware_flops_per_step=C.hardware_flops_per_step(m, t), steps=steps,
        theoretical_s=theoretical, train_s=masked(train), ckpt_write_s=delta, ckpt_interval_s=tau,
        young_interval_s=R.young_interval(delta, mtbf), daly_interval_s=daly, mtbf_s=mtbf,
        restart_s=restart, n_checkpoints=solve / tau, n_failures=masked(wall / mtbf),
        jct_s=masked(jct), efficiency=jnp.where(feasible, theoretical / train, 0.0),
        mfu=jnp.where(feasible, model_flops / (step * lay.n_gpus * peak), 0.0),
        gamma=comm_raw / compute_step, comm_share=jnp.where(feasible, comm_exposed / step, 0.0),
        gpu_hours=masked(hours), cost_usd=masked(hours * g.price_per_gpu_hour),
        energy_kwh=masked(energy), energy_usd=masked(energy * c.energy_price_kwh),
    )


estimate_batch = jax.jit(jax.vmap(estimate))
