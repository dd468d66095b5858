"""The suite base classes and the by-name registry (`@benchmark("gsm8k")`)."""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, TypeVar

from core.errors import MarsError
from core.names import unknown_name
from harness.benchmarks import grading
from harness.benchmarks.extraction import extract_choice_letter, extract_math_answer
from harness.benchmarks.prompts import LETTERS, choice_prompt, math_prompt
from harness.benchmarks.sources import (
    DATA_DIR_ENV,
    DATA_DIR_LABEL,
    HubSource,
    LocalSource,
    Row,
    fetch_rows,
)
from harness.benchmarks.types import LoadResult, Sample, Verdict

# Modules whose import registers the built-in suites.
_BUILTIN_MODULES = (
    "harness.benchmarks.math_suites",
    "harness.benchmarks.choice_suites",
    "harness.benchmarks.puzzle_suites",
    "harness.benchmarks.code_suites",
)

_REGISTRY: dict[str, Suite] = {}
_BUILTINS_LOADED: list[bool] = []  # non-empty once every built-in suite module is imported

SuiteClass = TypeVar("SuiteClass", bound="type[Suite]")


class MalformedRow(ValueError):
    """A row that cannot become a Sample; it is skipped and counted."""


def required_text(row: Row, *keys: str) -> str:
    """The first non-empty string among `keys`."""
    for key in keys:
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value
    raise MalformedRow(f"missing {' / '.join(keys)}")


class Suite(ABC):
    """A benchmark: where its rows live, how a row becomes a Sample, the prompt, the grader."""

    name: ClassVar[str] = ""
    version: ClassVar[str] = ""
    kind: ClassVar[str] = ""  # "math" (free answer) or "choice" (lettered options)
    hub: ClassVar[HubSource]
    local: ClassVar[LocalSource]
    # Only the first N rows of the source make the test set (APPS: test[:500]), on either route.
    first_rows: ClassVar[int | None] = None

    def load(self, data_dir: Path | None = None, limit: int | None = None) -> LoadResult:
        """Samples in file order (the first `limit` of them), from the hub or local files."""
        if limit is not None and limit < 1:
            raise MarsError(f"--limit must be a positive number of samples, got {limit}")
        set_to = os.environ.get(DATA_DIR_ENV)
        env_hint = (
            f"${DATA_DIR_ENV}={set_to} does not exist: point it at the test sets"
            if set_to and not Path(set_to).is_dir()
            else f"set ${DATA_DIR_ENV}"
        )
        hint = (
            f"Pass {DATA_DIR_LABEL}, {env_hint}, or run `mars data fetch {self.name}` "
            "where the hub is reachable (docs/benchmarks.md)."
        )
        raw = fetch_rows(self.name, self.hub, self.local, data_dir, hint=hint)
        samples: list[Sample] = []
        skipped = 0
        rows = raw.rows if self.first_rows is None else raw.rows[: self.first_rows]
        for index, row in enumerate(rows):
            if limit is not None and len(samples) >= limit:
                break
            try:
                if row is None:
                    raise MalformedRow("unreadable row")
                if raw.route == "hub":
                    sample = self.sample_from_hub_row(row, index)
                else:
                    sample = self.sample_from_local_row(row, index)
            except (MalformedRow, KeyError, TypeError, ValueError, AttributeError):
                skipped += 1
                continue
            samples.append(sample)
        return LoadResult(
            suite=self.name,
            version=self.version,
            samples=samples,
            source=raw.source,
            skipped=skipped,
            notes=raw.notes,
            root=raw.root,
        )

    def builtin_source(self) -> tuple[str, int] | None:
        """For a suite that reads no data file (generated levels, a package's own file): where
        its samples come from and how many there are. None: the hub or a local file (`hub`,
        `local`)."""
        return None

    @abstractmethod
    def sample_from_local_row(self, row: Row, index: int) -> Sample:
        """Normalise one row of the local file; raise MalformedRow (or KeyError...) if unusable."""

    def sample_from_hub_row(self, row: Row, index: int) -> Sample:
        """Normalise one hub row; the local layout unless a suite says otherwise."""
        return self.sample_from_local_row(row, index)

    @abstractmethod
    def prompt(self, sample: Sample) -> str:
        """The user-prompt text for a sample."""

    @abstractmethod
    def extract(self, response: str, choices: list[str] | None = None) -> str | None:
        """The final answer in a response, or None when there is none."""

    @abstractmethod
    def grade(self, response: str, gold: str, choices: list[str] | None = None) -> Verdict:
        """Extract the answer from `response` and compare it with `gold`."""


