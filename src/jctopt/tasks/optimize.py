"""`jctopt task=optimize`: an Optuna study over the design space, in process.

Trials are asked in batches of ``optimize.batch_size``, evaluated in one call of the jitted,
vmapped model, and told back (Optuna's ask-and-tell). ``mode=single`` minimises cost subject to
expected JCT <= ``job.deadline_days`` (TPE, each trial's constraint set with ``Trial.set_constraint``,
Optuna 5's successor of ``constraints_func``); ``mode=multi`` finds the cost-days Pareto set (NSGA-II).
Configurations the model masks (a layout that does not divide, out of memory, ...) are infeasible
trials: their constraint is violated and the objective carries a penalty far above any real cost, so
the sampler learns to avoid them, while ``trials.parquet`` records the model's real outputs and reason.

The study lives in ``optimize.storage`` (SQLite by default, so an interrupted study resumes;
any RDB URL, or ``journal:PATH`` for Optuna's journal file, which several worker processes
or hosts can share). ``optimize.n_trials`` is the study's total, not a per-run count. A batch
is asked in an in-memory copy of the study and stored once told (``working_copy``, ``save``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import signal
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optuna
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from optuna.trial import TrialState
from rich.progress import Progress

from ..config import PRECISION, ConfigError, cluster_with, is_mxfp8, to_config, zero_shard_code
from ..config.cache import ExportedKernel
from ..job.jct import Reason, estimate_batch
from ..model.schedules import SCHEDULES
from ..model.types import FabricSpec, GPUSpec, Layout
from ..search.space import (
    OPTIMAL,
    build_space,
    ckpt_values,
    etp_axis,
    gpu_overrides,
    int_axis,
    schedule_axis,
    zero_shard_choices,
)
from ..search.tables import catalog_arrays, ckpt_arrays, node_arrays, recompute_tables, with_choices
from ._output import Console, output_console
from ._storage import storage

# The batched model as later runs call it: loaded from the cache directory, untraced (config.cache).
BATCH = ExportedKernel(estimate_batch, "estimate_batch")
PENALTY = 1e30  # objective of a masked configuration (ranked below every real one)
INT_AXES = ("n_gpus", "tp", "pp", "cp", "ep", "vpp", "micro_batch")


def search_axes(cfg: DictConfig) -> dict[str, list]:
    """The categorical choices of every axis of ``cfg.space``."""
    s = cfg.space
    dims = {k: cfg.model[k] for k in ("n_heads", "n_layers", "seq_len", "n_experts")}
    axes = {"gpu": list(s.gpu), "fabric": list(s.fabric)}
    axes.update({k: int_axis(k, s[k], dims).tolist() for k in INT_AXES})
    axes["etp"] = etp_axis(s.get("etp", "tp")).tolist()  # 0: as tp
    axes["schedule"] = [name for name, code in SCHEDULES.items() if code in schedule_axis(s.get("schedule", ["1f1b"]))]
    if s.accum is not None:
        axes["accum"] = int_axis("accum", s.accum).tolist()
    axes.update(recompute=list(s.recompute), zero_stage=list(s.zero_stage), precision=list(s.precision),
                zero_shard=zero_shard_choices(s.get("zero_shard") or ["stack"]),
                ckpt_interval_s=[OPTIMAL if math.isnan(v) else v for v in ckpt_values(s.ckpt_interval_s)])
    return axes


class Evaluator:
    """Evaluates lists of parameter dicts with one compiled ``jit(vmap(estimate))`` call each."""

    def __init__(self, cfg: DictConfig, axes: dict[str, list], batch_size: int, nodes: dict | None = None):
        self.base = to_config(cfg, layout=False)
        self.axes, self.batch_size = axes, batch_size
        self.global_batch = int(cfg.training.global_batch)
        self.gpu = catalog_arrays("gpu", axes["gpu"], GPUSpec, jnp.float64, gpu_overrides(cfg.space, axes["gpu"]))
        self.fabric = catalog_arrays("fabric", axes["fabric"], FabricSpec, jnp.float64)
        self.node = node_arrays(axes["gpu"], nodes, self.base, jnp.float64)  # each GPU's own (build_space)
        self.recompute, self.recompute_modules = recompute_tables(axes["recompute"], self.base, jnp.float64)

    def __call__(self, params: list[dict]) -> pd.DataFrame:
        n = len(params)
        pad = params + [params[-1]] * (self.batch_size - n)
        col = {k: np.array([p[k] for p in pad]) for k in pad[0]}
        f = lambda a: jnp.asarray(a, jnp.float64)  # noqa: E731
        gi = np.array([self.axes["gpu"].index(g) for g in col["gpu"]])
        fi = np.array([self.axes["fabric"].index(x) for x in col["fabric"]])
        ri = np.array([self.axes["recompute"].index(r) for r in col["recompute"]])
        dp = col["n_gpus"] / (col["tp"] * col["pp"] * col["cp"])
        gb = dp * col["micro_batch"] * col["accum"] if "accum" in col else np.full(len(pad), self.global_batch)
        ckpt_auto, ckpt_s = ckpt_arrays([math.nan if c == OPTIMAL else float(c) for c in col["ckpt_interval_s"]],
                                        jnp.float64)
        etp = np.where(col["etp"] == 0, col["tp"], col["etp"])  # 0: as tp (search.space.etp_axis)
        batch = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(pad),)), self.base)
        cfg = with_choices(
            batch, jax.tree.map(lambda a: a[gi], self.gpu), jax.tree.map(lambda a: a[fi], self.fabric),
            Layout(*(f(col[k]) for k in ("n_gpus", "tp", "pp", "cp", "ep", "vpp")), f(etp),
                   f([SCHEDULES[x] for x in col["schedule"]]), f([zero_shard_code(x) for x in col["zero_shard"]])),
            global_batch=f(gb), micro_batch=f(col["micro_batch"]), recompute=self.recompute[ri],
            zero_stage=f(col["zero_stage"]), low_precision=f([PRECISION[p] for p in col["precision"]]),
            mxfp8=f([is_mxfp8(p) for p in col["precision"]]),
            ckpt_auto=ckpt_auto, ckpt_interval_s=ckpt_s, recompute_modules=self.recompute_modules[ri],
            node={k: v[gi] for k, v in self.node.items()})
        est = BATCH(cfg)
        out = pd.DataFrame({k: np.asarray(getattr(est, k))[:n] for k in ("jct_s", "cost_usd", "mfu", "energy_kwh",
                                                                           "dp", "n_micro", "reason")})
        out["reason"] = [Reason(int(r)).name for r in out.reason]
        return out


def study_name(cfg: DictConfig) -> str:
    """Default study name: the model, mode and a hash of everything that defines the problem."""
    c = OmegaConf.to_container(cfg, resolve=True)
    key = {k: c[k] for k in ("model", "cluster", "training", "job", "space")}
    key["mode"] = c["optimize"]["mode"]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{cfg.model.name}-{cfg.optimize.mode}-{digest}"


def run_optimize(cfg: DictConfig, console: Console | None = None) -> tuple[optuna.Study, pd.DataFrame]:
    """Run (or resume) the study to ``optimize.n_trials`` trials; (study, all trials)."""
    console = console or output_console()
    o = cfg.optimize
    if o.mode not in ("single", "multi"):
        raise ConfigError(f"optimize.mode={o.mode!r} is not allowed: single | multi")
    if not (o.n_trials >= 1 and o.batch_size >= 1):
        raise ConfigError(f"optimize.n_trials={o.n_trials}, optimize.batch_size={o.batch_size}: both must be >= 1")
    for key in ("worker", "startup_trials"):  # a worker's index; the random trials before TPE's model
        if isinstance(o[key], bool) or not isinstance(o[key], int) or o[key] < 0:
            raise ConfigError(f"optimize.{key}={o[key]!r} is not allowed: an integer >= 0")
    # The exact space's rules first: a space with no valid layout is a ConfigError naming the rule.
    space = build_space(cfg.space, cfg.model, int(cfg.training.global_batch), functools.partial(cluster_with, cfg))
    axes = search_axes(cfg)
    evaluate = Evaluator(cfg, axes, int(o.batch_size), space.nodes)
    deadline_s = float(cfg.job.deadline_days) * 86400.0
    seed = int(o.seed) + 1000 * int(o.worker)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if o.mode == "single":
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=o.startup_trials)
        directions = ["minimize"]
    else:
        sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=int(o.batch_size))
        directions = ["minimize", "minimize"]
    name = o.study_name or study_name(cfg)
    try:
        where = storage(o.storage) or optuna.storages.InMemoryStorage()
        study = optuna.create_study(storage=where, study_name=name, directions=directions,
                                    sampler=sampler, load_if_exists=True)
    except ConfigError:
        raise
    except ImportError as err:  # a server URL whose database driver is not installed
        raise ConfigError(f"optimize.storage={o.storage!r} is not allowed: {err}") from None
    except Exception as err:  # the database cannot be reached or opened (SQLAlchemy, OS)
        raise ConfigError(f"optimize.storage={o.storage!r} is not allowed: cannot open the study there "
                          f"({type(err).__name__}: {str(err).splitlines()[0][:200]})") from None
    worker = int(o.worker)
    requeued = requeue_stale(study, worker)
    done = counted(study, worker)
    if done or requeued:
        console.print(f"study '{name}': {done} trials already in {o.storage}"
                      + (f"; {requeued} left running by an interrupted run are asked again" if requeued else ""))
    stored = optuna.load_study(study_name=name, storage=where, sampler=(replay := _Replay()))  # for save
    best = _better(None, trials_frame(study), deadline_s) if done and o.mode == "single" else None
    stop: list[int] = []  # SIGINT or SIGTERM: finish the batch in flight (its trials are told), then stop
    previous = ({s: signal.signal(s, lambda signum, _: stop.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
                if threading.current_thread() is threading.main_thread() else {})
    try:
        with Progress(console=console, disable=not o.progress) as progress:
            task = progress.add_task(_describe(study, o.mode, best), total=int(o.n_trials), completed=done)
            while not stop and counted(study, worker) < o.n_trials:
                k = min(int(o.batch_size), int(o.n_trials) - counted(study, worker))
                if k <= 0:  # another worker filled the study meanwhile
                    break
                popped = [stored.ask() for _ in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))[:k]]
                for t in popped:
                    t.set_user_attr(WORKER_ATTR, worker)  # whose it is, should this process die
                work = working_copy(study, sampler, {t.number for t in popped})
                trials = []
                while len(trials) < k and (not stop or len(trials) < len(popped)):
                    trials.append(work.ask())
                    trials[-1].set_user_attr(WORKER_ATTR, worker)
                if not trials:
                    break
                params = [{a: t.suggest_categorical(a, v) for a, v in axes.items()} for t in trials]
                out = evaluate(params)
                for t, (_, r) in zip(trials, out.iterrows()):
                    work.tell(t, _record(t, r, o.mode, deadline_s))
                save(study, stored, replay, work, trials, popped, out, o.mode, deadline_s)
                if o.mode == "single":
                    best = _better(best, out.assign(number=[t.number for t in trials]), deadline_s)
                progress.update(task, completed=counted(study, worker), description=_describe(study, o.mode, best))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stop:  # the signal goes on to the handler it displaced (the CLI's: exit 128 + its number)
        if callable(previous.get(stop[0])):
            previous[stop[0]](stop[0], None)
        raise Interrupted(stop[0])
    return study, trials_frame(study)


class Interrupted(KeyboardInterrupt):
    """Stopped by SIGINT or SIGTERM (``signum``) after the batch in flight was told and stored."""
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _record(trial, r, mode: str, deadline_s: float):
    """Set one evaluated trial's model outputs and constraint; the values to tell."""
    feasible = r.reason == "OK"
    trial.set_user_attr("model", {"reason": r.reason, **{k: float(r[k]) if feasible else None for k in
                                                       ("jct_s", "cost_usd", "mfu", "energy_kwh")}})
    if mode == "single":
        trial.set_constraint("deadline_days", (r.jct_s - deadline_s) / 86400.0 if feasible else PENALTY)
        return float(r.cost_usd) if feasible else PENALTY
    trial.set_constraint("feasible", 0.0 if feasible else PENALTY)
    return [float(r.cost_usd), r.jct_s / 86400.0] if feasible else [PENALTY, PENALTY]


