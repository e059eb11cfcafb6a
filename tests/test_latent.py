"""LatentMoE (Nemotron 3 Super): routed experts in a narrower width than the model, by hand and
against the release's own weight counts and Megatron-Bridge's model FLOPs."""

import pytest

from jctopt.config import ConfigError
from jctopt.job.jct import estimate
from jctopt.model import flops as Fl
from jctopt.model import latent as La

H, LATENT, FFN, EXPERTS, TOP_K, SHARED = 4096, 1024, 2688, 512, 22, 5376


def _super(config, *extra):
    return config("model=nemotron3_super_120b_a12b", "gpu=gb300", "layout.n_gpus=64", "layout.tp=1", "layout.pp=1",
                  "layout.ep=64", "training.global_batch=512", "training.micro_batch=1", *extra)


def test_routed_layer_by_hand(config):
    """One routed layer: 512 experts of two 1024 x 2688 matrices (squared ReLU, not gated), the
    shared expert 2 x 4096 x 5376 on the hidden state, the router 4096 x 512 and the two latent
    projections 4096 x 1024."""
    m = _super(config).model
    assert float(La.routed_width(m)) == LATENT
    assert float(Fl.routed_expert_params(m)) == 2 * LATENT * FFN
    layer = EXPERTS * 2 * LATENT * FFN + 2 * H * SHARED + H * EXPERTS + 2 * H * LATENT
    assert float(Fl.routed_mlp_params(m, m.n_experts)) == layer


def test_release_weight_counts(config):
    """The BF16 release's safetensors headers (nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16):
    123,611,012,096 weights, 2,942,324,736 of them the MTP block, so a backbone of
    120,668,687,360; 107,898,470,400 of its expert weights idle per token (40 layers x 490
    experts), leaving 12.8 B active ("120B total, 12B active"). One MTP block here lacks one
    norm (4,096) of the release's."""
    cfg = _super(config, "model.mtp_layers=0")
    m, s = cfg.model, cfg.train.seq_len
    assert float(Fl.total_params(m, s)) == 120_668_687_360
    assert float(Fl.total_params(m, s)) - float(Fl.active_params(m, s)) == 40 * 490 * 2 * LATENT * FFN == 107_898_470_400
    with_mtp = _super(config, "model.mtp_layers=1")
    assert float(Fl.total_params(with_mtp.model, s)) == pytest.approx(123_611_012_096, abs=4096)


def test_model_flops_match_the_published_rate(config):
    """Megatron-Bridge docs/performance-summary.md @067f987d, 26.08, Nemotron_3_Super on 64 GB300
    (MXFP8, sequence 8192): 831 model TFLOP/s per GPU at 9,856 tokens/s per GPU, 84.3 GFLOP per
    token; the catalog's two MTP passes counted as two average layers and two output heads:
    within 3 %."""
    cfg = _super(config)
    per_token = float(Fl.model_flops_per_step(cfg.model, cfg.train)) / (512 * 8192)
    assert per_token == pytest.approx(831e12 / 9856, rel=0.03)


def test_latent_projections_replace_width_in_the_flops(config):
    """Per token and routed layer the experts run 22 x 2 x 2 x l x 2688 FLOPs forward and the two
    projections 2 x 2 x h x l; without the latent the experts run in h."""
    latent = _super(config, "model.mtp_layers=0").model
    plain = _super(config, "model.mtp_layers=0", "model.moe_latent_size=0").model
    delta = float(Fl.layer_forward_flops(plain, 1)[0]) - float(Fl.layer_forward_flops(latent, 1)[0])
    per_routed_layer = TOP_K * 2 * 2 * (H - LATENT) * FFN - 2 * 2 * H * LATENT
    assert delta == pytest.approx(40 / 88 * per_routed_layer, rel=1e-12)


def test_latent_width_shrinks_dispatch_and_permutation(config):
    """A dispatched token is l wide, not h: the all-to-all carries a quarter of the bytes (its
    latency terms aside), and the expert GEMMs read l-wide inputs."""
    latent, plain = _super(config), _super(config, "model.moe_latent_size=0")
    ep_latent = float(estimate(latent).ep_comm_s)
    ep_plain = float(estimate(plain).ep_comm_s)
    assert ep_latent < 0.3 * ep_plain
    assert float(Fl.mlp_input_width_per_token(latent.model)) == pytest.approx(
        40 / 88 * (TOP_K * LATENT + H + H + LATENT), rel=1e-12)


@pytest.mark.parametrize("override, allowed", [
    (("model=llama3_8b", "model.moe_latent_size=512"), "below model.hidden=4096 in an MoE model"),
    (("model=nemotron3_super_120b_a12b", "model.moe_latent_size=4096"), "below model.hidden=4096 in an MoE model")])
def test_latent_width_is_checked_by_key(config, override, allowed):
    with pytest.raises(ConfigError, match=rf"model.moe_latent_size=\d+ is not allowed: 0, or {allowed}"):
        config(*override, "layout=single_node", "layout.tp=1", "training.global_batch=8")


def _ultra(config, *extra):
    return config("model=nemotron3_ultra_550b_a55b", "gpu=gb300", "layout.n_gpus=256", "layout.tp=1", "layout.pp=1",
                  "layout.ep=64", "training.global_batch=256", "training.micro_batch=1", *extra)


def test_ultra_published_sizes(config):
    """Nemotron 3 Ultra, "550B total / A55B active" (Megatron-Bridge docs/models/nemotron/
    nemotron3-ultra.md @067f987d), without its MTP block: by hand, 108 layers of hidden 8192:
    48 routed layers of 512 experts (two 2048 x 5120 matrices each), the shared expert 2 x 8192
    x 10240, the router 8192 x 512 and the latent projections 2 x 8192 x 2048."""
    m = _ultra(config, "model.mtp_layers=0").model
    assert float(Fl.routed_mlp_params(m, m.n_experts)) == (512 * 2 * 2048 * 5120 + 2 * 8192 * 10240 + 8192 * 512
                                                          + 2 * 8192 * 2048)
    s = 8192
    assert float(Fl.total_params(m, s)) / 1e9 == pytest.approx(550, rel=0.01)
    assert float(Fl.active_params(m, s)) / 1e9 == pytest.approx(55, rel=0.03)  # "A55B" a rounded name


def test_ultra_model_flops_match_the_published_rate(config):
    """Megatron-Bridge docs/performance-summary.md @067f987d, 26.08, Nemotron_3_Ultra on 256 GB300
    (MXFP8, sequence 8192): 1281 model TFLOP/s per GPU at 3,552 tokens/s per GPU, 360.6 GFLOP
    per token, two MTP passes included; the vocabulary the entry takes from this (131,072) is
    what makes it agree: within 1 %."""
    cfg = _ultra(config)
    per_token = float(Fl.model_flops_per_step(cfg.model, cfg.train)) / (256 * 8192)
    assert per_token == pytest.approx(1281e12 / 3552, rel=0.01)
