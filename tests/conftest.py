import jax
import pytest

import jctopt

# Strict numerics under test: implicit rank promotion is an error.
jax.config.update("jax_numpy_rank_promotion", "raise")


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
