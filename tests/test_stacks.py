"""Software stacks (conf/stack): what each sets, that every task takes one, and the spellings of
precision and recompute that users of other frameworks write."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from jctopt.config import compose, load_option, to_config
from jctopt.config.resources import CONF_DIR
from jctopt.config.schema import TrainingConf
from jctopt.job import estimate
from jctopt.runs.spellings import (
    RowError,
    recompute_mode,
    recompute_modules,
    row_gpu,
    row_precision,
)

STACK_DIR = Path(CONF_DIR) / "stack"
NAMED = ["megatron_core", "torchtitan", "pytorch_fsdp", "deepspeed_zero", "llm_foundry", "maxtext"]
TASKS = sorted(p.stem for p in (Path(CONF_DIR) / "task").glob("*.yaml"))


def stack_values(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(STACK_DIR / f"{name}.yaml")) or {}


def test_every_stack_file_is_a_training_package_of_known_keys():
    fields = set(TrainingConf.__dataclass_fields__)
    for path in sorted(STACK_DIR.glob("*.yaml")):
        assert path.read_text().startswith("# @package training\n"), path.name
        assert set(stack_values(path.stem)) <= fields, path.name
        assert stack_values(path.stem)["stack"] == path.stem  # names itself: the intervals read it
    assert stack_values("none") == {"stack": "none"}
    assert {*NAMED, "generic", "megatron_lm", "none"} <= {p.stem for p in STACK_DIR.glob("*.yaml")}


def test_generic_is_each_flag_as_most_named_stacks_set_it():
    generic = stack_values("generic")
    named = [stack_values(n) for n in NAMED]
    for key, value in generic.items():
        if key == "stack":
            continue
        votes = [s[key] for s in named if key in s]
        assert votes.count(value) > len(votes) / 2, (key, value, votes)


def test_a_stack_sets_the_training_flags_and_the_command_line_still_wins():
    base = compose(["task=estimate"])
    titan = compose(["task=estimate", "stack=torchtitan"])
    assert base.training.selective_ac == "core_attention" and titan.training.selective_ac == "op"
    assert (titan.training.dp_overlap, titan.training.mp_comm_overlap) == (True, False)
    assert titan.training.global_batch == base.training.global_batch  # not a stack's key
    assert compose(["task=estimate", "stack=torchtitan", "training.selective_ac=core_attention"]
                   ).training.selective_ac == "core_attention"


def test_stack_none_is_the_training_preset():
    """The default stack names nothing: the estimate is the preset's, bit for bit."""
    without = compose(["task=estimate", "~stack"])  # the defaults list without a stack
    assert compose(["task=estimate", "stack=none"]).training == without.training
    a = estimate(to_config(without))
    b = estimate(to_config(compose(["task=estimate", "stack=none"])))
    assert float(a.step_s) == float(b.step_s) and float(a.jct_s) == float(b.jct_s)


def test_eager_elementwise_stack_is_slower_than_a_fused_one():
    """pytorch_fsdp runs eager norms and activations (model.eager) and eager cross-entropy: on the
    same job every other flag equal, its step is longer."""
    fused = ["task=estimate", "stack=pytorch_fsdp", "training.fused_elementwise=true"]
    eager = ["task=estimate", "stack=pytorch_fsdp"]
    assert float(estimate(to_config(compose(eager))).step_s) > float(estimate(to_config(compose(fused))).step_s)


@pytest.mark.parametrize("task", TASKS)
def test_every_task_takes_a_stack(task):
    cfg = compose([f"task={task}", "stack=generic"])
    assert cfg.training.fused_attention is False and cfg.training.dp_overlap is True


def test_a800_is_an_a100_with_two_thirds_of_its_nvlink():
    """NVIDIA A800 datasheet: NVLink 400 GB/s against the A100's 600 (both directions)."""
    a800, a100 = load_option("gpu", "a800"), load_option("gpu", "a100_80gb")
    assert a800.nvlink_gbps == pytest.approx(a100.nvlink_gbps * 400 / 600)
    assert (a800.peak_bf16_tflops, a800.hbm_tbps, a800.die) == (a100.peak_bf16_tflops, a100.hbm_tbps, a100.die)
    assert row_gpu("A800 80GB SXM") == ("a800", False)


@pytest.mark.parametrize("cell, precision", [("amp", "fp16"), ("O2", "fp16"), ("Apex O2", "fp16"),
                                             ("AMP (bf16)", "bf16"), ("amp bf16", "bf16"),
                                             ("BF16+FP8", "fp8"), ("bf16 + fp8", "fp8")])
def test_mixed_precision_spellings(cell, precision):
    assert row_precision(cell) == precision


@pytest.mark.parametrize("cell", ["fp32", "TF32", "float32"])
def test_full_precision_is_refused_by_name(cell):
    with pytest.raises(RowError, match="fp32 and tf32 GEMMs are not priced"):
        row_precision(cell)


