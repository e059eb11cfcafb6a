"""Attention core, TP/PP/DP overlap, pipeline sends, ZeRO-3 and hybrid-shard traffic against
hand-computed values."""

import prose
import pytest

from jctopt.config import to_config
from jctopt.job.jct import estimate
from jctopt.model import attention as Attn
from jctopt.model import comm as K
from jctopt.model import compute as C
from jctopt.model import memory as Mem
from jctopt.runs import read as runs_read

# GPT-3 175B (s = 2048, h = 12288) on the default layout: tp 8, pp 16, dp 8 (conf/layout/gpt3_175b_1024.yaml).
S, H = 2048, 12288


def test_flash_core_is_half_the_causal_square_at_attn_eff(config):
    """Forward core = 0.5 x 4 b s^2 h / tp FLOPs (causal blocks skipped) at attn_eff x peak,
    plus the fixed cost of the call."""
    cfg = config("model=gpt3_175b", "training.flash_attention=true", "training.fused_attention=false",
                 "training.micro_batch=1")
    g, tp = cfg.gpu, 8.0
    _, core, _ = C.layer_times(cfg.model, g, cfg.train, tp, 1.0)
    expected = 0.5 * 4 * S * S * H / tp / (1e12 * float(g.peak_bf16_tflops) * float(g.attn_eff))
    assert float(core) == pytest.approx(expected + Attn.ATTENTION_CALL_S, rel=1e-9)


def test_splitting_the_heads_pays_the_fixed_cost_once_per_gpu(config):
    """tp 8 runs one eighth of the heads per call: eight such calls cost seven fixed costs more
    than the unsplit one (the FLOP-bound parts are equal)."""
    cfg = config("model=gpt3_175b", "training.flash_attention=true", "training.micro_batch=1")
    _, core_tp1, _ = C.layer_times(cfg.model, cfg.gpu, cfg.train, 1.0, 1.0)
    _, core_tp8, _ = C.layer_times(cfg.model, cfg.gpu, cfg.train, 8.0, 1.0)
    assert 8 * float(core_tp8) - float(core_tp1) == pytest.approx(7 * Attn.ATTENTION_CALL_S, rel=1e-6)


# Transformer Engine 2.11 fused attention on one B200, causal bf16, b = 1, s = 4096, GQA head
# dim 128 (MooreThreads/SimuMax configs/system/b200_bf16_ceperm.json @4dcaae513b): query heads ->
# (sdp_fwd, sdp_bwd) efficiencies, FLOPs counted as 2 (fwd) and 5 (bwd) x s^2 heads (d_qk + d_v).
SIMUMAX_B200_GQA = {8: (0.310, 0.659), 16: (0.578, 0.755), 32: (0.732, 0.796), 64: (0.872, 0.729),
                    128: (0.997, 0.832)}


@pytest.mark.parametrize("heads", sorted(SIMUMAX_B200_GQA))
def test_fixed_attention_cost_matches_the_b200_kernel_table(heads):
    """Forward + backward time = 3.5 x half-square FLOPs at the kernel's sustained 0.43 of the
    B200 peak + 3.5 x ATTENTION_CALL_S, within 20 % of the measured 214-1959 us (the 8-head
    call is 2.4x slower per FLOP than the 128-head one)."""
    peak, s = 2250e12, 4096
    base = s * s * heads * 256.0
    fwd, bwd = SIMUMAX_B200_GQA[heads]
    measured = 2 * base / (fwd * peak) + 5 * base / (bwd * peak)
    modelled = 3.5 * base / (0.43 * peak) + 3.5 * Attn.ATTENTION_CALL_S
    assert modelled == pytest.approx(measured, rel=0.2)


