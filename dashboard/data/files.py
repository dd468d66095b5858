"""A run's files for the dashboard: JSONL, JSON and CSV, each tolerant of a half-written run."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from core import files
from core.files import JsonlData

METRICS_FILE = "metrics.jsonl"
# `mars loop` writes both; its CSV is the curated table (figures per evaluation and seat), its
# JSONL the full rows (settings, training metrics, nested evaluations).
CURVE_FILES = ("learning_curve.csv", "learning_curve.jsonl")
SEATS = ("first", "second")


def file_stamp(path: Path) -> tuple[str, int, int] | None:
    """(path, mtime in ns, size): the cache key of a file's content; None if it is missing."""
    try:
        stat = Path(path).stat()
    except OSError:
        return None
    return (str(path), stat.st_mtime_ns, stat.st_size)


def read_jsonl(path: Path) -> JsonlData:
    """Every JSON object line of `path`; other lines (broken, cut short, not objects) counted.
    A file the dashboard cannot read shows as empty."""
    try:
        return files.read_jsonl(path)
    except OSError:
        return JsonlData()


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_csv_rows(path: Path) -> JsonlData:
    data = JsonlData()
    try:
        with Path(path).open(encoding="utf-8", errors="replace", newline="") as handle:
            for row in csv.DictReader(handle):
                if None in row:  # more cells than header columns
                    data.malformed += 1
                    continue
                data.rows.append({k: _number_or_text(v) for k, v in row.items()})
    except (OSError, csv.Error):
        return data
    return data


def _number_or_text(value: str | None) -> Any:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value else number
