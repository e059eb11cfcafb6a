"""optimize: Optuna over the space, batched ask/tell, storages, workers, reproducibility."""

import subprocess
import sys

import numpy as np
import optuna
import pandas as pd
import pytest

from jctopt.search.grid import search
from jctopt.tasks import optimize

TINY = ["task=optimize", "model=gpt3_175b", "space.gpu=[h100_sxm,b200]", "space.fabric=[ib_ndr400]",
        "space.n_gpus=[256,512,1024]", "space.tp=[3,4,8]", "space.pp=[4,8,16]", "space.vpp=[1,2]",
        "space.micro_batch=[1]", "space.recompute=[selective,full]", "job.deadline_days=20",
        "optimize.batch_size=32", "optimize.startup_trials=32", "optimize.progress=false"]


def _run(compose, storage, *extra):
    return optimize.run_optimize(compose(*TINY, f"optimize.storage={storage}", *extra))


@pytest.mark.slow
def test_single_objective_finds_the_grid_optimum(compose, tmp_path):
    study, df = _run(compose, f"journal:{tmp_path}/j.log", "optimize.n_trials=200")
    assert len(df) == 200 and (df.state == "COMPLETE").all()
    exact = search(compose(*TINY), "top_k", "cost_usd", top_k=1, max_days=20.0).iloc[0]
    best = optimize.best_feasible(df, 20 * 86400.0).iloc[0]
    assert best.cost_usd == pytest.approx(exact.cost_usd, rel=1e-6)
    assert best.jct_s <= 20 * 86400
    # every infeasible trial carries the model's reason
    assert set(df.reason) <= {"OK", "LAYOUT", "MEMORY", "PRECISION_UNSUPPORTED", "FAILURES"} and "LAYOUT" in set(df.reason)


@pytest.mark.slow
def test_fixed_seed_is_reproducible(compose, tmp_path):
    _, a = _run(compose, f"journal:{tmp_path}/a.log", "optimize.n_trials=96", "optimize.seed=3")
    _, b = _run(compose, f"journal:{tmp_path}/b.log", "optimize.n_trials=96", "optimize.seed=3")
    cols = [c for c in a.columns if c.startswith("params_")] + ["cost_usd", "reason"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    _, c = _run(compose, f"journal:{tmp_path}/c.log", "optimize.n_trials=96", "optimize.seed=4")
    assert not a[cols].equals(c[cols])


def test_sqlite_study_resumes(compose, tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    _, first = _run(compose, url, "optimize.n_trials=40")
    _, both = _run(compose, url, "optimize.n_trials=70")
    assert len(first) == 40 and len(both) == 70 and both.number.tolist() == list(range(70))
    cols = [c for c in first.columns if c.startswith("params_")]
    pd.testing.assert_frame_equal(both[cols].head(40), first[cols])


def test_multi_objective_front_is_non_dominated(compose, tmp_path):
    study, df = _run(compose, f"journal:{tmp_path}/m.log", "optimize.mode=multi", "optimize.n_trials=128")
    front = study.best_trials
    assert front and all(t.user_attrs["model"]["reason"] == "OK" for t in front)
    pts = np.array([t.values for t in front])
    ok = df[df.reason == "OK"]
    allpts = np.column_stack([ok.cost_usd, ok.jct_s / 86400])
    for p in pts:
        assert not np.any(np.all(allpts <= p, axis=1) & np.any(allpts < p, axis=1))


WORKER = """
import sys, jctopt
from jctopt.tasks import optimize
cfg = jctopt.compose(sys.argv[3:] + ["optimize.storage=journal:" + sys.argv[1], "optimize.worker=" + sys.argv[2]])
optimize.run_optimize(cfg)
"""


@pytest.mark.slow
def test_two_workers_share_one_study(tmp_path):
    log = str(tmp_path / "shared.log")
    args = TINY + ["optimize.n_trials=160", "optimize.study_name=shared"]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, log, str(i), *args], stderr=subprocess.PIPE, text=True)
             for i in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    from jctopt.tasks.optimize import storage

    study = optuna.load_study(study_name="shared", storage=storage(f"journal:{log}"))
    states = [t.state for t in study.trials]
    numbers = [t.number for t in study.trials]
    # no trial lost or left running; both workers contributed; the overshoot is at most a batch
    assert all(s == optuna.trial.TrialState.COMPLETE for s in states)
    assert numbers == list(range(len(numbers))) and 160 <= len(numbers) <= 160 + 32
    assert len({t.params["gpu"] + str(t.params["n_gpus"]) + str(t.params["tp"]) for t in study.trials}) > 10


