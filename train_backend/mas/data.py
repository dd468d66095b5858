"""Training problems for the MAS workflows: the problem type and the loaders of training sets.

Three kinds of source (docs/mas_data.md):
- the named real sets, `gsm8k` (GSM8K train) and `math` (MATH train), read like the evaluation
  suites read their test sets (`harness.benchmarks.sources.fetch_rows`:
  `<root>/gsm8k/train.jsonl` or `<root>/math/train.jsonl` under `--data-dir`, `$MARS_DATA_DIR`
  or the cache's data folder, else the hub);
- a JSONL file the user names (`train_file`), one object a line with `question` and `answer`
  (or, for `code`, `question` and `tests`);
- generated problems: `puzzle_problems`, a puzzle suite's levels (`plan_path`, `plan_path_5x5`,
  `sokoban`, `sudoku`, ...) from the training split of its generator, which no evaluation level
  can equal (harness/puzzles/splits.py); the arithmetic set of the CPU miniature
  (train_backend/mas/arithmetic.py); `code_problems` (train_backend/mas/code_problems.py):
  procedural stdin/stdout problems for the code miniature.

Every problem of a named set or a file is checked against the question hashes of every
evaluation test set, loaded through the suites' own loaders (train_backend/mas/overlap.py); an
overlap is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from core.errors import MarsError
from core.files import jsonl_slots
from core.names import unknown_name
from harness.benchmarks.extraction import last_boxed
from harness.benchmarks.math_suites import gsm8k_final_answer
from harness.benchmarks.registry import MalformedRow, get_suite, list_suites, required_text
from harness.benchmarks.sources import (
    HubSource,
    LocalSource,
    Row,
    fetch_rows,
)
from train_backend.mas.overlap import (
    benchmark_question_hashes,
    code_question_hashes,
    find_overlap,
    overlap_error,
)

AnswerRule = Literal["number", "expression", "integer"]  # as in MathSuite.answers_are

FILE_FORMAT_HINT = "JSONL, one object a line with question and answer fields; docs/mas_data.md"


@dataclass(frozen=True)
class Problem:
    """One training problem as a workflow uses it."""

    id: str  # unique within its set
    question: str
    answer: str  # the reference final answer, compared with `answers_are`'s rule
    source: str  # e.g. "hub:openai/gsm8k[main]:train", "local:/path", "arithmetic:train:seed=0"
    answers_are: AnswerRule = "expression"
    kind: str = "math"  # "math", "puzzle" (answer = the level's ref) or "code"
    # What the workflow's environment needs (`Task.metadata`): a puzzle's `environment`; a code
    # problem's ground-truth `tests` and reference `solution`.
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class TrainSetSpec:
    name: str
    hub: HubSource
    local: LocalSource  # relative to a data root
    answers_are: AnswerRule


TRAIN_SETS: Mapping[str, TrainSetSpec] = MappingProxyType(
    {
        "gsm8k": TrainSetSpec(
            "gsm8k",
            HubSource("openai/gsm8k", split="train", config="main"),
            LocalSource("gsm8k/train.jsonl", "jsonl"),
            "number",
        ),
        # The mirror verl's own MATH example reads: all seven subjects in one default config,
        # the original 7,500-problem train split (MATH-500 comes from the test split).
        "math": TrainSetSpec(
            "math",
            HubSource("DigitalLearningGmbH/MATH-lighteval", split="train"),
            LocalSource("math/train.jsonl", "jsonl"),
            "expression",
        ),
    }
)


@dataclass
class TrainSet:
    """Problems in source order plus how they were obtained."""

    name: str
    problems: list[Problem]
    source: str
    skipped: int = 0  # rows that could not become a problem
    dropped_overlap: int = 0  # problems left out because a test set holds them (drop_overlap)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.problems)


# ---------------------------------------------------------------------------------------------
# Loading the real sets


def load_train_set(
    name: str,
    *,
    train_file: Path | None = None,
    data_dir: Path | None = None,
    limit: int | None = None,
    benchmarks_dir: Path | None = None,
    drop_overlap: bool = False,
) -> TrainSet:
    """The training problems of `name` ("gsm8k" or "math").

    `train_file` replaces the set's data with a local JSONL file; otherwise the hub is tried
    (unless `data_dir` is given or the hub is unavailable), then the local data roots. The
    problems are checked against every evaluation test set (`benchmarks_dir`, default: the data
    roots): an overlap raises MarsError, or with `drop_overlap` the overlapping problems are left
    out and counted. `limit` keeps the first problems after that check.
    """
    spec = _spec(name)
    if limit is not None and limit < 1:
        raise MarsError(f"the training-set limit must be a positive number, got {limit}")
    if train_file is not None:
        train_set = _from_file(spec, Path(train_file).expanduser())
    else:
        train_set = _from_sources(spec, data_dir)
    if not train_set.problems:
        raise MarsError(
            f"no usable training problems in {train_set.source} "
            f"({train_set.skipped} rows skipped; expected {FILE_FORMAT_HINT})"
        )
    _guard_overlap(train_set, benchmarks_dir, drop_overlap)
    if limit is not None:
        train_set.problems = train_set.problems[:limit]
    return train_set


GENERATED_SETS = ("arithmetic", "code", "code_mini")  # made by train_backend.mas.schedule


def train_set_names() -> list[str]:
    """Every name `train_set` accepts: the generated sets, the hub sets, the puzzle suites."""
    puzzles = [suite for suite in list_suites() if get_suite(suite).kind == "puzzle"]
    return [*GENERATED_SETS, *sorted(TRAIN_SETS), *puzzles]


def check_train_set_name(name: str) -> None:
    """One line, "did you mean" included, for a training set no loader knows."""
    if name.strip().lower() not in train_set_names():
        raise MarsError(unknown_name("training set", name, train_set_names()))


def _spec(name: str) -> TrainSetSpec:
    spec = TRAIN_SETS.get(name.strip().lower())
    if spec is None:
        raise MarsError(unknown_name("training set", name, train_set_names()))
    return spec


def _from_sources(spec: TrainSetSpec, data_dir: Path | None) -> TrainSet:
    try:
        raw = fetch_rows(f"{spec.name}-train", spec.hub, spec.local, data_dir)
    except MarsError as exc:
        raise MarsError(f"{exc} Or pass --train-file PATH ({FILE_FORMAT_HINT}).") from None
    train_set = TrainSet(name=spec.name, problems=[], source=raw.source, notes=list(raw.notes))
    for index, row in enumerate(raw.rows):
        _add_row(train_set, spec, row, f"{spec.name}-train/{index}")
    return train_set


def _from_file(spec: TrainSetSpec, path: Path) -> TrainSet:
    if not path.is_file():
        raise MarsError(f"training file {path} not found ({FILE_FORMAT_HINT})")
    train_set = TrainSet(name=spec.name, problems=[], source=f"local:{path}")
    for index, row in enumerate(_read_jsonl(path)):
        given_id = row.get("id") if row is not None else None
        problem_id = str(given_id) if given_id not in (None, "") else f"{path.stem}/{index}"
        _add_row(train_set, spec, row, problem_id)
    _refuse_duplicate_ids(train_set)
    return train_set


def _read_jsonl(path: Path) -> list[Row | None]:
    # The evaluation's local route: line by line, a bad row counted and skipped.
    try:
        return jsonl_slots(path)
    except OSError as exc:
        raise MarsError(f"cannot read training file {path}: {exc.strerror or exc}") from None


def _add_row(train_set: TrainSet, spec: TrainSetSpec, row: Row | None, problem_id: str) -> None:
    """Append the row's problem, or count the row as skipped."""
    try:
        if row is None:
            raise MalformedRow("unreadable row")
        problem = Problem(
            id=problem_id,
            question=required_text(row, "question", "problem").strip(),
            answer=reference_answer(row),
            source=train_set.source,
            answers_are=spec.answers_are,
        )
    except (MalformedRow, KeyError, TypeError, ValueError, AttributeError):
        train_set.skipped += 1
        return
    train_set.problems.append(problem)