def working_copy(study: optuna.Study, sampler, popped: set[int]) -> optuna.Study:
    """An in-memory copy of ``study``'s trials (numbers, parameters, values, constraints) where
    the sampler asks a batch: asked in a database, a batch's RUNNING trials are all re-read at
    every ask and suggestion (Optuna's cached storage re-reads unfinished trials), 95 % of the
    run time at 256 a batch. ``popped`` trials are WAITING there, to be asked first."""
    work = optuna.create_study(directions=study.directions, sampler=sampler)
    trials = []
    for t in study.get_trials(deepcopy=False):
        if t.number in popped:
            t = copy.deepcopy(t)
            t.state, t.datetime_start = TrialState.WAITING, None
        trials.append(t)
    work.add_trials(trials)
    return work


def save(study, stored, replay, work, trials, popped, out, mode: str, deadline_s: float) -> None:
    """Store a told batch: a new trial as it is (one write), a popped one by replaying its
    parameters into the stored trial (``_Replay``), then its outputs and values."""
    popped = {t.number: t for t in popped}
    told = work.get_trials(deepcopy=False)  # numbered from 0, as the stored study's
    for t, (_, r) in zip(trials, out.iterrows()):
        done = told[t.number]
        if t.number not in popped:
            study.add_trial(done)
            continue
        target = popped[t.number]
        replay.params = done.params
        for a, dist in done.distributions.items():
            target.suggest_categorical(a, dist.choices)
        stored.tell(target, _record(target, r, mode, deadline_s))


