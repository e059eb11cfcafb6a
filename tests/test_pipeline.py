"""Uneven pipeline splits (Megatron-Core's embedding/loss accounting) against hand counts."""

import pytest

from jctopt.config import ConfigError
from jctopt.job.jct import estimate
from jctopt.model import compute as C
from jctopt.model import pipeline as P


@pytest.mark.parametrize("layers, pp, vpp, middle, last", [
    (96, 8, 1, 12, 12),    # even: L / pp on every rank, the last also holds the logits
    (96, 8, 2, 12, 12),
    (126, 8, 1, 16, 15),   # Llama 3.1 405B on PP 8: 126 + 2 = 128 units, 16 per rank
    (126, 8, 8, 16, 15),   # PP 8 x VP 8: 2 units per virtual stage, 8 stages per rank
    (126, 16, 4, 8, 7),    # PP 16 x VP 4: 128 / 64 = 2 units per virtual stage
    (30, 4, 8, 8, 7),      # the 30-layer proxy on PP 4 x VP 8: one unit per virtual stage
    (32, 3, 1, 12, 11),    # 34 units over 3 ranks: ceil(11.33) = 12
])
def test_stage_layers_by_hand(layers, pp, vpp, middle, last):
    got = P.stage_layers(float(layers), float(pp), float(vpp))
    assert (float(got[0]), float(got[1])) == (middle, last)


@pytest.mark.parametrize("pp, vpp, middle, last", [
    (4, 1, 16, 13),   # embedding + 16 | 16 | 16 | 13 + MTP + loss
    (8, 1, 8, 5),     # embedding + 8 | 6 x 8 | 5 + MTP + loss
    (16, 1, 4, 1),    # embedding + 4 | 14 x 4 | 1 + MTP + loss
    (4, 4, 16, 13),   # the 16 chunks of (16, 1), 4 per rank: the last rank holds 4 + 4 + 4 + 1
    (8, 2, 8, 5),
])
def test_deepseek_v3_split_follows_nvidias_layouts(pp, vpp, middle, last):
    """DeepSeek-V3 (61 layers, one MTP module) against the pipeline layouts of Megatron-Bridge's
    DeepSeek-V3 recipes (recipes/deepseek/deepseek_v3.py, ``pipeline_model_parallel_layout``)."""
    got = P.stage_layers(61.0, float(pp), float(vpp), 1.0)
    assert (float(got[0]), float(got[1])) == (middle, last)


@pytest.mark.parametrize("layers, pp, vpp, ok", [(126, 8, 8, True), (30, 4, 8, True), (30, 8, 4, True),
                                                 (30, 4, 9, False), (2, 4, 1, True), (2, 5, 1, False)])
def test_every_virtual_stage_holds_a_unit(layers, pp, vpp, ok):
    assert bool(P.fits(layers, pp, vpp)) == ok


def test_uneven_stage_time_is_the_busiest_rank(config):
    """Llama 3 405B (126 layers) on PP 8: a middle rank's 16 layers, or the last rank's 15
    layers + logits and loss, whichever is slower; the bubble is (pp - 1) of that."""
    cfg = config("model=llama3_405b", "layout.n_gpus=512", "layout.tp=8", "layout.pp=8", "layout.vpp=1",
                 "training.global_batch=256", "training.micro_batch=1")
    m, g, t, lay = cfg.model, cfg.gpu, cfg.train, cfg.layout
    middle = float(C.microbatch_compute_time(m, g, t, lay.tp, lay.cp, 16.0, 0.0))
    last = float(C.microbatch_compute_time(m, g, t, lay.tp, lay.cp, 15.0, 1.0))
    est = estimate(cfg)
    per_micro = max(middle, last)
    assert float(est.compute_s) == pytest.approx(float(est.n_micro) * per_micro, rel=1e-9)
    # 405B's logits (V h = 2.1 G weights) weigh less than a layer (3.2 G): a middle rank is the busiest.
    assert middle > last


def test_config_rejects_more_virtual_stages_than_units(config):
    with pytest.raises(ConfigError, match=r"layout.pp=8 .*at most model.n_layers \+ 2 = 128"):
        config("model=llama3_405b", "layout.n_gpus=1024", "layout.tp=8", "layout.pp=8", "layout.vpp=32",
               "training.global_batch=1024", "training.micro_batch=1")
