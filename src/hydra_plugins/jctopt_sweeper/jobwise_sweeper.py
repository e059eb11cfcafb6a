"""``hydra/sweeper=jobwise`` (jctopt's default): Hydra's basic sweeper, except that a job whose
overrides do not compose (``layout.tp=8,abc``: 'abc' is no integer) stops alone, as a job with a bad
value does inside the task: its error is printed and written to ``<sweep.dir>/uncomposed-<n>/error.txt``
(which ``jctopt.app.FailedJobs`` counts, exiting 2 after the rest), and the other jobs run, on
whichever launcher. Hydra's own sweeper refuses the whole multirun before any job starts.

Hydra finds sweepers only in the ``hydra_plugins`` namespace package, hence this module's place.
(No ``from __future__ import annotations``: Hydra's plugin scan imports this module outside
``sys.modules``, where dataclasses cannot resolve string annotations.)
"""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.utils import filter_overrides
from hydra.errors import ConfigCompositionException


@dataclass
class JobwiseSweeperConf:
    _target_: str = "hydra_plugins.jctopt_sweeper.jobwise_sweeper.JobwiseSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="jobwise", node=JobwiseSweeperConf, provider="jctopt")


class JobwiseSweeper(BasicSweeper):
    uncomposed = 0  # jobs dropped so far (their error.txt directories are numbered by it)

    def get_job_batch(self) -> Sequence[Sequence[str]]:
        """The next batch without the jobs whose overrides do not compose, each reported."""
        batch = []
        for overrides in super().get_job_batch():
            try:
                self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            except ConfigCompositionException as err:
                # Hydra's message names the override, its cause (OmegaConf's) gives the reason.
                lines = [str(e).splitlines()[0] for e in (err, err.__cause__) if e is not None and str(e).strip()]
                reason = ": ".join(lines)
                shown = " ".join(filter_overrides(overrides))
                print(f"configuration error in job ({shown}): {reason}", file=sys.stderr)
                where = Path(str(self.config.hydra.sweep.dir)) / f"uncomposed-{self.uncomposed}"
                where.mkdir(parents=True, exist_ok=True)
                (where / "error.txt").write_text(f"configuration error: {reason}\n")
                self.uncomposed += 1
                continue
            batch.append(overrides)
        return batch
