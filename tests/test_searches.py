"""deadline, procure and syncwall: exact answers against brute force over small spaces."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from jctopt.config import to_config
from jctopt.job.risk import with_risk
from jctopt.search.grid import configured, search
from jctopt.tasks import deadline, procure, syncwall

SMALL = ["model=gpt3_175b", "space.gpu=[h100_sxm,b200]", "space.fabric=[ib_ndr400,roce400]",
         "space.n_gpus=128:2048:x2", "space.tp=[2,4,8]", "space.pp=[4,8]", "space.vpp=[1,2]",
         "space.micro_batch=[1]", "space.recompute=[selective,full]", "sweep.dtype=float64"]


@pytest.fixture(scope="module")
def everything(compose):
    """Every configuration of the small space, with its outputs."""
    return search(compose(*SMALL), "all")


def _ok(df, days=np.inf):
    return df[(df.reason == "OK") & (df.jct_s <= days * 86400)]


@pytest.mark.slow
@pytest.mark.parametrize("days", [5.0, 12.0, 40.0])
def test_deadline_answer_is_the_cheapest_meeting_it(compose, everything, days):
    front, answer = deadline.run_deadline(compose(*SMALL, f"job.deadline_days={days}"))
    ok = _ok(everything, days)
    assert len(ok) > 0 and len(ok) < len(_ok(everything))  # the deadline binds
    best = answer["best"]
    assert best["jct_s"] <= days * 86400
    assert best["cost_usd"] == pytest.approx(ok.cost_usd.min(), rel=1e-12)
    # the frontier is exactly the non-dominated set of all feasible configurations
    pts = _ok(everything)[["jct_s", "cost_usd"]].to_numpy()
    dominated = [np.any(np.all(pts <= p, axis=1) & np.any(pts < p, axis=1)) for p in pts]
    def rounded(points):  # per-GPU searches batch differently: equal to ~1e-16
        return {tuple(float(f"{v:.12g}") for v in p) for p in points}

    expected = rounded(p for p, d in zip(pts.tolist(), dominated) if not d)
    glob = front[front.on_frontier]
    assert rounded(glob[["jct_s", "cost_usd"]].to_numpy().tolist()) == expected
    assert front.meets_deadline.tolist() == (front.jct_s <= days * 86400).tolist()


@pytest.mark.slow
def test_deadline_with_confidence_is_the_cheapest_likely_to_meet_it(compose, everything):
    """The confident answer is the cheapest configuration of the whole grid with
    P(JCT <= deadline) >= confidence (brute force: every feasible configuration's probability);
    asking for more confidence never costs less."""
    cfg = compose(*SMALL, "job.deadline_days=12")
    risk = with_risk(_ok(everything), 0.8, 12 * 86400.0, cfg.cluster.init_s)
    costs = []
    for conf in (0.5, 0.8, 0.95):
        front, answer = deadline.run_deadline(compose(*SMALL, "job.deadline_days=12", f"job.confidence={conf}"))
        ok = risk[risk.p_deadline >= conf]
        best = answer["best_with_confidence"]
        assert best is not None and answer["confidence"] == conf and len(ok) > 0
        assert best["p_deadline"] >= conf and best["cost_usd"] == pytest.approx(ok.cost_usd.min(), rel=1e-9)
        assert (front.jct_lo_s <= front.jct_s).all() and (front.jct_s <= front.jct_hi_s).all()
        costs.append(best["cost_usd"])
    assert costs == sorted(costs)


@pytest.mark.slow
def test_deadline_nobody_meets_says_what_it_would_take(compose, everything, tmp_path):
    fastest = _ok(everything).jct_s.min() / 86400
    cfg = compose(*SMALL, f"job.deadline_days={fastest * 0.6}")
    front, answer = deadline.run_deadline(cfg)
    assert answer["best"] is None
    assert answer["fastest"]["jct_s"] == pytest.approx(fastest * 86400, rel=1e-12)
    alt = answer["would_take"]
    assert alt is not None and alt["jct_s"] <= fastest * 0.6 * 86400
    assert alt["n_gpus"] > 2048 or alt["gpu"] not in ("h100_sxm", "b200") or alt["fabric"] not in ("ib_ndr400", "roce400")
    deadline.main(cfg, tmp_path)
    assert json.loads((tmp_path / "best.json").read_text())["best"] is None
    assert len(pd.read_parquet(tmp_path / "frontier.parquet")) == len(front)
    assert (tmp_path / "frontier.png").stat().st_size > 10_000


@pytest.mark.slow
def test_procure_picks_the_cheapest_per_type_and_the_flip_price(compose, everything, tmp_path):
    days = 12.0
    df = procure.run_procure(compose(*SMALL, f"job.deadline_days={days}"))
    ok = _ok(everything, days)
    for _, r in df.iterrows():
        mine = ok[ok.gpu == r.gpu]
        assert r.meets_deadline == (len(mine) > 0)
        assert r.cost_usd == pytest.approx(mine.cost_usd.min(), rel=1e-12)
        assert r.energy_kwh > 0 and r.energy_usd == pytest.approx(r.energy_kwh * 0.08, rel=1e-9)
    assert df.winner.sum() == 1
    w, o = df[df.winner].iloc[0], df[~df.winner].iloc[0]
    assert w.cost_usd == df.cost_usd.min()
    # At the break-even price the other type costs exactly what the winner costs.
    assert o.gpu_hours * o.break_even_price_per_gpu_hour == pytest.approx(w.cost_usd, rel=1e-12)
    assert o.price_ratio_flip < 1
    # ... and the winner, priced at its own break-even, costs what the runner-up costs.
    assert w.gpu_hours * w.break_even_price_per_gpu_hour == pytest.approx(o.cost_usd, rel=1e-12)
    text = procure.verdict(df, days)
    assert w.gpu in text and f"{o.break_even_price_per_gpu_hour:.2f}" in text
    # How sure the winner is, across the model error: better than a coin flip, said in the verdict.
    assert 0.5 < w.p_winner_cheaper <= 1.0 and f"cheaper with {w.p_winner_cheaper:.0%} probability" in text


def test_sync_wall_finder_matches_the_closed_form():
    # T(n) = a/n + b n has its minimum at n* = sqrt(a / b) = 1024; on powers of two the wall is 1024.
    n = 2.0 ** np.arange(4, 15)
    a, b = 1024.0**2, 1.0
    t = a / n + b * n
    w = syncwall.wall(n, t, 0.5)
    assert w["wall_n_gpus"] == 1024 and w["fastest_jct_s"] == pytest.approx(2048.0)
    # marginal efficiency 16 -> 32: (T16 / T32 - 1) / (2 - 1), by hand T16 = 65552, T32 = 32800
    assert w["marginal_eff"][1] == pytest.approx(65552 / 32800 - 1)
    eff = w["marginal_eff"]
    assert w["diminishing_n_gpus"] == int(n[np.flatnonzero(eff < 0.5)[0]])
    # a curve still falling at its end has no wall in range
    assert syncwall.wall(n, a / n, 0.5)["wall_n_gpus"] is None


@pytest.mark.slow
def test_syncwall_curves(compose, tmp_path):
    cfg = compose("model=gpt_1p7b", "training.global_batch=1024", "space.gpu=[h100_sxm]",
                  "space.fabric=[eth100_tcp]", "syncwall.n_gpus=8:1024:x2", "space.zero_stage=[1]")
    points, summary = syncwall.run_syncwall(cfg)
    dp = points[points.family == "pure_dp"]
    assert (dp.tp == 1).all() and (dp.pp == 1).all() and len(dp) >= 5
    for _, s in summary.iterrows():
        curve = points[(points.family == s.family)]
        assert s.fastest_jct_s == pytest.approx(curve.jct_s.min())
    # every point is the fastest feasible configuration at its count
    everything = search(configured(cfg, space__n_gpus=[8, 16, 32, 64, 128, 256, 512, 1024]), "all")
    for _, r in points[points.family == "hybrid"].iterrows():
        same = _ok(everything)[_ok(everything).n_gpus == r.n_gpus]
        assert r.jct_s == pytest.approx(same.jct_s.min(), rel=1e-5)
    syncwall.main(cfg, tmp_path)
    assert len(pd.read_parquet(tmp_path / "syncwall.parquet")) == len(points)
    assert (tmp_path / "syncwall.png").stat().st_size > 10_000


@pytest.mark.slow
def test_jctopt_without_arguments_runs_procure(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "jctopt.app", f"hydra.run.dir={tmp_path}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "cheaper buy" in proc.stdout
    df = pd.read_parquet(tmp_path / "procure.parquet")
    assert set(df.gpu) == {"h100_sxm", "b200"} and df.winner.sum() == 1
    assert (tmp_path / "procure.png").stat().st_size > 10_000


@pytest.mark.parametrize("factor,flips", [(1.01, False), (0.99, True)])
def test_procure_answer_flips_at_the_reported_price(compose, factor, flips):
    """Quote the runner-up at its break-even price x factor: below it, it becomes the better buy."""
    base = procure.run_procure(compose(*SMALL, "job.deadline_days=12"))
    w, o = base[base.winner].iloc[0], base[~base.winner].iloc[0]
    price = o.break_even_price_per_gpu_hour * factor
    again = procure.run_procure(compose(*SMALL, "job.deadline_days=12", f"procure.prices={{{o.gpu}:{price}}}"))
    assert again[again.winner].iloc[0].gpu == (o.gpu if flips else w.gpu)
    assert again.set_index("gpu").loc[o.gpu, "price_per_gpu_hour"] == pytest.approx(price, rel=1e-6)


def test_gpu_overrides_are_checked(compose):
    from jctopt import ConfigError

    with pytest.raises(ConfigError, match="space.gpu_overrides.h100_sxm.speed"):
        search(compose(*SMALL, "space.gpu_overrides={h100_sxm:{speed:2}}"), "top_k")
    with pytest.raises(ConfigError, match="procure.prices"):
        procure.run_procure(compose(*SMALL, "procure.prices={mi300x:1.0}"))


def test_dense_twin_of_a_hybrid_latent_moe(compose):
    """Nemotron 3 Super's twin keeps its Mamba-2 and attention layers; its 40 E layers turn
    dense (-), each as wide as a token's path through a routed layer: 22 experts of 2 x 1024 x
    2688, the shared 2 x 4096 x 5376 and the two 4096 x 1024 projections, over 2 x 4096 per unit
    of width (squared ReLU, not gated): 21,184; the same forward FLOPs per token but the router's."""
    from jctopt.model import flops as Fl

    cfg = compose("model=nemotron3_super_120b_a12b")
    twin = syncwall.dense_twin(cfg)
    assert twin.model.layer_pattern == cfg.model.layer_pattern.replace("E", "-") and twin.model.moe_latent_size == 0
    width = (22 * 2 * 1024 * 2688 + 2 * 4096 * 5376 + 2 * 4096 * 1024) / (2 * 4096)
    assert twin.model.ffn_hidden == round(width) == 21184
    moe, dense = to_config(cfg, layout=False).model, to_config(twin, layout=False).model
    router = 2 * 4096 * 40 / 88 * 4096 * 512
    assert float(Fl.layer_forward_flops(dense, 4096)[0]) == pytest.approx(
        float(Fl.layer_forward_flops(moe, 4096)[0]) - router, rel=1e-4)


@pytest.mark.slow
def test_syncwall_of_an_moe_model_beside_its_dense_twin(compose):
    """DeepSeek-V3's dense twin: every layer dense, as wide as a token's path through a routed
    layer on average: 3/61 x 18432 + 58/61 x (8 + 1) x 2048 = 18432; the same active parameters
    but the router's (256 x 7168 per routed layer), no experts. syncwall draws it beside the MoE
    curves; the MoE model, whose all-to-all leaves the 8-GPU node, is slower at every count."""
    from jctopt.model import flops as Fl

    cfg = compose("model=deepseek_v3", "training.global_batch=4096", "space.gpu=[h100_sxm]",
                  "space.fabric=[ib_ndr400]", "syncwall.n_gpus=[512,1024,2048]", "space.tp=[1,2]",
                  "space.pp=[8,16]", "space.ep=[8,16,32,64]", "space.vpp=[1]", "space.micro_batch=[1]",
                  "space.recompute=[full]", "space.zero_stage=[1]")
    twin = syncwall.dense_twin(cfg)
    assert twin.model.ffn_hidden == 18432 and twin.model.n_experts == 1 and list(twin.space.ep) == [1]
    moe_cfg, twin_cfg = to_config(cfg, layout=False), to_config(twin, layout=False)
    router = 58 * 256 * 7168
    active = float(Fl.active_params(moe_cfg.model, 4096.0))
    assert float(Fl.active_params(twin_cfg.model, 4096.0)) == pytest.approx(active - router, rel=2e-4)
    points, summary = syncwall.run_syncwall(cfg)
    assert set(summary.family) == {"hybrid", "dense_twin"}  # 671 B on every GPU (pure DP) fits no H100
    hybrid = points[points.family == "hybrid"].set_index("n_gpus").jct_s
    dense = points[points.family == "dense_twin"].set_index("n_gpus").jct_s
    assert len(hybrid) == 3 and (dense.reindex(hybrid.index) < hybrid).all()
