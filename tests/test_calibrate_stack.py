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
from jctopt.runs import log_rows, place_rows
from jctopt.tasks import calibrate_stack

# Dense Megatron-era runs at 8-3072 GPUs of runs_dev.csv, as a user's file: no stack column.
COLUMNS = ["id", "source", "model", "layers", "hidden", "ffn_hidden", "heads", "seq_len", "vocab", "gpu", "precision",
           "gpus_per_node", "inter_node", "num_gpus", "tp", "pp", "dp", "sp", "micro_batch", "global_batch",
           "recompute", "zero_stage", "measured_iter_time_s"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "jctopt"


def user_runs(tmp_path, kernel_eff: float, n: int = 8, noise: float = 0.0):
    """A user's CSV of ``n`` runs_dev.csv rows whose measured step is the model's at
    ``kernel_eff`` under the generic stack (times a log-normal factor of log-sd ``noise``,
    seeded): the fit must find ``kernel_eff`` again."""
    table = pd.read_csv(validation_file("runs_dev.csv"))
    table = table[table["stack"] == "megatron_lm"][COLUMNS].head(n).reset_index(drop=True)
    rows, index, configs = place_rows(jctopt.compose(["task=validate"]), table)
    batch = stack_configs(configs)
    values = {p: float(np.asarray(getattr(batch.train, p))[0]) for p in STACK_PARAMS} | {"kernel_eff": kernel_eff}
    factor = np.exp(noise * np.random.default_rng(0).standard_normal(len(index)))
    table.loc[index, "measured_iter_time_s"] = np.asarray(step_times(values, batch)) * factor
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
def test_a_calibrated_stack_measures_its_own_error_on_runs_left_out(home, tmp_path):
    """16 runs measured at the model's step x exp(0.05 N(0, 1)): each predicted by the stack fitted
    without it, their median |error| is near 0.6745 x 5 % = 3.4 % and their 80 % interval near
    2 x 1.2816 x 5 % = 0.128 wide in log (loose bounds: 16 draws); the tasks' intervals then
    carry that error. A recalibration on 8 runs (too few) removes it: the across-stack error."""
    from jctopt.job import risk
    from jctopt.job.uncertainty import LEVELS, central

    runs = user_runs(tmp_path, 0.85, n=16, noise=0.05)
    cfg = jctopt.compose(["task=calibrate", f"calibrate.runs=[{runs}]", "calibrate.stack=mine"])
    records = calibrate_stack.main(cfg, tmp_path)
    assert len(records) == 16
    error = OmegaConf.load(home / "stack_error" / "mine.yaml")
    assert list(error.levels) == list(LEVELS) and error.runs == 16 and error.folds.startswith("leave-one-run-out")
    assert 1.5 < records.left_out_abs_pct_error.median() < 7.0
    # Left out, each run is predicted no better than by the fit that saw it.
    assert records.left_out_abs_pct_error.mean() > records.fitted_abs_pct_error.mean()
    lo, hi = central(list(error.log_quantiles), 0.8)
    assert 0.06 < hi - lo < 0.26 and lo < 0.0 < hi
    assert risk.error_basis("h100_sxm", stack="mine") == "stack:mine"
    rows = pd.DataFrame({"gpu": ["a100_sxm"], "step_s": [2.0]})
    out = risk.with_step_interval(rows, 0.8, stack="mine")
    assert float(out.step_lo_s[0]) == pytest.approx(2.0 * np.exp(lo)) and float(out.step_hi_s[0]) == pytest.approx(
        2.0 * np.exp(hi))
    few = user_runs(tmp_path, 0.85, n=8)
    calibrate_stack.main(jctopt.compose(["task=calibrate", f"calibrate.runs=[{few}]", "calibrate.stack=mine"]), tmp_path)
    assert not (home / "stack_error" / "mine.yaml").exists()
    assert risk.error_basis("h100_sxm", stack="mine") == "stacks"


def test_folds_leave_a_source_out_where_there_are_three_else_a_run():
    from jctopt.fit.stack_fit import MAX_FOLDS, folds_of

    fold, how = folds_of(["b", "a", "c", "a"])
    assert fold.tolist() == [1, 0, 2, 0] and how == "leave-one-source-out over 3 sources"
    fold, how = folds_of(["a", "b", "a"])
    assert fold.tolist() == [0, 1, 2] and how == "leave-one-run-out over 3 runs"
    fold, how = folds_of([""] * (MAX_FOLDS + 3))
    assert fold.tolist() == [*range(MAX_FOLDS), 0, 1, 2] and how.endswith(f"round-robin into {MAX_FOLDS} folds")


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


LLAMA_8B = {"model": "Llama 3 8B", "gpu": "h100_sxm", "precision": "bf16", "num_gpus": 8, "tp": 1, "pp": 1, "dp": 8,
            "global_batch": 64, "seq_len": 8192, "recompute": "none", "zero_stage": 3}


def write_log(tmp_path, name: str, text: str, settings: dict = LLAMA_8B):
    (tmp_path / f"{name}.yaml").write_text(OmegaConf.to_yaml(settings))
    path = tmp_path / f"{name}.log"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, text, step_s", [
    # Megatron-LM's training_log: the median after the first two (compiling) iterations.
    ("megatron", "\n".join(f" iteration {i}/ 100 | consumed samples: {64 * i} | elapsed time per iteration (ms): {ms} |"
                           for i, ms in enumerate([9000.0, 4100.0, 4000.0, 4020.0, 3980.0], 1)), 4.0),
    # DeepSpeed's ThroughputTimer, samples/s over every rank: 64 sequences / 16 per s.
    ("deepspeed", "\n".join(f"[Rank 0] epoch=0/micro_step={s}/global_step={s}, RunningAvgSamplesPerSec=15.9, "
                           f"CurrSamplesPerSec={v}, MemAllocated=20GB" for s, v in ((10, 8.0), (20, 16.0), (30, 16.0))), 4.0),
    # Hugging Face Trainer's closing metrics.
    ("hf", "{'train_runtime': 400.0, 'train_samples_per_second': 32.0, 'train_steps_per_second': 0.5}", 2.0),
])
def test_logs_become_rows_with_their_measured_step(tmp_path, name, text, step_s):
    row = log_rows([str(write_log(tmp_path, name, text))]).iloc[0]
    assert row.measured_iter_time_s == pytest.approx(step_s, rel=1e-9) and row.gpu == "h100_sxm"
    assert row.id == name and row.source.endswith(f"{name}.log")


