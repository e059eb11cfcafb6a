"""The `jctopt` command as a user runs it."""

import json
import subprocess
import sys

import pytest


def _run(*args, cwd):
    return subprocess.run([sys.executable, "-c", "from jctopt.app import main; main()", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_estimate_prints_breakdown_and_writes_json(tmp_path):
    out = _run("task=estimate", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for text in ("pipeline bubble", "TP all-reduce", "expected JCT", "efficiency", "diagnosis"):
        assert text in out.stdout
    record = json.loads((tmp_path / "run" / "estimate.json").read_text())
    assert record["feasible"] is True
    # GPT-3 175B, 300 B tokens, 1024 A100: Narayanan 2021 Sec. 5.1 estimate ~34 days at 140
    # TFLOP/s/GPU; the expected JCT with failures must be of that order.
    assert 20 < record["jct_s"] / 86400 < 45
    assert record["config"]["layout"]["pp"] == 16


@pytest.mark.slow
def test_help_and_cfg_job(tmp_path):
    assert _run("--help", cwd=tmp_path).returncode == 0
    out = _run("--cfg", "job", cwd=tmp_path)
    assert out.returncode == 0 and "nvlink_gbps" in out.stdout


@pytest.mark.parametrize("override,needle", [("layout.tp=7", "layout.tp=7"), ("task.name=nope", "task='nope'")])
def test_bad_values_stop_with_a_message(tmp_path, override, needle):
    out = _run("task=estimate", override, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode != 0
    assert needle in out.stderr
