"""optimize's speed changes keep its answers: a batch asked in an in-memory copy of the study
samples what asking in the stored study samples; SIGTERM stops like SIGINT (exit 143, nothing
left running); worker and startup_trials are checked."""

import signal
import subprocess
import sys
import time

import optuna
import pandas as pd
import pytest

from jctopt.config import ConfigError
from jctopt.tasks import optimize

TINY = ["task=optimize", "model=gpt3_175b", "space.gpu=[h100_sxm,b200]", "space.fabric=[ib_ndr400]",
        "space.n_gpus=[256,512,1024]", "space.tp=[3,4,8]", "space.pp=[4,8,16]", "space.vpp=[1,2]",
        "space.micro_batch=[1]", "space.recompute=[selective,full]", "job.deadline_days=20",
        "optimize.batch_size=32", "optimize.startup_trials=32", "optimize.progress=false"]


@pytest.mark.parametrize("key", ["worker", "startup_trials"])
def test_negative_worker_or_startup_trials_is_a_config_error(compose, tmp_path, key):
    cfg = compose(*TINY, f"optimize.storage=journal:{tmp_path}/j.log", f"optimize.{key}=-1")
    with pytest.raises(ConfigError, match=rf"optimize\.{key}=-1 is not allowed"):
        optimize.run_optimize(cfg)


def _asked_in_the_stored_study(cfg, url: str) -> pd.DataFrame:
    """The study as the batched loop ran it before the working copy: every ask, suggestion and
    tell against the stored study itself."""
    o = cfg.optimize
    axes = optimize.search_axes(cfg)
    evaluate = optimize.Evaluator(cfg, axes, int(o.batch_size))
    deadline_s = float(cfg.job.deadline_days) * 86400.0
    sampler = optuna.samplers.TPESampler(seed=int(o.seed), n_startup_trials=int(o.startup_trials))
    study = optuna.create_study(storage=optimize.storage(url), study_name="ref", sampler=sampler)
    while len(study.trials) < o.n_trials:
        trials = [study.ask() for _ in range(min(int(o.batch_size), int(o.n_trials) - len(study.trials)))]
        params = [{a: t.suggest_categorical(a, v) for a, v in axes.items()} for t in trials]
        out = evaluate(params)
        for t, (_, r) in zip(trials, out.iterrows()):
            feasible = r.reason == "OK"
            t.set_user_attr("model", {"reason": r.reason, **{k: float(r[k]) if feasible else None for k in
                                                           ("jct_s", "cost_usd", "mfu", "energy_kwh")}})
            t.set_constraint("deadline_days", (r.jct_s - deadline_s) / 86400.0 if feasible else optimize.PENALTY)
            study.tell(t, float(r.cost_usd) if feasible else optimize.PENALTY)
    return optimize.trials_frame(study)


@pytest.mark.slow
def test_working_copy_samples_what_the_stored_study_samples(compose, tmp_path):
    cfg = compose(*TINY, f"optimize.storage=sqlite:///{tmp_path}/new.db", "optimize.n_trials=96", "optimize.seed=5")
    _, new = optimize.run_optimize(cfg)
    ref = _asked_in_the_stored_study(cfg, f"sqlite:///{tmp_path}/ref.db")
    pd.testing.assert_frame_equal(new, ref, check_exact=True)
    deadline_s = 20 * 86400.0
    assert optimize.best_feasible(new, deadline_s).number.iloc[0] == optimize.best_feasible(ref, deadline_s).number.iloc[0]


@pytest.mark.slow
def test_sigterm_finishes_the_batch_stores_it_and_exits_143(compose, tmp_path):
    import sqlite3

    url = f"sqlite:///{tmp_path}/s.db"
    args = TINY + [f"optimize.storage={url}", "optimize.n_trials=100000", "optimize.study_name=s"]
    proc = subprocess.Popen([sys.executable, "-c", "from jctopt.app import main; main()", *args,
                             f"hydra.run.dir={tmp_path}/run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    complete, deadline = 0, time.monotonic() + 300
    while complete < 32 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            with sqlite3.connect(tmp_path / "s.db", timeout=10) as db:
                complete = db.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
        except sqlite3.OperationalError:  # no tables yet
            continue
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err
    trials = optuna.load_study(study_name="s", storage=optimize.storage(url)).trials
    assert len(trials) >= 32 and len(trials) % 32 == 0  # whole batches
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)  # none left RUNNING
    # The same command resumes it: the next trial numbers follow on.
    more = len(trials) + 32
    _, df = optimize.run_optimize(compose(*TINY, f"optimize.storage={url}", f"optimize.n_trials={more}",
                                          "optimize.study_name=s"))
    assert df.number.tolist() == list(range(more)) and (df.state == "COMPLETE").all()
