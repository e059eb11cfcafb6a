"""NVIDIA GH200 in the catalog: an H100 die in four-GPU nodes (JSC JUPITER, CSCS Alps), its own
MAMF, NVLink between the four, NDR200 InfiniBand out of the node."""

import prose
import pytest

from jctopt.config import ConfigError, to_config
from jctopt.job.jct import estimate

# Llama 3 8B on 16 nodes, data parallelism with the distributed optimizer.
RUN = ("model=llama3_8b", "layout.n_gpus=64", "layout.tp=1", "layout.pp=1", "training.micro_batch=1",
       "training.global_batch=64", "training.recompute=selective", "training.zero_stage=1")
# The same run as a validate row whose gpu cell each test fills in.
ROW = {"id": "r", "source": "a 2025 report", "model": "Llama 3 8B", "precision": "bf16", "num_gpus": 64, "tp": 1,
       "pp": 1, "cp": 1, "global_batch": 64}


def test_nodes_of_four_gpus_with_their_nics(compose):
    cfg = compose("gpu=gh200")
    assert (cfg.cluster.gpus_per_node, cfg.cluster.nics_per_node, cfg.gpu.nvlink_domain) == (4, 4, 4)
    nodes_of_4 = r"cluster.gpus_per_node=2 is not allowed: 4 \(gpu=gh200 comes in nodes of 4\)"
    with pytest.raises(ConfigError, match=nodes_of_4):
        to_config(compose("gpu=gh200", "cluster.gpus_per_node=2"))


def test_h100_die_at_its_own_mamf(config):
    """Same die and peaks as the H100 SXM (989 / 1,979 TFLOP/s dense); its GEMM efficiency is its
    own MAMF (828.6 TFLOP/s at 900 W, ml-engineering) moved by the H100 die's fit, as the H100's
    794.5 is: the bf16 ratio of the two spec fractions survives the move in logit space as an
    ordering, and the fitted die values (half-dimension, attention) are the H100's."""
    gh, h = config("gpu=gh200").gpu, config("gpu=h100_sxm").gpu
    assert float(gh.peak_bf16_tflops) == float(h.peak_bf16_tflops) == 989.0
    assert float(gh.matmul_eff) > float(h.matmul_eff)
    assert float(gh.matmul_half_dim) == float(h.matmul_half_dim)
    assert float(gh.attn_eff) == float(h.attn_eff)
    assert (float(gh.hbm_gb), float(gh.hbm_tbps), float(gh.host_link_gbps)) == (96.0, 4.0, 450.0)


def test_estimate_is_finite_and_feasible(config):
    est = estimate(config("gpu=gh200", "fabric=ib_ndr200", *RUN))
    assert bool(est.feasible) and 0 < float(est.step_s) < float("inf")


def test_validate_places_a_gh200_row_on_its_reference_system(compose):
    cfg, used = prose.row_config(compose("task=validate"), dict(ROW, gpu="NVIDIA GH200 96GB"))
    assert cfg.gpu.name == "gh200" and cfg.fabric.name == "ib_ndr200"
    assert (cfg.cluster.gpus_per_node, cfg.cluster.nics_per_node) == (4, 4)
    assert {"gpus_per_node", "inter_node"} <= set(used)


@pytest.mark.parametrize("cell, hbm", [("GH200", (96.0, 4.0)), ("GH200 96GB", (96.0, 4.0)),
                                       ("NVIDIA GH200 144GB HBM3e", (141.0, 4.8)), ("GH200 141GB", (141.0, 4.8))])
def test_a_gh200_row_states_its_memory(compose, cell, hbm):
    """The 96 GB HBM3 part is the catalog's; a cell naming the 141/144 GB HBM3e one runs on its
    memory (ml-engineering's memory table: 141 GB at 4.80 TB/s)."""
    cfg, _ = prose.row_config(compose("task=validate"), dict(ROW, gpu=cell))
    assert cfg.gpu.name == "gh200" and (cfg.gpu.hbm_gb, cfg.gpu.hbm_tbps) == hbm
