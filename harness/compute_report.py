"""The compute side of `mars report`: tokens and calls per question beside each run's metric,
the same per agent role, and what each compute-matched baseline matched, at what ratio.

"Per question" is per scored answer: under accuracy one attempt, under maj@k or pass@k the
attempts of a question that the metric uses. A compute-matched baseline
(`mars eval --match-compute`) is scored by maj@k, its majority vote over its k samples, when the
report's metric is accuracy: that vote is the answer its compute bought.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

COMPUTE_COLUMNS = ("tokens/q", "calls/q")
COMPUTE_NOTE = (
    "tokens/q, calls/q: prompt + completion tokens and model calls per scored answer "
    "(accuracy: one attempt; maj@k, pass@k: the attempts of a question the metric uses)"
)
ROLE_COLUMNS = ("run", "suite", "role", "tokens/q", "completion/q", "calls/q")
MATCH_COLUMNS = (
    "baseline",
    "suite",
    "matches",
    "k",
    "tokens/q",
    "its tokens/q",
    "ratio",
    "calls/q",
    "its calls/q",
)


def match_decision(config: dict[str, Any]) -> dict[str, Any] | None:
    """run.json's `compute_match` of a baseline whose k was chosen, else None."""
    decision = config.get("compute_match")
    return decision if isinstance(decision, dict) and decision.get("suites") else None


def answer_attempts(suite_summary: dict[str, Any], kind: str, k: int | None) -> float:
    """How many attempts one scored answer uses: 1 under accuracy, K for pass@K and maj@K (at
    most what a question has), every attempt of a question for maj@k."""
    questions = suite_summary.get("samples") or 0
    per_question = suite_summary.get("n", 0) / questions if questions else 1.0
    if kind == "accuracy":
        return 1.0
    if k is None:
        return per_question
    return float(k) if kind == "pass" else min(float(k), per_question)


def compute_cell(suite_summary: dict[str, Any] | None, kind: str, k: int | None) -> dict[str, Any]:
    """Tokens, completion tokens and calls per scored answer, in all and per role (None where
    the summary has no figure: no graded attempt, or a summary from before they were kept)."""
    figures = suite_summary or {}
    units = answer_attempts(figures, kind, k) if figures else 1.0

    def scaled(value: Any) -> float | None:
        return None if value is None else float(value) * units

    return {
        "attempts": units,
        "tokens": scaled(figures.get("mean_tokens")),
        "completion_tokens": scaled(figures.get("mean_completion_tokens")),
        "calls": scaled(figures.get("mean_llm_calls")),
        "by_role": {
            role: {key: scaled(value) for key, value in own.items()}
            for role, own in (figures.get("mean_by_role") or {}).items()
        },
    }


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def compute_texts(cell: dict[str, Any] | None) -> list[str]:
    if not cell:
        return ["-", "-"]
    return [_number(cell.get("tokens")), _number(cell.get("calls"), 1)]


def role_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for run, by_suite in report.get("compute", {}).items():
        for suite, cell in sorted(by_suite.items()):
            for role, own in cell["by_role"].items():
                rows.append(
                    [
                        run,
                        suite,
                        role,
                        _number(own.get("tokens")),
                        _number(own.get("completion_tokens")),
                        _number(own.get("llm_calls"), 2),
                    ]
                )
    return rows


def match_rows(report: dict[str, Any]) -> list[list[str]]:
    """A row per matched baseline and suite: the run it matches (by its name in this report
    when it is one of the runs), k, both runs' tokens and calls per question, the ratio."""
    names = {str(Path(path).resolve()): name for name, path in report.get("paths", {}).items()}
    rows = []
    for run, match in report.get("matches", {}).items():
        matched = names.get(str(Path(match["run"]).resolve()), match["run"])
        for suite, figures in sorted(match["suites"].items()):
            ratio = figures.get("ratio")
            rows.append(
                [
                    run,
                    suite,
                    f"{matched} ({match.get('mas')})",
                    str(figures["k"]),
                    _number(figures.get("tokens_per_question")),
                    _number(figures["mas_tokens_per_question"]),
                    "-" if ratio is None else f"{ratio:.2f}",
                    _number(figures.get("calls_per_question"), 1),
                    _number(figures["mas_calls_per_question"], 1),
                ]
            )
    return rows


def print_compute(report: dict[str, Any], console: Console) -> None:
    """The per-role table and, when a baseline is reported, the compute-matched table."""
    sections = (
        ("compute per question by role", ROLE_COLUMNS, role_rows(report)),
        (
            "compute-matched baselines: tokens/q is the baseline's over its k samples, "
            "its tokens/q the matched run's; ratio = the first / the second",
            MATCH_COLUMNS,
            match_rows(report),
        ),
    )
    for title, columns, rows in sections:
        if not rows:
            continue
        table = Table(title=title)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)


def compute_markdown(report: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for title, columns, rows in (
        ("Compute per question by role:", ROLE_COLUMNS, role_rows(report)),
        (
            "Compute-matched baselines (tokens/q: the baseline's over its k samples; its "
            "tokens/q: the matched run's; ratio: the first over the second):",
            MATCH_COLUMNS,
            match_rows(report),
        ),
    ):
        if not rows:
            continue
        lines += ["", title, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
