"""Rows whose software is written in prose (source, notes), read as scripts/convert_runs.py
writes them into the shipped files: its rules turn the prose into columns, then jctopt.runs
reads the columns. Tests of what a note means go through here."""

import convert_runs

from jctopt.runs import place as runs_place
from jctopt.runs import row as runs_row


def row_config(base, row: dict):
    return runs_row.row_config(base, convert_runs.with_columns(row, base))


def place(base, row: dict):
    return runs_place._place(base, convert_runs.with_columns(row, base))
