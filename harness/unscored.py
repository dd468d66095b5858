"""No score from no data: how commands say that a suite or a seat has no graded sample.

A suite (eval) or seat (arena) whose every sample failed has no score: null in summary.json,
"no score" wherever it is shown, never 0. The command names each one with how many samples
failed and the first error, and exits with `NO_SCORE_EXIT_CODE` (README, "Exit codes").
"""

from __future__ import annotations

import sys
from typing import Any

from core.errors import ExitCode

NO_SCORE = "no score"
NO_SCORE_EXIT_CODE = ExitCode.NO_SCORE
_ERROR_CHARS = 300


def one_line(error: Any) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 3] + "..."


def no_score_line(
    what: str, failed: int, unit: str, first_error: Any, *, total: int | None = None
) -> str:
    """`what` has no score: all N units failed (or "F of N" when `total` says some did not);
    first error: ..."""
    plural = unit if failed == 1 else unit + "s"
    share = f"all {failed}" if total is None or total == failed else f"{failed} of {total}"
    line = f"{what} has no score: {share} {plural} failed"
    return f"{line}; first error: {one_line(first_error)}" if first_error else line


def unscored_suites(summary: dict[str, Any]) -> list[str]:
    """One line per suite of an eval summary without a graded sample."""
    return [
        no_score_line(name, stats.get("errors", 0), "sample", stats.get("first_error"))
        for name, stats in summary.get("suites", {}).items()
        if stats.get("accuracy") is None
    ]


def unscored_seats(summary: dict[str, Any]) -> list[str]:
    """One line per seat of an arena summary without a graded episode."""
    return [
        no_score_line(f"seat {seat}", stats.get("errors", 0), "episode", stats.get("first_error"))
        for seat, stats in summary.get("seats", {}).items()
        if not stats.get("n")
    ]


def exit_if_unscored(lines: list[str]) -> None:
    """If there are lines: print each to stderr as an error, exit with NO_SCORE_EXIT_CODE."""
    if not lines:
        return
    import typer

    for line in lines:
        print(f"error: {line}", file=sys.stderr, flush=True)
    raise typer.Exit(NO_SCORE_EXIT_CODE)
