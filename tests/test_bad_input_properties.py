"""Property tests for bad input: generated malformed runs files and generated design-space
specs end in a result or in one ConfigError naming a key or a row, never in another exception."""

from functools import partial

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

import jctopt
from jctopt.config import cluster_with
from jctopt.config.resources import validation_file
from jctopt.runs import predict as runs_predict
from jctopt.search.space import build_space

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Two dense rows and two mixture-of-experts rows (the MoE and MLA columns of runs_moe_dev.csv).
ROWS = pd.concat([pd.read_csv(validation_file("runs_dev2.csv")).iloc[[0, 100]],
                  pd.read_csv(validation_file("runs_moe_dev.csv")).iloc[[0, 44]]], ignore_index=True)
MOE = ["experts", "top_k", "moe_ffn_hidden", "shared_experts", "dense_layers", "attention", "etp", "kv_lora_rank",
       "q_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim", "mtp_layers", "ep"]
NUMERIC = ["layers", "hidden", "ffn_hidden", "heads", "kv_heads", "seq_len", "vocab", "num_gpus", "tp", "pp",
           "dp", "cp", "vpp", "micro_batch", "global_batch", "zero_stage", "measured_iter_time_s"]
junk = st.one_of(st.none(), st.text(max_size=6), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                 st.sampled_from(["", "nan", "inf", "-1", "0", "1e30", "bf16", "h100_sxm", "full"]))
edits = st.lists(st.tuples(st.integers(0, len(ROWS) - 1), st.sampled_from(NUMERIC + MOE + ["gpu", "precision", "recompute",
                                                                                             "inter_node", "source"]), junk),
                 min_size=1, max_size=6)


@pytest.fixture(scope="module")
def validate_cfg():
    return jctopt.compose(["task=validate"])


@pytest.mark.slow
@SETTINGS
@given(edits=edits, drop=st.lists(st.sampled_from(list(ROWS.columns)), max_size=2))
def test_validate_on_a_malformed_file_names_the_file_or_the_row(validate_cfg, tmp_path_factory, edits, drop):
    table = ROWS.astype(object).copy()
    for row, column, value in edits:
        table.loc[row, column] = value
    path = tmp_path_factory.mktemp("runs") / "runs.csv"
    table.drop(columns=drop).to_csv(path, index=False)
    try:
        df = runs_predict.run_validate(validate_cfg, path)
    except jctopt.ConfigError as err:
        assert str(err).startswith("validate.runs=")  # a whole-file problem names the key
        event("whole file refused")
        return
    assert len(df) == len(pd.read_csv(path))  # one result per row as read (a bare \r in a cell starts a row)
    for _, r in df.iterrows():  # every row is predicted, or says why not
        predicted = np.isfinite(r.predicted_iter_time_s) and r.predicted_iter_time_s > 0
        assert predicted or (isinstance(r.reason, str) and r.reason)
        event("row predicted" if predicted else "row refused with a reason")


@pytest.fixture(scope="module")
def sweep_cfg():
    return jctopt.compose(["task=sweep"])


axis_spec = st.one_of(st.integers(-4, 4096), st.lists(st.integers(-2, 256), max_size=4),
                      st.sampled_from(["divisors", "1:8:1", "8:1:1", "1:64:x2", "1:64:x1", "a:b:c", "", "x", "1:2"]))


# Plausible values (GPT-3 175B, the sweep default) mixed with junk, so that both outcomes occur.
PLAUSIBLE = {"n_gpus": [512, 1024, "256:2048:x2"], "tp": [1, 8, "divisors"], "pp": [1, 8, 16], "cp": [1, [1, 2]],
             "ep": [1], "vpp": [1, [1, 2]], "micro_batch": [1, [1, 2]]}
specs = st.fixed_dictionaries({k: st.one_of(st.sampled_from(v), st.sampled_from(v), axis_spec)
                               for k, v in PLAUSIBLE.items()})


@SETTINGS
@given(specs=specs)
def test_a_generated_space_is_built_or_named(sweep_cfg, specs):
    cfg = sweep_cfg.copy()
    OmegaConf.set_struct(cfg, False)
    for key, value in specs.items():
        cfg.space[key] = value
    try:
        space = build_space(cfg.space, cfg.model, int(cfg.training.global_batch), partial(cluster_with, cfg))
    except jctopt.ConfigError as err:
        assert "space." in str(err) or "training.global_batch" in str(err)
        event("space refused")
        return
    assert space.counts.sum() > 0
    event("space built")


def _override(key, value):
    if isinstance(value, list):
        return f"space.{key}=[{','.join(map(str, value))}]"
    return f"space.{key}='{value}'" if isinstance(value, str) else f"space.{key}={value}"


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=specs)
def test_sweep_cli_on_a_generated_space_exits_0_or_2_without_a_traceback(tmp_path_factory, specs):
    import subprocess
    import sys

    where = tmp_path_factory.mktemp("sweep")
    out = subprocess.run([sys.executable, "-c", "from jctopt.app import main; main()", "task=sweep",
                          "sweep.progress=false", f"sweep.out={where}/out", f"hydra.run.dir={where}/run",
                          *(_override(k, v) for k, v in specs.items())],
                         cwd=where, capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 2), out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    if out.returncode == 2:
        assert "space." in out.stderr or "training.global_batch" in out.stderr