class _Replay(optuna.samplers.BaseSampler):
    """A sampler giving the parameters a trial was already evaluated with (``save``)."""

    params: dict  # of the trial being stored, set by ``save``

    def _nothing_relative(self, *args):
        return {}

    infer_relative_search_space = sample_relative = _nothing_relative

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.params[param_name]


def _better(best, out: pd.DataFrame, deadline_s: float):
    """The cheapest trial meeting the deadline among ``best`` (a row or None) and ``out``'s."""
    ok = best_feasible(out, deadline_s) if "reason" in out else out.iloc[:0]
    return ok.iloc[0] if len(ok) and (best is None or ok.cost_usd.iloc[0] < best.cost_usd) else best


def _describe(study: optuna.Study, mode: str, best) -> str:
    """The progress line: the best so far (multi: the size of the cost-days front)."""
    if mode == "multi":
        return f"optuna trials, {len(study.best_trials)} on the cost-days front"
    if best is None:
        return "optuna trials, none meets the deadline yet"
    return f"optuna trials, best ${best.cost_usd:,.0f} ({best.jct_s / 86400:.1f} days, trial {int(best.number)})"


WORKER_ATTR = "worker"


def counted(study: optuna.Study, worker: int) -> int:
    """Trials in the study's total: finished, waiting to be asked, or running in another worker
    (marked with its number). This worker's own running trials, once it restarts, are stale
    (``requeue_stale``), and a trial failed there is not counted; its copy is."""
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)):
        owner = t.user_attrs.get(WORKER_ATTR)
        n += t.state != TrialState.RUNNING or (owner is not None and owner != worker)
    return n


