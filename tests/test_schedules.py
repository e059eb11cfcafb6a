"""Pipeline schedules (model.schedules): bubbles against the papers' formulas, memory, masks."""

import numpy as np
import pytest

from jctopt.config import ConfigError
from jctopt.job.jct import Reason, estimate
from jctopt.model import compute as C
from jctopt.model import schedules as S

# F = B = W: each a third of a micro-batch's stage time.
THIRD = 1.0 / 3.0


@pytest.mark.parametrize("name, vpp, expected", [
    ("1f1b", 1, 7.0),            # (p - 1) micro-batches (Narayanan et al. 2021, Sec. 2.2)
    ("1f1b", 4, 7.0 / 4.0),      # interleaved: (p - 1) / v
    ("zb_h1", 1, 7.0 / 3.0),     # ZB-H1: a third of 1F1B's (Qi et al. 2024, Table 2; README "(p-1)/3m")
    ("zb_v", 2, 0.0),            # ZB-V: zero bubble at F = B = W (Qi et al. 2024, Sec. 6)
    ("dualpipe", 1, 3.0 * 2.0 / 3.0),  # (p/2 - 1)(F&B + B - 3W) = 3 (3 + 2 - 3) thirds
])
def test_bubble_at_equal_passes_matches_the_papers(name, vpp, expected):
    """p = 8, a micro-batch of 1 s, all compute: F = B = W = 1/3 s."""
    got = S.bubble_time(S.SCHEDULES[name], 8.0, float(vpp), 1.0, 1.0, THIRD, THIRD)
    assert float(got) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_bubble_with_unequal_passes_by_hand():
    """p = 8, a micro-batch of 1 s of compute: F = 0.3, B = 0.5, W = 0.2 s.
    ZB-H1 (p-1)(F + B - W) = 7 x 0.6; ZB-V (p-1)(F + B - 2W) / 2 (chunks of half a stage)
    = 7 x 0.4 / 2; DualPipe (p/2 - 1)((F + B + W) + (B + W) - 3W) = 3 x 1.1. With 0.5 s of
    exposed communication per micro-batch besides, ZB-H1 idles it too: 7 x (1.5 - 0.4)."""
    for name, expected in (("zb_h1", 4.2), ("zb_v", 1.4), ("dualpipe", 3.3)):
        assert float(S.bubble_time(S.SCHEDULES[name], 8.0, 1.0, 1.0, 1.0, 0.3, 0.2)) == pytest.approx(expected)
    assert float(S.bubble_time(S.ZB_H1, 8.0, 1.0, 1.5, 1.0, 0.3, 0.2)) == pytest.approx(7.0 * 1.1)
    # A weight-gradient share above a third would make ZB-V's formula negative: no bubble, not a gain.
    assert float(S.bubble_time(S.ZB_V, 8.0, 2.0, 1.0, 1.0, 0.3, 0.4)) == 0.0
    assert float(S.bubble_time(S.ZB_H1, 1.0, 1.0, 1.0, 1.0, 0.3, 0.2)) == 0.0  # no pipeline, no bubble


def test_in_flight_and_parameter_copies():
    """Activations of p micro-batches on 1F1B's first stage, x (1 + (p-1)/(p v)) interleaved
    (Korthikanti et al. 2022, Sec. 4.2.3); ZB-H1 and ZB-V as 1F1B; DualPipe p + 1 and two
    stages' parameters (DeepSeek-V3 report, Table 2). Fewer micro-batches than that cap it."""
    assert float(S.in_flight(S.ONE_F_ONE_B, 8.0, 1.0, 64.0)) == 8.0
    assert float(S.in_flight(S.ONE_F_ONE_B, 8.0, 4.0, 64.0)) == pytest.approx(8.0 * (1.0 + 7.0 / 32.0))
    assert float(S.in_flight(S.ZB_H1, 8.0, 1.0, 64.0)) == 8.0
    assert float(S.in_flight(S.ZB_V, 8.0, 2.0, 64.0)) == 8.0
    assert float(S.in_flight(S.DUALPIPE, 8.0, 1.0, 64.0)) == 9.0
    assert float(S.in_flight(S.ONE_F_ONE_B, 8.0, 1.0, 4.0)) == 4.0
    assert [float(S.parameter_copies(s, 8.0)) for s in range(4)] == [1.0, 1.0, 1.0, 2.0]


LLAMA_405B_PP16 = ("model=llama3_405b", "gpu=h100_sxm", "training=modern", "layout.n_gpus=2048", "layout.tp=8",
                   "layout.pp=16", "training.global_batch=2048", "training.micro_batch=1")


def _passes(cfg):
    """(F, W) of a middle rank's micro-batch (s), from the model's own layer times: 8 layers
    ((126 + 2) / 16 units, tests/test_pipeline.py), W the weight-gradient GEMMs (the forward's)."""
    m, g, t, lay = cfg.model, cfg.gpu, cfg.train, cfg.layout
    gemm, core, elem = (float(x) for x in C.layer_times(m, g, t, lay.tp, lay.cp, lay.ep, lay.etp))
    return 8.0 * (gemm + core + elem), 8.0 * gemm