# NVIDIA's cuDNN SDPA training benchmark (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/
# results @3929da2), Llama 3.1 shape (64 query heads, 8 KV heads, d = 128, causal, bf16,
# non-deterministic backward), s = 8192: (batch, forward ms, backward ms, fused_attn_eff). H200's
# rate is the catalog's; GB200's and GB300's are model.attention's fits, which the catalog leaves out.
CUDNN_LLAMA_S8192 = {"h200": (1, 1.708, 5.083, None), "gb200": (2, 1.397, 4.127, 0.537),
                     "gb300": (2, 1.185, 3.832, 0.615)}


@pytest.mark.parametrize("gpu", sorted(CUDNN_LLAMA_S8192))
def test_fused_attention_runs_at_the_cudnn_benchmark_rate(config, gpu):
    """Forward + backward of the cuDNN kernel = 3.5 x (half-square FLOPs at fused_attn_eff of the
    bf16 peak + the call's fixed cost), within 8 % of the benchmark's time at s = 8192."""
    batch, fwd_ms, bwd_ms, eff = CUDNN_LLAMA_S8192[gpu]
    cfg = config(f"gpu={gpu}", "training.fused_attention=true", *([f"gpu.fused_attn_eff={eff}"] if eff else []))
    half_square = 0.5 * 4.0 * batch * 8192**2 * 64 * 128
    modelled = 3.5 * Attn.flash_forward_time(half_square, cfg.gpu, cfg.train)
    assert float(modelled) == pytest.approx(1e-3 * (fwd_ms + bwd_ms), rel=0.08)


@pytest.mark.parametrize("gpu, fused", [("h100_sxm", 0.575), ("h800", 0.575), ("b200", None), ("a100_80gb", None)])
def test_fused_attention_runs_the_architecture_kernel(config, gpu, fused):
    """Transformer Engine's cuDNN attention runs at the architecture's measured rate
    (fused_attn_eff) on Hopper; on an A100 (no such kernel) at FlashAttention-2's, attn_eff, and on
    Blackwell at the fitted attn_eff its cuDNN rows imply (model.attention)."""
    base = ("model=gpt3_175b", f"gpu={gpu}", "training.flash_attention=true", "training.micro_batch=1")
    fa2, cudnn = config(*base, "training.fused_attention=false"), config(*base, "training.fused_attention=true")
    _, core_fa2, _ = C.layer_times(fa2.model, fa2.gpu, fa2.train, 8.0, 1.0)
    _, core_fused, _ = C.layer_times(cudnn.model, cudnn.gpu, cudnn.train, 8.0, 1.0)
    fixed = Attn.ATTENTION_CALL_S  # the call's fixed cost is the same
    rate = fused if fused is not None else float(fa2.gpu.attn_eff)
    assert (float(core_fa2) - fixed) / (float(core_fused) - fixed) == pytest.approx(rate / float(fa2.gpu.attn_eff), rel=1e-6)


def test_flash_backward_is_two_and_a_half_forward(config):
    """Flash: fwd + bwd core = 3.5 x fwd (Dao 2022); the rest of the layer 3 x fwd."""
    cfg = config("model=gpt3_175b", "training.flash_attention=true", "training.recompute=none",
                 "training.micro_batch=1")
    gemm, core, elem = C.layer_times(cfg.model, cfg.gpu, cfg.train, 8.0, 1.0)
    one_layer = C.microbatch_compute_time(cfg.model, cfg.gpu, cfg.train, 8.0, 1.0, 1.0, 0.0)
    assert float(one_layer) == pytest.approx(3 * float(gemm + elem) + 3.5 * float(core), rel=1e-9)


def test_training_metrics_add_cross_entropy_passes_on_the_last_stage(config):
    """Composer's per-micro-batch train metrics (llm-foundry MPT: 2) each read the bf16 logits
    and write and re-read fp32: 14 bytes per logit, at the streaming HBM rate, last stage only."""
    base = ("model=gpt3_175b", "training.micro_batch=2")
    off, on = config(*base), config(*base, "training.metric_loss_passes=2")
    m, g, t = on.model, on.gpu, on.train
    tokens = 2.0 * float(t.seq_len)
    extra = 2 * 14.0 * tokens * float(m.vocab) / 8.0 / (1e12 * float(g.hbm_tbps) * float(g.mem_eff))

    def time(cfg, last):
        return float(C.microbatch_compute_time(cfg.model, cfg.gpu, cfg.train, 8.0, 1.0, 12.0, last))

    assert time(on, 1.0) - time(off, 1.0) == pytest.approx(extra, rel=1e-6)
    assert time(on, 0.0) == time(off, 0.0)


