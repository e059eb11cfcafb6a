"""layout.zero_shard: the ranks ZeRO shards over (model.memory.shard_groups) and what crosses the
fabric (model.step.data_parallel), against hand counts."""

import pytest

import jctopt
from jctopt.config import ConfigError
from jctopt.job.jct import Reason
from jctopt.model import comm as K
from jctopt.search.grid import search


def _llama8b(config, *extra, n_gpus=64, stage=1):
    """Llama 3 8B data-parallel over 64 H100 (8 nodes of 8), ZeRO-``stage``, tp = pp = 1."""
    return config("model=llama3_8b", "gpu=h100_sxm", f"layout.n_gpus={n_gpus}", "layout.tp=1", "layout.pp=1",
                  f"training.zero_stage={stage}", "training.global_batch=128", "training.micro_batch=1",
                  "training.recompute=none", *extra)


def test_optimizer_state_divides_by_the_shard_group(config):
    """Adam's 12 bytes per parameter over all 64 ranks, over a node's 8, or over 16 ranks."""
    every = jctopt.estimate(_llama8b(config, "layout.zero_shard=all"))
    node = jctopt.estimate(_llama8b(config, "layout.zero_shard=node"))
    sixteen = jctopt.estimate(_llama8b(config, "layout.zero_shard=16"))
    params = float(every.params)
    assert float(every.mem_optimizer) == pytest.approx(12.0 * params / 64, rel=1e-6)
    assert float(node.mem_optimizer) == pytest.approx(12.0 * params / 8, rel=1e-6)
    assert float(sixteen.mem_optimizer) == pytest.approx(12.0 * params / 16, rel=1e-6)
    assert float(node.mem_weights) == pytest.approx(float(every.mem_weights), rel=1e-12)  # ZeRO-1: weights whole


def test_stack_default_is_all_for_zero1_and_the_stack_hybrid_shard_for_zero3(config):
    for extra, same_as in (((), "all"), (("training.zero_stage=3", "training.hybrid_shard=true"), "node"),
                           (("training.zero_stage=3", "training.hybrid_shard=false"), "all")):
        stated = jctopt.estimate(_llama8b(config, *extra, f"layout.zero_shard={same_as}"))
        default = jctopt.estimate(_llama8b(config, *extra))
        assert float(default.step_s) == float(stated.step_s), extra
        assert float(default.mem_total) == float(stated.mem_total), extra


def test_zero1_inside_a_node_all_reduces_the_shard_across_nodes(config):
    """ZeRO-1 over each node's 8 ranks: a reduce-scatter and an all-gather inside the node (a ring
    all-reduce's bytes, on NVLink) and the 1/8 shard all-reduced across the 8 nodes, 8 ranks apart.
    Over all 64: one all-reduce of every gradient over the 64 ranks."""
    cfg = _llama8b(config, "layout.zero_shard=node")
    est = jctopt.estimate(cfg)
    wire = float(cfg.train.grad_bytes * cfg.train.grad_compression) * float(est.params)
    g, f, c = cfg.gpu, cfg.fabric, cfg.cluster
    in_node = K.all_reduce(wire, 8.0, 1.0, g, f, c)
    across = K.all_reduce(wire / 8.0, 8.0, 8.0, g, f, c)
    assert float(est.dp_comm_raw_s) == pytest.approx(float(in_node + across), rel=1e-6)
    every = jctopt.estimate(_llama8b(config, "layout.zero_shard=all"))
    assert float(every.dp_comm_raw_s) == pytest.approx(float(K.all_reduce(wire, 64.0, 1.0, g, f, c)), rel=1e-6)


def test_on_one_node_node_and_all_are_the_same_group(config):
    node = jctopt.estimate(_llama8b(config, "layout.zero_shard=node", n_gpus=8))
    every = jctopt.estimate(_llama8b(config, "layout.zero_shard=all", n_gpus=8))
    assert float(node.step_s) == pytest.approx(float(every.step_s), rel=1e-12)
    assert float(node.mem_total) == pytest.approx(float(every.mem_total), rel=1e-12)


@pytest.mark.parametrize("value, why", [("abc", "stack | node | all"), ("0", "stack | node | all"),
                                        ("3", "a divisor of dp x cp = 64")])
def test_a_bad_shard_group_is_refused_by_name(compose, value, why):
    cfg = compose("model=llama3_8b", "layout.n_gpus=64", "layout.tp=1", "layout.pp=1",
                  "training.global_batch=128", f"layout.zero_shard={value}")
    with pytest.raises(ConfigError, match="layout.zero_shard") as err:
        jctopt.to_config(cfg)
    assert why in str(err.value)


def test_a_shard_group_that_does_not_tile_dp_is_masked(config):
    """A search over layouts keeps one zero_shard: where it does not divide a layout's dp x cp, the
    layout is masked (Reason.LAYOUT); the engine's check is the model's."""
    for shard, tiles in ((16.0, False), (8.0, True), (4.0, True)):
        cfg = _llama8b(config, n_gpus=8)  # dp = 8: groups of 16 ranks do not tile it
        est = jctopt.estimate(cfg._replace(layout=cfg.layout._replace(zero_shard=cfg.layout.zero_shard * 0 + shard)))
        assert (int(est.reason) != Reason.LAYOUT) == tiles, shard


def test_a_sweep_over_shard_groups_matches_estimate(compose, config):
    """space.zero_shard is an axis: each swept configuration's step time is estimate's for the same
    layout.zero_shard, and a group of 16 ranks masks the layouts whose dp x cp it does not tile."""
    overrides = ("model=llama3_8b", "gpu=h100_sxm", "fabric=ib_ndr400", "training.global_batch=128",
                 "training.recompute=full", "space.gpu=[h100_sxm]", "space.fabric=[ib_ndr400]", "space.n_gpus=[16,32]", "space.tp=[1]", "space.pp=[1]", "space.cp=[1]",
                 "space.ep=[1]", "space.vpp=[1]", "space.micro_batch=[1]", "space.zero_stage=[1]",
                 "space.precision=[bf16]", "space.recompute=[full]", "space.ckpt_interval_s=[optimal]",
                 "space.zero_shard=[all,node,32]")
    df = search(compose(*overrides), "all")
    assert len(df) == 6 and set(df.zero_shard) == {"all", "node", "32"}
    for row in df.itertuples():
        if row.zero_shard == "32" and row.n_gpus == 16:
            assert row.reason == "LAYOUT"
            continue
        one = jctopt.estimate(config(*overrides[:5], f"layout.n_gpus={row.n_gpus}", "layout.tp=1", "layout.pp=1",
                                     "training.micro_batch=1", "training.zero_stage=1", "training.precision=bf16",
                                     f"layout.zero_shard={row.zero_shard}"))
        assert row.step_s == pytest.approx(float(one.step_s), rel=1e-5), row  # the sweep runs float32
