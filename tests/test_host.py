"""The host's launch floor under launch-bound MoE stages (model.host) against hand counts."""

import pytest

import jctopt
from jctopt.model import compute as C
from jctopt.model import host as H


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


def _moe_block_forward_s(cfg, est):
    """The MoE block's GPU forward time per micro-batch and layer: its GEMMs and half the layer's
    elementwise work (model.compute.layer_block_times), and its dispatch and combine, exposed here
    (no overlap, no recompute: 48 layers x 4 all-to-alls per micro-batch)."""
    m, g, t, lay = cfg.model, cfg.gpu, cfg.train, cfg.layout
    gemm, core, elem = C.layer_times(m, g, t, lay.tp, lay.cp, lay.ep, lay.etp)
    _, mlp_forward = C.layer_block_times(m, g, t, lay.tp, lay.cp, gemm, core, elem)
    a2a = float(est.ep_comm_s) / (float(est.n_micro) * 48 * 4)
    return float(mlp_forward) + 2 * a2a


def test_launch_bound_step_runs_at_the_host_pace(config):
    """With a floor above the GPU's micro-batch time, a third of the launches (the forward's)
    come after the dispatcher's sync and are hidden by the MoE block's own GPU forward time
    alone; the other two thirds (the backward's) by the backward's share of the GPU time. With
    the floor at 0 (a full-iteration CUDA graph) the GPU sets the pace."""
    cfg = _qwen3(config, "training.moe_host_s=0.05")
    graphed = jctopt.estimate(_qwen3(config, "training.moe_host_s=0.0"))
    bound = jctopt.estimate(cfg)
    n = float(bound.n_micro)
    assert n == 64.0 and float(graphed.host_s) == 0.0
    gpu_mb = (float(graphed.compute_s) + float(graphed.ep_comm_s)) / n
    block = _moe_block_forward_s(cfg, graphed)
    assert gpu_mb < 48 * 0.05 and block < 0.05 / 3
    synced = 48 * (0.05 / 3 - block)
    ahead = 2 / 3 * (48 * 0.05 - gpu_mb)
    assert float(bound.host_s) == pytest.approx(n * (synced + ahead), rel=1e-9)
    # The step exceeds the host's own time by the attention the GPU runs after each MoE block.
    parts = float(bound.compute_s) + float(bound.ep_comm_s) + float(bound.host_s)
    assert parts == pytest.approx(n * (48 * 0.05 + gpu_mb / 3 - 48 * block), rel=1e-9)
    assert parts > n * 48 * 0.05


def test_sync_exposes_launches_a_long_attention_hides_no_more(config):
    """A floor below the stage's whole GPU time but above the MoE block's forward (long
    sequences: the attention dominates the layer): the backward's launches hide, the forward's
    beyond the block do not: host_s = n x 48 x (h / 3 - block forward)."""
    long = ("model.seq_len=16384", "training.global_batch=64", "training.flash_attention=true")
    cfg = _qwen3(config, "training.moe_host_s=0.012", *long)
    graphed = jctopt.estimate(_qwen3(config, "training.moe_host_s=0.0", *long))
    est = jctopt.estimate(cfg)
    n = float(est.n_micro)
    gpu_mb = (float(graphed.compute_s) + float(graphed.ep_comm_s)) / n
    block = _moe_block_forward_s(cfg, graphed)
    assert 48 * 0.012 < gpu_mb and block < 0.012 / 3
    assert float(est.host_s) == pytest.approx(n * 48 * (0.012 / 3 - block), rel=1e-9)


def test_floor_below_the_gpu_time_changes_nothing(config):
    """0.1 ms per layer is below this stage's GPU time per layer: the step is the GPU's."""
    low = jctopt.estimate(_qwen3(config, "training.moe_host_s=0.0001"))
    none = jctopt.estimate(_qwen3(config, "training.moe_host_s=0.0"))
    assert float(low.host_s) == 0.0 and float(low.step_s) == pytest.approx(float(none.step_s), rel=1e-12)


def test_graphed_router_leaves_only_the_sync(config):
    """CUDA graphs over the router and the dispatcher's preprocessing (moe_router_graphed) keep
    the host ahead of the GPU: of the launch-bound case above only the forward's launches after
    each dispatch's sync remain, host_s = n x 48 x (h / 3 - block forward)."""
    cfg = _qwen3(config, "training.moe_host_s=0.05", "training.moe_router_graphed=true")
    graphed = jctopt.estimate(_qwen3(config, "training.moe_host_s=0.0"))
    est = jctopt.estimate(cfg)
    n = float(est.n_micro)
    block = _moe_block_forward_s(cfg, graphed)
    assert block < 0.05 / 3
    assert float(est.host_s) == pytest.approx(n * 48 * (0.05 / 3 - block), rel=1e-9)


@pytest.mark.parametrize("graphed_router", ["false", "true"])
def test_overlapped_all_to_alls_cover_the_sync(config, graphed_router):
    """With the all-to-alls overlapped with another micro-batch (Megatron-Core's 1F1B EP
    overlap), that micro-batch's queued work covers each dispatch's sync: only the launch floor's
    backward share beyond the GPU time is left, and none with the router graphed."""
    cfg = _qwen3(config, "training.moe_host_s=0.05", "training.ep_comm_overlap=true",
                 f"training.moe_router_graphed={graphed_router}")
    free = jctopt.estimate(_qwen3(config, "training.moe_host_s=0.0", "training.ep_comm_overlap=true"))
    est = jctopt.estimate(cfg)
    n = float(est.n_micro)
    gpu_mb = (float(free.compute_s) + float(free.ep_comm_s)) / n
    assert gpu_mb < 48 * 0.05
    ahead = 0.0 if graphed_router == "true" else n * 2 / 3 * (48 * 0.05 - gpu_mb)
    assert float(est.host_s) == pytest.approx(ahead, rel=1e-9, abs=1e-12)
