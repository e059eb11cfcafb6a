"""Configuration: the typed schema Hydra composes, the catalogs under conf/, the value checks,
and the conversion of a checked config to the model's pytree."""

from .catalog import as_dict, catalog_names, compose, load_option
from .checks import check, check_layout, layer_counts, node_sizes
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
from .pytree import to_config
from .schema import AppConf, register_configs, unknown_keys

__all__ = [
    "PEAK_OF_PRECISION", "PRECISION", "RECOMPUTE", "SELECTIVE_AC", "AppConf", "ConfigError", "as_dict",
    "catalog_names", "check", "check_layout", "compose", "is_mxfp8", "layer_counts", "load_option",
    "node_sizes", "recompute_choice", "register_configs", "runs_precision", "to_config", "unknown_keys",
    "zero_shard_code",
]
