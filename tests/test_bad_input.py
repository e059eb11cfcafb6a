"""Bad input ends in one message that names the key, the value and what is allowed (exit 2
from the CLI), never in a traceback or a wrong answer."""

import subprocess
import sys

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
    if task == "syncwall":  # it sweeps the counts of syncwall.n_gpus
        override = override.replace("space.n_gpus", "syncwall.n_gpus")
    cfg = compose(f"task={task}", override, "sweep.progress=false")
    with pytest.raises(jctopt.ConfigError, match="no valid layout for model=gpt3_175b") as err:
        TASKS[task](cfg, tmp_path)
    assert rule in str(err.value)


def test_empty_space_from_the_cli_exits_2_without_a_traceback(tmp_path):
    out = subprocess.run([sys.executable, "-c", "from jctopt.app import main; main()", "task=sweep", "space.tp=[5]",
                          f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "space.tp must divide model.n_heads=96" in out.stderr
