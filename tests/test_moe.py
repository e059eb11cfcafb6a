"""Mixture-of-experts architectures: parameter counts against the models' published figures,
FLOPs and layer times against hand counts."""

import numpy as np
import pytest

from jctopt.config import ConfigError
from jctopt.job.jct import estimate
from jctopt.model import compute as C
from jctopt.model import flops as Fl
from jctopt.model import memory as Mem


def _model(config, name, *extra):
    return config(f"model={name}", "layout=single_node", "layout.tp=1", "training.global_batch=8", *extra)


# (total, active) in billions, as the model owners publish them (conf/model/*.yaml cite each).
PUBLISHED = {
    "mixtral_8x7b": (46.7, 12.9),     # Jiang et al. 2024: 47 B, 13 B active
    "mixtral_8x22b": (141.0, 39.0),   # mistral.ai announcement
    "qwen3_30b_a3b": (30.5, 3.3),     # Hugging Face model card
    "qwen3_235b_a22b": (235.0, 22.0),
    "llama4_scout": (107.8, 17.2),    # text model; the published 109 B includes the vision encoder
    "llama4_maverick": (400.0, 17.0),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_total_and_active_parameters(config, name):
    cfg = _model(config, name)
    total, active = PUBLISHED[name]
    # Published figures are rounded to the last digit given: 3.3 B may be 3.35 B.
    assert float(Fl.total_params(cfg.model, cfg.train.seq_len)) / 1e9 == pytest.approx(total, rel=0.01)
    assert float(Fl.active_params(cfg.model, cfg.train.seq_len)) / 1e9 == pytest.approx(active, rel=0.02)


@pytest.mark.parametrize("name, total, active", [("deepseek_v2", 236.0, 21.0), ("deepseek_v2_lite", 15.7, 2.4)])
def test_deepseek_v2_published_counts_without_the_input_embedding(config, name, total, active):
    """DeepSeek-V2 (arXiv:2405.04434, Sec. 3.1 and Appendix B): 236 B total, 21 B activated;
    V2-Lite 15.7 B, 2.4 B activated. The activated figures leave out the input embedding (102,400
    x hidden), as gpt-oss's do (below): V2-Lite's 2.66 B with it would not round to 2.4."""
    cfg = _model(config, name)
    m = cfg.model
    embedding = float(m.vocab * m.hidden)
    assert float(Fl.total_params(m, cfg.train.seq_len)) / 1e9 == pytest.approx(total, rel=0.005)
    assert (float(Fl.active_params(m, cfg.train.seq_len)) - embedding) / 1e9 == pytest.approx(active, rel=0.025)


@pytest.mark.parametrize("name, total, active", [("glm45_355b_a32b", 355.0, 32.0),
                                                 ("glm45_air_106b_a12b", 106.0, 12.0)])
def test_glm45_published_counts_without_the_embeddings(config, name, total, active):
    """GLM-4.5: 355 B total, 32 B activated; GLM-4.5-Air 106 B, 12 B (GLM-4.5 report, Table 1).
    The totals are met within 1 % (GLM-4.5's with its MTP layer: 356.8 B; Air 106.9 B), as the other
    published totals here; the activated ones within half a unit of their last digit, leaving out
    the input embedding and the untied output head (2 x 151,552 x hidden: 1.55 B, 1.24 B; with
    them 34.0 and 13.4 B)."""
    cfg = _model(config, name)
    m = cfg.model
    embeddings = 2.0 * float(m.vocab * m.hidden)
    assert float(Fl.total_params(m, cfg.train.seq_len)) / 1e9 == pytest.approx(total, rel=0.01)
    assert (float(Fl.active_params(m, cfg.train.seq_len)) - embeddings) / 1e9 == pytest.approx(active, abs=0.5)


@pytest.mark.parametrize("name, total, active", [("gpt_oss_120b", 116.83, 5.13), ("gpt_oss_20b", 20.91, 3.61)])
def test_gpt_oss_counts_the_unembedding_as_active(config, name, total, active):
    """gpt-oss model card (arXiv:2508.10925), Table 1: 116.83 B total and 5.13 B active for
    gpt-oss-120b, 20.91 B and 3.61 B for gpt-oss-20b, the active count without the input embedding."""
    cfg = _model(config, name)
    m = cfg.model
    embedding = float(m.vocab * m.hidden)
    assert float(Fl.total_params(m, cfg.train.seq_len)) / 1e9 == pytest.approx(total, rel=2e-3)
    assert (float(Fl.active_params(m, cfg.train.seq_len)) - embedding) / 1e9 == pytest.approx(active, rel=2e-3)


def test_qwen3_layer_by_hand(config):
    """Qwen3-30B-A3B, one layer: Q 2048 x 32*128, K and V 2048 x 4*128 each, O 4096 x 2048;
    128 experts of 3 x 2048 x 768; router 2048 x 128; two norms."""
    m = _model(config, "qwen3_30b_a3b").model
    attention = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048
    assert float(Fl.attention_params(m)) == attention
    assert float(Fl.layer_params(m)) == attention + 128 * 3 * 2048 * 768 + 2048 * 128 + 2 * 2048
    # Forward FLOPs per sequence of 4096: 2 s (attention + 8 experts) + router; core 4 s^2 a d.
    gemm, core = Fl.layer_forward_flops(m, 4096.0)
    assert float(gemm) == pytest.approx(2 * 4096 * (attention + 8 * 3 * 2048 * 768) + 2 * 4096 * 2048 * 128, rel=1e-12)
    assert float(core) == pytest.approx(4 * 4096**2 * 32 * 128, rel=1e-12)


def test_dense_layers_and_shared_experts_by_hand(config):
    """Llama 4 Maverick: half the layers dense (3 x 5120 x 16384), half routed (128 + 1 shared
    experts of 3 x 5120 x 8192, router 5120 x 128); a token passes 16384 or 2 x 8192 of MLP."""
    m = _model(config, "llama4_maverick").model
    expert = 3 * 5120 * 8192
    dense_mlp, moe_mlp = 3 * 5120 * 16384, 129 * expert + 5120 * 128
    assert float(Fl.layer_params(m)) == pytest.approx(
        float(Fl.attention_params(m)) + 0.5 * dense_mlp + 0.5 * moe_mlp + 2 * 5120, rel=1e-12)
    assert float(Fl.mlp_width_per_token(m)) == 0.5 * 16384 + 0.5 * 2 * 8192
    assert float(Fl.routed_params_per_layer(m)) == 0.5 * 128 * expert


def test_expert_gemms_see_top_k_of_the_tokens(config):
    """Balanced routing: each of the 8 Mixtral experts multiplies top_k/8 of the tokens, so the
    experts' GEMM time is that of 8 grouped GEMMs of top_k/8 of the tokens each."""
    cfg = _model(config, "mixtral_8x7b", "training.micro_batch=4", "training.global_batch=32")
    m, g, t = cfg.model, cfg.gpu, cfg.train
    column, row = C.layer_gemm_times(m, g, t, 1.0, 1.0)
    tokens = 4.0 * 4096
    rate = C.matmul_peak_flops(g, t)
    expert_tokens = tokens * 2 / 8
    up = C.gemm_time(expert_tokens, 4096.0, 2 * 14336.0, rate, g, half_dim_factor=C.GROUPED_GEMM_HALF_DIM_FACTOR)
    qkv = C.gemm_time(tokens, 4096.0, 4096.0 + 2 * 1024.0, rate, g)
    assert float(column) == pytest.approx(float(qkv + 8 * up), rel=1e-12)


def test_grouped_expert_gemms_halve_at_twice_the_dense_size(config):
    """One sequence of 4096 tokens, top-2 of 8 experts: 1024 tokens per expert. The experts' up
    projection (1024 x 4096 x 28672 each) runs at 1024 / (1024 + 2 d_half) of the large-GEMM
    rate (SimuMax's B200 grouped-GEMM table: halving at 290-400 tokens, against 157 for one
    dense GEMM), compute bound here."""
    cfg = _model(config, "mixtral_8x7b", "training.micro_batch=1", "training.global_batch=32")
    m, g, t = cfg.model, cfg.gpu, cfg.train
    column, _ = C.layer_gemm_times(m, g, t, 1.0, 1.0)
    rate, d_half = float(C.matmul_peak_flops(g, t)), float(g.matmul_half_dim)
    expert_up = 2 * 1024 * 4096 * 28672 / (rate * 1024 / (1024 + 2 * d_half))
    qkv = C.gemm_time(4096.0, 4096.0, 4096.0 + 2 * 1024.0, rate, g)
    assert float(column) == pytest.approx(float(qkv) + 8 * expert_up, rel=1e-9)


def test_dense_layers_need_an_moe_model(config):
    with pytest.raises(ConfigError, match=r"model.n_dense_layers=2 is not allowed"):
        _model(config, "llama3_8b", "model.n_dense_layers=2")


def test_deepseek_v3_mla_and_published_counts(config):
    """DeepSeek-V2 Sec. 2.1 (Eqs. 9-17) with V3's sizes: W_DQ 7168 x 1536, W_UQ 1536 x 128*192,
    W_DKV + W_KR 7168 x (512 + 64), W_UK + W_UV 512 x 128*(128 + 128), W_O 128*128 x 7168 =
    187.1 M per layer. Published: 671 B main model + 11.5 B MTP module, 37 B active
    (README_WEIGHTS.md: 36.7 B, embedding and head included)."""
    cfg = _model(config, "deepseek_v3")
    m = cfg.model
    mla = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert float(Fl.attention_params(m)) == mla == pytest.approx(187.1e6, rel=1e-3)
    # Attention core, forward per sequence: QK^T over 192 and scores x V over 128, 2 s^2 a (192 + 128).
    _, core = Fl.layer_forward_flops(m, 4096.0)
    assert float(core) == 2 * 4096**2 * 128 * 320
    main = cfg.model._replace(mtp_layers=0.0 * m.mtp_layers)
    assert float(Fl.total_params(main, 4096.0)) / 1e9 == pytest.approx(671.0, rel=0.01)
    assert float(Fl.total_params(m, 4096.0) - Fl.total_params(main, 4096.0)) / 1e9 == pytest.approx(11.5, rel=0.03)
    assert float(Fl.active_params(main, 4096.0)) / 1e9 == pytest.approx(37.0, rel=0.02)


def test_kimi_k2_published_counts(config):
    """Kimi-K2 README: "Total Parameters 1T, Activated Parameters 32B", i.e. 1.0-1.05 T and
    32-33 B as printed (by hand: 61 layers of 101.1 M MLA + 1 dense, 60 routed of 385 experts)."""
    cfg = _model(config, "kimi_k2")
    assert 1.0 <= float(Fl.total_params(cfg.model, 4096.0)) / 1e12 < 1.05
    assert 32.0 <= float(Fl.active_params(cfg.model, 4096.0)) / 1e9 < 33.0


@pytest.mark.parametrize("ep", [1.0, 8.0, 64.0])
def test_expert_parallel_gathers_tokens_onto_fewer_experts(config, ep):
    """EP places 256/ep experts on a GPU, each fed top_k x tokens x ep / 256 tokens: the same
    FLOPs as ep = 1, in fewer, fatter GEMMs."""
    cfg = _model(config, "deepseek_v3", "training.micro_batch=1")
    m, g, t = cfg.model, cfg.gpu, cfg.train
    rate = C.matmul_peak_flops(g, t)
    column, _ = C.layer_gemm_times(m, g, t, 1.0, 1.0, ep)
    tokens = 4096.0
    grouped = C.GROUPED_GEMM_HALF_DIM_FACTOR
    experts = (256 / ep) * C.gemm_time(tokens * 8 * ep / 256, 7168.0, 2 * 2048.0, rate, g, half_dim_factor=grouped)
    dense = C.gemm_time(tokens, 7168.0, 2 * 18432.0, rate, g)
    shared = C.gemm_time(tokens, 7168.0, 2 * 2048.0, rate, g)
    qkv = C.gemm_time(tokens, 7168.0, (float(Fl.attention_params(m)) - 128 * 128 * 7168) / 7168, rate, g)
    expected = qkv + 3 / 61 * dense + 58 / 61 * (experts + shared)
    assert float(column) == pytest.approx(float(expected), rel=1e-12)


def test_folded_experts_stay_whole_on_fewer_tokens(config):
    """MoE parallel folding, DeepSeek-V3 at tp 2, ep 16, etp 1: each GPU holds 256/16 experts
    whole (width 2048) and runs through each the top-8 copies of its TP share of the tokens,
    4096 x 8 x 16 x 1 / (2 x 256) = 1024; without folding (etp = tp) the experts are split in
    two and see 2048 tokens. Same FLOPs, other shapes."""
    cfg = _model(config, "deepseek_v3", "training.micro_batch=1")
    m, g, t = cfg.model, cfg.gpu, cfg.train
    rate = C.matmul_peak_flops(g, t)
    column, _ = C.layer_gemm_times(m, g, t, 2.0, 1.0, 16.0, 1.0)
    grouped = C.GROUPED_GEMM_HALF_DIM_FACTOR
    experts = 16 * C.gemm_time(1024.0, 7168.0, 2 * 2048.0, rate, g, half_dim_factor=grouped)
    dense = C.gemm_time(4096.0, 7168.0, 2 * 18432.0 / 2, rate, g)
    shared = C.gemm_time(4096.0, 7168.0, 2 * 2048.0 / 2, rate, g)
    qkv = C.gemm_time(4096.0, 7168.0, (float(Fl.attention_params(m)) - 128 * 128 * 7168) / 7168 / 2, rate, g)
    assert float(column) == pytest.approx(float(qkv + 3 / 61 * dense + 58 / 61 * (experts + shared)), rel=1e-12)
    unfolded, _ = C.layer_gemm_times(m, g, t, 2.0, 1.0, 16.0)
    split = 16 * C.gemm_time(2048.0, 7168.0, 2 * 2048.0 / 2, rate, g, half_dim_factor=grouped)
    assert float(unfolded) == pytest.approx(float(qkv + 3 / 61 * dense + 58 / 61 * (split + shared)), rel=1e-12)


@pytest.mark.slow
def test_deepseek_v3_sweep_file_puts_the_all_to_all_on_nvlink_in_an_nvl72_rack(compose, tmp_path):
    """conf/space/deepseek_v3_b200_vs_gb200.yaml at 256 GPUs: for every layout both GPUs run,
    GB200's EP all-to-all (inside the 72-GPU NVLink domain) costs less than B200's wherever the
    EP group (ep x etp ranks) outgrows B200's 8-GPU baseboard, and the same inside it (both
    NVLink5 at 900 GB/s); the larger the group, the larger B200's penalty. At tp 2 the file
    also holds folded layouts (etp 1), whose EP group of 8 fits a baseboard again."""
    from jctopt.tasks.sweep import run_sweep

    cfg = compose("task=sweep", "model=deepseek_v3", "space=deepseek_v3_b200_vs_gb200",
                  "space.n_gpus=[256]", "training.global_batch=4096", "sweep.keep=all", "sweep.progress=false")
    df = run_sweep(cfg, tmp_path / "sweep")
    assert set(df.schedule) == {"1f1b", "dualpipe"}
    df = df[df.schedule == "1f1b"]  # DualPipe hides the all-to-all whichever the rack (tests/test_schedules.py)
    layout = ["tp", "pp", "ep", "etp", "vpp", "recompute"]
    both = df[df.gpu == "b200"].merge(df[df.gpu == "gb200"], on=layout, suffixes=("_b200", "_gb200"))
    assert len(both) > 20 and set(both.ep) == {8, 16, 32, 64}
    assert ((both.tp == 2) & (both.etp == 1)).any() and ((both.tp == 2) & (both.etp == 2)).any()
    inside = both.ep * both.etp <= 8
    assert np.allclose(both.ep_comm_s_gb200[inside], both.ep_comm_s_b200[inside], rtol=1e-12)
    assert (both.ep_comm_s_gb200[~inside] < both.ep_comm_s_b200[~inside]).all() and (~inside).sum() > 10
    ratio = (both.ep_comm_s_b200 / both.ep_comm_s_gb200).groupby(both.ep).median()
    assert ratio[64] > ratio[8]


def test_each_all_to_all_is_hidden_by_the_block_beside_it():
    """Megatron-Core's 1F1B EP overlap places combine_bwd beside the mixer's forward,
    dispatch_fwd beside the MLP's data gradient, dispatch_bwd beside its weight gradient and the
    next forward, combine_fwd beside the mixer's backward: by hand, with all-to-alls of 3 ms, a
    1 ms mixer (0.5 ms of it the attention core, backward 2.5x) and a 2 ms MLP, the windows are
    1, 2, 4 and 2 x 0.5 + 2.5 x 0.5 = 2.25 ms: 2 + 1 + 0 + 0.75 = 3.75 ms exposed."""
    from jctopt.model import ep_overlap as Eo

    assert float(Eo.exposed_per_layer(3e-3, 1e-3, 2e-3, 0.5e-3, 2.5)) == pytest.approx(3.75e-3, rel=1e-12)
    assert float(Eo.exposed_per_layer(0.9e-3, 1e-3, 2e-3, 0.5e-3, 2.5)) == 0.0  # shorter than every block


@pytest.mark.parametrize("fabric, ep", [("ib_ndr400", 32), ("eth100_tcp", 64)])
def test_overlapped_all_to_all_shows_what_outlasts_its_block(config, fabric, ep):
    """With ep_comm_overlap each of a layer's four all-to-alls runs beside one block of the other
    micro-batch (model.ep_overlap): exposed per micro-batch = MoE layers x the sum over the four
    blocks of max(0, all-to-all - block); without it all of them show. Over NDR400 some of the
    32-wide group's traffic still shows, over 100G TCP most of the 64-wide group's does; the
    overlap never adds time."""
    import jctopt
    from jctopt.model import compute as Cm

    base = ("model=deepseek_v3", "gpu=h100_sxm", f"fabric={fabric}", "training=modern", "layout.n_gpus=512",
            "layout.tp=1", "layout.pp=8", "layout.vpp=1", f"layout.ep={ep}", "training.global_batch=1024")
    off_cfg = config(*base, "training.ep_comm_overlap=false")
    off, on = jctopt.estimate(off_cfg), jctopt.estimate(config(*base, "training.ep_comm_overlap=true"))
    m, g, _, _, lay, t, _ = off_cfg
    n = float(off.n_micro)
    moe_layers = 8 * (58 / 61)  # the busiest of 61 layers' 8 stages holds 8; 3 of the 61 are dense
    a2a = float(off.ep_comm_s) / n / (4 * moe_layers)  # no full recompute in training=modern
    gemm, core, elem = Cm.layer_times(m, g, t, lay.tp, lay.cp, lay.ep, lay.etp)
    mixer, mlp = (float(x) for x in Cm.layer_block_times(m, g, t, lay.tp, lay.cp, gemm, core, elem))
    core = float(core)
    windows = (mixer, mlp, 2 * mlp, 2 * mixer + 0.5 * core)
    exposed = n * moe_layers * sum(max(a2a - w, 0.0) for w in windows)
    assert float(on.compute_s) == pytest.approx(float(off.compute_s), rel=1e-12)
    assert float(on.ep_comm_s) == pytest.approx(exposed, rel=1e-6)
    assert 0.0 < float(on.ep_comm_s) < float(off.ep_comm_s)


def test_load_imbalance_scales_the_busiest_ranks_experts_and_all_to_all(config):
    """training.moe_imbalance 1.25: the busiest EP rank runs its experts' grouped GEMMs on 1.25x
    the balanced tokens, receives and returns 1.25x the all-to-all bytes, and keeps 1.25x the
    routed activations; attention and the dense parts do not change."""
    args = ("training.micro_batch=4", "training.global_batch=32", "layout.ep=8", "training.recompute=none")
    balanced = _model(config, "mixtral_8x7b", *args)
    skewed = _model(config, "mixtral_8x7b", *args, "training.moe_imbalance=1.25")
    m, g = balanced.model, balanced.gpu
    tokens = 4.0 * 4096
    rate = C.matmul_peak_flops(g, balanced.train)
    # One expert per GPU at ep 8, fed by all 8 ranks: tokens x top_k x ep / n_experts = 2 x tokens.
    up = C.gemm_time(1.25 * tokens * 2, 4096.0, 2 * 14336.0, rate, g, half_dim_factor=C.GROUPED_GEMM_HALF_DIM_FACTOR)
    qkv = C.gemm_time(tokens, 4096.0, 4096.0 + 2 * 1024.0, rate, g)
    column, _ = C.layer_gemm_times(m, g, skewed.train, 1.0, 1.0, 8.0, 1.0)
    assert float(column) == pytest.approx(float(qkv + up), rel=1e-12)
    assert float(estimate(skewed).ep_comm_s) == pytest.approx(1.25 * float(estimate(balanced).ep_comm_s), rel=1e-12)
    routed = 0.25 * 2 * 14336 * tokens * (4.0 + 2.0)  # the excess of 2 routed copies' MLP activations, bf16, SwiGLU
    mem = [Mem.activation_bytes_per_layer(c.model, c.layout, c.train)[1] for c in (balanced, skewed)]
    assert float(mem[1] - mem[0]) == pytest.approx(routed, rel=1e-12)


def test_load_imbalance_below_balance_is_refused(config):
    with pytest.raises(ConfigError, match=r"training\.moe_imbalance=0\.9 is not allowed"):
        _model(config, "mixtral_8x7b", "training.moe_imbalance=0.9")
