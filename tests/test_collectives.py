"""The collective model against measured nccl-tests all-reduce bus bandwidth (collectives.csv)."""

import csv

import numpy as np
import pytest

from jctopt.config.resources import validation_file
from jctopt.model import comm as K

CSV = validation_file("collectives.csv")


def _sweep(system_prefix):
    with CSV.open() as fh:
        rows = list(csv.DictReader(fh))
    rows = [r for r in rows
            if r["system"].startswith(system_prefix) and r["message_size_bytes"]
            and r["value_type"] == "measured" and float(r["message_size_bytes"]) >= 64 * 2**20]
    return [(float(r["message_size_bytes"]), float(r["busbw_GBps"])) for r in rows]


CASES = [("a100_80gb", size, busbw) for size, busbw in _sweep("Azure ND A100 v4")] + \
        [("h100_sxm", size, busbw) for size, busbw in _sweep("Azure ND H100 v5")]


def test_csv_has_both_sweeps():
    assert sum(c[0] == "a100_80gb" for c in CASES) >= 8
    assert sum(c[0] == "h100_sxm" for c in CASES) >= 8


@pytest.mark.parametrize("gpu,size,measured", CASES, ids=[f"{g}-{int(s) >> 20}MiB" for g, s, _ in CASES])
def test_allreduce_busbw_8gpu_within_15pct(config, gpu, size, measured):
    cfg = config(f"gpu={gpu}", "layout=single_node")
    t = K.all_reduce(size, 8.0, 1.0, cfg.gpu, cfg.fabric, cfg.cluster)
    busbw = float(K.bus_bandwidth(t, size, 8.0)) / 1e9
    assert busbw == pytest.approx(measured, rel=0.15)


def test_cross_node_group_uses_the_fabric(config):
    # DP group of 8 GPUs one per node (stride 8): every hop crosses the NIC, so it is slower
    # than the same group inside a node, and a 2x faster NIC makes it faster.
    cfg = config("gpu=h100_sxm", "fabric=ib_ndr400")
    inside = float(K.all_reduce(1e9, 8.0, 1.0, cfg.gpu, cfg.fabric, cfg.cluster))
    across = float(K.all_reduce(1e9, 8.0, 8.0, cfg.gpu, cfg.fabric, cfg.cluster))
    fast = cfg.fabric._replace(nic_gbit=cfg.fabric.nic_gbit * 2)
    across_fast = float(K.all_reduce(1e9, 8.0, 8.0, cfg.gpu, fast, cfg.cluster))
    assert inside < across_fast < across
    # Bandwidth term: 2 x 7/8 x 1 GB over 400 Gb/s x 0.94 = 47 GB/s per GPU ~ 37 ms (+ latency).
    assert across == pytest.approx(2 * 7 / 8 * 1e9 / 47e9, rel=0.05)


def test_tcp_and_oversubscription_slow_the_fabric(config):
    rdma = config("fabric=roce400")
    tcp = config("fabric=eth100_tcp")
    assert float(K.nic_bw(tcp.fabric, tcp.cluster)) < float(K.nic_bw(rdma.fabric, rdma.cluster)) / 4
    fat = config("cluster=fat_tree_2to1")
    big = 64.0  # 64 nodes: more than a fat-tree leaf holds (32 ports / 8 NICs = 4 nodes)
    ratio = (float(K.scale_out_bw(big, 8.0, fat.gpu, fat.fabric, fat.cluster))
             / float(K.scale_out_bw(big, 8.0, rdma.gpu, fat.fabric, rdma.cluster)))
    assert ratio == pytest.approx(0.5)


def test_sharp_halves_nic_bound_allreduce(config):
    # H100 nodes on HDR 200G: the ring is NIC-bound (8 x 23.5 GB/s < 370 GB/s NVLink); SHARP
    # sends each byte across the fabric once instead of ~twice, so the time about halves.
    cfg = config("gpu=h100_sxm", "fabric=ib_hdr200")
    sharp = cfg.fabric._replace(sharp=np.float64(1.0))
    args = (4e9, 128.0, 1.0, cfg.gpu)
    ratio = float(K.all_reduce(*args, sharp, cfg.cluster)) / float(K.all_reduce(*args, cfg.fabric, cfg.cluster))
    assert ratio == pytest.approx(128 / (2 * 127), rel=0.02)


def test_two_hop_dispatch_by_hand(config):
    """MoE dispatch of a 100 MB token buffer, top-8, EP 32 over four 8-GPU H100 nodes (stride
    1): the flat all-to-all sends 8 x 24/32 = 6 copies over the fabric; the two-hop (DeepEP)
    one copy per remote node holding a chosen expert, 3 x (1 - (3/4)^8) = 2.70 on average,
    at 400 Gb/s x 0.94 = 47 GB/s per GPU (the NVLink side, 8 x (7/32 + 24/32 x 7/8) = 7 copies
    at 450 x nvlink_eff GB/s, is faster). Each pays one NVLink and one fabric step's latency:
    every peer's share is posted at once. Inside one node the two are the same."""
    cfg = config("gpu=h100_sxm", "fabric=ib_ndr400")
    g, f, c = cfg.gpu, cfg.fabric, cfg.cluster
    nbytes = 100e6
    flat = float(K.all_to_all(8 * nbytes, 32.0, 1.0, g, f, c))
    two_hop = float(K.all_to_all_two_hop(nbytes, 8.0, 32.0, 1.0, g, f, c))
    latency_flat = latency_two_hop = (float(g.nvlink_latency_us) + 5.0) * 1e-6
    assert flat == pytest.approx(latency_flat + 6 * nbytes / 47e9, rel=1e-12)
    assert two_hop == pytest.approx(latency_two_hop + 3 * (1 - 0.75 ** 8) * nbytes / 47e9, rel=1e-12)
    inside_flat = float(K.all_to_all(8 * nbytes, 8.0, 1.0, g, f, c))
    assert float(K.all_to_all_two_hop(nbytes, 8.0, 8.0, 1.0, g, f, c)) == pytest.approx(inside_flat, rel=1e-12)
    assert inside_flat == pytest.approx(float(g.nvlink_latency_us) * 1e-6 + 8 * 7 / 8 * nbytes / (450e9 * float(g.nvlink_eff)),
                                        rel=1e-12)
