"""Free-answer suites: GSM8K, MATH500, AIME 2024, AMC 2023."""

from __future__ import annotations

from fractions import Fraction

from harness.benchmarks.registry import MalformedRow, MathSuite, benchmark, required_text
from harness.benchmarks.sources import HubSource, LocalSource, Row
from harness.benchmarks.types import Sample


def integer_answer(value: object) -> str:
    """AIME answers are zero-padded strings ("025"), AMC answers floats (27.0): both become "25",
    "27". A non-integer is malformed for these suites."""
    if isinstance(value, bool) or value is None:
        raise MalformedRow(f"not an integer answer: {value!r}")
    number = Fraction(str(value).strip())
    if number.denominator != 1:
        raise MalformedRow(f"not an integer answer: {value!r}")
    return str(number.numerator)


def gsm8k_final_answer(solution: str) -> str:
    """The number after the last `####` of a GSM8K solution, thousands commas removed (the
    training-data loader reads GSM8K train through this too)."""
    if "####" not in solution:
        raise MalformedRow("no '####' final answer")
    gold = solution.rsplit("####", 1)[1].strip().replace(",", "")
    if not gold:
        raise MalformedRow("empty final answer")
    return gold


@benchmark("gsm8k")
class GSM8K(MathSuite):
    version = "1.0"
    answers_are = "number"
    hub = HubSource("openai/gsm8k", split="test", config="main")
    local = LocalSource("gsm8k/test.jsonl", "jsonl")

    def sample_from_local_row(self, row: Row, index: int) -> Sample:
        gold = gsm8k_final_answer(required_text(row, "answer"))
        return Sample(id=str(index), question=required_text(row, "question"), gold=gold)


@benchmark("math500")
class MATH500(MathSuite):
    version = "1.0"
    answers_are = "expression"
    hub = HubSource("HuggingFaceH4/MATH-500", split="test")
    local = LocalSource("math500/test.jsonl", "jsonl")

    def sample_from_local_row(self, row: Row, index: int) -> Sample:
        return Sample(
            id=required_text(row, "unique_id"),
            question=required_text(row, "problem"),
            gold=required_text(row, "answer").strip(),
            metadata={"subject": row.get("subject"), "level": row.get("level")},
        )


class ContestSuite(MathSuite):
    """A contest's rows (AIME, AMC): an optional id, the problem, an integer answer, a url."""

    answers_are = "integer"

    def sample_from_local_row(self, row: Row, index: int) -> Sample:
        return Sample(
            id=str(row["id"]) if row.get("id") is not None else str(index),
            question=required_text(row, "problem", "question"),
            gold=integer_answer(row.get("answer")),
            metadata={"url": row.get("url")},
        )


@benchmark("aime24")
class AIME24(ContestSuite):
    version = "1.0"
    hub = HubSource("HuggingFaceH4/aime_2024", split="train")
    local = LocalSource("aime24/test.jsonl", "jsonl")


@benchmark("amc23")
class AMC23(ContestSuite):
    version = "1.0"
    hub = HubSource("math-ai/amc23", split="test")
    local = LocalSource("amc23/test.jsonl", "jsonl")
