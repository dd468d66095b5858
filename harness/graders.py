"""Graders of `mars eval`: from a solved sample to the grade fields of its record.

A grader is `async (item, solved) -> dict` of record fields (`extracted`, `correct`,
`extraction_failed`, and with a judge `grader` and `grades`); raising makes the grading failure
that sample's error. `grade_by_rules` (the default) runs the suite's rule-based grader in a worker
process with a time limit (`harness.benchmarks.grading_worker`); a code suite's answer is run
on the sample's hidden tests in the sandbox instead, on the event loop (the sandbox is its own
process), adding the tests' `pass_ratio`, `tests_passed`, `tests_total` and `failures` to the
record (`harness.benchmarks.code_suites`). `--grader judge[:ROLE]` adds an
LLM judge (`harness.benchmarks.judge`) whose verdict becomes the score, with the rule-based grade
kept beside it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.errors import MarsError
from harness.benchmarks.code_suites import CodeSuite
from harness.benchmarks.grading_worker import GradingError, grade_off_loop
from harness.benchmarks.judge import (
    AnswerJudgeSettings,
    answer_judge_messages,
    parse_answer_verdict,
)
from harness.benchmarks.registry import MalformedRow

if TYPE_CHECKING:
    from core.endpoint import Endpoint, GenerationConfig
    from harness.evaluation import SolvedSample, WorkItem

Grader = Callable[["WorkItem", "SolvedSample"], Awaitable[dict[str, Any]]]

RULES = "rules"
JUDGE = "judge"
DEFAULT_JUDGE_ROLE = "grader"


async def grade_by_rules(item: WorkItem, solved: SolvedSample) -> dict[str, Any]:
    if isinstance(item.suite, CodeSuite):
        try:
            return await item.suite.grade_sample(solved.final_answer, item.sample)
        except (MarsError, MalformedRow) as exc:  # e.g. private tests that cannot be unpacked
            raise GradingError(f"{type(exc).__name__}: {exc}") from None
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


def judge_grader(endpoint: Endpoint, settings: AnswerJudgeSettings, role: str) -> Grader:
    """Rule-based grade plus an LLM judge's verdict through `endpoint` (ledger role `role`); the
    judge's verdict is the record's `correct`, both grades are kept in `grades`. A judge reply
    that is neither "Correct" nor "Incorrect" is a grading error (the sample is redone on
    resume), never a guess."""
    from core.endpoint import GenerationConfig

    gen = GenerationConfig(
        temperature=settings.temperature, top_p=settings.top_p, max_tokens=settings.max_tokens
    )

    async def grade(item: WorkItem, solved: SolvedSample) -> dict[str, Any]:
        rules = await grade_by_rules(item, solved)
        messages = answer_judge_messages(
            item.sample.question, item.sample.choices, solved.final_answer, item.sample.gold
        )
        reply = await endpoint.complete(messages, role=role, gen=gen, epoch=item.epoch)
        verdict = parse_answer_verdict(reply.text)
        if verdict is None:
            shown = " ".join(reply.text.split())[:120] or "(empty)"
            raise GradingError(f"the judge answered neither Correct nor Incorrect: {shown!r}")
        judged = {"correct": verdict, "reply": reply.text, "model": endpoint.config.model}
        return {**rules, "correct": verdict, "grades": {"rules": rules, "judge": judged}}

    return grade


@dataclass(frozen=True)
class GradingPlan:
    """What `mars eval --grader ...` asked for, in the pieces the command needs."""

    kind: str = RULES
    role: str | None = None
    settings: AnswerJudgeSettings | None = None

    @classmethod
    def from_options(cls, spec: str, temperature: float, max_tokens: int) -> GradingPlan:
        kind, role = parse_grader(spec)
        if kind == RULES:
            return cls()
        return cls(JUDGE, role, AnswerJudgeSettings(temperature=temperature, max_tokens=max_tokens))

    def config(self) -> dict[str, Any]:
        """Entries for the run's config (so part of its identity); none for the default."""
        if self.settings is None:
            return {}
        return {"grader": f"{JUDGE}:{self.role}", "judge": self.settings.model_dump()}

    def extra_sampling(self, mapped_roles: Collection[str]) -> list[GenerationConfig]:
        """The judge's sampling when it shares the run's model (its role is not mapped)."""
        if self.settings is None or self.role in mapped_roles:
            return []
        from core.endpoint import GenerationConfig

        return [GenerationConfig(temperature=self.settings.temperature, top_p=self.settings.top_p)]

    def grader(self, endpoint_for_role: Callable[[str], Endpoint]) -> Grader:
        """The rules, or the judge answering through the endpoint of its role."""
        if self.settings is None or self.role is None:
            return grade_by_rules
        return judge_grader(endpoint_for_role(self.role), self.settings, self.role)
