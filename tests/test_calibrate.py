"""calibrate: recovers known parameters from synthetic step times; leave-one-source-out."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jctopt import _calibrate as Cal
from jctopt.tasks import calibrate

RUNS = Path(__file__).resolve().parents[2] / "shared" / "validation" / "runs_dev.csv"


@pytest.fixture(scope="module")
def problem(compose):
    problem, records = calibrate.problem_from_runs(compose("task=calibrate"), RUNS)
    return problem, records


def test_pack_unpack_round_trip(problem):
    prior = Cal.catalog_values(problem[0])
    back = Cal.unpack(Cal.pack(prior), len(problem[0].gpus))
    for p in Cal.GPU_PARAMS:
        np.testing.assert_allclose(back["gpu"][p], prior["gpu"][p], rtol=1e-12)
    assert float(back["overlap_eta"]) == pytest.approx(prior["overlap_eta"])


def test_source_weights_equal_per_source():
    w = Cal.source_weights(["a", "a", "a", "b"])
    np.testing.assert_allclose(w, [1 / 6, 1 / 6, 1 / 6, 1 / 2])


def test_fit_recovers_known_parameters(problem):
    """Step times generated from known parameters: the fit from the catalog values brings the
    error to ~0 and finds the parameters that the rows constrain."""
    p = problem[0]
    prior = Cal.catalog_values(p)
    truth = {"gpu": {k: np.array(v, float) for k, v in prior["gpu"].items()}, "overlap_eta": 0.6}
    truth["gpu"]["matmul_eff"] = prior["gpu"]["matmul_eff"] * np.array([0.85, 0.8, 0.9])
    truth["gpu"]["mem_eff"] = prior["gpu"]["mem_eff"] * 0.9
    truth["gpu"]["matmul_half_dim"] = np.array([96.0, 128.0, 160.0])
    synthetic = p._replace(measured_s=np.asarray(Cal.step_times(jax.tree.map(jnp.asarray, truth), p)))
    before = np.abs(np.asarray(Cal.step_times(jax.tree.map(jnp.asarray, prior), synthetic)) / synthetic.measured_s - 1)
    # A weak prior: this checks that gradient descent through the model finds the optimum.
    fitted, loss = Cal.fit(synthetic, prior, max_iter=500, prior_weight=1e-6)
    after = np.abs(np.asarray(Cal.step_times(jax.tree.map(jnp.asarray, fitted), synthetic)) / synthetic.measured_s - 1)
    assert np.median(before) > 0.08
    assert np.median(after) < 0.005 and np.percentile(after, 90) < 0.02
    np.testing.assert_allclose(fitted["gpu"]["matmul_eff"], truth["gpu"]["matmul_eff"], rtol=0.05)
    assert float(fitted["overlap_eta"]) == pytest.approx(0.6, abs=0.1)


def test_calibration_lowers_error_on_published_runs(compose):
    fitted, records = calibrate.run_calibrate(compose("task=calibrate"), RUNS, loso=False)
    assert records.fitted_abs_pct_error.median() < records.catalog_abs_pct_error.median()
    assert set(fitted["gpu"]) == {"a100_40gb", "a100_80gb", "h100_sxm"}
    assert all(0 < v["matmul_eff"] < 1 for v in fitted["gpu"].values())
