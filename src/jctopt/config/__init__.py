"""Configuration: the typed schema Hydra composes, the catalogs under conf/, the value checks,
and the conversion of a checked config to the model's pytree."""

from .catalog import as_dict, catalog_names, compose, load_option
from .checks import check, check_layout, check_ranges, layer_counts, node_problem, node_sizes
from .choices import (
    PEAK_OF_PRECISION,
    PRECISION,
    RECOMPUTE,
    SELECTIVE_AC,
    is_mxfp8,
    recompute_choice,
    runs_precision,
    zero_shard_code,
)
from .errors import ConfigError
from .pytree import NODE_FIELDS, cluster_with, to_config, with_host_mtbf
from .schema import AppConf, register_configs, unknown_keys

__all__ = [
    "NODE_FIELDS", "PEAK_OF_PRECISION", "PRECISION", "RECOMPUTE", "SELECTIVE_AC", "AppConf", "ConfigError", "as_dict",
    "catalog_names", "check", "check_layout", "check_ranges", "cluster_with", "compose", "is_mxfp8", "layer_counts", "load_option",
    "node_problem", "node_sizes", "recompute_choice", "register_configs", "runs_precision", "to_config",
    "unknown_keys", "with_host_mtbf", "zero_shard_code",
]
