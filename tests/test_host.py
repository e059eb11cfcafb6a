"""The host's launch floor under launch-bound MoE stages (_host) against hand counts."""

import pytest

import jctopt
from jctopt import _host as H


def _qwen3(config, *extra):
    """Qwen3-30B-A3B (48 MoE layers) on one 8-GPU node, EP 8, one 4096-token sequence per
    micro-batch: 512 / (8 x 1) = 64 micro-batches per step."""
    return config("model=qwen3_30b_a3b", "gpu=b200", "layout=single_node", "layout.tp=1", "layout.ep=8",
                  "training.global_batch=512", "training.micro_batch=1", "training.recompute=none",
                  "training.precision=fp8", *extra)


def test_floor_counts_the_stage_moe_layers(config):
    """48 MoE layers x 9.5 ms = 0.456 s per micro-batch; a dense model has none."""
    cfg = _qwen3(config, "training.moe_host_s=0.0095")
    assert float(H.launch_floor(cfg.model, cfg.train, 48.0)) == pytest.approx(48 * 0.0095, rel=1e-12)
    dense = config("model=llama3_8b", "training.moe_host_s=0.0095")
    assert float(H.launch_floor(dense.model, dense.train, 32.0)) == 0.0


def test_launch_bound_step_runs_at_the_host_pace(config):
    """With a floor above the GPU's micro-batch time the step is n_micro x the floor (no
    pipeline, no data-parallel traffic beyond the gradient sync), and host_s is what the floor
    adds; with the floor at 0 (a full-iteration CUDA graph) the GPU sets the pace."""
    graphed = jctopt.estimate(_qwen3(config, "training.moe_host_s=0.0"))
    bound = jctopt.estimate(_qwen3(config, "training.moe_host_s=0.05"))
    n = float(bound.n_micro)
    assert n == 64.0 and float(graphed.host_s) == 0.0
    gpu_mb = (float(graphed.compute_s) + float(graphed.ep_comm_s)) / n
    assert gpu_mb < 48 * 0.05
    assert float(bound.host_s) == pytest.approx(n * (48 * 0.05 - gpu_mb), rel=1e-9)
    parts = float(bound.compute_s) + float(bound.ep_comm_s) + float(bound.host_s)
    assert parts == pytest.approx(n * 48 * 0.05, rel=1e-9)


def test_floor_below_the_gpu_time_changes_nothing(config):
    """0.1 ms per layer is below this stage's GPU time per layer: the step is the GPU's."""
    low = jctopt.estimate(_qwen3(config, "training.moe_host_s=0.0001"))
    none = jctopt.estimate(_qwen3(config, "training.moe_host_s=0.0"))
    assert float(low.host_s) == 0.0 and float(low.step_s) == pytest.approx(float(none.step_s), rel=1e-12)
