"""Reading a runs CSV: where it is, the columns it must have."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ..config import ConfigError
from ..config.resources import validation_file

DEFAULT_RUNS = "runs_dev.csv"  # shipped with the package (jctopt/data/validation/)


def runs_path(runs: str | None) -> Path:
    """The CSV that ``validate.runs`` names: a path, or the bare name of a file shipped with
    the package (``runs_dev.csv``, ``runs_dev2.csv``, ...); unset means ``DEFAULT_RUNS``."""
    path = Path(runs or DEFAULT_RUNS)
    if path.is_file():
        return path
    if path.name == str(path):
        try:
            return validation_file(path.name)
        except FileNotFoundError as err:
            raise ConfigError(f"validate.runs={runs!r} is not allowed: no such file, and {err}") from None
    raise ConfigError(f"validate.runs={runs!r} is not allowed: no such file")


REQUIRED_COLUMNS = ("id", "gpu", "precision", "num_gpus", "tp", "pp", "global_batch", "measured_iter_time_s")


def read_runs(runs: Path) -> pd.DataFrame:
    """The runs CSV; a file that is not one (empty, binary, malformed), lacks a required column
    or holds no row is one ConfigError. Problems within a row are that row's ``reason``."""
    bad = f"validate.runs={str(runs)!r} is not allowed"
    try:
        table = pd.read_csv(runs)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ConfigError(f"{bad}: not a CSV file ({type(err).__name__}: {err})") from None
    # Column names in any case, padded or with spaces ("Num GPUs" is num_gpus).
    table.columns = [re.sub(r"\s+", "_", str(c).strip()).lower() for c in table.columns]
    missing = set(REQUIRED_COLUMNS) - set(table.columns)
    if missing:
        raise ConfigError(f"{bad}: missing columns {', '.join(sorted(missing))} (needed: {', '.join(REQUIRED_COLUMNS)})")
    if table.empty:
        raise ConfigError(f"{bad}: the file has a header but no rows")
    return table
