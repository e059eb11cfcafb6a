"""`jctopt task=estimate`: one configuration -> a readable JCT breakdown and estimate.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from ..config import to_config
from ..job.diagnosis import diagnose
from ..job.jct import Reason, estimate
from ..job.risk import with_job_risk
from ._output import output_console, write_text

STEP_ROWS = [
    ("compute_s", "compute (fwd + bwd + recompute, slowest stage)"),
    ("bubble_s", "pipeline bubble (of layout.schedule)"),
    ("tp_comm_s", "TP all-reduce / SP all-gather + reduce-scatter"),
    ("cp_comm_s", "CP K/V exchange (exposed)"),
    ("ep_comm_s", "EP all-to-all"),
    ("pp_comm_s", "PP send/recv"),
    ("host_s", "host launch time beyond the GPU's (launch-bound MoE layers)"),
    ("offload_s", "activation offload copies to/from host memory (exposed)"),
    ("dp_comm_s", "DP gradient sync (exposed after overlap)"),
    ("zero3_comm_s", "ZeRO-3 parameter gathers (exposed)"),
    ("optimizer_s", "optimizer step (HBM bound)"),
    ("straggler_s", "stragglers (expected max of rank jitter)"),
    ("serial_s", "serial time (Amdahl)"),
]


def run_estimate(cfg: DictConfig) -> pd.DataFrame:
    """Evaluate one configuration; one row with every output (SI units: s, bytes, USD), with
    intervals at ``job.confidence`` and P(JCT <= job.deadline_days) (``job.risk.with_risk``)."""
    config = to_config(cfg)
    est = estimate(config)  # op by op, as always: a jitted estimate rounds some outputs differently
    row = {k: np.asarray(v).item() for k, v in est._asdict().items()}
    row["reason"] = Reason(row["reason"]).name
    row["diagnosis"] = diagnose(config, est)
    row["gpu"] = cfg.gpu.name
    return with_job_risk(cfg, pd.DataFrame([row]))


def _fmt_s(x: float) -> str:
    if not np.isfinite(x):
        return "-"
    if x >= 86400:
        return f"{x / 86400:.2f} d"
    if x >= 3600:
        return f"{x / 3600:.2f} h"
    if x >= 1:
        return f"{x:.3f} s"
    return f"{x * 1e3:.2f} ms"


def print_estimate(cfg: DictConfig, r: dict, console: Console | None = None) -> None:
    console = console or output_console()
    lay = cfg.layout
    title = (f"{cfg.model.name} on {lay.n_gpus} x {cfg.gpu.name} + {cfg.fabric.name}: "
             f"TP {lay.tp} PP {lay.pp} CP {lay.cp} EP {lay.ep} DP {r['dp']:g} (vpp {lay.vpp}, {lay.schedule})")
    console.print(f"[bold]{title}[/bold]")
    console.print(f"global batch {cfg.training.global_batch} x seq {cfg.model.seq_len}, micro-batch "
                  f"{cfg.training.micro_batch}, {r['n_micro']:g} micro-batches/step, recompute "
                  f"{cfg.training.recompute}, ZeRO {cfg.training.zero_stage}, {cfg.training.precision}")
    mem = Table(title="memory per GPU (GB)")
    for col in ("weights", "grads", "optimizer", "activations", "total", "capacity"):
        mem.add_column(col, justify="right")
    mem.add_row(*(f"{r['mem_' + k] / 1e9:.1f}" for k in
                  ("weights", "grads", "optimizer", "activations", "total", "capacity")))
    console.print(mem)
    if not r["feasible"]:
        console.print(f"[red]infeasible ({r['reason']})[/red]: {r['diagnosis']}")
        return
    step = Table(title=f"one step: {_fmt_s(r['step_s'])}")
    step.add_column("component")
    step.add_column("time", justify="right")
    step.add_column("share", justify="right")
    for key, label in STEP_ROWS:
        step.add_row(label, _fmt_s(r[key]), f"{r[key] / r['step_s']:.1%}")
    console.print(step)
    job = Table(title="whole job")
    job.add_column("quantity")
    job.add_column("value", justify="right")
    rows = [
        ("parameters", f"{r['params'] / 1e9:.1f} B"),
        ("model FLOPs / step (Korthikanti Eq. 7)", f"{r['model_flops_per_step']:.4g}"),
        ("hardware FLOPs / step (with recompute)", f"{r['hardware_flops_per_step']:.4g}"),
        ("steps", f"{r['steps']:,.0f}"),
        ("checkpoint stall (delta)", _fmt_s(r["ckpt_write_s"])),
        ("checkpoint interval (tau)", _fmt_s(r["ckpt_interval_s"])),
        ("  Young / Daly optimum", f"{_fmt_s(r['young_interval_s'])} / {_fmt_s(r['daly_interval_s'])}"),
        ("cluster MTBF", _fmt_s(r["mtbf_s"])),
        ("restart cost per failure", _fmt_s(r["restart_s"])),
        ("expected failures", f"{r['n_failures']:.1f}"),
        ("theoretical minimum (compute only)", _fmt_s(r["theoretical_s"])),
        ("predicted wall-clock, no failures", _fmt_s(r["train_s"])),
        ("expected JCT, failures included", _fmt_s(r["jct_s"])),
        (f"  {cfg.job.confidence:.0%} interval (model error + failures; {r['error_basis']})",
         f"{_fmt_s(r['jct_lo_s'])} - {_fmt_s(r['jct_hi_s'])}"),
        (f"P(JCT <= {cfg.job.deadline_days:g} days)", f"{r['p_deadline']:.0%}"),
        ("efficiency (theoretical / predicted)", f"{r['efficiency']:.1%}"),
        ("MFU", f"{r['mfu']:.1%}"),
        ("gamma = comm / compute", f"{r['gamma']:.3f}"),
        ("communication share of step", f"{r['comm_share']:.1%}"),
        ("GPU-hours", f"{r['gpu_hours']:,.0f}"),
        ("cost", f"${r['cost_usd']:,.0f}"),
        ("energy", f"{r['energy_kwh']:,.0f} kWh (${r['energy_usd']:,.0f})"),
    ]
    for k, v in rows:
        job.add_row(k, v)
    console.print(job)
    console.print(f"[bold]diagnosis:[/bold] {r['diagnosis']}")


def main(cfg: DictConfig, run_dir: Path) -> pd.DataFrame:
    df = run_estimate(cfg)
    record = df.iloc[0].to_dict()
    print_estimate(cfg, record)
    out = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in record.items()}
    out["config"] = OmegaConf.to_container(cfg, resolve=True)
    path = run_dir / "estimate.json"
    write_text(path, json.dumps(out, indent=2, default=float))
    output_console().print(f"wrote {path}")
    return df
