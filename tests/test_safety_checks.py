"""Values the config checks used to accept silently: each is now a ConfigError naming key and value."""

import re

import pytest

import jctopt
from jctopt.config import ConfigError
from jctopt.config.checks import widest_interval
from jctopt.config.resources import PACKAGE_CALIBRATION_RECORD
from jctopt.model.power import STATIC_W


def refused(overrides, message):
    cfg = jctopt.compose(["task=estimate", *overrides])
    with pytest.raises(ConfigError) as err:
        jctopt.to_config(cfg)
    assert str(err.value) == message


def test_a_pipeline_schedule_without_a_pipeline():
    refused(["layout.pp=1", "layout.vpp=1", "layout.schedule=zb_h1"],
            "layout.schedule='zb_h1' is not allowed: 1f1b when layout.pp=1 (a pipeline schedule needs layout.pp > 1)")


def test_a_power_limit_above_the_tdp():
    refused(["gpu=h100_sxm", "cluster.gpu_power_limit_w=2000"],
            f"cluster.gpu_power_limit_w=2000.0 is not allowed: watts in ({STATIC_W:g}, 700]: at most gpu.tdp_w=700 W of "
            "gpu=h100_sxm, or null for its TDP")
    jctopt.to_config(jctopt.compose(["task=estimate", "gpu=h100_sxm", "cluster.gpu_power_limit_w=700"]))


def test_pue_below_one():
    refused(["cluster.pue=0.9"], "cluster.pue=0.9 is not allowed: a number >= 1 (facility power / IT power; "
            "1 = no overhead)")


def test_jitter_cv_above_one():
    refused(["cluster.jitter_cv=1.5"], "cluster.jitter_cv=1.5 is not allowed: a coefficient of variation in [0, 1] "
            "(0.005: 0.5 % per-rank step jitter)")


def test_more_offloaded_layers_than_a_stage_holds():
    """GPT-3 175B: 96 layers over the default layout's pipeline stages."""
    cfg = jctopt.compose(["task=estimate"])
    stage = cfg.model.n_layers // cfg.layout.pp
    assert cfg.model.n_layers % (cfg.layout.pp * cfg.layout.vpp) == 0  # even stages: n_layers / pp each
    jctopt.to_config(jctopt.compose(["task=estimate", f"training.offload_layers={stage}"]))
    refused([f"training.offload_layers={stage + 1}"],
            f"training.offload_layers={stage + 1} is not allowed: at most {stage}, the layers of the busiest pipeline "
            f"stage (model.n_layers={cfg.model.n_layers} over layout.pp={cfg.layout.pp})")


def test_fewer_tokens_than_one_step():
    cfg = jctopt.compose(["task=estimate"])
    step = cfg.training.global_batch * cfg.model.seq_len
    jctopt.to_config(jctopt.compose(["task=estimate", f"job.tokens={step}"]))
    refused([f"job.tokens={step - 1}"],
            f"job.tokens={float(step - 1)!r} is not allowed: at least one step, training.global_batch x model.seq_len "
            f"= {cfg.training.global_batch} x {cfg.model.seq_len} = {step:,} tokens")


def test_confidence_above_what_the_error_quantiles_cover():
    """The shipped quantiles sit at 0.025 ... 0.975: central intervals up to 0.95."""
    assert widest_interval(PACKAGE_CALIBRATION_RECORD) == pytest.approx(0.95, abs=1e-12)
    jctopt.to_config(jctopt.compose(["task=estimate", "job.confidence=0.95"]))
    cfg = jctopt.compose(["task=estimate", "job.confidence=0.99"])
    with pytest.raises(ConfigError, match=re.escape("job.confidence=0.99 is not allowed: a probability in (0, 0.95]: "
                                                    "the model-error quantiles (")):
        jctopt.to_config(cfg)


def test_the_cli_names_key_and_value(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "jctopt.app", "task=estimate", "cluster.pue=0.5",
                           f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == ("configuration error: cluster.pue=0.5 is not allowed: a number >= 1 "
                                                    "(facility power / IT power; 1 = no overhead)")