def test_zero_bubble_schedules_shrink_the_bubble_by_their_formula(config):
    """Llama 3.1 405B on PP 16 (the uneven 126-layer split): ZB-H1 and DualPipe against 1F1B,
    in step terms. The micro-batch time t is 1F1B's bubble / (p - 1); ZB-H1 keeps it and idles
    (p - 1)(t - 2W); DualPipe hides the pipeline sends, so its micro-batch is compute + TP
    communication, and it idles (p/2 - 1)(t + B_full - 3W), B_full = compute - F."""
    base = config(*LLAMA_405B_PP16)
    e1 = estimate(base)
    forward, weight_grad = _passes(base)
    n = float(e1.n_micro)
    compute = float(e1.compute_s) / n
    assert 0.2 < weight_grad / compute < forward / compute < 0.5
    t_mb = float(e1.bubble_s) / 15.0
    zb = estimate(config(*LLAMA_405B_PP16, "layout.schedule=zb_h1"))
    assert float(zb.bubble_s) == pytest.approx(15.0 * (t_mb - 2.0 * weight_grad), rel=1e-9)
    assert float(zb.compute_s) == float(e1.compute_s) and float(zb.mem_total) == float(e1.mem_total)

    dual = estimate(config(*LLAMA_405B_PP16, "layout.schedule=dualpipe"))
    assert float(dual.pp_comm_s) == 0.0 < float(e1.pp_comm_s)
    t_dual = (float(dual.compute_s) + float(dual.tp_comm_s)) / n
    assert float(dual.bubble_s) == pytest.approx(7.0 * (t_dual + compute - forward - 3.0 * weight_grad), rel=1e-9)
    # Two stages' parameters per rank: weights, gradients and optimizer state double.
    assert float(dual.mem_weights) == pytest.approx(2.0 * float(e1.mem_weights), rel=1e-12)
    assert float(dual.mem_optimizer) == pytest.approx(2.0 * float(e1.mem_optimizer), rel=1e-12)


def test_zb_v_runs_two_chunks_and_keeps_1f1b_memory(config):
    """ZB-V on PP 16 x 2 chunks: the activations of 1F1B at vpp 1 (not interleaving's
    1 + (p-1)/(p v) more), and a smaller bubble than interleaved 1F1B on the same chunks."""
    one = estimate(config(*LLAMA_405B_PP16))
    interleaved = estimate(config(*LLAMA_405B_PP16, "layout.vpp=2"))
    zbv = estimate(config(*LLAMA_405B_PP16, "layout.vpp=2", "layout.schedule=zb_v"))
    assert float(zbv.mem_activations) == pytest.approx(float(one.mem_activations), rel=1e-12)
    assert float(interleaved.mem_activations) > float(zbv.mem_activations)
    assert float(zbv.bubble_s) < float(interleaved.bubble_s)


@pytest.mark.parametrize("overrides, needle", [
    (("layout.schedule=zb_v",), r"layout.schedule='zb_v' is not allowed: .*layout.vpp=2"),
    (("layout.schedule=zb_h1", "layout.vpp=2"), r"layout.schedule='zb_h1' .*layout.vpp=1"),
    (("layout.schedule=dualpipe", "training.global_batch=32"),
     r"layout.schedule='dualpipe' .*at least 2 x pp micro-batches per step \(here pp=16, 2 micro-batches\)"),
    (("layout.schedule=gpipe",), r"layout.schedule='gpipe' is not allowed: 1f1b \| zb_h1 \| zb_v \| dualpipe"),
])
def test_a_schedule_that_cannot_run_names_the_key(config, overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        config(*LLAMA_405B_PP16, *overrides)


def test_dualpipe_needs_an_even_pipeline(config):
    with pytest.raises(ConfigError, match=r"layout.schedule='dualpipe' .*an even layout.pp"):
        config("model=llama3_8b", "layout.n_gpus=24", "layout.tp=8", "layout.pp=3", "training.global_batch=24",
               "layout.schedule=dualpipe")


def test_batched_masks_match_the_config_checks(config):
    """The same rules in the vmapped model: a DualPipe step of too few micro-batches is LAYOUT."""
    cfg = config(*LLAMA_405B_PP16)
    few = cfg._replace(layout=cfg.layout._replace(schedule=np.float64(S.DUALPIPE)),
                       train=cfg.train._replace(global_batch=np.float64(32.0)))
    assert int(estimate(few).reason) == Reason.LAYOUT
    odd = cfg._replace(layout=cfg.layout._replace(schedule=np.float64(S.ZB_V)))  # vpp 1
    assert int(estimate(odd).reason) == Reason.LAYOUT


def test_space_schedule_axis(compose):
    """space.schedule: names become codes; without a pipeline every schedule is 1F1B (kept
    once); each schedule appears only with the chunks it runs on."""
    from jctopt.search.space import build_space

    cfg = compose("model=llama3_405b", "space.pp=[1,16]", "space.vpp=[1,2]",
                  "space.schedule=[1f1b,zb_h1,zb_v,dualpipe]")
    space = build_space(cfg.space, cfg.model, cfg.training.global_batch)
    s = space.splits
    assert set(s["schedule"][s["pp"] == 1]) == {S.ONE_F_ONE_B}
    piped = s["pp"] == 16
    for code, vpps in ((S.ONE_F_ONE_B, {1, 2}), (S.ZB_H1, {1}), (S.ZB_V, {2}), (S.DUALPIPE, {1})):
        assert set(s["vpp"][piped & (s["schedule"] == code)]) == vpps
    with pytest.raises(ConfigError, match=r"space.schedule entry 'zb2p' is not allowed: one of 1f1b, zb_h1"):
        build_space(compose("space.schedule=[zb2p]").space, cfg.model, cfg.training.global_batch)
