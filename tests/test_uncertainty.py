"""Model error x failure randomness (jctopt.job.uncertainty, tasks._risk) against hand values."""

import numpy as np
import pandas as pd
import pytest

import jctopt
from jctopt.job import failure_time as F
from jctopt.job import risk as _risk
from jctopt.job import uncertainty as U
from jctopt.tasks.calibrate import held_out_coverage, model_error


def test_quantiles_are_the_weighted_type5_ones():
    # Hyndman & Fan type 5: the i-th of n sorted values sits at (i - 1/2) / n.
    assert U.quantiles_of([4.0, 1.0, 3.0, 2.0], levels=[0.5, 0.125, 0.875, 0.25]) == [2.5, 1.0, 4.0, 1.5]
    # Weighted: each row sits at the midpoint of its cumulative weight, 1 at 0.5/4, 2 at 2.5/4.
    assert U.quantiles_of([1.0, 2.0], [1.0, 3.0], levels=[0.125, 0.5, 0.625]) == [1.0, 1.75, 2.0]
    with pytest.raises(ValueError, match="too few"):
        U.quantiles_of([np.nan, 1.0])


def test_coverage_of_a_known_distribution():
    x = np.random.default_rng(0).normal(size=200_000)
    q = U.quantiles_of(x)
    for c in (0.5, 0.8, 0.9):
        assert U.coverage(x, q, c) == pytest.approx(c, abs=0.005)
    # N(0, 1): the 0.9 quantile is 1.2816.
    assert q[U.LEVELS.index(0.9)] == pytest.approx(1.2816, abs=0.02)


def test_error_multipliers_are_equiprobable_midpoints():
    k = U.error_multipliers(np.log([0.5, 0.6, 0.7, 0.8, 1.0, 1.2, 1.4, 1.6, 2.0]))
    assert k.shape == (U.N_NODES,) and np.all(np.diff(k) >= 0)
    assert k[0] == pytest.approx(0.5) and k[-1] == pytest.approx(2.0)  # midpoints 0.025 and 0.975
    assert np.log(k[9]) == pytest.approx(np.interp(0.475, U.LEVELS, np.log([0.5, 0.6, 0.7, 0.8, 1.0, 1.2, 1.4,
                                                                              1.6, 2.0])))


ARGS = dict(solve_s=30 * 86400.0, tau_s=2000.0, ckpt_s=30.0, restart_s=600.0, mtbf_s=86400.0, init_s=900.0)


@pytest.mark.slow
def test_no_model_error_is_the_failure_law():
    t = np.array([30.5, 31.0, 31.5]) * 86400
    a = ARGS
    expected = F.wall_time_cdf(t - a["init_s"], a["solve_s"], a["tau_s"], a["ckpt_s"], a["restart_s"], a["mtbf_s"])
    got = U.jct_cdf(t, *a.values(), np.ones(4))
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-12)


@pytest.mark.slow
def test_without_failures_the_quantiles_are_the_scaled_solve_times():
    """MTBF 1e15 s: JCT = init + k S (1 + delta / tau) for each of four equiprobable k."""
    a = dict(ARGS, mtbf_s=1e15)
    k = np.array([0.9, 1.0, 1.1, 1.3])
    free = a["solve_s"] * (1 + a["ckpt_s"] / a["tau_s"])
    for q, kq in ((0.2, 0.9), (0.45, 1.0), (0.6, 1.1), (0.9, 1.3)):  # atoms at 0.25, 0.5, 0.75, 1
        got = float(U.jct_quantile(q, *a.values(), k))
        assert got == pytest.approx(a["init_s"] + kq * free, rel=1e-9)
    mid = a["init_s"] + 1.05 * free  # between the second and the third atom
    assert float(U.jct_cdf(mid, *a.values(), k)) == pytest.approx(0.5, abs=1e-8)  # P(a failure) ~ 3e-9


def test_step_interval_by_hand():
    q = np.log([0.5, 0.6, 0.7, 0.8, 1.0, 1.2, 1.4, 1.6, 2.0])
    lo, hi = U.step_interval(10.0, q, 0.8)  # levels 0.1 and 0.9
    assert (lo, hi) == (pytest.approx(7.0), pytest.approx(14.0))


@pytest.mark.slow
def test_estimate_carries_an_interval_and_a_deadline_probability(compose):
    base = ("task=estimate",)
    r = jctopt.run_estimate(compose(*base)).iloc[0]
    assert r.jct_lo_s < r.jct_s < r.jct_hi_s and r.step_lo_s < r.step_s < r.step_hi_s
    assert r.error_basis in ("rows", "specs")
    wide = jctopt.run_estimate(compose(*base, "job.confidence=0.95")).iloc[0]
    assert wide.jct_lo_s < r.jct_lo_s and wide.jct_hi_s > r.jct_hi_s
    # P(JCT <= deadline) grows with the deadline: 0 well before the interval, 1 well after.
    days = [r.jct_lo_s / 86400 * 0.8, r.jct_s / 86400, r.jct_hi_s / 86400 * 1.3]
    p = [jctopt.run_estimate(compose(*base, f"job.deadline_days={d}")).iloc[0].p_deadline for d in days]
    assert p[0] < 0.01 and 0.05 < p[1] < 0.95 and p[2] > 0.99


