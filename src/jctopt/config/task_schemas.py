"""The tasks' own config groups (space, sweep, procure, deadline, syncwall, gradient, optimize,
validate, calibrate): typed, so Hydra rejects a misspelled key or a wrongly typed value."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING


@dataclass
class SpaceConf:
    """Search ranges. Integer axes take an integer, a list, ``"from:to:step"``,
    ``"from:to:xfactor"`` (geometric) or ``"divisors"`` (tp: of n_heads, pp: of n_layers,
    cp: of seq_len, ep: of n_experts)."""  # context-parallel degrees

    name: str = MISSING  # the space's catalog name (conf/space)
    gpu: list[str] = MISSING  # catalog names (conf/gpu)
    fabric: list[str] = MISSING  # catalog names (conf/fabric)
    n_gpus: Any = MISSING  # GPU counts
    tp: Any = MISSING  # tensor-parallel degrees
    pp: Any = MISSING  # pipeline depths
    cp: Any = MISSING
    ep: Any = MISSING  # expert-parallel degrees
    etp: Any = "tp"  # expert tensor parallel: "tp" (as tp), integers dividing tp (1: MoE parallel folding)
    vpp: Any = MISSING  # virtual (interleaved) stages per pipeline rank
    schedule: Any = field(default_factory=lambda: ["1f1b"])  # pipeline schedules (model.schedules.SCHEDULES)
    micro_batch: Any = MISSING  # micro-batch sizes
    accum: Any = None  # None: global batch fixed at training.global_batch, accumulation solved
    recompute: list[str] = MISSING  # none | selective | full
    zero_stage: list[int] = MISSING  # ZeRO stages (0-3)
    zero_shard: list[str] = field(default_factory=lambda: ["stack"])  # layout.zero_shard choices
    precision: list[str] = MISSING  # bf16 | fp16 | fp8
    ckpt_interval_s: list[Any] = MISSING  # seconds, or "optimal" (Daly, per configuration)
    # Per-GPU catalog values to replace, e.g. {h100_sxm: {price_per_gpu_hour: 2.1}} (your quote).
    # (Untyped so that a whole mapping can be given on the command line.)
    gpu_overrides: Any = None


@dataclass
class SweepConf:
    keep: str = "feasible"  # feasible | all | top_k | pareto | best_per_group
    objective: str = "cost_usd"  # cost_usd | jct_s | energy_kwh: what top_k / best_per_group minimise
    top_k: int = 100  # configurations keep=top_k keeps
    group_by: list[str] = field(default_factory=lambda: ["gpu", "fabric", "n_gpus"])  # columns keep=best_per_group groups by
    max_days: Optional[float] = None  # keep only configurations with expected JCT <= this
    # ... and with failure-free time (steps x step, plus checkpoint stalls; start-up excluded) <= this
    max_free_days: Optional[float] = None
    chunk_size: Optional[int] = None  # configurations per compiled call; None: sized to the devices (search.engine.default_chunk_size)
    dtype: str = "float32"  # float32 (fast) | float64
    resume: bool = False  # continue the newest unfinished sweep of this configuration
    out: Optional[str] = None  # directory for the results (None = the Hydra run directory)
    progress: bool = True  # a progress bar
    distributed: bool = False  # jax.distributed.initialize(): several hosts share the chunks


@dataclass
class ProcureConf:
    gpus: list[str] = field(default_factory=lambda: ["h100_sxm", "b200"])  # GPU types compared
    prices: Any = None  # {gpu name: USD per GPU-hour} replacing the catalog's, e.g. {h100_sxm: 2.1}


@dataclass
class DeadlineConf:
    # When nothing meets the deadline, search again with up to this many times the largest GPU
    # count, every catalog GPU type and fabric, to say what it would take.
    scale_up: list[int] = field(default_factory=lambda: [2, 4, 8])


@dataclass
class SyncwallConf:
    n_gpus: Any = "8:16384:x2"  # GPU counts on the curve (same forms as space.n_gpus)
    min_marginal_eff: float = 0.5  # flag the count where adding GPUs returns less than this


@dataclass
class GradientConf:
    comm_share: float = 0.2  # threshold: NIC bandwidth that keeps exposed communication at this share
    n_gpus_max: float = 1.0e6  # upper end of the relaxed GPU count


@dataclass
class OptimizeConf:
    mode: str = "single"  # single: cost under the deadline (TPE) | multi: cost and days (NSGA-II)
    n_trials: int = 1000  # the study's total; a resumed study runs only the missing ones
    batch_size: int = 256  # trials asked, evaluated in one jitted call, and told together
    startup_trials: int = 256  # TPE: random trials before the model of good/bad regions
    seed: int = 0  # the samplers' seed
    worker: int = 0  # give each worker process sharing a study its own index (seed + 1000 x worker)
    storage: str = "sqlite:///outputs/optimize/optuna.db"  # RDB URL, journal:PATH (many workers), or memory
    study_name: Optional[str] = None  # None: model, mode and a hash of the problem definition
    progress: bool = True  # progress and the best so far


@dataclass
class ValidateConf:
    runs: Optional[str] = None  # CSV path, or a shipped file's name (runs_dev2.csv); None: runs_dev.csv
    out: Optional[str] = None  # output Parquet (None: validate.parquet in the run directory)


@dataclass
class CalibrateConf:
    # The runs to fit: paths or shipped file names; None: tasks.calibrate.CALIBRATION_RUNS
    # (runs_dev.csv, runs_dev2.csv).
    runs: Optional[list[str]] = None
    # Training logs to fit as well (runs.logs): Megatron-LM/NeMo, torchtitan, DeepSpeed or HF
    # Trainer logs, each with its run's settings in a YAML of the same stem.
    logs: Optional[list[str]] = None
    # Write the fitted values (gpu/*.yaml, training/*.yaml and the record calibration.yaml, all
    # or none) into the user's config directory, $XDG_CONFIG_HOME/jctopt (~/.config/jctopt),
    # which later runs read ahead of the shipped catalog.
    apply: bool = False
    # Where apply writes: user (the user's config directory) | package (the shipped catalog
    # itself, conf/: for refitting jctopt's own calibration in a clone; refused for an installed
    # or read-only package).
    target: str = "user"
    # Calibrate your own software stack instead (tasks.calibrate_stack): its name; the fitted
    # stack is written to $XDG_CONFIG_HOME/jctopt/stack/<name>.yaml, used as stack=<name>.
    stack: Optional[str] = None
