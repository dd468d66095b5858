"""Training problems for the MAS workflows, and the guard that keeps test questions out of them.

Three kinds of source (docs/mas_data.md):
- the named real sets, `gsm8k` (GSM8K train) and `math` (MATH train), read like the evaluation
  suites read their test sets (`harness.benchmarks.sources.fetch_rows`:
  `<root>/gsm8k/train.jsonl` or `<root>/math/train.jsonl` under `--data-dir`, `$MARS_DATA_DIR`
  or the cache's data folder, else the hub);
- a JSONL file the user names (`train_file`), one object a line with `question` and `answer`;
- `arithmetic_problems`: seeded integer expressions for the CPU miniature;
- `puzzle_problems`: a puzzle suite's levels (`plan_path`, `plan_path_5x5`, `sokoban`, `sudoku`,
  ...), from the training split of its generator, which no evaluation level can equal
  (harness/puzzles/splits.py); `code_problems` (train_backend/mas/code_problems.py): procedural
  stdin/stdout problems for the code miniature.

Every problem of a named set or a file is checked against the question hashes of every
evaluation test set, loaded through the suites' own loaders; an overlap is refused.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Mapping, Sequence
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
    candidate_roots,
    fetch_rows,
)

AnswerRule = Literal["number", "expression", "integer"]  # as in MathSuite.answers_are
ArithmeticSplit = Literal["train", "heldout"]

FILE_FORMAT_HINT = "JSONL, one object a line with question and answer fields; docs/mas_data.md"
# One canonical expression in HELD_OUT_BUCKETS (by hash) belongs to the held-out split.
HELD_OUT_BUCKETS = 5
_ARITHMETIC_OPERATORS = ("+", "-", "*")


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
# The test-set guard

GUARDED_KINDS = ("math", "choice")


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
        raise _overlap_error(overlap, label)


def _overlap_error(overlap: list[tuple[Problem, str]], label: str) -> MarsError:
    problem, test_ref = overlap[0]
    return MarsError(
        f"{len(overlap)} question(s) of {label} are in the evaluation test sets "
        f"(e.g. {problem.id!r} is {test_ref}); remove them, or load with drop_overlap=True "
        "to leave them out"
    )


def _guard_overlap(train_set: TrainSet, benchmarks_dir: Path | None, drop_overlap: bool) -> None:
    hashes = benchmark_question_hashes(benchmarks_dir)
    overlap = find_overlap(train_set.problems, hashes)
    if overlap and not drop_overlap:
        raise _overlap_error(overlap, train_set.source)
    overlapping = {problem.id for problem, _ in overlap}
    train_set.problems = [p for p in train_set.problems if p.id not in overlapping]
    train_set.dropped_overlap = len(overlapping)
    train_set.notes.append(f"checked against {len(hashes)} distinct test-set questions")


# ---------------------------------------------------------------------------------------------
# Code problems from a file

CODE_FILE_HINT = (
    "JSONL, one object a line with question, tests ([{stdin, expected}, ...]) and optionally "
    "solution; docs/mas_data.md"
)
CODE_KINDS = ("code",)


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
    hashes = code_question_hashes(benchmarks_dir)
    overlap = find_overlap(train_set.problems, hashes)
    if overlap and not drop_overlap:
        raise _overlap_error(overlap, train_set.source)
    overlapping = {problem.id for problem, _ in overlap}
    train_set.problems = [p for p in train_set.problems if p.id not in overlapping]
    train_set.dropped_overlap = len(overlapping)
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


# ---------------------------------------------------------------------------------------------
# The arithmetic set of the CPU miniature


def arithmetic_problems(
    count: int,
    seed: int,
    split: ArithmeticSplit = "train",
    *,
    max_operand: int = 9,
    operand_counts: Sequence[int] = (2, 3),
) -> list[Problem]:
    """`count` distinct expressions such as "What is 7 + 3 * 2?" over integers 0..max_operand,
    non-negative results only, the same for the same arguments in any process. A canonical
    expression's hash decides its split, so train and held-out problems never coincide,
    whatever seeds each side uses."""
    _check_arithmetic_arguments(count, split, max_operand, operand_counts)
    rng = random.Random(f"mars-arithmetic:{split}:{seed}")
    source = f"arithmetic:{split}:seed={seed}"
    problems: list[Problem] = []
    seen: set[str] = set()
    for _ in range(100 * count + 1000):  # bounded: a small space may hold fewer than `count`
        if len(problems) == count:
            return problems
        expression, value = _random_expression(rng, max_operand, operand_counts)
        if value < 0 or expression in seen or arithmetic_split_of(expression) != split:
            continue
        seen.add(expression)
        problems.append(
            Problem(
                id=f"arith-{split}-s{seed}/{len(problems)}",
                question=f"What is {expression}?",
                answer=str(value),
                source=source,
                answers_are="integer",
            )
        )
    if len(problems) == count:
        return problems
    raise MarsError(
        f"only {len(problems)} distinct {split} arithmetic problems found with operands up to "
        f"{max_operand}; ask for fewer than {count} or raise max_operand"
    )


def arithmetic_split_of(expression: str) -> ArithmeticSplit:
    """Which split a canonical expression ("7 + 3 * 2") belongs to."""
    digest = hashlib.sha256(f"mars-arithmetic-split:{expression}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") % HELD_OUT_BUCKETS == 0 else "train"


def evaluate_expression(numbers: Sequence[int], operators: Sequence[str]) -> int:
    """Value of numbers[0] op[0] numbers[1] ... with `*` before `+` and `-`, left to right."""
    if len(numbers) != len(operators) + 1:
        raise ValueError("an expression needs one operator fewer than numbers")
    terms, signs = [numbers[0]], [1]
    for operator, number in zip(operators, numbers[1:], strict=True):
        if operator == "*":
            terms[-1] *= number
        elif operator in ("+", "-"):
            terms.append(number)
            signs.append(1 if operator == "+" else -1)
        else:
            raise ValueError(f"unknown operator {operator!r}")
    return sum(sign * term for sign, term in zip(signs, terms, strict=True))


def _random_expression(
    rng: random.Random, max_operand: int, operand_counts: Sequence[int]
) -> tuple[str, int]:
    size = rng.choice(list(operand_counts))
    numbers = [rng.randint(0, max_operand) for _ in range(size)]
    operators = [rng.choice(_ARITHMETIC_OPERATORS) for _ in range(size - 1)]
    parts = [str(numbers[0])]
    for operator, number in zip(operators, numbers[1:], strict=True):
        parts += [operator, str(number)]
    return " ".join(parts), evaluate_expression(numbers, operators)


def _check_arithmetic_arguments(
    count: int, split: str, max_operand: int, operand_counts: Sequence[int]
) -> None:
    if count < 1:
        raise MarsError(f"the number of arithmetic problems must be positive, got {count}")
    if split not in ("train", "heldout"):
        raise MarsError(f"the arithmetic split is 'train' or 'heldout', got {split!r}")
    if max_operand < 1:
        raise MarsError(f"max_operand must be at least 1, got {max_operand}")
    if not operand_counts or any(size not in (2, 3, 4) for size in operand_counts):
        raise MarsError(f"operand counts must be 2, 3 or 4, got {list(operand_counts)}")
