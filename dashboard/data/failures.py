"""Failure-mode (MAST) verdicts as rates per run and mode."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from harness.failures import summarize_failures
from harness.failures.taxonomy import CATEGORIES, FAILURE_MODES


def failure_rates(verdicts_by_run: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """Long table: run x (category | mode) with rate, Wilson interval, count and n."""
    rows: list[dict[str, Any]] = []
    for run, verdicts in verdicts_by_run.items():
        summary = summarize_failures(verdicts)
        for category in CATEGORIES:
            cell = summary["categories"][category.key]
            rows.append(_rate_row(run, "category", category.id, category.name, category.key, cell))
        for mode in FAILURE_MODES:
            cell = summary["modes"][mode.id]
            rows.append(_rate_row(run, "mode", mode.id, mode.name, mode.category, cell))
        rows.append(_rate_row(run, "any", "any", "any failure mode", "any", summary["any_failure"]))
    columns = ["run", "level", "id", "name", "category", "rate", "ci_low", "ci_high"]
    columns += ["count", "n"]
    return pd.DataFrame(rows, columns=columns)


def _rate_row(
    run: str, level: str, ident: str, name: str, category: str, cell: dict[str, Any]
) -> dict[str, Any]:
    return {
        "run": run,
        "level": level,
        "id": ident,
        "name": name,
        "category": category,
        "rate": cell["rate"],
        "ci_low": cell["ci95"][0],
        "ci_high": cell["ci95"][1],
        "count": cell["count"],
        "n": cell["n"],
    }


def verdicts_showing(verdicts: Iterable[dict[str, Any]], target: str) -> list[dict[str, Any]]:
    """Parsed verdicts that show a mode id ("FM-2.5"), a category key ("misalignment") or any."""
    out = []
    for verdict in verdicts:
        if verdict.get("error") or not verdict.get("parsed"):
            continue
        modes = verdict.get("modes") or []
        categories = verdict.get("categories") or []
        if (target == "any" and modes) or target in modes or target in categories:
            out.append(verdict)
    return out
