"""Graders of `mars eval`: from a solved sample to the grade fields of its record.

A grader is `async (item, solved) -> dict` of record fields (`extracted`, `correct`,
`extraction_failed`, and with a judge `grader` and `grades`); raising makes the grading failure
that sample's error. `grade_by_rules` (the default) runs the suite's rule-based grader in a worker
process with a time limit (`harness.benchmarks.grading_worker`). `--grader judge[:ROLE]` adds an
LLM judge (`harness.benchmarks.judge`) whose verdict becomes the score, with the rule-based grade
kept beside it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from harness.benchmarks.grading_worker import grade_off_loop
from harness.errors import MarsError

if TYPE_CHECKING:
    from harness.evaluation import SolvedSample, WorkItem

Grader = Callable[["WorkItem", "SolvedSample"], Awaitable[dict[str, Any]]]

RULES = "rules"
JUDGE = "judge"
DEFAULT_JUDGE_ROLE = "grader"


async def grade_by_rules(item: WorkItem, solved: SolvedSample) -> dict[str, Any]:
    verdict = await grade_off_loop(
        item.suite.name, solved.final_answer, item.sample.gold, item.sample.choices
    )
    return {
        "extracted": verdict.extracted,
        "correct": verdict.correct,
        "extraction_failed": verdict.extraction_failed,
    }


def parse_grader(spec: str) -> tuple[str, str | None]:
    """`rules` -> ("rules", None); `judge` / `judge:ROLE` -> ("judge", ROLE)."""
    kind, sep, role = spec.strip().partition(":")
    if kind == RULES and not sep:
        return RULES, None
    if kind == JUDGE:
        if sep and not role.strip():
            raise MarsError("--grader judge:ROLE needs a role name after the colon")
        return JUDGE, role.strip() or DEFAULT_JUDGE_ROLE
    raise MarsError(f"--grader must be 'rules', 'judge' or 'judge:ROLE', got '{spec}'")