@pytest.mark.parametrize("on", [False, True])
def test_tp_overlap_hides_eta_of_the_gemm_window(config, on):
    cfg = config("model=gpt3_175b", "training.recompute=none", "training.flash_attention=true",
                 f"training.mp_comm_overlap={on}")
    est = estimate(cfg)
    m, g, f, c, lay, t = cfg.model, cfg.gpu, cfg.fabric, cfg.cluster, cfg.layout, cfg.train
    layers = float(m.n_layers / lay.pp)
    tokens = float(t.micro_batch) * S
    raw = layers * 4 * float(K.all_reduce(2.0 * tokens * H, lay.tp, 1.0, g, f, c))
    gemm, _, _ = C.layer_times(m, g, t, lay.tp, lay.cp)
    window = layers * 3 * float(gemm)
    eta = float(t.overlap_eta) if on else 0.0
    per_mb = raw - eta * min(window, raw)
    assert float(est.tp_comm_s) == pytest.approx(float(est.n_micro) * per_mb, rel=1e-6)


@pytest.mark.parametrize("sp", [False, True])
def test_async_tp_backward_hides_behind_the_column_parallel_gemms(config, sp):
    """Forward all-reduces exposed; the backward's two (column-parallel input gradients) hidden
    behind the weight-gradient GEMMs (SP: re-gather behind the data-gradient GEMMs too), SP's
    output-gradient all-gathers (one all-reduce's bytes per layer) exposed."""
    cfg = config("model=gpt3_175b", "training.recompute=none", "training.mp_comm_overlap=false",
                 "training.tp_async_backward=true", f"training.seq_parallel={sp}")
    m, g, f, c, lay, t = cfg.model, cfg.gpu, cfg.fabric, cfg.cluster, cfg.layout, cfg.train
    layers = float(m.n_layers / lay.pp)
    tokens = float(t.micro_batch) * S
    ar = float(K.all_reduce(2.0 * tokens * H, lay.tp, 1.0, g, f, c))
    rate = C.matmul_peak_flops(g, t)
    column = float(C.gemm_time(tokens, H, 3 * H / lay.tp, rate, g) + C.gemm_time(tokens, H, 4 * H / lay.tp, rate, g))
    per_mb = layers * (2 + sp) * ar + max(0.0, 2 * layers * ar - (1 + sp) * layers * column)
    est = estimate(cfg)
    assert float(est.tp_comm_s) == pytest.approx(float(est.n_micro) * per_mb, rel=1e-6)
    sync = estimate(config("model=gpt3_175b", "training.recompute=none", "training.mp_comm_overlap=false",
                           "training.tp_async_backward=false", f"training.seq_parallel={sp}"))
    assert float(sync.tp_comm_s) == pytest.approx(float(est.n_micro) * layers * 4 * ar, rel=1e-6)


# Korthikanti et al. 2022 Table 4: one 22B layer (h 6144, tp 8, s 2048, micro-batch 4) on
# A100, forward + backward ms, per (sequence parallel, recompute).
KORTHIKANTI_T4_MS = {(False, "none"): 19.6, (True, "none"): 19.0, (False, "full"): 27.2,
                     (False, "selective"): 20.9, (True, "selective"): 20.3}


