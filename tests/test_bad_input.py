"""Bad input ends in one message that names the key, the value and what is allowed (exit 2
from the CLI), never in a traceback or a wrong answer."""

import json
import re
import subprocess
import sys

import optuna
import pytest

import jctopt
from jctopt.tasks import deadline, procure, sweep, syncwall

EMPTY_SPACES = [  # (override, the rule the message must name)
    ("space.tp=[5]", "space.tp must divide model.n_heads=96"),  # GPT-3 175B has 96 heads
    ("space.n_gpus=[7]", "space.n_gpus must be a multiple of tp x pp x cp"),
    ("space.n_gpus=[100]", "space.n_gpus must be a multiple of tp x pp x cp"),
]
TASKS = {
    "sweep": lambda cfg, tmp_path: sweep.run_sweep(cfg, tmp_path / "out"),
    "deadline": lambda cfg, tmp_path: deadline.run_deadline(cfg),
    "procure": lambda cfg, tmp_path: procure.run_procure(cfg),
    "syncwall": lambda cfg, tmp_path: syncwall.run_syncwall(cfg),
}


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("override,rule", EMPTY_SPACES)
def test_a_space_without_a_valid_layout_names_the_rule(compose, tmp_path, task, override, rule):
    if task == "syncwall":  # it sweeps the counts of syncwall.n_gpus, and its messages name that key
        override, rule = (s.replace("space.n_gpus", "syncwall.n_gpus") for s in (override, rule))
    cfg = compose(f"task={task}", override, "sweep.progress=false")
    with pytest.raises(jctopt.ConfigError, match="no valid layout for model=gpt3_175b") as err:
        TASKS[task](cfg, tmp_path)
    assert rule in str(err.value)


