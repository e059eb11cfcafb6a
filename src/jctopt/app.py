"""The `jctopt` command: one Hydra app, `jctopt task=<name> [overrides...]`."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from .config import ConfigError, register_configs, unknown_keys
from .config.cache import enable_compile_cache
from .config.resources import CONF_DIR
from .tasks import (
    calibrate,
    deadline,
    estimate,
    gradient,
    optimize,
    procure,
    sweep,
    syncwall,
    validate,
)

TASKS = {"calibrate": calibrate.main, "deadline": deadline.main, "estimate": estimate.main, "gradient": gradient.main, "optimize": optimize.main, "procure": procure.main, "sweep": sweep.main, "syncwall": syncwall.main,
         "validate": validate.main}

register_configs()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _app(cfg: DictConfig) -> None:
    for noisy in ("jax", "matplotlib"):  # backend probing, font cache chatter
        logging.getLogger(noisy).setLevel(logging.WARNING)
    enable_compile_cache(cfg.compile_cache)
    name = cfg.task.name
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    (run_dir / "error.txt").unlink(missing_ok=True)  # a rerun into the same directory starts clean
    try:
        if name not in TASKS:
            raise ConfigError(f"task={name!r} is not allowed: one of {', '.join(sorted(TASKS))}")
        unknown = unknown_keys(cfg)
        if unknown:
            key, allowed = unknown[0]
            raise ConfigError(f"{key} is not a configuration key: one of {', '.join(allowed)}")
        TASKS[name](cfg, run_dir)
    except ConfigError as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            # One bad job of a multirun is reported and skipped; the other jobs still run.
            job = HydraConfig.get().job
            print(f"configuration error in job {job.num} ({' '.join(job.override_dirname.split(','))}): {err}",
                  file=sys.stderr)
            (run_dir / "error.txt").write_text(f"configuration error: {err}\n")
            return
        print(f"configuration error: {err}", file=sys.stderr)
        sys.exit(2)


class FailedJobs(Callback):
    """After a multirun: name the jobs that stopped on a configuration error (their run
    directories hold error.txt) and exit 2, as a single bad run does."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        failed = sorted(Path(config.hydra.sweep.dir).glob("*/error.txt"))
        if failed:
            print(f"{len(failed)} job(s) of the multirun stopped on a configuration error: "
                  f"{', '.join(str(p.parent) for p in failed)}", file=sys.stderr)
            sys.exit(2)


def main() -> None:
    _app()


if __name__ == "__main__":
    main()