def reference_answer(row: Row) -> str:
    """The final answer of a row: `answer` as given (after GSM8K's `####` or inside a `\\boxed{}`
    when it holds a whole solution), else the last `\\boxed{}` of `solution` (MATH rows)."""
    answer = row.get("answer")
    if isinstance(answer, bool):
        raise MalformedRow("a boolean is not an answer")
    if isinstance(answer, int | float):
        return str(answer)
    if isinstance(answer, str) and answer.strip():
        text = answer.strip()
        if "####" in text:
            return gsm8k_final_answer(text)
        return last_boxed(text) or text
    solution = row.get("solution")
    boxed = last_boxed(solution) if isinstance(solution, str) else None
    if not boxed:
        raise MalformedRow("no answer, and no solution with a \\boxed{} answer")
    return boxed


def _refuse_duplicate_ids(train_set: TrainSet) -> None:
    seen: set[str] = set()
    for problem in train_set.problems:
        if problem.id in seen:
            raise MarsError(
                f"training file {train_set.source.removeprefix('local:')}: id {problem.id!r} "
                "appears more than once; ids must be unique"
            )
        seen.add(problem.id)


# ---------------------------------------------------------------------------------------------
# The test-set guard, as the loaders apply it (train_backend.mas.overlap)


def _guard_overlap(train_set: TrainSet, benchmarks_dir: Path | None, drop_overlap: bool) -> None:
    hashes = benchmark_question_hashes(benchmarks_dir)
    _drop_overlap(train_set, hashes, drop_overlap)
    train_set.notes.append(f"checked against {len(hashes)} distinct test-set questions")