def test_p_cheaper_by_hand():
    """Same GPU type (same error), same cost: a coin flip, ties counted half. Twice the cost of
    the other: cheaper only where the error multipliers differ by more than 2x."""
    assert _risk.p_cheaper(1.0, "h100_sxm", 1.0, "h100_sxm") == pytest.approx(0.5)
    k = U.error_multipliers(_risk.log_quantiles(_risk.error_basis("h100_sxm")))
    expected = np.mean(2.0 * k[:, None] < k[None, :])
    assert _risk.p_cheaper(2.0, "h100_sxm", 1.0, "h100_sxm") == pytest.approx(expected)
    assert _risk.p_cheaper(1.0, "h100_sxm", 2.0, "h100_sxm") == pytest.approx(1.0 - expected)


def test_infeasible_rows_get_no_interval():
    rows = pd.DataFrame({"gpu": ["h100_sxm"], "step_s": [np.inf], "steps": [1e5], "ckpt_interval_s": [2000.0],
                         "ckpt_write_s": [30.0], "restart_s": [600.0], "mtbf_s": [86400.0], "jct_s": [np.inf]})
    out = _risk.with_risk(rows, 0.8, 30 * 86400.0, 900.0)
    assert out.p_deadline.iloc[0] == 0.0 and out[["jct_lo_s", "jct_hi_s"]].isna().all(axis=None)


@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.2"])
def test_confidence_must_be_a_probability(compose, value):
    with pytest.raises(jctopt.ConfigError, match=r"job\.confidence"):
        jctopt.to_config(compose("task=estimate", f"job.confidence={value}"))


def test_model_error_record_from_left_out_predictions():
    """Two sources; left-out predictions 10 % slow for one, exact for the other; equal source
    weights: the median log ratio lies between them and the record names its basis."""
    rec = pd.DataFrame({"source": ["a"] * 3 + ["b"] * 5, "measured_iter_time_s": 1.0,
                        "loso_s": [1 / 1.1] * 3 + [1.0] * 5, "lodo_s": 1.0})
    rec["weight"] = np.where(rec.source == "a", 1 / 6, 1 / 10)
    out = model_error(rec)
    q = out["rows"]["log_quantiles"]
    assert q[0] == pytest.approx(0.0) and q[-1] == pytest.approx(np.log(1.1))
    assert 0.0 < q[U.LEVELS.index(0.5)] < np.log(1.1)
    assert out["specs"]["log_quantiles"] == [0.0] * len(U.LEVELS)
    assert set(out["rows"]["coverage_two_fold"]) == set(out["rows"]["coverage_loso"]) == {0.5, 0.8, 0.9}


def test_held_out_coverage_by_hand():
    """Groups a and b all 0, c all 1 (five rows each): a's interval from b and c spans 0..1 and
    covers it, as does b's; c's from a and b is 0..0 and misses: 2/3 at every level."""
    x = np.repeat([0.0, 0.0, 1.0], 5)
    cover = held_out_coverage(x, np.ones_like(x), np.repeat(["a", "b", "c"], 5))
    assert cover == pytest.approx({0.5: 2 / 3, 0.8: 2 / 3, 0.9: 2 / 3})


def test_shipped_intervals_cover_runs_of_sources_they_were_not_taken_from():
    """The shipped error quantiles for GPU types with rows cover each source's left-out
    predictions, taken from every other source, within 5 points of the nominal rate
    (conf/calibration.yaml, ``coverage_loso``; shipped 2026-11-25: 51.1 / 79.4 / 89.0 % at
    50 / 80 / 90 %). Half the sources against the other half (``coverage_two_fold``) is
    stricter: 48.8 / 76.3 / 83.6 %."""
    cover = _risk._record()["model_error"]["rows"]["coverage_loso"]
    for level in (0.5, 0.8, 0.9):
        assert abs(cover[level] - level) <= 0.05, (level, cover[level])


def test_moe_models_carry_the_moe_runs_error():
    """A mixture-of-experts model's interval comes from the MoE runs' error (basis ``moe``,
    stored by calibrate from predictions no efficiency fit saw), whatever the GPU; a dense model's from its
    GPU's basis. At job.confidence 0.8 the step interval is step x exp(q10, q90) of that basis,
    and the MoE basis covers each source's runs from the others' within 5 points
    (shipped 2026-11-29: 47.6 / 78.2 / 88.1 % at 50 / 80 / 90 %)."""
    assert _risk.error_basis("h100_sxm", moe=True) == _risk.error_basis("mi300x", moe=True) == "moe"
    assert _risk.error_basis("h100_sxm") == "rows"
    q = _risk.log_quantiles("moe")
    rows = pd.DataFrame({"gpu": ["h100_sxm", "b200"], "step_s": [10.0, 4.0]})
    out = _risk.with_step_interval(rows, 0.8, moe=True)
    np.testing.assert_allclose(out.step_lo_s, [10.0 * np.exp(q[2]), 4.0 * np.exp(q[2])], rtol=1e-12)
    np.testing.assert_allclose(out.step_hi_s, [10.0 * np.exp(q[6]), 4.0 * np.exp(q[6])], rtol=1e-12)
    cover = _risk._record()["model_error"]["moe"]["coverage_loso"]
    for level in (0.5, 0.8, 0.9):
        assert abs(cover[level] - level) <= 0.05, (level, cover[level])
