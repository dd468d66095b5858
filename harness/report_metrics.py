"""The metrics `mars report` compares eval runs on: one question's value, a suite's cell with its
95% interval, and paired differences of two runs over the questions both scored.

- `accuracy`: correct / graded attempts; the cell's interval is the summary's (clustered by
  question when a question has several attempts, `core.stats.clustered_wilson_ci`);
- `maj@k` (all of each question's attempts) or `maj@K` (epochs 0..K-1): the majority answer is
  right (`core.stats.majority_correct`), Wilson interval over questions;
- `pass@K`: the unbiased estimate from each question's n attempts (`core.stats.pass_at_k`),
  percentile bootstrap interval over questions. Questions with fewer than K attempts are left out.

A paired difference is B minus A of the per-question values over the questions both runs scored,
with a paired percentile bootstrap interval (resampling questions, so the attempts of one question
stay together).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.errors import MarsError
from core.stats import (
    Attempt,
    bootstrap_mean_ci,
    majority_correct,
    paired_bootstrap_diff,
    pass_at_k,
    wilson_ci,
)

Questions = dict[str, list[Attempt]]  # sample id -> graded attempts, in epoch order


@dataclass(frozen=True)
class Metric:
    kind: str  # "accuracy", "maj" or "pass"
    k: int | None = None  # an explicit K; None: all attempts (maj) or the fewest shared (pass)

    @property
    def label(self) -> str:
        if self.kind == "accuracy":
            return "accuracy"
        return f"{self.kind}@{self.k if self.k is not None else 'k'}"

    @property
    def per_question(self) -> bool:
        return self.kind != "accuracy"


def parse_metric(text: str) -> Metric:
    """`accuracy`, `maj@k`, `maj@K`, `pass@k` or `pass@K` (K a whole number >= 1)."""
    value = text.strip().lower()
    if value in ("accuracy", "acc"):
        return Metric("accuracy")
    match = re.fullmatch(r"(maj|pass)@(k|\d+)", value)
    if not match or match.group(2) == "0":
        raise MarsError(f"--metric must be accuracy, maj@k, maj@K, pass@k or pass@K, got '{text}'")
    k = None if match.group(2) == "k" else int(match.group(2))
    return Metric(match.group(1), k)


def question_value(attempts: list[Attempt], metric: Metric, k: int | None) -> float | None:
    """One question's value under `metric` (None: not enough attempts for it)."""
    if not attempts:
        return None
    if metric.kind == "accuracy":
        return sum(a.correct for a in attempts) / len(attempts)
    if metric.kind == "maj":
        chosen = [a for a in attempts if k is None or a.epoch < k]
        return float(majority_correct(chosen)) if chosen else None
    assert k is not None
    if len(attempts) < k:
        return None
    return pass_at_k(len(attempts), sum(a.correct for a in attempts), k)


def question_values(questions: Questions, metric: Metric, k: int | None) -> dict[str, float]:
    values = {qid: question_value(attempts, metric, k) for qid, attempts in questions.items()}
    return {qid: v for qid, v in values.items() if v is not None}


def metric_cell(
    suite_summary: dict[str, Any] | None, questions: Questions, metric: Metric, k: int | None
) -> dict[str, Any] | None:
    """A table cell: value, ci95, n and errors (None where the run has no such suite).

    Accuracy comes from the summary (clustered interval); the other metrics are computed over
    questions here. A suite with no graded attempt has value None ("no score").
    """
    if suite_summary is None:
        return None
    errors = suite_summary.get("errors", 0)
    if metric.kind == "accuracy":
        return {
            "value": suite_summary.get("accuracy"),
            "ci95": suite_summary.get("ci95"),
            "n": suite_summary.get("n", 0),
            "errors": errors,
            **attempt_rates(suite_summary),
        }
    values = list(question_values(questions, metric, k).values())
    cell: dict[str, Any] = {
        "value": None,
        "ci95": None,
        "n": len(values),
        "errors": errors,
        **attempt_rates(suite_summary),
    }
    if values:
        cell["value"] = sum(values) / len(values)
        if metric.kind == "maj":
            cell["ci95"] = list(wilson_ci(sum(values), len(values)))
        else:
            cell["ci95"] = list(bootstrap_mean_ci(values))
    left_out = len(questions) - len(values)
    if left_out:
        cell["left_out"] = left_out
    return cell


def attempt_rates(suite_summary: dict[str, Any]) -> dict[str, float | None]:
    """The share of graded attempts with no answer extracted, and of all attempts that errored
    (None where there is nothing to divide by)."""
    graded, errors = suite_summary.get("n", 0), suite_summary.get("errors", 0)
    attempts = graded + errors
    return {
        "extraction_failure_rate": suite_summary.get("extraction_failure_rate"),
        "error_rate": errors / attempts if attempts else None,
    }


def paired_differences(
    a: dict[str, Questions],
    b: dict[str, Questions],
    metric: Metric,
    ks: dict[str, int | None],
    metric_b: Metric | None = None,
) -> dict[str, dict[str, Any]]:
    """Per suite, B minus A of the per-question values over the questions both runs scored
    (B under `metric_b` when given: a compute-matched baseline's maj@k beside a MAS's accuracy)."""
    out: dict[str, dict[str, Any]] = {}
    for suite in sorted(set(a) & set(b)):
        values_a = question_values(a[suite], metric, ks.get(suite))
        values_b = question_values(b[suite], metric_b or metric, ks.get(suite))
        shared = sorted(set(values_a) & set(values_b))
        if not shared:
            continue
        diff, lo, hi = paired_bootstrap_diff(
            [values_a[q] for q in shared], [values_b[q] for q in shared]
        )
        out[suite] = {"n": len(shared), "diff": diff, "ci95": [lo, hi]}
    return out
