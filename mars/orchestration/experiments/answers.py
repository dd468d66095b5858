"""The report's answer to each question of the experiment file.

Each question's `answers` name an evaluation of a loop part at a checkpoint and what it is
compared with (by default the same evaluation at the start, step 0): the report writes both
figures with their intervals and the change with its 95% interval (paired over the episodes or
questions both played, else the two intervals as independent estimates). It says so plainly when
a figure is not there yet, and when more than 10% of the replies behind it were invalid: the
answer is then about the reply format, not the play.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mars.orchestration.experiments.figures import (
    Change,
    arena_change,
    curve,
    interval_change,
    start_and_last,
    suite_change,
)
from mars.orchestration.experiments.report_text import INVALID_TARGET, percent, value_text
from mars.orchestration.experiments.spec import Answer, Experiment


@dataclass(frozen=True)
class Measured:
    """One evaluation's figure at one checkpoint of a loop part."""

    part: str
    key: str
    step: int
    entry: dict[str, Any]
    run_dir: Path

    def when(self) -> str:
        return "start" if self.step == 0 else f"step {self.step}"


@dataclass(frozen=True)
class Figure:
    """How one kind of evaluation's figure is read and written."""

    name: str
    field: str
    interval: str | None
    invalid: str  # the field holding the share of invalid replies behind it
    scale: float = 1.0
    digits: int = 1


FIGURES = {
    "normalized_return": Figure(
        "normalised return", "normalized_return", "normalized_return_ci", "invalid_rate"
    ),
    "win": Figure("win %", "win", None, "invalid_rate", scale=100, digits=0),
    "exploit": Figure(
        "exploitability (lower is better)", "exploitability", "ci95", "invalid_rate", digits=3
    ),
    "eval": Figure("accuracy %", "accuracy", "ci95", "extraction_failure_rate", scale=100),
}


def measured(root: Path, part: str, key: str, step: str) -> Measured | str:
    """The evaluation `key` of loop part `part` at its start or last checkpoint, or why not."""
    start, last = start_and_last(curve(root / part))
    row = start if step == "start" else last
    if row is None:
        missing = "no start (step 0) row" if step == "start" else "no trained checkpoint evaluated"
        return f"`{part}` has {missing} yet"
    entry = (row.get("evals") or {}).get(key)
    if entry is None:
        return f"`{part}` has no evaluation {key} at step {row['step']}"
    if entry.get("error"):
        return f"{key} failed at step {row['step']} of `{part}`: {entry['error']}"
    return Measured(part, key, row["step"], entry, root / part / entry["run_dir"])


def _read(point: Measured, figure: Figure, seat: str | None) -> dict[str, Any]:
    stats = point.entry if seat is None else (point.entry.get("seats") or {}).get(seat) or {}
    return {
        "value": stats.get(figure.field),
        "interval": stats.get(figure.interval) if figure.interval else None,
        "invalid": stats.get(figure.invalid),
    }


def _change(
    a: Measured, b: Measured, seat: str | None, arena_figure: str, read: tuple[dict, dict]
) -> Change | None:
    """b minus a: paired over the episodes (arena) or questions (suite) both played when they
    share any, else the two intervals as independent estimates."""
    kind, paired = b.entry["kind"], None
    if kind == "arena" and seat is not None:
        figure = "win" if arena_figure == "win" else "norm"
        paired = arena_change(a.run_dir, b.run_dir, seat, figure)
    elif kind == "eval" and a.entry.get("suite") == b.entry.get("suite"):
        paired, _ = suite_change(a.run_dir, b.run_dir, b.entry["suite"])
    if paired is not None:
        return paired
    first, second = read
    if first["interval"] and second["interval"]:
        return interval_change(
            first["value"], first["interval"], second["value"], second["interval"]
        )
    return None


def _labels(a: Measured, b: Measured) -> tuple[str, str]:
    """The two points named by their checkpoints, and by what else differs between them."""
    if (a.part, a.key) == (b.part, b.key):
        return a.when(), b.when()

    def name(point: Measured) -> str:
        part = f"`{point.part}` " if a.part != b.part else ""
        return f"{part}{point.key} at {point.when()}"

    return name(a), name(b)


def _invalid_text(kind: str, shares: list[float | None]) -> str:
    if all(share is None for share in shares):
        return ""
    what = "Unreadable answers" if kind == "eval" else "Invalid replies"
    text = f" {what} {' → '.join(percent(share) for share in shares)}"
    if not any((share or 0) > INVALID_TARGET for share in shares):
        return text + "."
    about = (
        "the answer format, not the solving" if kind == "eval" else "the reply format, not the play"
    )
    return text + f": over {100 * INVALID_TARGET:.0f}%, so this figure is about {about}."


def answer_lines(answer: Answer, root: Path) -> list[str]:
    """One line per seat (an arena answered for both seats) or one line."""
    b = measured(root, answer.part, answer.eval, answer.step)
    against = answer.against
    a = measured(root, against.part or answer.part, against.eval or answer.eval, against.step)
    head = f"`{answer.part}` {answer.eval}"
    if isinstance(a, str) or isinstance(b, str):
        missing = [point for point in (a, b) if isinstance(point, str)]
        return [f"{head}: not answered yet: {'; '.join(missing)}."]
    kind = b.entry["kind"]
    figure = FIGURES[answer.figure or "normalized_return"] if kind == "arena" else FIGURES[kind]
    seats: list[str | None] = [None]
    if kind == "arena":
        seats = [answer.seat] if answer.seat else list(b.entry.get("seats") or {}) or [None]
    lines = []
    for seat in seats:
        read = (_read(a, figure, seat), _read(b, figure, seat))
        where = f"{head}, {figure.name}" + (f" ({seat} seat)" if seat else "")
        if read[0]["value"] is None or read[1]["value"] is None:
            lines.append(f"{where}: not answered: no {figure.name} was recorded.")
            continue
        points = [
            f"{label} " + value_text(r["value"], r["interval"], figure.digits, figure.scale)
            for label, r in zip(_labels(a, b), read, strict=True)
        ]
        change = _change(a, b, seat, answer.figure or "normalized_return", read)
        word = "change" if (a.part, a.key) == (b.part, b.key) else "difference"
        if change is None:
            verdict = f"{word}: no interval (nothing to pair and no intervals to combine)"
        else:
            n = f", n={change.n}" if change.n else ""
            verdict = f"{word} {change.text(figure.scale, figure.digits)} ({change.method}{n})"
        invalid = _invalid_text(kind, [r["invalid"] for r in read])
        lines.append(f"{where}: {' → '.join(points)}; {verdict}.{invalid}")
    return lines


def answered_questions(experiment: Experiment, root: Path) -> list[str]:
    """Each question, then a line per figure that answers it."""
    out = []
    for question in experiment.report.questions:
        out.append(f"- **Question:** {question.question}")
        if not question.answers:
            out.append("  - (the experiment file names no figure that answers it)")
        for answer in question.answers:
            out += [f"  - {line}" for line in answer_lines(answer, root)]
    return out
