"""Reasoning benchmark suites: loading, prompts, answer extraction and grading.

Typical use: `suite = get_suite("gsm8k")`, `loaded = suite.load(limit=10)` (the hub when it is
reachable, else local files), `suite.prompt(sample)` for the user prompt, and
`suite.grade(response, sample.gold, sample.choices)` for a Verdict.
"""

from harness.benchmarks.registry import (
    ChoiceSuite,
    MalformedRow,
    MathSuite,
    Suite,
    benchmark,
    get_suite,
    list_suites,
)
from harness.benchmarks.types import LoadResult, Sample, Verdict

__all__ = [
    "ChoiceSuite",
    "LoadResult",
    "MalformedRow",
    "MathSuite",
    "Sample",
    "Suite",
    "Verdict",
    "benchmark",
    "get_suite",
    "list_suites",
]
