"""JAX's persistent compilation cache in the user's cache directory, so that a repeated
``jctopt`` run loads its compiled kernels instead of compiling them again.

A cache that cannot be used never breaks a run: an unusable directory leaves the cache off
(with one log line saying why), and JAX itself compiles afresh when an entry cannot be read
or written (``jax/_src/compiler.py``: ``_cache_read`` and ``_cache_write`` turn such errors
into warnings). JAX never replaces an entry that exists, so a damaged one would be compiled
again on every run: ``_heal`` removes it when JAX reports it, and the fresh compilation is
written in its place.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import warnings
from pathlib import Path

import jax

from .resources import why_unwritable

log = logging.getLogger(__name__)

OFF = ("off", "none", "false", "")
# JAX's warning for an entry it could not read (compiler.py, _cache_read); entries are files
# named "<module>-<hash>-cache" (lru_cache.py), the warning names the module or the key.
_READ_ERROR = re.compile(r"Error reading persistent compilation cache entry for '([^']+)'")


def cache_dir(setting: str | None) -> Path | None:
    """The directory ``compile_cache=setting`` names: ``auto`` is ``$XDG_CACHE_HOME/jctopt``
    (``~/.cache/jctopt`` when unset), ``off`` is None, anything else a path."""
    if setting is None or str(setting).strip().lower() in OFF:
        return None
    if setting == "auto":
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        return Path(base) / "jctopt"
    return Path(setting).expanduser()


def enable_compile_cache(setting: str | None = "auto") -> Path | None:
    """Point JAX's persistent compilation cache at ``cache_dir(setting)``; the directory used,
    or None when the cache is off or unusable. Call before the first compilation."""
    path = cache_dir(setting)
    if path is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    problem = why_unwritable(path)
    if problem:
        log.warning("compile_cache=%s is not usable (%s): compiling without a cache", path, problem)
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # Every kernel is worth keeping: the model's take 0.5-5 s each to compile on a CPU.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    warnings.showwarning = _heal(path, warnings.showwarning)
    return path


def _heal(path: Path, showwarning):
    """``showwarning`` that also deletes the cache entries JAX reports as unreadable, before
    JAX compiles them again and writes the result."""
    if getattr(showwarning, "heals", None) == path:
        return showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        damaged = _READ_ERROR.search(str(message))
        if damaged:
            for entry in path.glob(glob.escape(damaged[1]) + "-*"):
                entry.unlink(missing_ok=True)
        showwarning(message, category, filename, lineno, file, line)

    show.heals = path
    return show