def test_a_torchtitan_log_gives_its_step_through_the_placed_batch(compose, tmp_path):
    """torchtitan logs tokens/s per GPU ("tps: 5,120"): 64 x 8192 tokens over 8 GPUs at 5,120 each
    is 12.8 s a step once the row is placed."""
    text = "\n".join(f"step: {s}  loss: 7.1  memory: 60.2GiB(76%)  tps: {tps}  tflops: 250  mfu: 25%"
                     for s, tps in ((1, "1,000"), (2, "4,000"), (3, "5,120"), (4, "5,100"), (5, "5,140")))
    table = log_rows([str(write_log(tmp_path, "titan", text, dict(LLAMA_8B, stack="torchtitan")))])
    rows, index, _ = place_rows(compose("task=validate"), table)
    assert index == [0] and rows[0]["measured_iter_time_s"] == pytest.approx(64 * 8192 / (8 * 5120), rel=1e-9)
    assert "measured_iter_time_s" in rows[0]["defaults_used"] and rows[0]["stack"] == "torchtitan"


def test_a_log_without_a_step_line_or_settings_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"calibrate.logs: .*quiet.log has no line jctopt reads a step time from"):
        log_rows([str(write_log(tmp_path, "quiet", "loss 7.1\nloss 7.0\n"))])
    alone = tmp_path / "alone.log"
    alone.write_text("elapsed time per iteration (ms): 100.0")
    with pytest.raises(ConfigError, match=r"alone.log needs its run's settings in .*alone.yaml"):
        log_rows([str(alone)])
