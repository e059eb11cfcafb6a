"""Calibrating your own stack (calibrate.stack): the stack-level efficiencies fitted to your runs,
written into your config directory, refused where the runs cannot determine them."""

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

import jctopt
from jctopt.config import ConfigError
from jctopt.config.resources import validation_file
from jctopt.fit.stack_fit import STACK_PARAMS, fit_stack, step_times
from jctopt.model.types import stack as stack_configs
from jctopt.runs import place_rows
from jctopt.tasks import calibrate_stack

# Dense Megatron-era runs at 8-3072 GPUs of runs_dev.csv, as a user's file: no stack column.
COLUMNS = ["id", "source", "model", "layers", "hidden", "ffn_hidden", "heads", "seq_len", "vocab", "gpu", "precision",
           "gpus_per_node", "inter_node", "num_gpus", "tp", "pp", "dp", "sp", "micro_batch", "global_batch",
           "recompute", "zero_stage", "measured_iter_time_s"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "jctopt"


def user_runs(tmp_path, kernel_eff: float, n: int = 8):
    """A user's CSV of ``n`` runs_dev.csv rows whose measured step is the model's at
    ``kernel_eff`` under the generic stack: the fit must find ``kernel_eff`` again."""
    table = pd.read_csv(validation_file("runs_dev.csv"))
    table = table[table["stack"] == "megatron_lm"][COLUMNS].head(n).reset_index(drop=True)
    rows, index, configs = place_rows(jctopt.compose(["task=validate"]), table)
    batch = stack_configs(configs)
    values = {p: float(np.asarray(getattr(batch.train, p))[0]) for p in STACK_PARAMS} | {"kernel_eff": kernel_eff}
    table.loc[index, "measured_iter_time_s"] = np.asarray(step_times(values, batch))
    path = tmp_path / "my_runs.csv"
    table.iloc[index].to_csv(path, index=False)
    return path


@pytest.mark.slow
def test_a_stack_fit_recovers_the_kernel_efficiency_its_runs_ran_at(home, tmp_path):
    runs = user_runs(tmp_path, 0.85)
    cfg = jctopt.compose(["task=calibrate", f"calibrate.runs=[{runs}]", "calibrate.stack=mine"])
    records = calibrate_stack.main(cfg, tmp_path)
    written = OmegaConf.load(home / "stack" / "mine.yaml")
    assert written.stack == "mine" and written.kernel_eff == pytest.approx(0.85, rel=2e-3)
    assert records.fitted_abs_pct_error.max() < 0.5 < records.prior_abs_pct_error.median()
    # From then on stack=mine is a stack like the shipped ones: its flags are generic's.
    mine, generic = jctopt.compose(["task=estimate", "stack=mine"]), jctopt.compose(["task=estimate", "stack=generic"])
    assert mine.training.kernel_eff == pytest.approx(0.85, rel=2e-3) and generic.training.kernel_eff == 1.0
    assert mine.training.mp_comm_overlap == generic.training.mp_comm_overlap
    assert float(jctopt.estimate(jctopt.to_config(mine)).step_s) > float(jctopt.estimate(jctopt.to_config(generic)).step_s)


@pytest.mark.slow
def test_runs_that_cannot_determine_the_stack_are_refused(tmp_path):
    """One run cannot determine a parameter with a prior pull and a robust loss; runs without
    ZeRO-3 leave zero3_overlap_eta at the prior's value, with the reason."""
    table = pd.read_csv(user_runs(tmp_path, 0.9, n=4))
    rows, index, configs = place_rows(jctopt.compose(["task=validate"]), table)
    batch, measured = stack_configs(configs), table.measured_iter_time_s.to_numpy(float)
    prior = {p: float(np.asarray(getattr(batch.train, p))[0]) for p in STACK_PARAMS}
    fit = fit_stack(batch, measured, np.ones(len(measured)), prior)
    assert "kernel_eff" in fit.fitted and "zero3_overlap_eta" in fit.held
    assert fit.values["zero3_overlap_eta"] == prior["zero3_overlap_eta"]
    one = stack_configs(configs[:1])
    with pytest.raises(ConfigError, match=r"calibrate.stack: 1 placed run\(s\) .* cannot determine"):
        fit_stack(one, measured[:1], np.ones(1), prior)


@pytest.mark.parametrize("overrides, message", [
    (["calibrate.stack=generic"], r"calibrate.stack='generic' is not allowed: a shipped stack's name"),
    (["calibrate.stack=MyStack"], r"calibrate.stack='MyStack' is not allowed: a name of lower-case letters"),
    (["calibrate.stack=mine"], r"calibrate.stack needs your runs: calibrate.runs="),
])
def test_calibrate_stack_names_what_is_wrong(home, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        calibrate_stack.main(jctopt.compose(["task=calibrate", *overrides]), tmp_path)
    assert not (home / "stack").exists()  # nothing written


def test_kernel_efficiency_scales_the_compute(config):
    """kernel_eff 0.5: every GEMM, attention and HBM-bound kernel at half the catalog's efficiency,
    so the compute per step close to twice (the attention's fixed cost per call does not scale);
    outside (0, 2] it is refused by name."""
    full, half = config(), config("training.kernel_eff=0.5")
    ratio = float(jctopt.estimate(half).compute_s) / float(jctopt.estimate(full).compute_s)
    assert 1.9 < ratio <= 2.0
    with pytest.raises(ConfigError, match=r"training.kernel_eff=3.0 is not allowed"):
        config("training.kernel_eff=3.0")