def _drop_overlap(train_set: TrainSet, hashes: Mapping[str, str], drop_overlap: bool) -> None:
    """Refuse the problems whose question is in `hashes` (MarsError), or with `drop_overlap`
    leave them out and count them."""
    overlap = find_overlap(train_set.problems, hashes)
    if overlap and not drop_overlap:
        raise overlap_error(overlap, train_set.source)
    overlapping = {problem.id for problem, _ in overlap}
    train_set.problems = [p for p in train_set.problems if p.id not in overlapping]
    train_set.dropped_overlap = len(overlapping)


# ---------------------------------------------------------------------------------------------
# Code problems from a file

CODE_FILE_HINT = (
    "JSONL, one object a line with question, tests ([{stdin, expected}, ...]) and optionally "
    "solution; docs/mas_data.md"
)


def load_code_train_file(
    path: Path, *, benchmarks_dir: Path | None = None, drop_overlap: bool = False
) -> TrainSet:
    """Code training problems from a JSONL file (`train_set: code` with `train_file`), each
    question checked against the code suites' test sets like the math sets' (an overlap raises
    MarsError, or with `drop_overlap` is left out and counted)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise MarsError(f"training file {path} not found ({CODE_FILE_HINT})")
    train_set = TrainSet(name="code", problems=[], source=f"local:{path}")
    for index, row in enumerate(_read_jsonl(path)):
        try:
            train_set.problems.append(_code_problem(row, f"{path.stem}/{index}", train_set.source))
        except (MalformedRow, KeyError, TypeError, ValueError, AttributeError):
            train_set.skipped += 1
    if not train_set.problems:
        raise MarsError(
            f"no usable code problems in {path} ({train_set.skipped} rows skipped; expected "
            f"{CODE_FILE_HINT})"
        )
    _refuse_duplicate_ids(train_set)
    _drop_overlap(train_set, code_question_hashes(benchmarks_dir), drop_overlap)
    return train_set


def _code_problem(row: Row | None, default_id: str, source: str) -> Problem:
    if row is None:
        raise MalformedRow("unreadable row")
    tests = row["tests"]
    if not isinstance(tests, list) or not tests:
        raise MalformedRow("no tests")
    cases = [{"stdin": str(t["stdin"]), "expected": str(t["expected"])} for t in tests]
    metadata: dict[str, Any] = {"tests": cases}
    if isinstance(row.get("solution"), str) and row["solution"].strip():
        metadata["solution"] = row["solution"]
    given_id = row.get("id")
    return Problem(
        id=str(given_id) if given_id not in (None, "") else default_id,
        question=required_text(row, "question", "problem").strip(),
        answer="",
        source=source,
        kind="code",
        metadata=metadata,
    )


# ---------------------------------------------------------------------------------------------
# Puzzles


def is_puzzle_set(name: str) -> bool:
    """Whether `name` is a puzzle suite (its training split is a training set)."""
    if name not in list_suites():
        return False
    return get_suite(name).kind == "puzzle"


def puzzle_problems(suite_name: str, split: Literal["train", "eval"], count: int) -> list[Problem]:
    """Levels 0..count-1 of the split of `suite_name`'s generator, as its suite poses them: the
    question is the suite's own prompt (what `single` is asked in `mars eval`), the answer the
    level's ref, and the level rides in the metadata for the puzzle workflows."""
    suite = get_suite(suite_name)
    if suite.kind != "puzzle":
        raise MarsError(f"{suite_name} is not a puzzle suite")
    problems: list[Problem] = []
    for index in range(count):
        sample = suite.level_sample(split, index)  # type: ignore[attr-defined]
        problems.append(
            Problem(
                id=f"{suite_name}-{split}/{index}",
                question=suite.prompt(sample),
                answer=sample.gold,
                source=f"procedural:{suite_name}:{split}",
                kind="puzzle",
                metadata={"environment": sample.gold},
            )
        )
    return problems
