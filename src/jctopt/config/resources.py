"""Files that ship inside the package, found relative to it: the Hydra config tree and the
published measurements the model is validated and calibrated on. Both work the same from a
clone (editable install), an installed wheel, or any working directory. The user's own config
directory (``user_config_dir``), searched ahead of the package's. And the one check of a
directory jctopt writes into (outputs, the compilation cache), and files written whole or not
at all (``write_together``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
CONF_DIR = PACKAGE_DIR / "conf"  # Hydra's primary config directory (groups gpu/, model/, task/ ...)
SWEEPS_DIR = PACKAGE_DIR / "sweeps"  # ready multiruns: --config-dir sweeps from any working directory (app)
VALIDATION_DIR = PACKAGE_DIR / "data" / "validation"  # published runs, specs, nccl-tests; README lists sources
PACKAGE_CALIBRATION_RECORD = CONF_DIR / "calibration.yaml"  # the shipped calibration: values, errors, model_error


def user_config_dir() -> Path:
    """The user's config directory, ``$XDG_CONFIG_HOME/jctopt`` (default ``~/.config/jctopt``).

    It mirrors the package's ``conf/`` groups: ``gpu/<name>.yaml``, ``training/<name>.yaml``,
    ``stack/<name>.yaml`` ... and ``calibration.yaml``. An entry there is found before the
    package's of the same name, by Hydra (``config.catalog.user_search_path``) and by
    ``load_option``; ``calibrate.apply=true`` writes into it, never into the package."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "jctopt"


def conf_file(group: str, name: str) -> Path:
    """``<group>/<name>.yaml`` of the user's config directory where it exists, else the package's."""
    own = user_config_dir() / group / f"{name}.yaml"
    return own if own.is_file() else CONF_DIR / group / f"{name}.yaml"


def stack_error_file(stack: str) -> Path:
    """Where ``calibrate.stack=<stack>`` keeps that stack's own model error (its runs, each
    predicted by the stack fitted without it): ``$XDG_CONFIG_HOME/jctopt/stack_error/<stack>.yaml``."""
    return user_config_dir() / "stack_error" / f"{stack}.yaml"


def calibration_record() -> Path:
    """The calibration in force: the user's ``calibration.yaml`` (``calibrate.apply=true``)
    where there is one, else the shipped one."""
    own = user_config_dir() / "calibration.yaml"
    return own if own.is_file() else PACKAGE_CALIBRATION_RECORD


# The record read by the error model (job.risk), resolved once when jctopt is imported.
CALIBRATION_RECORD = calibration_record()


def package_unwritable(conf_dir: Path = CONF_DIR) -> str | None:
    """Why the shipped catalog ``conf_dir`` must not be rewritten (``calibrate.target=package``),
    or None: an installed package (under site-packages or dist-packages) is its installer's, and
    a directory that cannot be written is no one's to rewrite."""
    installed = {"site-packages", "dist-packages"} & set(conf_dir.parts)
    if installed:
        return f"{conf_dir} is an installed package (under {installed.pop()})"
    if not os.access(conf_dir, os.W_OK):
        return f"{conf_dir} is not writable"
    return why_unwritable(conf_dir)


def validation_file(name: str) -> Path:
    """A published data file shipped with the package, e.g. ``validation_file("runs_dev.csv")``."""
    path = VALIDATION_DIR / name
    if not path.is_file():
        shipped = sorted(p.name for p in VALIDATION_DIR.iterdir() if p.suffix == ".csv")
        raise FileNotFoundError(f"{name!r} is not shipped with jctopt: one of {', '.join(shipped)}")
    return path


def why_unwritable(path: Path) -> str | None:
    """Why files cannot be written into directory ``path`` (created if missing), or None."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
    except OSError as err:
        return f"{type(err).__name__}: {err.strerror or err}"
    return None


def write_temp(path: Path, text: str) -> Path:
    """``text`` in a new hidden file beside ``path`` (same directory, so that ``os.replace``
    onto ``path`` is atomic); its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def write_together(files: dict[Path, str]) -> list[Path]:
    """Write every file of ``{path: text}`` or none: each to a temporary file in its own
    directory first (``write_temp``), then all renamed onto their paths (``os.replace``) once
    every one was written. A failure before the renames removes the temporary files and leaves
    every path as it was. The paths written, in order."""
    written: list[tuple[Path, Path]] = []
    try:
        for path, text in files.items():
            written.append((write_temp(path, text), path))
    except BaseException:
        for tmp, _ in written:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in written:
        os.replace(tmp, path)
    return [path for _, path in written]
