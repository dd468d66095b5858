"""How the experiment report writes its figures: values with intervals, shares, tables."""

from __future__ import annotations

INVALID_TARGET = 0.10  # the most invalid replies a figure may rest on and still be about play


def ci_text(low: float | None, high: float | None, digits: int = 1, scale: float = 1.0) -> str:
    if low is None or high is None:
        return ""
    return f" [{scale * low:.{digits}f}, {scale * high:.{digits}f}]"


def value_text(
    number: float, interval: list[float] | None, digits: int = 1, scale: float = 1.0
) -> str:
    """`number [low, high]`, each times `scale`."""
    return f"{scale * number:.{digits}f}{ci_text(*(interval or (None, None)), digits, scale)}"


def percent(share: float | None) -> str:
    return "—" if share is None else f"{100 * share:.0f}%"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]