@pytest.mark.parametrize("sp,recompute", sorted(KORTHIKANTI_T4_MS))
def test_layer_time_matches_korthikanti_table_4(compose, sp, recompute):
    """The shipped model's per-layer compute + TP time within 6 % of the measured layer (with
    the backward all-reduces exposed it is 6-12 % over on all five)."""
    runs = runs_read.read_runs(runs_read.runs_path(None))
    row = runs[runs.id == "korthikanti22_t5_22b_full_recompute"].iloc[0].to_dict()
    row.update(sp=int(sp), recompute=recompute)
    cfg = to_config(prose.row_config(compose("task=validate"), row)[0])
    m, lay, t = cfg.model, cfg.layout, cfg.train
    assert float(t.micro_batch) == 4 and float(lay.tp) == 8 and float(t.tp_async_backward) == 1
    est = estimate(cfg)
    compute = C.microbatch_compute_time(m, cfg.gpu, t, lay.tp, lay.cp, 1.0, 0.0)
    tp = est.tp_comm_s / (est.n_micro * m.n_layers / lay.pp)
    assert 1e3 * float(compute + tp) == pytest.approx(KORTHIKANTI_T4_MS[(sp, recompute)], rel=0.06)


def _zero3_pass(cfg, params, group, bytes_per_param):
    """One ZeRO-3 pass: a ring all-gather of every layer's parameters over ``group``, layer
    by layer (the ring latency paid per layer)."""
    layers = float(cfg.model.n_layers / cfg.layout.pp)
    nbytes = bytes_per_param * params / layers
    return layers * float(K.all_gather(nbytes, group, float(cfg.layout.tp), cfg.gpu, cfg.fabric, cfg.cluster))


ZERO3 = ("model=gpt3_175b", "layout.tp=1", "layout.pp=1", "layout.vpp=1", "layout.n_gpus=1536",
         "training.zero_stage=3", "training.micro_batch=1", "training.global_batch=3072", "training.dp_overlap=true")


def test_zero3_moves_three_parameter_passes_per_micro_batch(config):
    """ZeRO-3: gather forward, gather backward, reduce-scatter gradients, every micro-batch;
    no per-step gradient all-reduce (Rajbhandari et al. 2020: 3x parameter bytes vs 2x for DDP)."""
    cfg = config(*ZERO3)
    est = estimate(cfg)
    assert float(est.dp_comm_s) == 0.0 and float(est.dp_comm_raw_s) == 0.0
    mem = Mem.memory(cfg.model, cfg.layout, cfg.train, est.dp, est.n_micro, cfg.cluster.gpus_per_node)
    params = float(mem.dense_params + mem.expert_params)
    raw = (2 * _zero3_pass(cfg, params, 1536.0, Mem.WEIGHT_BYTES)
           + _zero3_pass(cfg, params, 1536.0, float(cfg.train.grad_bytes)))
    window = float(est.compute_s) / float(est.n_micro)
    exposed = raw - float(cfg.train.zero3_overlap_eta) * min(window, raw)
    assert float(est.n_micro) == 2.0
    assert float(est.zero3_comm_s) == pytest.approx(2 * exposed, rel=1e-6)


def test_megatron_fsdp_hides_its_collectives_at_the_spec_overlap(config):
    """Megatron-FSDP prefetches the next unit's gathers from double buffers (model.megatron_fsdp):
    its ZeRO-3 traffic hides at eta = 0.9 of the compute window, the fitted zero3_overlap_eta
    (set to 0.6 here) left to PyTorch FSDP and DeepSpeed. Same raw traffic, exposed part by the
    MISSION overlap model, tau_comm - eta min(tau_comp, tau_comm), per micro-batch."""
    pytorch = config(*ZERO3, "training.zero3_overlap_eta=0.6")
    megatron = config(*ZERO3, "training.zero3_overlap_eta=0.6", "training.megatron_fsdp=true")
    e_pt, e_mf = estimate(pytorch), estimate(megatron)
    params = float(Mem.memory(pytorch.model, pytorch.layout, pytorch.train, e_pt.dp, e_pt.n_micro, 8.0).dense_params)
    t = pytorch.train
    raw = (2 * _zero3_pass(pytorch, params, 1536.0, Mem.WEIGHT_BYTES)
           + _zero3_pass(pytorch, params, 1536.0, float(t.grad_bytes)))
    window = float(e_pt.compute_s) / float(e_pt.n_micro)
    assert float(e_mf.compute_s) == pytest.approx(float(e_pt.compute_s), rel=1e-12)
    assert float(e_pt.zero3_comm_s) == pytest.approx(2 * (raw - 0.6 * min(window, raw)), rel=1e-6)
    assert float(e_mf.zero3_comm_s) == pytest.approx(2 * (raw - 0.9 * min(window, raw)), rel=1e-6)


