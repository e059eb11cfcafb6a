"""jctopt: a differentiable job-completion-time model for large-model training.

x64 is enabled on import: counts such as 12 L h^2 or 16k GPUs x 10^12 FLOP/s stay exact,
and the model itself is dtype-generic (float32 inputs give float32 results).
"""

import os
import signal
import sys

# The `jctopt` command interrupted while it imports JAX (its first ~2 s; nothing is written yet)
# ends quietly with 128 + the signal, not a KeyboardInterrupt traceback; app.main then installs
# the tasks' own handlers (interrupt, finish or abandon the work in flight, write nothing partial).
_argv = list(getattr(sys, "orig_argv", sys.argv))
if (sys.argv and sys.argv[0].endswith("jctopt")) or ("-m" in _argv[:-1] and _argv[_argv.index("-m") + 1] == "jctopt.app"):
    for _signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signal, lambda number, frame: os._exit(128 + number))

# One XLA host device per available core, so that CPU sweeps shard their chunks over every
# core (XLA runs each host device's program on one core). GPUs are unaffected. Set before
# JAX creates its backends; a user's own XLA_FLAGS setting wins.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={_cores}").strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from .config import ConfigError, check, compose, to_config  # noqa: E402
from .config.cache import enable_compile_cache  # noqa: E402
from .job.jct import Estimate, Reason, estimate, estimate_batch  # noqa: E402
from .model.types import (  # noqa: E402
    ClusterSpec,
    Config,
    FabricSpec,
    GPUSpec,
    Job,
    Layout,
    ModelSpec,
    Training,
)
from .search.engine import Engine  # noqa: E402
from .search.space import Space, build_space  # noqa: E402
from .tasks.estimate import run_estimate  # noqa: E402
from .tasks.sweep import run_sweep  # noqa: E402

__all__ = [
    "ClusterSpec", "Config", "ConfigError", "Engine", "Estimate", "FabricSpec", "GPUSpec", "Job", "Layout",
    "ModelSpec", "Reason", "Space", "Training", "build_space", "check", "compose", "enable_compile_cache", "estimate",
    "estimate_batch", "run_estimate", "run_sweep", "to_config",
]
