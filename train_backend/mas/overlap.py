"""The guard that keeps evaluation test questions out of the training data (docs/mas_data.md).

A question is known by the hash of its text with whitespace runs collapsed and case folded
(`question_hash`). The math sets are checked against every reasoning suite's test set read from
local copies (`benchmark_question_hashes`), code data against the code suites' test sets
(`code_question_hashes`); an overlap is refused in one line (`check_no_overlap`), or the loaders
leave the overlapping problems out and count them (`drop_overlap`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from core.errors import MarsError
from harness.benchmarks.registry import get_suite, list_suites
from harness.benchmarks.sources import candidate_roots

if TYPE_CHECKING:
    from train_backend.mas.data import Problem

GUARDED_KINDS = ("math", "choice")  # the reasoning suites guard the math sets
CODE_KINDS = ("code",)  # the code suites guard code data


def question_hash(question: str) -> str:
    """SHA-256 of the question with whitespace runs collapsed and case folded."""
    normalised = " ".join(question.split()).casefold()
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class _TestSetFile:
    suite: str
    root: Path
    size: int
    mtime_ns: int  # with size, makes an edited file a new cache key


def benchmark_question_hashes(benchmarks_dir: Path | None = None) -> Mapping[str, str]:
    """Question hash -> "suite/sample id" over every registered evaluation suite's test set,
    read from local copies (`benchmarks_dir`, else `$MARS_DATA_DIR` then the cache's data
    folder). Computed once per process for the same files."""
    return _hashes_of(_test_set_files(benchmarks_dir))


def _test_set_files(benchmarks_dir: Path | None) -> tuple[_TestSetFile, ...]:
    if benchmarks_dir is not None:
        roots = [Path(benchmarks_dir).expanduser()]
    else:
        roots = [root for label, root in candidate_roots(None)]
    found: list[_TestSetFile] = []
    missing: list[str] = []
    for suite_name in list_suites():
        suite = get_suite(suite_name)
        # The reasoning suites guard the math sets. The puzzles are generated (their splits are
        # disjoint by construction); the code suites guard code data (`code_overlap`).
        if suite.kind not in GUARDED_KINDS:
            continue
        relative = suite.local.relative_path
        root = next((root for root in roots if (root / relative).is_file()), None)
        if root is None:
            missing.append(relative)
            continue
        stat = (root / relative).stat()
        found.append(_TestSetFile(suite_name, root.resolve(), stat.st_size, stat.st_mtime_ns))
    if missing:
        raise MarsError(
            f"cannot check the training data against the test sets: {', '.join(missing)} not "
            f"found under {', '.join(str(root) for root in roots)}; point $MARS_DATA_DIR at a "
            "folder holding all seven (docs/benchmarks.md)"
        )
    return tuple(found)


@functools.lru_cache(maxsize=4)
def _hashes_of(files: tuple[_TestSetFile, ...]) -> Mapping[str, str]:
    hashes: dict[str, str] = {}
    for entry in files:
        loaded = get_suite(entry.suite).load(data_dir=entry.root)
        for sample in loaded.samples:
            hashes.setdefault(question_hash(sample.question), f"{entry.suite}/{sample.id}")
    return MappingProxyType(hashes)


def find_overlap(
    problems: Sequence[Problem], hashes: Mapping[str, str]
) -> list[tuple[Problem, str]]:
    """The problems whose question is in a test set, each with the test sample it matches."""
    matches: list[tuple[Problem, str]] = []
    for problem in problems:
        test_ref = hashes.get(question_hash(problem.question))
        if test_ref is not None:
            matches.append((problem, test_ref))
    return matches


def check_no_overlap(
    problems: Sequence[Problem],
    *,
    label: str = "the training data",
    benchmarks_dir: Path | None = None,
) -> None:
    """MarsError (one line: how many, one example) if any problem's question is a test question."""
    overlap = find_overlap(problems, benchmark_question_hashes(benchmarks_dir))
    if overlap:
        raise overlap_error(overlap, label)


def overlap_error(overlap: list[tuple[Problem, str]], label: str) -> MarsError:
    problem, test_ref = overlap[0]
    return MarsError(
        f"{len(overlap)} question(s) of {label} are in the evaluation test sets "
        f"(e.g. {problem.id!r} is {test_ref}); remove them, or load with drop_overlap=True "
        "to leave them out"
    )


def code_question_hashes(benchmarks_dir: Path | None = None) -> Mapping[str, str]:
    """Question hash -> "suite/sample id" over every code suite's test set, loaded as `mars
    eval` loads it (the hub, else `benchmarks_dir` or the data roots; HumanEval from its
    wheel). A suite that cannot be loaded is a one-line error: unchecked data is not trained on."""
    hashes: dict[str, str] = {}
    missing: list[str] = []
    for name in list_suites():
        suite = get_suite(name)
        if suite.kind not in CODE_KINDS:
            continue
        try:
            loaded = suite.load(data_dir=benchmarks_dir)
        except MarsError:
            missing.append(name)
            continue
        for sample in loaded.samples:
            hashes.setdefault(question_hash(sample.question), f"{name}/{sample.id}")
    if missing:
        raise MarsError(
            "cannot check the code training data against the test sets of "
            f"{', '.join(missing)} (no hub and no local copy); put them under $MARS_DATA_DIR "
            "(docs/benchmarks.md)"
        )
    return MappingProxyType(hashes)
