"""`jctopt task=sweep`: evaluate a whole design space and stream the kept rows to Parquet.

Layout of the output directory (the Hydra run directory unless ``sweep.out`` is set)::

    sweep.json                   what was swept, progress, counts per Reason
    configs.parquet/             the result: a Parquet dataset (pandas, pyarrow, DuckDB)
        part-00000012.parquet    keep=feasible|all: the kept rows of chunk 12, one row group
        result.parquet           keep=top_k|pareto|best_per_group: the exact reduction
    candidates/part-*.parquet    keep=top_k|pareto|best_per_group: each chunk's candidates

Every file is written to a temporary name and renamed, so an interrupted sweep leaves only
whole chunks; ``sweep.resume=true`` skips them and evaluates the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..config import ConfigError
from ..config.resources import why_unwritable
from ..job.jct import Reason
from ..job.risk import with_job_risk, with_step_interval
from ..search.engine import build, chunks_for_process, reduce_rows
from ._output import output_console

REDUCTIONS = ("top_k", "pareto", "best_per_group")
# Settings that change how a sweep runs but not what it computes (excluded from the fingerprint).
RUN_ONLY = ("resume", "out", "progress", "distributed")


def unit(column: str) -> str:
    """Unit of an output column (also stored in the Parquet field metadata)."""
    if column.endswith("_s"):
        return "s"
    if column.endswith("_usd"):
        return "USD"
    if column.endswith("_kwh"):
        return "kWh"
    if column.startswith("mem_"):
        return "bytes"
    if "flops" in column:
        return "FLOP"
    table = {"gpu_hours": "GPU-hours", "params": "parameters", "efficiency": "fraction", "mfu": "fraction",
             "comm_share": "fraction", "gamma": "ratio", "global_batch": "sequences",
             "micro_batch": "sequences", "n_micro": "micro-batches per step", "steps": "optimizer steps",
             "n_checkpoints": "count", "n_failures": "count", "n_gpus": "GPUs", "p_deadline": "probability"}
    return table.get(column, "")


def fingerprint(cfg: DictConfig) -> str:
    """Hash of everything that decides a sweep's rows (not how it runs, not other tasks' settings)."""
    c = OmegaConf.to_container(cfg, resolve=True)
    key = {k: c[k] for k in ("model", "fabric", "cluster", "training", "job", "space", "sweep")}
    for name in RUN_ONLY:
        key["sweep"].pop(name, None)
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _write_atomic(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd", row_group_size=max(table.num_rows, 1))
    os.replace(tmp, path)


def _json_atomic(obj: dict, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def _table(df: pd.DataFrame, meta: dict[str, str]) -> pa.Table:
    table = pa.Table.from_pandas(df, preserve_index=False)
    units = {f.name: unit(f.name) for f in table.schema if unit(f.name)}
    fields = [f.with_metadata({"unit": units[f.name]}) if f.name in units else f for f in table.schema]
    meta = {**meta, "jctopt.units": json.dumps(units)}
    schema = pa.schema(fields, metadata={**(table.schema.metadata or {}), **{k: v.encode() for k, v in meta.items()}})
    return table.cast(schema)


def _chunk_of(path: Path) -> int:
    return int(path.stem.split("-")[1])


class SweepDir:
    """Where a sweep's files live and which chunks are already done."""

    def __init__(self, root: Path, keep: str):
        self.root = root
        self.result = root / "configs.parquet"
        self.parts = root / "candidates" if keep in REDUCTIONS else self.result
        self.manifest = root / "sweep.json"

    def part(self, chunk: int) -> Path:
        return self.parts / f"part-{chunk:08d}.parquet"

    def done(self) -> set[int]:
        if not self.parts.is_dir():
            return set()
        for stale in self.parts.glob(".*.tmp"):
            stale.unlink()  # a write cut short by an interruption
        return {_chunk_of(p) for p in self.parts.glob("part-*.parquet")}

    def reason_counts(self) -> np.ndarray:
        total = np.zeros(len(Reason), np.int64)
        for p in self.parts.glob("part-*.parquet"):
            meta = pq.read_schema(p).metadata
            total += np.asarray(json.loads(meta[b"jctopt.reason_counts"]), np.int64)
        return total


