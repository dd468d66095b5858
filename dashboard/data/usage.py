"""What an eval run cost, from its own `usage.json`: calls and tokens per role and per question,
beside its accuracy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from core.stats import clustered_wilson_ci
from dashboard.data.values import as_float

USAGE_FILE = "usage.json"
COUNTS = ("calls", "cached", "errors", "prompt_tokens", "completion_tokens", "reasoning_tokens")
ROLE_COLUMNS = [
    "run",
    "role",
    "calls",
    "cached",
    "errors",
    "calls / question",
    "prompt tokens / question",
    "completion tokens / question",
    "reasoning tokens / question",
    "tokens / question",
]
COST_COLUMNS = [
    "run",
    "mas",
    "model",
    "questions",
    "graded",
    "correct",
    "accuracy",
    "ci_low",
    "ci_high",
    "calls / question",
    "tokens / question",
]


def role_usage(usage: Mapping[str, Any] | None) -> dict[str, dict[str, float]]:
    """Counts per role: `by_role` (the run's default endpoint) plus each `role:NAME` (a role
    served by its own endpoint, which `by_role` does not hold); empty without a usage file."""
    roles: dict[str, dict[str, float]] = {}
    if not isinstance(usage, Mapping):
        return roles
    entries: list[tuple[str, Any]] = []
    by_role = usage.get("by_role")
    if isinstance(by_role, Mapping):
        entries += [(str(role), counts) for role, counts in by_role.items()]
    entries += [(key[5:], value) for key, value in usage.items() if str(key).startswith("role:")]
    for role, counts in entries:
        if not isinstance(counts, Mapping):
            continue
        total = roles.setdefault(role, dict.fromkeys(COUNTS, 0.0))
        for name in COUNTS:
            total[name] += as_float(counts.get(name)) or 0.0
    return roles


def _per_question(counts: Mapping[str, float], questions: int) -> dict[str, float | None]:
    def share(value: float) -> float | None:
        return value / questions if questions else None

    tokens = counts["prompt_tokens"] + counts["completion_tokens"]
    return {
        "calls / question": share(counts["calls"]),
        "prompt tokens / question": share(counts["prompt_tokens"]),
        "completion tokens / question": share(counts["completion_tokens"]),
        "reasoning tokens / question": share(counts["reasoning_tokens"]),
        "tokens / question": share(tokens),
    }


def role_table(
    usages: Mapping[str, Mapping[str, Any] | None], questions: Mapping[str, int]
) -> pd.DataFrame:
    """One row per (run, role): the counts of the whole run (all its attempts) and per question
    (divided by the run's records, one per sample and epoch); a run without usage.json has none."""
    rows = []
    for run, usage in usages.items():
        for role, counts in sorted(role_usage(usage).items()):
            rows.append(
                {
                    "run": run,
                    "role": role,
                    **{k: int(counts[k]) for k in ("calls", "cached", "errors")},
                    **_per_question(counts, questions.get(run, 0)),
                }
            )
    return pd.DataFrame(rows, columns=ROLE_COLUMNS)


def run_totals(usage: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The run's counts over every role; None without a usable usage file."""
    roles = role_usage(usage)
    if not roles:
        return None
    return {name: sum(r[name] for r in roles.values()) for name in COUNTS}


def overall_accuracy(frame: pd.DataFrame) -> dict[str, Any]:
    """Accuracy over every graded attempt of a run (all suites pooled), with its 95% interval
    clustered by question (`core.stats.clustered_wilson_ci`); None without a graded attempt."""
    graded = frame[~frame["has_error"]] if not frame.empty else frame
    n = len(graded)
    correct = int(graded["correct"].sum()) if n else 0
    interval = None
    if n:
        per_question = graded.groupby(["suite", "sample_id"])["correct"].agg(["sum", "count"])
        interval = clustered_wilson_ci(
            per_question["sum"].astype(int).tolist(), per_question["count"].astype(int).tolist()
        )
    return {
        "questions": len(frame),
        "graded": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
        "ci_low": interval.low if interval else None,
        "ci_high": interval.high if interval else None,
    }


def cost_row(
    *, run: str, mas: str, model: str, frame: pd.DataFrame, usage: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A run's pooled accuracy beside its calls and tokens per question (None without usage)."""
    accuracy = overall_accuracy(frame)
    totals = run_totals(usage)
    questions = accuracy["questions"]
    per_question = _per_question(totals, questions) if totals else {}
    return {
        "run": run,
        "mas": mas,
        "model": model,
        **accuracy,
        "calls / question": per_question.get("calls / question"),
        "tokens / question": per_question.get("tokens / question"),
    }
