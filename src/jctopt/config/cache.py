"""JAX's persistent compilation cache in the user's cache directory, so that a repeated
``jctopt`` run loads its compiled kernels instead of compiling them again.

A cache that cannot be used never breaks a run: an unusable directory leaves the cache off
(with one log line saying why), and JAX itself compiles afresh when an entry cannot be read
or written (``jax/_src/compiler.py``: ``_cache_read`` and ``_cache_write`` turn such errors
into warnings). JAX never replaces an entry that exists, so a damaged one would be compiled
again on every run: ``_heal`` removes it when JAX reports it, and the fresh compilation is
written in its place.

Compilation is not all a warm run would repeat: JAX traces every kernel again first (1-3 s
for the model's on a CPU). ``ExportedKernel`` keeps a kernel's traced program (``jax.export``)
in ``<cache>/exported`` too, loaded on later runs without tracing; ``compile_cache=off``
turns both off.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import importlib.metadata
import json
import logging
import os
import pickle
import re
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import jax
import jaxlib

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
    set_kernel_dir(None)
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
    set_kernel_dir(path / EXPORTED)
    # Every kernel is worth keeping: the model's take 0.5-5 s each to compile on a CPU.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # XLA's GPU autotune cache lives at a path under the cache directory, and that path enters
    # every entry's key (jax/_src/cache_key.py hashes the debug options without stripping it), so a
    # cache copied or moved elsewhere would never be hit; compiled kernels already hold their tuning.
    jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
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


# --- exported kernels ------------------------------------------------------------------------
# The persistent compilation cache skips XLA's compilation, not JAX's tracing, which for the
# model's kernels takes 1-3 s each on a CPU. An ``ExportedKernel`` keeps the traced program
# itself (``jax.export``'s serialized StableHLO) in ``<cache dir>/exported``: a later run
# deserializes and calls it without tracing. An entry is keyed by what decides the program:
# the static arguments, the arguments' tree, shapes, dtypes and shardings, the jax, jaxlib and
# jctopt versions, x64, the backend, and a hash of the traced sources (``source_hash``).

EXPORTED = "exported"  # subdirectory of the compile cache holding the exported kernels
SOURCE_PACKAGES = ("model", "job", "search", "config")  # under src/jctopt: everything a kernel traces
_SUFFIX = ".jaxexport"
_kernel_dir: list[Path | None] = [None]  # where exported kernels live; None: off (set by enable_compile_cache)
_loaded: dict = {}  # (directory, tag, spec) -> (callable, output tree) of this process
_warned: list[str] = []


def kernel_dir() -> Path | None:
    """Where exported kernels are read and written now (None: tracing every run)."""
    return _kernel_dir[0]


def set_kernel_dir(path: Path | None) -> None:
    """Keep exported kernels in ``path`` (None: off). ``enable_compile_cache`` calls it."""
    _kernel_dir[0] = None if path is None else Path(path)


@functools.cache
def source_hash() -> str:
    """sha256 of the Python sources a kernel's trace depends on (``SOURCE_PACKAGES``)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for package in SOURCE_PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def _versions() -> tuple[str, str, str]:
    try:
        own = importlib.metadata.version("jctopt")
    except importlib.metadata.PackageNotFoundError:
        own = "unknown"
    return jax.__version__, jaxlib.__version__, own


def build_tag() -> str:
    """What every entry written now shares: versions, x64, backend and the sources' hash."""
    parts = [*_versions(), bool(jax.config.jax_enable_x64), jax.default_backend(), source_hash()]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _leaf_spec(x) -> tuple:
    aval = jax.typeof(x)
    sharding = x.sharding if isinstance(x, jax.Array) and x.committed else None
    return aval.shape, aval.dtype, aval.weak_type, sharding


def _warn_once(what: str, *args) -> None:
    """Log ``what % args`` once per process."""
    message = what % args
    if message not in _warned:
        _warned.append(message)
        log.warning(message)


def forget_loaded() -> None:
    """Drop the kernels this process has loaded: the next call reads the cache directory."""
    _loaded.clear()


