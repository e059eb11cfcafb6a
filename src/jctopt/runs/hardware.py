"""The hardware a row states: its rack, its NICs, its power limit and memory."""

from __future__ import annotations

import re

from omegaconf import DictConfig

from .columns import flag

# GB200's one smaller NVLink domain: NVL36 racks, cabled in pairs (NVIDIA GB200 NVL36x2).
NVL36 = 36


def _rack_node(gpu: DictConfig, gpn: int, used: list[str]) -> int:
    """A rack-scale GPU's gpus_per_node cell as the model takes it: the compute tray or the
    NVLink domain as stated; 36 an NVL36 rack (its NVLink domain set to 36); any other count
    ("8" as on HGX, "2" per superchip) the tray, one NIC per GPU either way, marked as a default."""
    tray = gpu.get("tray_gpus")
    if not tray or gpn in (tray, gpu.nvlink_domain):
        return gpn
    if gpn == NVL36 and gpu.nvlink_domain % NVL36 == 0:
        gpu.nvlink_domain = NVL36
        return gpn
    used.append("gpus_per_node")
    return int(tray)


def _ib_fabric(gbit: float) -> str:
    """The catalog's InfiniBand fabric of a NIC rate (Gbit/s): HDR up to 200, NDR up to 400, XDR."""
    return "ib_hdr200" if gbit <= 200 else "ib_ndr400" if gbit <= 400 else "ib_xdr800"


# The GH200's other memory: 141 GB HBM3e at 4.8 TB/s (ml-engineering's memory table, "GH200 SXM
# (2)"; NVIDIA sells it as 144 GB); the catalog's gh200 is the 96 GB HBM3 part.
GH200_HBM3E = re.compile(r"\b14[14] ?gi?b\b|hbm3e", re.IGNORECASE)


def _stated_hardware(cfg: DictConfig, row: dict) -> None:
    """Hardware the row states apart from the catalog GPU: a GH200 with HBM3e in its gpu cell;
    a board power limit below TDP (``gpu_power_limit_w``, model.power) and the HBM (``hbm_gb``,
    ``hbm_tbps``: Meta's Grand Teton H100s, 96 GB of HBM2e at 2.4 TB/s, as torchtitan benchmarks on)."""
    if cfg.gpu.name == "gh200" and GH200_HBM3E.search(str(row.get("gpu", ""))):
        cfg.gpu.hbm_gb, cfg.gpu.hbm_tbps = 141.0, 4.8
    if (watts := flag(row, "gpu_power_limit_w", float)) is not None:
        cfg.cluster.gpu_power_limit_w = watts
    for key in ("hbm_gb", "hbm_tbps"):
        if (value := flag(row, key, float)) is not None:
            cfg.gpu[key] = value
