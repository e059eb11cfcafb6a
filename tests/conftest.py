import atexit
import os
import shutil
import tempfile

import jax
import pytest

import jctopt

# Strict numerics under test: implicit rank promotion is an error.
jax.config.update("jax_numpy_rank_promotion", "raise")

# One compilation cache for this test session, in-process and in the `jctopt` subprocesses
# (they inherit XDG_CACHE_HOME), and never the user's own: kernels compiled by one test are
# loaded by the next, as a user's repeated runs do. Removed when the session ends (~25 MB).
# Under pytest-xdist the workers inherit the controller's directories (its conftest runs
# before it starts them), so they share one cache, removed when the controller exits.
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("JCTOPT_TEST_CACHE_HOME"):
    os.environ["XDG_CACHE_HOME"] = os.environ["JCTOPT_TEST_CACHE_HOME"]
else:
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="jctopt-test-cache-")
    os.environ["JCTOPT_TEST_CACHE_HOME"] = os.environ["XDG_CACHE_HOME"]
    atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)
jctopt.enable_compile_cache("auto")
# The same for the user's config directory, where calibrate writes and every lookup looks first:
# never the developer's own calibrations (config.resources).
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="jctopt-test-config-")
atexit.register(shutil.rmtree, os.environ["XDG_CONFIG_HOME"], ignore_errors=True)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core, at most 4 (each worker is a JAX process of ~1 GB)."""
    return min(os.cpu_count() or 1, 4)


@pytest.fixture(scope="session")
def compose():
    cache = {}

    def _compose(*overrides: str):
        key = tuple(overrides)
        if key not in cache:
            cache[key] = jctopt.compose(list(overrides))
        return cache[key]

    return _compose


@pytest.fixture(scope="session")
def config(compose):
    """The model pytree for a composed config."""

    def _config(*overrides: str):
        return jctopt.to_config(compose(*overrides))

    return _config