class ExportedKernel:
    """``jitted`` (a ``jax.jit`` function), called through a ``jax.export`` of it kept in
    ``kernel_dir()``: traced and written on the first call for a given static spec, loaded
    and called without tracing on later runs. A missing, stale, unreadable or corrupt entry is
    rebuilt (one log line), a kernel that cannot be exported runs traced; with the cache off
    this is ``jitted`` itself. The outputs are those of ``jitted``, bit for bit."""

    def __init__(self, jitted: Callable, name: str, static_argnums: tuple[int, ...] = ()):
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise ValueError(f"kernel name {name!r}: letters, digits and _ only")
        self.jitted, self.name, self.static_argnums = jitted, name, tuple(static_argnums)

    def __call__(self, *args):
        root = kernel_dir()
        if root is None:
            return self.jitted(*args)
        statics = tuple(args[i] for i in self.static_argnums)
        leaves, in_tree = jax.tree.flatten(tuple(a for i, a in enumerate(args) if i not in self.static_argnums))
        spec = (self.name, statics, in_tree, tuple(_leaf_spec(x) for x in leaves))
        key = (root, build_tag(), spec)
        entry = _loaded.get(key)
        if entry is None:
            entry = _loaded[key] = self._load_or_export(root, key[1], spec, leaves)
        call, out_tree = entry
        if call is None:  # could not be exported: traced, as without the cache
            return self.jitted(*args)
        return jax.tree.unflatten(out_tree, call(*leaves))

    def path(self, root: Path, tag: str, spec: tuple) -> Path:
        """The entry of ``spec`` under ``root``: ``<name>-<tag>-<hash of the spec>.jaxexport``."""
        return root / f"{self.name}-{tag}-{hashlib.sha256(_describe(spec).encode()).hexdigest()[:24]}{_SUFFIX}"

    def _load_or_export(self, root: Path, tag: str, spec: tuple, leaves: list):
        path, described = self.path(root, tag, spec), _describe(spec)
        if path.exists():
            try:
                return _read(path, tag, described)
            except Exception as err:  # noqa: BLE001 - any damage means: build it again
                _warn_once("exported kernel %s is unreadable (%s): tracing it again", path, err)
        out_tree = []

        def flat(*flat_args):
            dynamic = jax.tree.unflatten(spec[2], flat_args)
            values, statics = iter(dynamic), iter(spec[1])
            args = [next(statics) if i in self.static_argnums else next(values)
                    for i in range(len(spec[1]) + len(dynamic))]
            out, tree = jax.tree.flatten(self.jitted(*args))
            out_tree.append(tree)
            return out

        try:
            shapes = [jax.ShapeDtypeStruct(s, d, weak_type=w, sharding=sh) for s, d, w, sh in spec[3]]
            exported = jax.export.export(jax.jit(flat))(*shapes)
            blob = bytes(exported.serialize())
            entry = pickle.dumps({"tag": tag, "spec": described, "out_tree": out_tree[0],
                                  "sha256": hashlib.sha256(blob).hexdigest(), "exported": blob})
        except Exception as err:  # noqa: BLE001 - e.g. flatbuffers missing, or a kernel export cannot hold
            _warn_once("kernel %s cannot be exported (%s): it is traced on every run", self.name, err)
            return None, None
        _write(path, entry)
        _prune(root, self.name, tag)
        return jax.jit(exported.call), out_tree[0]


def _describe(spec: tuple) -> str:
    name, statics, in_tree, leaves = spec
    return repr((name, statics, str(in_tree), [(s, str(d), w, str(sh)) for s, d, w, sh in leaves]))


def _read(path: Path, tag: str, described: str):
    entry = pickle.loads(path.read_bytes())
    if entry["tag"] != tag or entry["spec"] != described:
        raise ValueError("it holds another kernel")
    if hashlib.sha256(entry["exported"]).hexdigest() != entry["sha256"]:
        raise ValueError("checksum mismatch")
    return jax.jit(jax.export.deserialize(bytearray(entry["exported"])).call), entry["out_tree"]


def _write(path: Path, data: bytes) -> None:
    """Atomically (a temporary file in the same directory, then ``os.replace``); never fatal."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name + ".", suffix=".tmp", delete=False) as f:
            tmp = f.name
            f.write(data)
        os.replace(tmp, path)
    except OSError as err:
        _warn_once("cannot write exported kernel %s (%s): it is traced again next run", path, err)
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _prune(root: Path, name: str, tag: str) -> None:
    """Remove ``name``'s entries written under another tag (older sources or versions)."""
    for entry in root.glob(glob.escape(name) + "-*" + _SUFFIX):
        if entry.name[len(name) + 1:].split("-", 1)[0] != tag:
            with contextlib.suppress(OSError):
                entry.unlink(missing_ok=True)