def test_hybrid_shard_shards_in_the_node_and_all_reduces_across_nodes(config):
    """HYBRID_SHARD on 8-GPU nodes: weights, grads and optimizer state over the 8 GPUs of a node;
    the gathers stay on NVLink; each node's gradient shard is all-reduced over the 192 nodes,
    hidden as ZeRO-3's collectives are (zero3_overlap_eta; DDP's overlap_eta set apart here)."""
    full = config(*ZERO3)
    hybrid = config(*ZERO3, "training.hybrid_shard=true", "training.overlap_eta=0.2", "training.zero3_overlap_eta=0.6")
    e_full, e_hyb = estimate(full), estimate(hybrid)
    m_full = Mem.memory(full.model, full.layout, full.train, e_full.dp, e_full.n_micro, 8.0)
    m_hyb = Mem.memory(hybrid.model, hybrid.layout, hybrid.train, e_hyb.dp, e_hyb.n_micro, 8.0)
    assert float(m_hyb.shard_dense) == 8.0 and float(m_full.shard_dense) == 1536.0
    assert float(m_hyb.optimizer) == pytest.approx(192.0 * float(m_full.optimizer), rel=1e-9)
    params = float(m_hyb.dense_params + m_hyb.expert_params)
    g, f, c, t = hybrid.gpu, hybrid.fabric, hybrid.cluster, hybrid.train
    raw = 2 * _zero3_pass(hybrid, params, 8.0, Mem.WEIGHT_BYTES) + _zero3_pass(hybrid, params, 8.0, float(t.grad_bytes))
    window = float(e_hyb.compute_s) / float(e_hyb.n_micro)
    exposed = raw - 0.6 * min(window, raw)
    assert float(e_hyb.zero3_comm_s) == pytest.approx(2 * exposed, rel=1e-6)
    shard_sync = float(K.all_reduce(float(t.grad_bytes) * params / 8.0, 192.0, 8.0, g, f, c))
    assert float(e_hyb.dp_comm_raw_s) == pytest.approx(shard_sync, rel=1e-9)
    # DDP buckets: the last one (25 M of the parameters) is exposed, the rest hides behind the
    # backward (2/3 of a micro-batch's compute).
    last = 25e6 / params * shard_sync
    hidden_part = shard_sync - last
    backward = 2.0 / 3.0 * window
    assert float(e_hyb.dp_comm_s) == pytest.approx(last + hidden_part - 0.6 * min(backward, hidden_part), rel=1e-6)


def test_deepspeed_zero3_pays_the_ring_latency_per_tensor(config):
    """Four all-gathers per layer and pass (DeepSpeed gathers each weight matrix) move the
    same bytes as one (FSDP) and pay 3 more ring latencies per layer and pass: the latency is
    the time of an empty all-gather. Gathers exposed (no overlap), one micro-batch."""
    base = ZERO3[:-2] + ("training.global_batch=1536", "training.dp_overlap=false")
    one, four = estimate(config(*base)), estimate(config(*base, "training.zero3_collectives_per_layer=4"))
    cfg = config(*base)
    latency = float(K.all_gather(0.0, 1536.0, 1.0, cfg.gpu, cfg.fabric, cfg.cluster))
    assert latency > 0.0 and float(one.n_micro) == 1.0
    assert float(four.zero3_comm_s - one.zero3_comm_s) == pytest.approx(3 * 3 * 96 * latency, rel=1e-6)