class MathSuite(Suite):
    """Free-form answers in `\\boxed{}`; `answers_are` picks the comparison rule."""

    kind = "math"
    answers_are: ClassVar[str] = "expression"  # "expression" | "number" | "integer"

    def prompt(self, sample: Sample) -> str:
        return math_prompt(sample.question)

    def extract(self, response: str, choices: list[str] | None = None) -> str | None:
        return extract_math_answer(response)

    def grade(self, response: str, gold: str, choices: list[str] | None = None) -> Verdict:
        gold = str(gold).strip()
        if not gold:
            raise MarsError(f"{self.name}: the gold answer is empty")
        extracted = self.extract(response)
        if extracted is None:
            return Verdict(extracted=None, gold=gold, correct=False, extraction_failed=True)
        if self.answers_are == "expression":
            correct = grading.math_equal(gold, extracted)
        else:
            correct = grading.numbers_equal(gold, extracted, integer=self.answers_are == "integer")
        return Verdict(extracted=extracted, gold=gold, correct=correct, extraction_failed=False)


class ChoiceSuite(Suite):
    """Lettered options; the answer is one letter in `\\boxed{}`."""

    kind = "choice"
    num_choices: ClassVar[int] = 4

    def letters(self, choices: list[str] | None) -> str:
        count = len(choices) if choices else self.num_choices
        if count > len(LETTERS):
            raise MarsError(f"{self.name}: at most {len(LETTERS)} options, got {count}")
        return LETTERS[:count]

    def prompt(self, sample: Sample) -> str:
        if not sample.choices:
            raise MarsError(f"{self.name}: sample {sample.id} has no options")
        return choice_prompt(sample.question, sample.choices)

    def extract(self, response: str, choices: list[str] | None = None) -> str | None:
        return extract_choice_letter(response, self.letters(choices), choices)

    def grade(self, response: str, gold: str, choices: list[str] | None = None) -> Verdict:
        letters = self.letters(choices)
        gold_letter = str(gold).strip().strip("()").upper()
        if len(gold_letter) != 1 or gold_letter not in letters:
            raise MarsError(
                f"{self.name}: the gold answer must be one of the letters {', '.join(letters)}, "
                f"got {gold!r}"
            )
        extracted = self.extract(response, choices)
        return Verdict(
            extracted=extracted,
            gold=gold_letter,
            correct=extracted == gold_letter,
            extraction_failed=extracted is None,
        )


def benchmark(name: str) -> Callable[[SuiteClass], SuiteClass]:
    """Class decorator: register a Suite subclass under `name`."""

    def register(cls: SuiteClass) -> SuiteClass:
        if name in _REGISTRY:
            raise ValueError(f"benchmark {name!r} is registered twice")
        if not cls.version:
            raise ValueError(f"benchmark {name!r} must name its version")
        cls.name = name
        _REGISTRY[name] = cls()
        return cls

    return register


def _load_builtins() -> None:
    if _BUILTINS_LOADED:
        return  # get_suite runs once per graded answer: no import machinery each time
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
    _BUILTINS_LOADED.append(True)


def list_suites() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def get_suite(name: str) -> Suite:
    _load_builtins()
    suite = _REGISTRY.get(name.strip().lower())
    if suite is None:
        raise MarsError(unknown_name("suite", name, _REGISTRY))
    return suite