@pytest.mark.parametrize("cell, mode, modules", [
    ("--recompute-activations", "selective", None),  # Megatron-LM: granularity selective
    ("partition_activations", "full", None),  # DeepSpeed activation checkpointing
    ("norm, act", "selective", ["layernorm", "moe_act"]),
    ("selective: norm, act", "selective", ["layernorm", "moe_act"]),
])
def test_recompute_spellings_of_other_frameworks(cell, mode, modules):
    assert recompute_mode(cell) == mode
    assert recompute_modules(cell) == modules


def test_every_shipped_run_names_its_stack():
    """The shipped files are what scripts/convert_runs.py writes (their stack and software
    columns), and every stack they name has a conf/stack file."""
    import convert_runs
    import pandas as pd

    from jctopt.config.resources import VALIDATION_DIR

    assert convert_runs.main(["--check"]) == 0
    named = set(pd.concat([pd.read_csv(p) for p in Path(VALIDATION_DIR).glob("runs_*.csv")])["stack"])
    assert named <= {p.stem for p in STACK_DIR.glob("*.yaml")} and len(named) == 9
    assert convert_runs.stack_of("Korthikanti et al. 2022 (arXiv:2205.05198), Tables 3+5", "") == "megatron_lm"
    assert convert_runs.stack_of("NVIDIA/dgxc-benchmarking v25.02 (nemo:24.12)", "") == "megatron_core"
    assert convert_runs.stack_of("my own cluster's logs", "") is None


def test_a_stack_without_runs_carries_the_spread_across_stacks():
    """stack=generic: the step interval is the record's leave-one-stack-out quantiles
    (model_error.stacks), linear between the levels, around the predicted step; stack=none keeps
    the GPU type's own left-out error (rows)."""
    import numpy as np
    import pandas as pd

    from jctopt.job import risk, uncertainty

    record = risk._record()["model_error"]
    assert risk.error_basis("h100_sxm", stack="generic") == "stacks"
    assert risk.error_basis("h100_sxm", stack="none") == "rows"
    assert risk.error_basis("h100_sxm", stack="torchtitan") == "rows"  # a stack with runs in the fit
    rows = pd.DataFrame({"gpu": ["h100_sxm"], "step_s": [10.0]})
    for stack, basis in (("generic", "stacks"), ("none", "rows")):
        q = np.asarray(record[basis]["log_quantiles"])
        lo, hi = np.interp([0.1, 0.9], uncertainty.LEVELS, q)
        out = risk.with_step_interval(rows, 0.8, stack=stack)
        assert float(out.step_lo_s[0]) == pytest.approx(10.0 * np.exp(lo), rel=1e-12)
        assert float(out.step_hi_s[0]) == pytest.approx(10.0 * np.exp(hi), rel=1e-12)
    stacks = record["stacks"]
    assert stacks["rows"] > 500 and 0.7 <= stacks["coverage_lost"][0.8] <= 0.9


def test_a_calibrated_stack_carries_its_own_error_else_the_spread_across_stacks(tmp_path, monkeypatch):
    """A stack calibrated with enough runs (its error file in the user's config directory) gets
    its own quantiles, hand-written here: the 80 % interval of a 10 s step is 10 s x exp(q10)
    .. exp(q90); one without that file gets the across-stack error (stacks); a file at other
    levels is refused by name."""
    import numpy as np
    import pandas as pd

    from jctopt.config import ConfigError
    from jctopt.config.resources import stack_error_file
    from jctopt.job import risk

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    rows = pd.DataFrame({"gpu": ["h100_sxm"], "step_s": [10.0]})
    assert risk.error_basis("h100_sxm", stack="mine") == "stacks"
    path = stack_error_file("mine")
    assert path == tmp_path / "jctopt" / "stack_error" / "mine.yaml"
    path.parent.mkdir(parents=True)
    quantiles = [-0.2, -0.15, -0.1, -0.05, 0.0, 0.04, 0.08, 0.12, 0.16]  # q10 = -0.1, q90 = 0.08
    path.write_text(f"levels: [0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.975]\nlog_quantiles: {quantiles}\n")
    assert risk.error_basis("h100_sxm", stack="mine") == "stack:mine"
    assert risk.error_basis("h100_sxm", moe=True, stack="mine") == "moe"  # MoE keeps the MoE runs' error
    out = risk.with_step_interval(rows, 0.8, stack="mine")
    assert float(out.step_lo_s[0]) == pytest.approx(10.0 * np.exp(-0.1), rel=1e-12)
    assert float(out.step_hi_s[0]) == pytest.approx(10.0 * np.exp(0.08), rel=1e-12)
    path.write_text("levels: [0.1, 0.9]\nlog_quantiles: [-0.1, 0.1]\n")
    with pytest.raises(ConfigError, match=r"mine.yaml holds no log_quantiles at levels"):
        risk.error_basis("h100_sxm", stack="mine")
    path.unlink()
    assert risk.error_basis("h100_sxm", stack="mine") == "stacks"