def requeue_stale(study: optuna.Study, worker: int) -> int:
    """Trials this worker asked but never told (its process was interrupted): marked FAIL and
    their parameters enqueued, so the next ``ask`` evaluates them (Optuna's
    ``RetryFailedTrialCallback`` pattern). Other workers' running trials are left alone."""
    stale = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
             if t.user_attrs.get(WORKER_ATTR) == worker]
    for t in stale:
        study.tell(t.number, state=TrialState.FAIL)
        study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
    return len(stale)


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial: number, state, values, params_*, and the model's outputs."""
    df = study.trials_dataframe(attrs=("number", "state", "values", "params"))
    model = pd.DataFrame([t.user_attrs.get("model", {}) for t in study.trials])
    df = pd.concat([df.reset_index(drop=True), model], axis=1)
    df["state"] = df["state"].astype(str)
    for col in df.columns:  # mixed categorical choices ("optimal" or seconds) as text
        if df[col].dtype == object:
            df[col] = df[col].map(lambda v: None if v is None else str(v))
    return df


def best_feasible(df: pd.DataFrame, deadline_s: float) -> pd.DataFrame:
    ok = df[(df.reason == "OK") & (df.jct_s <= deadline_s)]
    return ok.sort_values(["cost_usd", "number"])


def why_none(df: pd.DataFrame) -> str:
    """What the trials' model said, most frequent first: ``n of N trials <REASON>``, where none
    meets the deadline (a space whose every trial is masked, e.g. PRECISION, says so)."""
    counts = df.reason.value_counts() if "reason" in df else pd.Series(dtype=int)
    if counts.empty:
        return "no trial has finished"
    said = ", ".join(f"{n} {reason}" for reason, n in counts.items())
    hint = "" if "OK" in counts else " (none runs: each is masked for its reason, job.jct.Reason; widen the space)"
    return f"of {int(counts.sum())} trials: {said}{hint}"


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    console = output_console()
    try:
        study, df = run_optimize(cfg, console)
    except KeyboardInterrupt as err:  # SIGINT, or SIGTERM (Interrupted): exit 128 + the signal's number
        console.print("[yellow]interrupted[/yellow]: the batch in flight was finished; every trial is in "
                      f"{cfg.optimize.storage}, and the same command resumes the study")
        raise SystemExit(128 + getattr(err, "signum", signal.SIGINT)) from None
    df.to_parquet(run_dir / "trials.parquet", index=False)
    deadline_s = float(cfg.job.deadline_days) * 86400.0
    if cfg.optimize.mode == "single":
        ok = best_feasible(df, deadline_s)
        if ok.empty:
            console.print(f"[red]no trial meets {cfg.job.deadline_days:g} days yet[/red]: {why_none(df)}", soft_wrap=True)
        else:
            b = ok.iloc[0]
            params = {c[len("params_"):]: b[c] for c in df.columns if c.startswith("params_")}
            params = ", ".join(f"{k}={v}" for k, v in params.items())
            console.print(f"best of {(df.state == 'COMPLETE').sum()} trials (trial {b.number}): ${b.cost_usd:,.0f}, "
                          f"{b.jct_s / 86400:.1f} days: {params}")
    else:
        front = study.best_trials
        console.print(f"{len(front)} trials on the cost-days Pareto front after {len(df)} trials")
    console.print(f"wrote {run_dir / 'trials.parquet'}")
    return df