@pytest.mark.parametrize("recompute, extra_passes", [("full", 1), ("selective", 0), ("none", 0)])
def test_deepspeed_zero3_gathers_again_for_a_recomputed_forward(config, recompute, extra_passes):
    """DeepSpeed's ZeRO-3 partitions a layer's weights after every forward and gathers them
    before the next (model.zero3_gathers): a fully recomputed forward costs one more weight pass per
    micro-batch, as a hand all-gather of every layer; selective recompute (the attention core,
    no weights) and no recompute none. Gathers exposed, one micro-batch."""
    base = ZERO3[:-2] + ("training.global_batch=1536", "training.dp_overlap=false", f"training.recompute={recompute}")
    fsdp, deepspeed = config(*base), config(*base, "training.zero3_regather=true")
    e_fsdp, e_ds = estimate(fsdp), estimate(deepspeed)
    params = float(Mem.memory(fsdp.model, fsdp.layout, fsdp.train, e_fsdp.dp, e_fsdp.n_micro, 8.0).dense_params)
    one_pass = _zero3_pass(fsdp, params, 1536.0, Mem.WEIGHT_BYTES)
    assert float(e_ds.n_micro) == 1.0 and float(e_ds.compute_s) == float(e_fsdp.compute_s)
    assert float(e_ds.zero3_comm_s - e_fsdp.zero3_comm_s) == pytest.approx(extra_passes * one_pass, rel=1e-6, abs=1e-9)
    raw = 2 * one_pass + _zero3_pass(fsdp, params, 1536.0, float(fsdp.train.grad_bytes))
    assert float(e_fsdp.zero3_comm_s) == pytest.approx(raw, rel=1e-6)


@pytest.mark.parametrize("sp", [False, True])
def test_pipeline_sends_are_scattered_over_tp(config, sp):
    """Each TP rank sends 1/tp of the activation to the next stage; without SP the receiver
    all-gathers it over NVLink (Narayanan 2021 Sec. 4.1). 1F1B: forward + backward per stage."""
    cfg = config("model=gpt3_175b", f"training.seq_parallel={sp}", "training.mp_comm_overlap=false")
    est = estimate(cfg)
    g, f, c, lay = cfg.gpu, cfg.fabric, cfg.cluster, cfg.layout
    act = 2.0 * float(cfg.train.micro_batch) * S * H
    crosses = float(lay.tp * lay.cp * est.dp) >= float(g.nvlink_domain)
    send = float(K.p2p(act / float(lay.tp), crosses, g, f, c))
    if not sp:
        send += float(K.all_gather(act, lay.tp, 1.0, g, f, c))
    expected = 2.0 * float(lay.vpp) * send  # interleaved sends hide only with mp_comm_overlap (off)
    assert float(est.pp_comm_s) == pytest.approx(float(est.n_micro) * expected, rel=1e-6)


@pytest.mark.parametrize("on", [False, True])
def test_dp_overlap_hides_eta_of_the_backward(config, on):
    """Gradient all-reduce: last bucket exposed, the rest overlapped with 2/3 of a micro-batch's
    compute at eta, or not at all (Megatron-LM before --overlap-grad-reduce)."""
    cfg = config("model=gpt3_175b", "training.zero_stage=1", f"training.dp_overlap={on}")
    est = estimate(cfg)
    raw = float(est.dp_comm_raw_s)
    mem = Mem.memory(cfg.model, cfg.layout, cfg.train, est.dp, est.n_micro, cfg.cluster.gpus_per_node)
    bucket = min(1e6 * float(cfg.train.bucket_mparams) / float(mem.dense_params + mem.expert_params), 1.0)
    rest = raw * (1 - bucket)
    window = 2.0 / 3.0 * float(est.compute_s) / float(est.n_micro)
    eta = float(cfg.train.overlap_eta) if on else 0.0
    assert raw > 0
    assert float(est.dp_comm_s) == pytest.approx(bucket * raw + rest - eta * min(window, rest), rel=1e-9)
