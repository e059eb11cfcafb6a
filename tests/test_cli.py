"""The `jctopt` command as a user runs it."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
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


def test_piped_output_prints_whole_lines_and_counts_without_a_point(capsys):
    """Not on a terminal (a pipe, a file), a task's table is not cut at 80 columns; GPU counts
    and degrees print as integers (128 GPUs, TP2 PP4), however the column stores them."""
    from rich.table import Table

    from jctopt.tasks._output import count, layout_label, output_console

    table = Table("configuration", "cost (USD)")
    table.add_row("x" * 120, "43,230,117")
    output_console().print(table)
    out = capsys.readouterr().out
    assert "43,230,117" in out and "x" * 120 in out and "\u2026" not in out
    row = pd.Series({"tp": 2.0, "pp": 4.0, "cp": 1.0, "ep": 1.0, "dp": 16.0, "vpp": 1.0, "micro_batch": 1.0,
                     "n_micro": 8.0, "schedule": "1f1b"})
    assert layout_label(row) == "TP2 PP4 DP16, mb 1 x 8" and count(128.0) == "128" and count(0.5) == "0.5"


def test_procure_says_a_gpu_cannot_run_the_precision_asked(compose):
    """A GPU type whose tensor cores run none of the space's precisions is not 'unable to meet the
    deadline': the verdict says what it cannot run, and what it runs."""
    from jctopt.config import load_option
    from jctopt.tasks.procure import unsupported_precisions, verdict

    cfg = compose("task=procure", "space.precision=[mxfp8]")
    why = unsupported_precisions(cfg, load_option("gpu", "h100_sxm"))
    assert why == "it cannot run mxfp8 (its tensor cores run bf16 | fp16 | fp8)"
    assert unsupported_precisions(cfg, load_option("gpu", "b200")) is None
    df = pd.DataFrame([{"gpu": "h100_sxm", "meets_deadline": False, "winner": False, "days": np.nan, "why_none": why}])
    assert verdict(df, 30.0) == f"nothing in the space runs: h100_sxm: {why} (space.precision)"


def test_config_dir_sweeps_means_the_shipped_multiruns_from_anywhere(tmp_path, monkeypatch):
    """`--config-dir sweeps` names the repository's sweeps/ when run from its root; elsewhere (no
    ./sweeps) it is the package's copy, in each spelling of the flag. A ./sweeps of the user's own,
    an absolute path and other directories are left as given."""
    from jctopt.app import shipped_config_dir
    from jctopt.config.resources import SWEEPS_DIR

    monkeypatch.chdir(tmp_path)
    assert shipped_config_dir(["-m", "--config-dir", "sweeps", "--config-name", "deadlines"]) == \
        ["-m", "--config-dir", str(SWEEPS_DIR), "--config-name", "deadlines"]
    assert shipped_config_dir(["-cd", "sweeps/"]) == ["-cd", str(SWEEPS_DIR)]
    assert shipped_config_dir(["--config-dir=sweeps"]) == [f"--config-dir={SWEEPS_DIR}"]
    for argv in (["--config-dir", "mine"], ["--config-dir", "/abs/sweeps"], ["--config-dir"], ["task=sweep"]):
        assert shipped_config_dir(argv) == argv
    (tmp_path / "sweeps").mkdir()
    assert shipped_config_dir(["--config-dir", "sweeps"]) == ["--config-dir", "sweeps"]
    assert sorted(p.name for p in SWEEPS_DIR.glob("*.yaml")) == ["deadlines.yaml", "gpu_x_fabric.yaml", "models.yaml",
                                                                "optimize_seeds.yaml", "procure_models.yaml",
                                                                "syncwall_fabrics.yaml"]


@pytest.mark.slow
def test_a_shipped_sweep_file_composes_outside_the_repository(tmp_path):
    out = _run("--config-dir", "sweeps", "--config-name", "deadlines", "--cfg", "job", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "name: deadline" in out.stdout


def test_help_describes_every_key_from_its_schema(compose):
    """`jctopt --help`: every key of every group has the one-line description its schema field
    declares (config.help reads schema.py and task_schemas.py), and its allowed values where the
    field declares them (schema.ranged), shown beside the value the given overrides compose."""
    import dataclasses
    import typing

    from jctopt.config import schema
    from jctopt.config.help import field_docs, help_text

    hints = typing.get_type_hints(schema.AppConf)
    groups = [hints[f.name] for f in dataclasses.fields(schema.AppConf) if dataclasses.is_dataclass(hints[f.name])]
    undocumented = [f"{cls.__name__}.{f.name}" for cls in groups for f in dataclasses.fields(cls)
                    if f.name not in field_docs(cls)]
    assert len(groups) == 16 and undocumented == []
    text = help_text(compose("gpu=b200", "layout.tp=4"))
    assert "  gpu: a100_40gb, a100_80gb," in text and "  task: calibrate, deadline, estimate," in text
    assert "    hbm_tbps = 8.0\n        HBM bandwidth, TB/s [allowed: a finite number > 0]\n" in text
    assert "    tp = 4\n        tensor-parallel ranks [allowed: a finite number > 0]\n" in text
    assert "    nic_eff = " in text and "[allowed: a fraction in (0, 1]]" in text
    assert "    zero_shard = stack\n        Ranks ZeRO/FSDP shard over" in text  # a comment block above its field
    assert "    gpu_overrides = null\n" in text and "    recompute_modules = [core_attn]\n" in text


@pytest.mark.slow
def test_help_from_the_command_line_and_a_bad_override(tmp_path):
    out = _run("--help", "gpu=b200", cwd=tmp_path)
    assert out.returncode == 0 and "    hbm_tbps = 8.0" in out.stdout, out.stderr
    bad = _run("--help", "gpu=nope", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("configuration error: In 'config': Could not find 'gpu/nope'")
    assert "Traceback" not in bad.stderr