def find_resumable(outputs: Path, print_id: str) -> Path | None:
    """The newest unfinished sweep under ``outputs`` with this fingerprint."""
    found = []
    for manifest in outputs.glob("*/sweep.json"):
        info = json.loads(manifest.read_text())
        if info.get("fingerprint") == print_id and info.get("status") != "done":
            found.append(manifest.parent)
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _best(path: Path, objective: str, n: int) -> pd.DataFrame:
    """The n best rows of a dataset by objective, scanning batch by batch (bounded memory)."""
    best = None
    for batch in ds.dataset(path, format="parquet").to_batches():
        df = batch.to_pandas()
        if df.empty:
            continue
        df = df[np.isfinite(df[objective])]
        best = df if best is None else pd.concat([best, df])
        best = best.sort_values([objective, "config_id"]).head(n)
    return best if best is not None else pd.DataFrame()


def run_sweep(cfg: DictConfig, out: Path, *, process: tuple[int, int] = (0, 1), devices: list | None = None,
              stop_after: int | None = None, console: Console | None = None) -> pd.DataFrame:
    """Evaluate the space of ``cfg`` into ``out``; returns the result rows (configs.parquet).

    ``process=(index, count)``: this process takes every count-th chunk (several hosts).
    ``stop_after``: stop after that many chunks, as an interruption would (for tests)."""
    console = console or output_console()
    sw = cfg.sweep
    space, engine = build(cfg, devices)
    d = SweepDir(Path(out), sw.keep)
    fp = fingerprint(cfg)
    if d.manifest.exists() and json.loads(d.manifest.read_text()).get("fingerprint") != fp:
        raise ConfigError(f"sweep.out={str(d.root)!r} is not allowed: it holds a sweep of another "
                          "configuration; choose another directory (or the same configuration to resume it)")
    problem = why_unwritable(d.parts) or why_unwritable(d.result)
    if problem:
        raise ConfigError(f"sweep.out={str(d.root)!r} is not allowed: cannot write there ({problem})")
    n_chunks = space.n_chunks(engine.chunk_size)
    meta = {"jctopt.config": OmegaConf.to_yaml(cfg, resolve=True), "jctopt.space": space.describe(),
            "jctopt.dtype": sw.dtype, "jctopt.keep": sw.keep}
    manifest = {"fingerprint": fp, "status": "running", "space": space.describe(), "n_configs": space.size,
                "chunk_size": engine.chunk_size, "n_chunks": n_chunks, "keep": sw.keep,
                "objective": sw.objective, "devices": [str(x) for x in engine.devices]}
    if d.manifest.exists():
        before = json.loads(d.manifest.read_text())
        if before.get("chunk_size") != engine.chunk_size:
            raise ConfigError(f"sweep.chunk_size={sw.chunk_size} gives {engine.chunk_size} configurations per chunk "
                              f"on {len(engine.devices)} devices, but {d.root} was swept with "
                              f"{before.get('chunk_size')}: resume with sweep.chunk_size={before.get('chunk_size')} "
                              "on as many devices")
    done = d.done()
    todo = [c for c in chunks_for_process(n_chunks, *process) if c not in done]
    if process[0] == 0:
        _json_atomic(manifest, d.manifest)
    if done:
        console.print(f"resuming {d.root}: {len(done)} of {n_chunks} chunks already done")
    console.print(space.describe())

    stop: list[int] = []

    def on_term(signum, frame):
        # A flag read between chunks: an exception raised at an arbitrary point can land inside
        # library code (jax, pyarrow) that swallows it. A second SIGTERM does not wait.
        stop.append(signum)
        if len(stop) > 1:
            interrupt()

    def interrupt():
        # The SIGTERM goes on to the handler it displaced (the CLI's: exit status 143), else
        # stops the sweep as Ctrl-C does.
        if callable(previous):
            previous(stop[0], None)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term) if _main_thread() else None
    evaluated = 0
    start = time.perf_counter()
    progress = Progress(TextColumn("[bold]sweep"), BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
                        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                        console=console, disable=not sw.progress, transient=False)
    try:
        with progress:
            total = sum(min(engine.chunk_size, space.size - c * engine.chunk_size) for c in todo)
            task = progress.add_task("sweep", total=total, rate="")
            for i, (chunk, rows, counts) in enumerate(engine.run(todo)):
                if stop_after is not None and i >= stop_after:
                    raise KeyboardInterrupt
                if sw.keep not in REDUCTIONS:  # a reduction's rows get the whole risk at the end
                    rows = with_step_interval(rows, cfg.job.confidence, cfg.model.n_experts > 1,
                                              cfg.training.stack)
                table = _table(rows, {**meta, "jctopt.reason_counts": json.dumps(counts.tolist()),
                                      "jctopt.chunk": str(chunk)})
                _write_atomic(table, d.part(chunk))
                evaluated += int(counts.sum())
                rate = evaluated / (time.perf_counter() - start)
                progress.update(task, advance=int(counts.sum()), rate=f"{rate:,.0f} configs/s")
                if stop:
                    interrupt()
    except KeyboardInterrupt:
        finished = len(d.done())
        console.print(f"[yellow]interrupted[/yellow]: {finished} of {n_chunks} chunks are on disk in {d.root}; "
                      "run again with sweep.resume=true to finish")
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    elapsed = time.perf_counter() - start

    if len(d.done()) < n_chunks:
        console.print(f"this process finished its chunks; {n_chunks - len(d.done())} chunks remain with other "
                      "processes (the last to finish writes the result)")
        return pd.DataFrame()
    if sw.keep in REDUCTIONS:
        candidates = pd.read_parquet(d.parts)
        result = reduce_rows(candidates, sw.keep, sw.objective, sw.top_k, tuple(sw.group_by))
        if not result.empty:  # a reduction's few rows get JCT intervals; kept rows only the step's
            result = with_job_risk(cfg, result)
        _write_atomic(_table(result, meta), d.result / "result.parquet")
    counts = d.reason_counts()
    manifest.update(status="done", reason_counts={r.name: int(n) for r, n in zip(Reason, counts)},
                    last_run_s=round(elapsed, 3), last_run_configs=evaluated,
                    last_run_configs_per_s=round(evaluated / elapsed) if elapsed > 0 else None)
    _json_atomic(manifest, d.manifest)
    return pd.read_parquet(d.result)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _print_summary(console: Console, d: SweepDir, objective: str) -> None:
    from rich.table import Table

    info = json.loads(d.manifest.read_text())
    counts = info["reason_counts"]
    console.print(f"{info['n_configs']:,} configurations: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    best = _best(d.result, objective, 10)
    if best.empty:
        console.print("[red]no kept configuration is feasible[/red]")
        return
    table = Table(title=f"best kept configurations by {objective}")
    for c in ("gpu", "fabric", "GPUs", "TP-PP-CP-EP-DP /vpp", "mb", "recompute", "ZeRO", "days", "cost $", "MFU"):
        table.add_column(c, justify="right")
    for _, r in best.iterrows():
        layout = f"{r.tp}-{r.pp}-{r.cp}-{r.ep}-{r.dp} /{r.vpp}"
        table.add_row(str(r.gpu), str(r.fabric), str(r.n_gpus), layout, str(r.micro_batch),
                      f"{r.recompute} {r.precision}", str(r.zero_stage), f"{r.jct_s / 86400:.1f}",
                      f"{r.cost_usd:,.0f}", f"{r.mfu:.1%}")
    console.print(table)


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    console = output_console()
    sw = cfg.sweep
    process = (0, 1)
    if sw.distributed:
        jax.distributed.initialize()  # coordinator, process count and index from the environment (e.g. Slurm)
        process = (jax.process_index(), jax.process_count())
    out = Path(sw.out) if sw.out else run_dir
    if sw.resume and not sw.out:
        previous = find_resumable(run_dir.parent, fingerprint(cfg))
        if previous is None:
            console.print(f"sweep.resume=true: no unfinished sweep of this configuration under {run_dir.parent}; "
                          "starting a new one")
        else:
            out = previous
    df = run_sweep(cfg, out, process=process, console=console)  # an interruption: the CLI exits 130 / 143
    d = SweepDir(out, sw.keep)
    if json.loads(d.manifest.read_text())["status"] == "done":
        _print_summary(console, d, sw.objective)
        console.print(f"wrote {d.result}")
    return df
