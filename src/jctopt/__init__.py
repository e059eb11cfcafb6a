"""jctopt: a differentiable job-completion-time model for large-model training.

x64 is enabled on import: counts such as 12 L h^2 or 16k GPUs x 10^12 FLOP/s stay exact,
and the model itself is dtype-generic (float32 inputs give float32 results).
"""

import jax

jax.config.update("jax_enable_x64", True)

from ._config import ConfigError, check, compose, to_config  # noqa: E402
from ._jct import Estimate, Reason, estimate, estimate_batch  # noqa: E402
from ._types import (  # noqa: E402
    ClusterSpec,
    Config,
    FabricSpec,
    GPUSpec,
    Job,
    Layout,
    ModelSpec,
    Training,
)
from .tasks.estimate import run_estimate  # noqa: E402

__all__ = [
    "ClusterSpec", "Config", "ConfigError", "Estimate", "FabricSpec", "GPUSpec", "Job", "Layout",
    "ModelSpec", "Reason", "Training", "check", "compose", "estimate", "estimate_batch",
    "run_estimate", "to_config",
]
