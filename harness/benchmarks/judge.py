"""An LLM judge of answers (MASLab-style), and its agreement with the rule-based graders.

MASLab scored every benchmark with an LLM judge (xVerify's prompt) at temperature 0.5 and at
most 2,048 new tokens: the judge sees the question, the response and the correct answer and says
whether the response's final answer is right. This module has our own prompt for the same job,
the same defaults as settings, a strict reading of the verdict (the reply must be one of the two
words, as MASLab's parser requires; anything else is a grading error, not a guess), and
`agreement`: how often the judge and the rule-based grader agree on the samples both graded.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from pydantic import BaseModel, Field

from harness.benchmarks.prompts import format_options

JUDGE_SYSTEM = (
    "You check answers to exam questions. You are given a question, a candidate's response and "
    "the reference answer. Decide whether the final answer of the response is the reference "
    "answer. Rules: if the response gives several answers, only its last, final answer counts, "
    "and an unclear or hedged final answer is incorrect; mathematically equivalent forms are "
    "correct (0.5 and 1/2, different but equal expressions); for a question with lettered "
    "options, the response is correct if it clearly picks the right option by its letter or by "
    "its text; without options, the response must mean the same as the reference answer. "
    "Do not solve the question yourself and do not judge the reasoning, only the final answer. "
    "Reply with exactly one word: Correct or Incorrect."
)


class AnswerJudgeSettings(BaseModel):
    """Sampling of the judge's calls; the defaults are MASLab's."""

    temperature: float = Field(0.5, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(2048, ge=1)


def answer_judge_messages(
    question: str, choices: list[str] | None, response: str, reference: str
) -> list[dict[str, str]]:
    shown = question.strip()
    if choices:
        shown += "\n\n" + format_options(choices)
    user = (
        f'Question:\n"""\n{shown}\n"""\n\n'
        f'Response:\n"""\n{response.strip()}\n"""\n\n'
        f"Reference answer: {reference.strip()}\n\n"
        "Is the response's final answer correct? Reply Correct or Incorrect."
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


_DECORATION = re.compile(r"[\s*_`\"'\[\]().:!]+")
_LABEL = re.compile(r"^(?:judgement|judgment|verdict|answer)\s*:\s*", re.IGNORECASE)


def parse_answer_verdict(text: str) -> bool | None:
    """True for "Correct", False for "Incorrect" (brackets, bold, quotes, a final full stop and a
    "Verdict:" label allowed); None for anything else, including both words or a sentence."""
    word = _DECORATION.sub(" ", _LABEL.sub("", text.strip())).strip().lower()
    if word == "correct":
        return True
    if word == "incorrect":
        return False
    return None


def agreement(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per suite (and "all"), on records graded both by the judge and by the rules: how many,
    how many agree, the rate, and the 2 x 2 counts (judge, rules)."""
    tallies: dict[str, dict[str, int]] = defaultdict(
        lambda: {"both_correct": 0, "judge_only": 0, "rules_only": 0, "both_wrong": 0}
    )
    for record in records:
        grades = record.get("grades") or {}
        judge, rules = grades.get("judge"), grades.get("rules")
        if record.get("error") or not judge or not rules:
            continue
        cell = {
            (True, True): "both_correct",
            (True, False): "judge_only",
            (False, True): "rules_only",
            (False, False): "both_wrong",
        }[(bool(judge.get("correct")), bool(rules.get("correct")))]
        for suite in (str(record["suite"]), "all"):
            tallies[suite][cell] += 1
    out: dict[str, dict[str, Any]] = {}
    for suite, counts in sorted(tallies.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        n = sum(counts.values())
        agree = counts["both_correct"] + counts["both_wrong"]
        out[suite] = {"n": n, "agree": agree, "rate": agree / n, **counts}
    return out


def agreement_markdown(by_run: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The agreement tables of the runs that have both grades, as markdown ("" when none)."""
    lines: list[str] = []
    for run_name, suites in by_run.items():
        if not suites:
            continue
        lines += [
            "",
            f"Judge vs rule-based grading ({run_name}):",
            "",
            "| suite | n | agree | rate | both correct | judge only | rules only | both wrong |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for suite, row in suites.items():
            lines.append(
                f"| {suite} | {row['n']} | {row['agree']} | {100 * row['rate']:.1f}% | "
                f"{row['both_correct']} | {row['judge_only']} | {row['rules_only']} | "
                f"{row['both_wrong']} |"
            )
    return "\n".join(lines) + ("\n" if lines else "")


def print_agreement(by_run: dict[str, dict[str, dict[str, Any]]], console: Any = None) -> None:
    """The same tables in the terminal (nothing when no run has both grades)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    for run_name, suites in by_run.items():
        if not suites:
            continue
        table = Table(title=f"judge vs rule-based grading ({run_name})")
        for column in ("suite", "n", "agree", "rate", "both ✓", "judge ✓ only", "rules ✓ only"):
            table.add_column(column)
        table.add_column("both ✗")
        for suite, row in suites.items():
            table.add_row(
                suite,
                str(row["n"]),
                str(row["agree"]),
                f"{100 * row['rate']:.1f}%",
                str(row["both_correct"]),
                str(row["judge_only"]),
                str(row["rules_only"]),
                str(row["both_wrong"]),
            )
        console.print(table)
