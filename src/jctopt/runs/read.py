"""Reading a runs CSV: where it is, the columns it must have."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pandas as pd

from ..config import ConfigError
from ..config.resources import VALIDATION_DIR, validation_file
from .columns import FLAG_COLUMNS
from .defaults import DEFAULTS

DEFAULT_RUNS = "runs_dev.csv"  # shipped with the package (jctopt/data/validation/)


def runs_path(runs: str | None, key: str = "validate.runs") -> Path:
    """The CSV that ``validate.runs`` (or ``key``) names: a path, or the bare name of a file
    shipped with the package (``runs_dev.csv``, ``runs_dev2.csv``, ...); unset means ``DEFAULT_RUNS``."""
    path = Path(runs or DEFAULT_RUNS)
    if path.is_file():
        return path
    if path.name == str(path):
        try:
            return validation_file(path.name)
        except FileNotFoundError as err:
            raise ConfigError(f"{key}={runs!r} is not allowed: no such file, and {err}") from None
    raise ConfigError(f"{key}={runs!r} is not allowed: no such file")


REQUIRED_COLUMNS = ("id", "gpu", "precision", "num_gpus", "tp", "pp", "global_batch", "measured_iter_time_s")


def read_runs(runs: Path, key: str = "validate.runs", required: tuple[str, ...] = REQUIRED_COLUMNS) -> pd.DataFrame:
    """The runs CSV; a file that is not one (empty, binary, malformed), lacks one of the
    ``required`` columns, holds no row or repeats a row id is one ConfigError naming ``key``
    (the setting that named the file) and the file. Problems within a row are that row's ``reason``."""
    bad = f"{key}={str(runs)!r} is not allowed"
    try:
        table = pd.read_csv(runs)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ConfigError(f"{bad}: not a CSV file ({type(err).__name__}: {err})") from None
    table.columns = column_names(table.columns)
    missing = set(required) - set(table.columns)
    if missing:
        raise ConfigError(f"{bad}: missing columns {', '.join(sorted(missing))} (needed: {', '.join(required)})")
    if table.empty:
        raise ConfigError(f"{bad}: the file has a header but no rows")
    check_unique_ids(table, bad)
    return table


def column_names(columns) -> list[str]:
    """Column names in any case, padded or with spaces ("Num GPUs" is num_gpus)."""
    return [re.sub(r"\s+", "_", str(c).strip()).lower() for c in columns]


@functools.cache
def known_columns() -> frozenset[str]:
    """Every column a runs file may hold: the shipped files' (read, or provenance such as
    ``notes``), the required ones, the documented defaults' and the software flags'."""
    names = set(REQUIRED_COLUMNS) | set(DEFAULTS) | set(FLAG_COLUMNS)
    for path in VALIDATION_DIR.glob("runs*.csv"):
        names |= set(column_names(pd.read_csv(path, nrows=0).columns))
    return frozenset(names)


def unread_columns(runs: Path) -> list[str]:
    """The columns of the runs file ``runs`` that no reader knows (``known_columns``): ignored,
    which a user should hear (a misspelt ``micro_bacth`` takes its default silently otherwise)."""
    return [c for c in column_names(pd.read_csv(runs, nrows=0).columns) if c not in known_columns()]


def check_unique_ids(table: pd.DataFrame, bad: str) -> None:
    """A ConfigError ``bad: row ids ... appear more than once`` where ``table.id`` repeats one
    (the first five named): each row's results are known by its id."""
    repeated = list(dict.fromkeys(table.id[table.id.duplicated()].tolist()))
    if repeated:
        shown = ", ".join(repr(i) for i in repeated[:5]) + (f" and {len(repeated) - 5} more" if len(repeated) > 5 else "")
        raise ConfigError(f"{bad}: row ids {shown} appear more than once")


def read_all(runs: list[Path], key: str = "validate.runs", required: tuple[str, ...] = REQUIRED_COLUMNS) -> pd.DataFrame:
    """The rows of every runs file (``read_runs``), one table; row ids must not repeat, within a
    file or across the files."""
    table = pd.concat([read_runs(r, key, required) for r in runs], ignore_index=True)
    check_unique_ids(table, f"{key}={[str(r) for r in runs]!r} is not allowed" if len(runs) > 1 else
                     f"{key}={str(runs[0])!r} is not allowed")
    return table
