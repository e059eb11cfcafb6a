"""Measured training runs: reading a runs CSV, turning each row into a model configuration,
placing what the run left unstated, and predicting every row."""

from .columns import DEFAULT_STACK, FLAG_COLUMNS
from .defaults import DEFAULTS, REFERENCE_FABRIC
from .logs import log_rows
from .place import place_rows
from .predict import run_validate
from .read import REQUIRED_COLUMNS, check_unique_ids, read_all, read_runs, runs_path, unread_columns
from .row import row_config
from .spellings import RowError

__all__ = ["DEFAULTS", "DEFAULT_STACK", "FLAG_COLUMNS", "REFERENCE_FABRIC", "REQUIRED_COLUMNS", "RowError", "check_unique_ids", "log_rows", "place_rows", "read_all", "read_runs", "row_config", "run_validate", "runs_path", "unread_columns"]
