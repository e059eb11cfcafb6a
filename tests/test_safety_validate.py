"""validate refuses what it cannot do before it works, and fails where nothing was compared:
an output path it cannot write, a file that places no row, times that are no times, repeated ids."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import jctopt
from jctopt.config import ConfigError
from jctopt.config.resources import validation_file
from jctopt.runs import run_validate

RUNS = pd.read_csv(validation_file("runs_dev.csv"))
THREE = RUNS[RUNS.id.str.startswith("mpt_h100bf16_1b_")].head(3).reset_index(drop=True)


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "jctopt.app", "task=validate", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def last_error(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_an_output_in_a_directory_that_cannot_be_written_is_refused_before_any_prediction(tmp_path):
    proc = cli("validate.runs=runs_dev.csv", "validate.out=/proc/x.parquet", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert last_error(proc).startswith("configuration error: validate.out='/proc/x.parquet' is not allowed: "
                                       "cannot write into /proc (")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "validate.md").exists()  # nothing was evaluated


def test_an_output_that_is_a_directory_is_refused(tmp_path):
    proc = cli("validate.runs=runs_dev.csv", f"validate.out={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert last_error(proc) == (f"configuration error: validate.out='{tmp_path}' is not allowed: it is a directory; "
                                "name the Parquet file to write, e.g. validate.out=out.parquet")
    assert not (tmp_path / "run" / "validate.md").exists()


def test_a_file_that_places_no_row_fails_and_points_at_the_reasons(tmp_path):
    bad = THREE.assign(gpu="no_such_gpu")
    bad.to_csv(tmp_path / "bad.csv", index=False)
    out, run = tmp_path / "out.parquet", tmp_path / "run"
    proc = cli(f"validate.runs={tmp_path / 'bad.csv'}", f"validate.out={out}", f"hydra.run.dir={run}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert last_error(proc) == (
        f"configuration error: validate.runs='{tmp_path / 'bad.csv'}': no row could be compared (none of its 3 rows "
        f"has both a prediction and a measured step time); each row's reason is in {run / 'validate.md'} "
        f"(\"Rows not placed\") and the reason column of {out}")
    assert "median_abs_pct_error" not in proc.stdout
    table = pd.read_parquet(out)
    assert table.reason.str.startswith("gpu='no_such_gpu' is not in the catalog").all()
    assert "## Rows not placed" in (run / "validate.md").read_text()


@pytest.mark.parametrize("value", [-1.0, 0.0, np.inf])
def test_a_measured_time_that_is_no_time_is_the_rows_reason(tmp_path, value):
    table = THREE.copy()
    table.loc[0, "measured_iter_time_s"] = value
    table.to_csv(tmp_path / "runs.csv", index=False)
    df = run_validate(jctopt.compose(["task=validate"]), tmp_path / "runs.csv")
    assert df.reason[0] == (f"measured_iter_time_s={value!r}: a measured step time is a finite number of seconds > 0")
    assert np.isnan(df.predicted_iter_time_s[0])
    assert df.reason[1:].isna().all() and np.isfinite(df.abs_pct_error[1:]).all()
    assert np.isfinite(df.abs_pct_error.median())


def test_repeated_ids_are_refused_by_name(tmp_path):
    table = pd.concat([THREE, THREE.iloc[[0, 0, 2]]], ignore_index=True)
    table.to_csv(tmp_path / "runs.csv", index=False)
    with pytest.raises(ConfigError) as err:
        run_validate(jctopt.compose(["task=validate"]), tmp_path / "runs.csv")
    assert str(err.value) == (f"validate.runs='{tmp_path / 'runs.csv'}' is not allowed: row ids "
                              f"'{THREE.id[0]}', '{THREE.id[2]}' appear more than once")


def test_unread_columns_and_rows_not_placed_are_said_on_the_console(tmp_path, capsys):
    """A column no reader knows (a misspelt micro_batch) is named, not silently dropped, and the
    rows not placed are counted with the first one's reason; the shipped files' own columns
    (provenance such as notes) are all known."""
    from jctopt.runs import unread_columns
    from jctopt.tasks import validate

    assert all(unread_columns(validation_file(f)) == [] for f in ("runs_dev.csv", "runs_dev2.csv", "runs_moe_dev.csv"))
    table = THREE.assign(micro_bacth=2)
    table.loc[0, "measured_iter_time_s"] = -1.0
    table.to_csv(tmp_path / "runs.csv", index=False)
    validate.main(jctopt.compose(["task=validate", f"validate.runs={tmp_path / 'runs.csv'}"]), tmp_path)
    out = capsys.readouterr().out
    assert "columns not read (no reader knows them: a misspelling leaves the column it meant blank): micro_bacth" in out
    assert (f"1 of 3 rows not placed (first: {THREE.id[0]}: measured_iter_time_s=-1.0: a measured step time is a "
            "finite number of seconds > 0)") in out
