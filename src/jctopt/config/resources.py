"""Files that ship inside the package, found relative to it: the Hydra config tree and the
published measurements the model is validated and calibrated on. Both work the same from a
clone (editable install), an installed wheel, or any working directory. And the one check of
a directory jctopt writes into (outputs, the compilation cache)."""

from __future__ import annotations

import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
CONF_DIR = PACKAGE_DIR / "conf"  # Hydra's primary config directory (groups gpu/, model/, task/ ...)
VALIDATION_DIR = PACKAGE_DIR / "data" / "validation"  # published runs, specs, nccl-tests; README lists sources
CALIBRATION_RECORD = CONF_DIR / "calibration.yaml"  # written by `calibrate.apply=true`: values, errors, model_error


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