def test_empty_space_from_the_cli_exits_2_without_a_traceback(tmp_path):
    out = subprocess.run([sys.executable, "-c", "from jctopt.app import main; main()", "task=sweep", "space.tp=[5]",
                          f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "space.tp must divide model.n_heads=96" in out.stderr


def _runs_head(n=5):
    import pandas as pd

    from jctopt.config.resources import validation_file

    return pd.read_csv(validation_file("runs_dev.csv")).head(n)


def _write(path, kind):
    if kind == "empty":
        path.write_text("")
    elif kind == "header only":
        path.write_text(",".join(_runs_head().columns) + "\n")
    elif kind == "not a csv":
        path.write_text('hello world\nthis is "not a csv\n')
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "no precision column":
        _runs_head().drop(columns=["precision"]).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("kind,message", [
    ("empty", "not a CSV file"), ("header only", "has a header but no rows"), ("not a csv", "missing columns"),
    ("binary", "not a CSV file"), ("no precision column", "missing columns precision"),
])
def test_validate_names_what_is_wrong_with_a_whole_file(compose, tmp_path, kind, message):
    from jctopt.runs import predict as runs_predict

    path = _write(tmp_path / "runs.csv", kind)
    with pytest.raises(jctopt.ConfigError, match=f"validate.runs=.*{message}"):
        runs_predict.run_validate(compose("task=validate"), path)


@pytest.mark.slow
def test_validate_reads_column_names_in_any_case(compose, tmp_path):
    from jctopt.runs import predict as runs_predict

    table = _runs_head()
    table.to_csv(tmp_path / "good.csv", index=False)
    table.rename(columns={"num_gpus": "Num GPUs", "tp": " TP", "measured_iter_time_s": "Measured_Iter_Time_S"}).to_csv(
        tmp_path / "shouted.csv", index=False)
    good = runs_predict.run_validate(compose("task=validate"), tmp_path / "good.csv")
    shouted = runs_predict.run_validate(compose("task=validate"), tmp_path / "shouted.csv")
    assert shouted.predicted_iter_time_s.notna().sum() == good.predicted_iter_time_s.notna().sum() > 0
    assert shouted.predicted_iter_time_s.tolist() == pytest.approx(good.predicted_iter_time_s.tolist(), rel=1e-12,
                                                                   nan_ok=True)


@pytest.mark.slow
@pytest.mark.parametrize("column", ["num_gpus", "tp", "hidden", "measured_iter_time_s"])
def test_validate_text_in_a_numeric_column_costs_that_row_only(compose, tmp_path, column):
    from jctopt.runs import predict as runs_predict

    table = _runs_head()
    table.to_csv(tmp_path / "good.csv", index=False)
    good = runs_predict.run_validate(compose("task=validate"), tmp_path / "good.csv")
    table[column] = table[column].astype(object)
    table.loc[1, column] = "lots"
    table.to_csv(tmp_path / "bad.csv", index=False)
    df = runs_predict.run_validate(compose("task=validate"), tmp_path / "bad.csv")
    assert len(df) == len(table)
    others = df.index != 1
    assert df.loc[others, "predicted_iter_time_s"].tolist() == pytest.approx(
        good.loc[others, "predicted_iter_time_s"].tolist(), rel=1e-12)
    if column == "measured_iter_time_s":  # predicted, not compared
        assert df.loc[1, "predicted_iter_time_s"] > 0 and df.loc[1, "abs_pct_error"] != df.loc[1, "abs_pct_error"]
    else:  # not placed: a null prediction and a reason naming the column or its value
        assert df.loc[1, "predicted_iter_time_s"] != df.loc[1, "predicted_iter_time_s"]
        assert f"{column}='lots' is not a number" in df.loc[1, "reason"]


@pytest.mark.parametrize("where", ["proc", "under a file", "another sweep"])
def test_sweep_out_that_cannot_hold_the_sweep_names_the_key(compose, tmp_path, where):
    cfg = compose("task=sweep", "sweep.progress=false")
    if where == "proc":
        out = "/proc/jctsweep"
    elif where == "under a file":
        (tmp_path / "file").write_text("a regular file")
        out = tmp_path / "file" / "sweep"
    else:
        (tmp_path / "old").mkdir()
        (tmp_path / "old" / "sweep.json").write_text('{"fingerprint": "someone else\'s"}')
        out = tmp_path / "old"
    with pytest.raises(jctopt.ConfigError, match=r"^sweep\.out=.* is not allowed: (cannot write there|it holds a sweep)"):
        sweep.run_sweep(cfg, out)


@pytest.mark.parametrize("url,message", [
    ("foo://bar", "one of memory, journal:PATH"),
    ("/tmp/plain.db", "one of memory, journal:PATH"),  # a bare path is no storage form
    ("sqlite:////proc/x/x.db", "cannot write '/proc/x/x.db'"),
    ("journal:/proc/x/study.log", "cannot write '/proc/x/study.log'"),
    ("postgresql://nobody@127.0.0.1:1/x", "DB access module|cannot open the study"),  # no driver, or no server
])
def test_optimize_storage_that_cannot_hold_the_study_names_the_forms(compose, url, message):
    from jctopt.tasks import optimize

    with pytest.raises(jctopt.ConfigError, match=rf"^optimize\.storage='{re.escape(url)}' is not allowed: .*({message})"):
        optimize.run_optimize(compose("task=optimize", f"optimize.storage={url}", "optimize.n_trials=4",
                                      "optimize.progress=false"))


@pytest.mark.parametrize("form, kind", [("journal:", "an Optuna journal"), ("sqlite:///", "an SQLite database")])
def test_a_users_own_file_as_storage_is_refused_untouched(compose, tmp_path, form, kind):
    from jctopt.tasks import optimize

    notes = tmp_path / "notes.txt"
    notes.write_text("my cluster notes\n")
    with pytest.raises(jctopt.ConfigError, match=rf"^optimize\.storage=.* is not allowed: .* is not {kind}"):
        optimize.storage(f"{form}{notes}")
    assert notes.read_text() == "my cluster notes\n"


def test_a_studys_own_journal_and_database_are_reopened(tmp_path):
    from jctopt.tasks import optimize

    for url in (f"journal:{tmp_path}/s.log", f"sqlite:///{tmp_path}/s.db"):
        optuna.create_study(storage=optimize.storage(url), study_name="s").optimize(lambda t: t.suggest_float("x", 0, 1),
                                                                                    n_trials=2)
        assert len(optuna.load_study(study_name="s", storage=optimize.storage(url)).trials) == 2


@pytest.mark.slow
def test_sqlite_storage_creates_its_directory(compose, tmp_path):
    from jctopt.tasks import optimize

    url = f"sqlite:///{tmp_path}/new/dir/s.db"
    optimize.run_optimize(compose("task=optimize", f"optimize.storage={url}", "optimize.n_trials=4",
                                  "optimize.batch_size=4", "optimize.progress=false"))
    assert (tmp_path / "new" / "dir" / "s.db").stat().st_size > 0


@pytest.mark.parametrize("value", ["0", "-5", "nan", "64"])  # the default layout's replica is 8 x 16 = 128 GPUs
def test_gradient_n_gpus_max_at_or_below_one_replica_names_the_key(compose, value):
    from jctopt.tasks import gradient

    with pytest.raises(jctopt.ConfigError, match=r"^gradient\.n_gpus_max=.*\(tp x pp x cp = 128\)"):
        gradient.run_gradient(compose("task=gradient", f"gradient.n_gpus_max={value}"))


def test_an_empty_space_leaves_no_sweep_directory_behind(compose, tmp_path):
    with pytest.raises(jctopt.ConfigError, match="no valid layout"):
        sweep.run_sweep(compose("task=sweep", "space.tp=[5]", "sweep.progress=false"), tmp_path / "out")
    assert not (tmp_path / "out" / "configs.parquet").exists()


def test_optimize_over_a_space_without_a_valid_layout_names_the_rule(compose):
    from jctopt.tasks import optimize

    with pytest.raises(jctopt.ConfigError, match="no valid layout .* space.tp must divide model.n_heads=96"):
        optimize.run_optimize(compose("task=optimize", "space.tp=[5]", "optimize.n_trials=4", "optimize.progress=false"))


def _cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-c", "from jctopt.app import main; main()", *args,
                           f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/multi"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args,message", [
    (("task=estimate", "+layout.tpp=8"), "layout.tpp is not a configuration key: one of n_gpus, tp, pp"),
    (("task=sweep", "space.gpu=[]"), "space.gpu=[] is not allowed: at least one of a100_40gb, "),
    (("task=sweep", "space.fabric=[]"), "space.fabric=[] is not allowed: at least one of eth100_tcp, "),
    (("task=syncwall", "syncwall.n_gpus=abc"), "syncwall.n_gpus='abc' is not allowed"),
    (("task=deadline", "deadline.scale_up=[0]"), "deadline.scale_up=[0] is not allowed: a list of integers >= 1"),
    (("task=sweep", "sweep.max_free_days=-1"), "sweep.max_free_days=-1.0 is not allowed: a number of days > 0 or null"),
    (("task=estimate", "job.confidence=1.2"), "job.confidence"),
    (("task=procure", "space.gpu=[h100_sxm,gb200]"), "space.gpu=[h100_sxm,gb200] is not read by task=procure: it "
     "compares the GPU types of procure.gpus (now ['h100_sxm', 'b200']); name them there, e.g. "
     "procure.gpus=[h100_sxm,gb200]"),
])
def test_cli_names_the_bad_key_and_what_is_allowed(tmp_path, args, message):
    out = _cli(tmp_path, *args)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert message in out.stderr


@pytest.mark.slow
def test_a_bad_job_of_a_multirun_is_reported_and_the_others_run(tmp_path):
    out = _cli(tmp_path, "-m", "task=estimate", "layout.n_gpus=1000,512")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "1 job(s) of the multirun stopped on a configuration error" in out.stderr
    assert "configuration error in job 0 (layout.n_gpus=1000" in out.stderr and "a multiple of tp*pp*cp=128" in out.stderr
    assert (tmp_path / "multi" / "0" / "error.txt").is_file()
    assert (tmp_path / "multi" / "1" / "estimate.json").is_file()


@pytest.mark.slow
def test_a_multirun_job_whose_value_has_the_wrong_type_stops_alone(tmp_path):
    """Hydra refuses a whole multirun when one job's overrides do not compose ('abc' is no
    integer); jctopt's sweeper (hydra_plugins/jctopt_sweeper) reports that job and runs the rest."""
    out = _cli(tmp_path, "-m", "task=estimate", "layout.tp=abc,8")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert ("configuration error in job (task=estimate layout.tp=abc): Error merging override layout.tp=abc: "
            "Value 'abc' of type 'str' could not be converted to Integer") in out.stderr
    assert "1 job(s) of the multirun stopped on a configuration error" in out.stderr
    assert (tmp_path / "multi" / "uncomposed-0" / "error.txt").read_text().startswith("configuration error: ")
    assert json.loads((tmp_path / "multi" / "0" / "estimate.json").read_text())["config"]["layout"]["tp"] == 8


@pytest.mark.slow
def test_procure_when_nothing_fits_says_so_and_still_plots(compose, tmp_path):
    cfg = compose("task=procure", "model=gpt_1008b", "space.n_gpus=[64]", "sweep.progress=false")
    df = procure.run_procure(cfg)
    assert not df.meets_deadline.any() and df.days.isna().all()
    assert procure.verdict(df, 30.0).startswith("nothing in the space runs this model on h100_sxm, b200")
    assert procure.plot(df, 30.0, tmp_path / "p.png").stat().st_size > 0


@pytest.mark.slow
def test_syncwall_when_nothing_fits_says_so(compose, tmp_path, capsys):
    syncwall.main(compose("task=syncwall", "model=gpt_1008b", "syncwall.n_gpus=[64]", "sweep.progress=false"), tmp_path)
    assert "nothing fits: no configuration of gpt_1008b runs at syncwall.n_gpus=[64]" in " ".join(capsys.readouterr().out.split())


def test_deadline_scale_up_empty_tries_the_space_counts_only(compose):
    assert deadline.scale_up(compose("task=deadline", "deadline.scale_up=[]")) == []
    assert deadline.scale_up(compose("task=deadline")) == [2, 4, 8]


def test_blank_cells_read_as_nan_take_their_documented_defaults(compose):
    """A runs file mixing dense and MoE rows leaves inter_node or attention blank (NaN): the
    reference fabric and GQA, not 'nan is not modelled'; MLA where the row names a catalog model
    that has it (DeepSeek-V3)."""
    import pandas as pd

    from jctopt.config.resources import validation_file
    from jctopt.runs import defaults as runs_defaults
    from jctopt.runs import row as runs_row

    row = pd.read_csv(validation_file("runs_moe_dev.csv")).iloc[0].to_dict()
    row.update(inter_node=float("nan"), attention=float("nan"), kv_lora_rank=float("nan"))
    cfg, used = runs_row.row_config(compose("task=validate"), dict(row, model="An MoE of our own"))
    assert cfg.fabric.name == runs_defaults.REFERENCE_FABRIC[cfg.gpu.name] and "inter_node" in used
    assert cfg.model.kv_lora_rank == 0  # GQA
    named, used = runs_row.row_config(compose("task=validate"), row)  # "DeepSeekV3": the catalog's MLA
    assert named.model.kv_lora_rank == 512 and "architecture" in used


@pytest.mark.parametrize("name", ["x" * 300, "../gpu/h100_sxm", "h100_sxm/../b200"])
def test_a_catalog_name_is_looked_up_never_opened_as_a_path(name):
    """A long or path-like name (a shifted runs-file cell) is a ConfigError, not an OSError."""
    from jctopt.config import load_option

    with pytest.raises(jctopt.ConfigError, match=r"^gpu=.* is not allowed: one of a100_40gb"):
        load_option("gpu", name)