def test_optimize_task_writes_trials(compose, tmp_path):
    cfg = compose(*TINY, f"optimize.storage=journal:{tmp_path}/t.log", "optimize.n_trials=64")
    df = optimize.main(cfg, tmp_path)
    back = pd.read_parquet(tmp_path / "trials.parquet")
    assert len(back) == len(df) == 64 and "params_gpu" in back and "cost_usd" in back


@pytest.mark.slow
def test_interrupted_study_resumes_to_the_uninterrupted_answer(compose, tmp_path):
    """A real SIGINT mid-study, then the same command: the batch in flight is finished and told
    before the process stops, only finished trials count, and the answer is the grid optimum
    that the uninterrupted study finds."""
    import signal
    import sqlite3
    import time

    url = f"sqlite:///{tmp_path}/s.db"
    args = TINY + [f"optimize.storage={url}", "optimize.n_trials=320", "optimize.study_name=s"]
    proc = subprocess.Popen([sys.executable, "-c", "from jctopt.app import main; main()", *args,
                             f"hydra.run.dir={tmp_path}/run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    complete = 0
    deadline = time.monotonic() + 300
    while complete < 32 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        try:  # a cheap look at Optuna's schema: the storage API is too slow to catch the moment
            with sqlite3.connect(tmp_path / "s.db", timeout=10) as db:
                complete = db.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
        except sqlite3.OperationalError:  # no tables yet
            continue
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "the same command resumes the study" in " ".join(out.split())
    before = optuna.load_study(study_name="s", storage=optimize.storage(url)).trials
    assert 32 <= len(before) < 320
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in before)  # nothing left in flight

    study, df = optimize.run_optimize(compose(*args))
    assert df.state.tolist() == ["COMPLETE"] * 320
    exact = search(compose(*TINY), "top_k", "cost_usd", top_k=1, max_days=20.0).iloc[0]
    assert optimize.best_feasible(df, 20 * 86400.0).iloc[0].cost_usd == pytest.approx(exact.cost_usd, rel=1e-6)


def test_trials_of_a_killed_worker_are_asked_again(compose, tmp_path):
    """What SIGKILL leaves: trials asked by this worker and never told. The resumed run fails
    them, asks their parameters again and counts only finished trials."""
    url = f"journal:{tmp_path}/k.log"
    cfg = compose(*TINY, f"optimize.storage={url}", "optimize.n_trials=64", "optimize.study_name=k")
    study = optuna.create_study(storage=optimize.storage(url), study_name="k", direction="minimize")
    stale = []
    for gpu, tp in (("b200", 8), ("h100_sxm", 4), ("b200", 3)):
        t = study.ask()
        t.set_user_attr(optimize.WORKER_ATTR, 0)
        t.suggest_categorical("gpu", ["h100_sxm", "b200"]), t.suggest_categorical("tp", [3, 4, 8])
        stale.append(t.number)
    other = study.ask()  # a live worker's trial: left alone, and counted
    other.set_user_attr(optimize.WORKER_ATTR, 1)
    study, df = optimize.run_optimize(cfg)
    by_number = {t.number: t for t in study.trials}
    assert [by_number[n].state for n in stale] == [optuna.trial.TrialState.FAIL] * 3
    assert by_number[other.number].state == optuna.trial.TrialState.RUNNING
    retried = {t.user_attrs["retry_of"]: t for t in study.trials if "retry_of" in t.user_attrs}
    assert sorted(retried) == stale
    for n in stale:
        assert retried[n].state == optuna.trial.TrialState.COMPLETE
        assert by_number[n].params.items() <= retried[n].params.items()
    assert (df.state == "COMPLETE").sum() == 64 - 1  # the other worker's trial fills the total


def test_no_trial_meeting_the_deadline_says_what_the_trials_were():
    """Where no trial meets the deadline the message counts the trials' reasons, most first, and
    says when none runs at all (every trial masked: nvfp4 asked of an H100)."""
    import pandas as pd

    from jctopt.tasks.optimize import why_none

    masked = pd.DataFrame({"reason": ["PRECISION_UNSUPPORTED"] * 3 + ["LAYOUT"]})
    assert why_none(masked) == ("of 4 trials: 3 PRECISION_UNSUPPORTED, 1 LAYOUT (none runs: each is masked for its "
                                "reason, job.jct.Reason; widen the space)")
    assert why_none(pd.DataFrame({"reason": ["OK", "OK", "MEMORY"]})) == "of 3 trials: 2 OK, 1 MEMORY"
    assert why_none(pd.DataFrame()) == "no trial has finished"
