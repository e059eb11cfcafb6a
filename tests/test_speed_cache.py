"""Exported kernels (config.cache.ExportedKernel): later runs load the traced program instead of
tracing it; a damaged or stale entry is rebuilt; compile_cache=off writes nothing; a loaded
kernel's outputs are the traced kernel's, bit for bit."""

import logging
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jctopt
from jctopt.config import cache

# jax.export serializes with flatbuffers; without it every kernel runs traced (one log line).
pytest.importorskip("flatbuffers", reason="jax.export's serialization needs flatbuffers (pyproject dependency)")

TRACES = []


@jax.jit
def _kernel(x, y):
    """A small kernel with transcendental ops, a pytree in and out; counts its traces."""
    TRACES.append(1)
    return {"a": jnp.exp(x) * jnp.log1p(y["w"]), "b": (jnp.sqrt(x) / 3.0).sum()}


def _static(n, x):
    TRACES.append(1)
    return jnp.cumsum(x ** n)


_STATIC = jax.jit(_static, static_argnums=0)


@pytest.fixture
def kernels(tmp_path):
    """Exported kernels kept in tmp_path for the test (the session's own place afterwards)."""
    before = cache.kernel_dir()
    cache.set_kernel_dir(tmp_path)
    cache.forget_loaded()
    yield tmp_path
    cache.set_kernel_dir(before)
    cache.forget_loaded()


def _args():
    x = jnp.linspace(0.5, 4.0, 7)
    return x, {"w": x[::-1] * 2.0}


def _same(a, b) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.asarray(u).dtype == np.asarray(v).dtype and np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(la, lb))


def _new_process() -> None:
    """As a new process would start: no kernel loaded, nothing traced in memory."""
    cache.forget_loaded()
    jax.clear_caches()


def _entries(root: Path) -> list[Path]:
    return sorted(root.glob("*.jaxexport"))


def test_loaded_kernel_is_bit_identical_and_does_not_trace(kernels):
    k = cache.ExportedKernel(_kernel, "small")
    want = _kernel(*_args())
    first = k(*_args())  # traced and exported
    assert len(_entries(kernels)) == 1 and _same(first, want)
    _new_process()  # from the file
    traces = len(TRACES)
    loaded = k(*_args())
    assert len(TRACES) == traces  # not traced
    assert _same(loaded, want)
    # Another shape is another entry; a static argument is part of the key too.
    k(jnp.ones(3), {"w": jnp.ones(3)})
    s = cache.ExportedKernel(_STATIC, "static", static_argnums=(0,))
    assert _same(s(2, jnp.arange(5.0)), _STATIC(2, jnp.arange(5.0)))
    assert _same(s(3, jnp.arange(5.0)), _STATIC(3, jnp.arange(5.0)))
    assert len(_entries(kernels)) == 4


def test_corrupt_or_unreadable_entry_is_rebuilt_with_the_same_result(kernels, caplog):
    k = cache.ExportedKernel(_kernel, "small")
    want = k(*_args())
    (entry,) = _entries(kernels)
    for junk in (b"\x00not a kernel\xff" * 9, entry.read_bytes()[:-100]):  # garbage, a cut-short write
        entry.write_bytes(junk)
        _new_process()
        traces = len(TRACES)
        with caplog.at_level(logging.WARNING, logger="jctopt.config.cache"):
            again = k(*_args())
        assert _same(again, want)
        assert len(TRACES) == traces + 1  # traced again, and written again
        assert "unreadable" in caplog.text and "tracing it again" in caplog.text
        caplog.clear()
    _new_process()
    traces = len(TRACES)
    assert _same(k(*_args()), want) and len(TRACES) == traces  # the rewritten entry loads
    assert not list(kernels.glob("*.tmp"))  # written atomically: no temporary file left


def test_changed_sources_miss_the_cache(kernels, monkeypatch):
    k = cache.ExportedKernel(_kernel, "small")
    want = k(*_args())
    (old,) = _entries(kernels)
    _new_process()
    monkeypatch.setattr(cache, "source_hash", lambda: "an edited model")
    traces = len(TRACES)
    assert _same(k(*_args()), want)
    assert len(TRACES) == traces + 1  # a miss: traced again
    (new,) = _entries(kernels)  # under the new tag; the stale entry was removed
    assert new != old and not old.exists()


def test_source_hash_covers_the_model_job_and_engine():
    assert cache.source_hash() == cache.source_hash() and len(cache.source_hash()) == 64
    root = Path(jctopt.__file__).parent
    for f in ("model/step.py", "job/jct.py", "search/engine.py"):
        assert (root / f).is_file() and f.split("/")[0] in cache.SOURCE_PACKAGES


def test_compile_cache_off_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # where "auto" would write
    before_dir = cache.kernel_dir()
    auto_place = Path(os.environ["XDG_CACHE_HOME"])
    try:
        assert cache.enable_compile_cache("off") is None and cache.kernel_dir() is None
        cache.forget_loaded()
        k = cache.ExportedKernel(_kernel, "small_off")
        traces = len(TRACES)
        assert _same(k(*_args()), _kernel(*_args()))
        x = jnp.arange(11.0)
        assert _same(k(x, {"w": x}), _kernel(x, {"w": x}))  # a new shape: traced, as jit would
        assert len(TRACES) == traces + 1
        assert not list(auto_place.rglob("*"))
        if before_dir is not None:
            assert not list(before_dir.glob("small_off-*"))
    finally:
        monkeypatch.undo()
        cache.enable_compile_cache("auto")  # the session's cache (conftest)
        cache.set_kernel_dir(before_dir)
        cache.forget_loaded()


def test_unwritable_directory_still_answers(kernels, caplog):
    blocker = kernels / "a_file"
    blocker.write_text("a regular file where the directory would go")
    cache.set_kernel_dir(blocker / "exported")
    k = cache.ExportedKernel(_kernel, "small_unwritable")
    with caplog.at_level(logging.WARNING, logger="jctopt.config.cache"):
        assert _same(k(*_args()), _kernel(*_args()))
    assert "cannot write exported kernel" in caplog.text


@pytest.mark.slow
def test_loaded_model_batch_is_bit_identical_to_the_traced_one(kernels, config):
    """The model itself: estimate_batch on a small batch, traced vs loaded from its export."""
    base = config("model=llama3_8b", "gpu=h100_sxm")
    batch = jax.tree.map(lambda x: jnp.stack([jnp.asarray(x, jnp.float64)] * 4), base)
    batch = batch._replace(layout=batch.layout._replace(tp=jnp.asarray([1.0, 2.0, 4.0, 8.0]),
                                                        n_gpus=jnp.asarray([8.0, 64.0, 512.0, 3.0])))
    want = jctopt.estimate_batch(batch)
    k = cache.ExportedKernel(jctopt.estimate_batch, "estimate_batch")
    k(batch)
    cache.forget_loaded()
    got = k(batch)
    assert type(got) is type(want) and _same(got, want)
    assert not bool(np.asarray(got.feasible)[3])  # 3 GPUs: a masked row, compared all the same
