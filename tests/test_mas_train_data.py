"""MAS training data: GSM8K / MATH train through the evaluation's loading routes, training files,
the refusal of test-set questions, and the seeded arithmetic set of the CPU miniature."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.errors import MarsError
from harness.benchmarks import get_suite, list_suites, sources
from train_backend.mas import data, overlap
from train_backend.mas.arithmetic import (
    arithmetic_problems,
    arithmetic_split_of,
    evaluate_expression,
)
from train_backend.mas.data import load_train_set
from train_backend.mas.overlap import benchmark_question_hashes, check_no_overlap, question_hash

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO.parent / "shared" / "data" / "benchmarks"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("MARS_DATA_DIR", raising=False)
    # Training data never comes from the shared test-set folder unless a test asks for it.
    monkeypatch.setattr(sources, "cache_data_root", lambda: tmp_path / "no-cache-data")


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def gsm8k_test_row(index: int) -> dict[str, str]:
    with (BENCHMARKS / "gsm8k" / "test.jsonl").open(encoding="utf-8") as handle:
        for position, line in enumerate(handle):
            if position == index:
                return json.loads(line)
    raise AssertionError(f"no GSM8K test row {index}")


def clean_rows(count: int) -> list[dict[str, str]]:
    return [
        {"question": f"A crate holds {n} pears and {n + 3} plums. How many fruits?",
         "answer": f"{n} + {n + 3} = {2 * n + 3}\n#### {2 * n + 3}"}
        for n in range(count)
    ]  # fmt: skip


# --- the real sets, offline and (faked) hub routes -------------------------------------------


def test_gsm8k_train_loads_from_the_data_root_when_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "data-root"
    rows: list[Any] = [*clean_rows(2), '{"question": "cut off', {"question": "no final answer"}]
    rows.append({"question": "Big sums?", "answer": "Add them.\n#### 1,234"})
    write_jsonl(root / "gsm8k" / "train.jsonl", rows)
    monkeypatch.setenv("MARS_DATA_DIR", str(root))
    loaded = load_train_set("gsm8k", benchmarks_dir=BENCHMARKS)
    assert [p.answer for p in loaded.problems] == ["3", "5", "1234"]
    assert [p.id for p in loaded.problems] == ["gsm8k-train/0", "gsm8k-train/1", "gsm8k-train/4"]
    assert loaded.skipped == 2
    assert loaded.source == f"local:{root / 'gsm8k' / 'train.jsonl'}"
    assert all(p.source == loaded.source and p.answers_are == "number" for p in loaded.problems)
    assert not any("openai/gsm8k" in note for note in loaded.notes)  # local before the hub


def test_math_train_takes_the_last_boxed_answer_of_each_solution(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "math" / "train.jsonl",
        [
            {"problem": "Halve one.", "solution": "Try \\boxed{2}, no: $\\boxed{\\frac{1}{2}}$."},
            {"problem": "No box here.", "solution": "The answer is 4."},
            {"problem": "Pair?", "solution": "So $\\boxed{(3, \\pi)}$.", "type": "Algebra"},
        ],
    )
    loaded = load_train_set("MATH", data_dir=tmp_path, benchmarks_dir=BENCHMARKS)
    assert [(p.question, p.answer) for p in loaded.problems] == [
        ("Halve one.", "\\frac{1}{2}"),
        ("Pair?", "(3, \\pi)"),
    ]
    assert loaded.skipped == 1
    assert {p.answers_are for p in loaded.problems} == {"expression"}


def test_no_training_data_offline_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(MarsError) as caught:
        load_train_set("gsm8k", benchmarks_dir=BENCHMARKS)
    message = str(caught.value)
    assert "\n" not in message
    assert "HF_HUB_OFFLINE=1" in message
    assert "openai/gsm8k" in message
    assert str(tmp_path / "no-cache-data" / "gsm8k" / "train.jsonl") in message
    assert "$MARS_DATA_DIR" in message and "--train-file" in message


@pytest.mark.parametrize(
    ("name", "expected_call", "hub_rows", "answers"),
    [
        (
            "gsm8k",
            ("openai/gsm8k", "main", "train"),
            [{"question": "Q1 apples?", "answer": "1 + 1 = 2\n#### 2"}],
            ["2"],
        ),
        (
            "math",
            ("DigitalLearningGmbH/MATH-lighteval", None, "train"),
            [{"problem": "Q2 roots?", "solution": "$\\boxed{\\sqrt{2}}$", "level": "Level 2"}],
            ["\\sqrt{2}"],
        ),
    ],
)
def test_the_hub_route_reads_the_named_train_split(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    expected_call: tuple[str, str | None, str],
    hub_rows: list[dict[str, str]],
    answers: list[str],
) -> None:
    """The hub cannot be reached here: `load_dataset` is replaced by one that records its call."""
    import datasets

    calls: list[tuple[Any, ...]] = []

    def fake_load_dataset(path: str, name: str | None = None, split: str | None = None) -> Any:
        calls.append((path, name, split))
        return hub_rows

    monkeypatch.setattr(sources, "hub_unavailable_reason", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    loaded = load_train_set(name, benchmarks_dir=BENCHMARKS)
    assert calls == [expected_call]
    assert loaded.source.startswith(f"hub:{expected_call[0]}")
    assert [p.answer for p in loaded.problems] == answers


# --- training files ---------------------------------------------------------------------------


def test_a_training_file_accepts_the_documented_row_shapes(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "mine.jsonl",
        [
            {"question": "GSM-style?", "answer": "work\n#### 72"},
            {"question": "Plain number?", "answer": 5},
            {"problem": "MATH-style?", "solution": "so \\boxed{x^2}"},
            {"id": "custom-7", "question": "Given id?", "answer": "\\frac{1}{2}"},
            "{broken json",
            {"question": "Nothing to check against"},
        ],
    )
    loaded = load_train_set("gsm8k", train_file=path, benchmarks_dir=BENCHMARKS)
    assert [(p.id, p.answer) for p in loaded.problems] == [
        ("mine/0", "72"),
        ("mine/1", "5"),
        ("mine/2", "x^2"),
        ("custom-7", "\\frac{1}{2}"),
    ]
    assert loaded.skipped == 2
    assert loaded.source == f"local:{path}"


def test_a_training_file_wins_over_the_data_roots(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "root" / "gsm8k" / "train.jsonl", clean_rows(3))
    path = write_jsonl(tmp_path / "one.jsonl", clean_rows(1))
    loaded = load_train_set(
        "gsm8k", train_file=path, data_dir=tmp_path / "root", benchmarks_dir=BENCHMARKS
    )
    assert len(loaded) == 1


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("missing", "not found"),
        ("directory", "not found"),
        ("empty", "no usable training problems"),
        ("only-bad-rows", "no usable training problems"),
        ("duplicate-ids", "appears more than once"),
    ],
)
def test_bad_training_files_are_one_line_errors(tmp_path: Path, setup: str, expected: str) -> None:
    path = tmp_path / "train.jsonl"
    if setup == "directory":
        path.mkdir()
    elif setup == "empty":
        path.write_text("", encoding="utf-8")
    elif setup == "only-bad-rows":
        write_jsonl(path, ["nonsense", {"answer": "#### 3"}, [1, 2]])
    elif setup == "duplicate-ids":
        write_jsonl(path, [{"id": "a", "question": f"Q{n}?", "answer": n} for n in range(2)])
    with pytest.raises(MarsError) as caught:
        load_train_set("gsm8k", train_file=path, benchmarks_dir=BENCHMARKS)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_unknown_set_and_bad_limit_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MarsError, match="known: arithmetic, code, code_mini, gsm8k, math, plan"):
        load_train_set("svamp")
    path = write_jsonl(tmp_path / "t.jsonl", clean_rows(3))
    with pytest.raises(MarsError, match="positive"):
        load_train_set("gsm8k", train_file=path, limit=0, benchmarks_dir=BENCHMARKS)
    limited = load_train_set("gsm8k", train_file=path, limit=2, benchmarks_dir=BENCHMARKS)
    assert [p.id for p in limited.problems] == ["t/0", "t/1"]


# --- the test-set guard -----------------------------------------------------------------------


def test_question_hash_ignores_whitespace_and_case_only() -> None:
    assert question_hash("  What is\n2 +  2? ") == question_hash("what IS 2 + 2?")
    assert question_hash("What is 2 + 2?") != question_hash("What is 2 + 3?")
    assert question_hash("What is 2 + 2?") != question_hash("What is 2+2?")


def test_a_real_gsm8k_test_question_in_a_training_file_is_refused(tmp_path: Path) -> None:
    leaked = gsm8k_test_row(17)
    # Re-spaced and re-cased: the guard must still see it.
    disguised = "  " + "\n".join(leaked["question"].upper().split(" ")) + " "
    rows = [*clean_rows(3), {"id": "leak", "question": disguised, "answer": leaked["answer"]}]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    with pytest.raises(MarsError) as caught:
        load_train_set("gsm8k", train_file=path, benchmarks_dir=BENCHMARKS)
    message = str(caught.value)
    assert message.startswith("1 question(s) of ")
    assert "'leak' is gsm8k/17" in message
    assert "\n" not in message

    kept = load_train_set("gsm8k", train_file=path, benchmarks_dir=BENCHMARKS, drop_overlap=True)
    assert [p.id for p in kept.problems] == ["train/0", "train/1", "train/2"]
    assert kept.dropped_overlap == 1


def test_questions_of_every_suite_are_guarded(tmp_path: Path) -> None:
    hashes = benchmark_question_hashes(BENCHMARKS)
    by_suite: dict[str, str] = {}
    for question_ref in hashes.values():
        by_suite.setdefault(question_ref.split("/", 1)[0], question_ref)
    guarded = {name for name in list_suites() if get_suite(name).kind in overlap.GUARDED_KINDS}
    assert set(by_suite) == guarded
    # 5,359 questions in the seven files; MMLU repeats some of its own.
    assert 5000 < len(hashes) <= 5359
    problems = [
        data.Problem(id="p0", question="What is 1 + 1?", answer="2", source="x"),
        data.Problem(id="p1", question="What is 1 + 1?", answer="2", source="x"),
    ]
    check_no_overlap(problems, benchmarks_dir=BENCHMARKS)  # nothing to refuse


def test_the_hash_set_is_built_once_per_process_and_follows_file_changes(tmp_path: Path) -> None:
    copy = tmp_path / "benchmarks"
    shutil.copytree(BENCHMARKS, copy)
    for path in copy.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)  # the shared copy is read-only
    first = benchmark_question_hashes(copy)
    assert benchmark_question_hashes(copy) is first
    question = "How many marbles does a juggler keep in a hat of seven?"
    with (copy / "amc23" / "test.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": 999, "question": question, "answer": 7}) + "\n")
    second = benchmark_question_hashes(copy)
    assert second is not first
    assert second[question_hash(question)] == "amc23/999"
    assert question_hash(question) not in first


def test_training_is_refused_when_the_test_sets_cannot_be_found(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", clean_rows(1))
    with pytest.raises(MarsError) as caught:
        load_train_set("gsm8k", train_file=path)  # no $MARS_DATA_DIR, empty cache
    message = str(caught.value)
    assert "cannot check the training data against the test sets" in message
    assert "gsm8k/test.jsonl" in message and "\n" not in message


# --- the arithmetic set -----------------------------------------------------------------------


def test_expressions_follow_operator_precedence() -> None:
    assert evaluate_expression([3, 4, 2], ["-", "*"]) == -5
    assert evaluate_expression([2, 3, 1], ["*", "-"]) == 5
    assert evaluate_expression([7, 0], ["*"]) == 0
    with pytest.raises(ValueError):
        evaluate_expression([1, 2], ["/"])


def test_arithmetic_problems_are_correct_distinct_and_seeded() -> None:
    problems = arithmetic_problems(300, seed=3)
    assert problems == arithmetic_problems(300, seed=3)
    assert problems != arithmetic_problems(300, seed=4)
    assert len({p.question for p in problems}) == 300
    sizes = set()
    for problem in problems:
        expression = problem.question.removeprefix("What is ").removesuffix("?")
        sizes.add(len(expression.split()) // 2 + 1)
        assert problem.answer == str(eval(expression, {"__builtins__": {}}))  # our own text
        assert int(problem.answer) >= 0
        assert problem.answers_are == "integer"
    assert sizes == {2, 3}


def test_train_and_held_out_arithmetic_never_coincide_whatever_the_seeds() -> None:
    train = {p.question for seed in range(8) for p in arithmetic_problems(400, seed)}
    held_out = {p.question for seed in range(8) for p in arithmetic_problems(200, seed, "heldout")}
    assert len(train) > 1000 and len(held_out) > 500
    assert not train & held_out
    # The split is a property of the expression itself, not of the seed that drew it.
    assert {arithmetic_split_of(q[len("What is ") : -1]) for q in held_out} == {"heldout"}


def test_arithmetic_problems_are_the_same_in_another_process() -> None:
    here = [p.question for p in arithmetic_problems(50, seed=11, split="heldout")]
    script = (
        "import json\n"
        "from train_backend.mas.arithmetic import arithmetic_problems\n"
        "print(json.dumps([p.question for p in arithmetic_problems(50, 11, 'heldout')]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "987"}
    output = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=REPO,
    ).stdout
    assert json.loads(output) == here


def test_arithmetic_problems_hold_no_test_question() -> None:
    problems = arithmetic_problems(500, 0) + arithmetic_problems(200, 0, "heldout")
    check_no_overlap(problems, label="arithmetic", benchmarks_dir=BENCHMARKS)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"count": 0, "seed": 0}, "positive"),
        ({"count": 5, "seed": 0, "split": "test"}, "'train' or 'heldout'"),
        ({"count": 5, "seed": 0, "max_operand": 0}, "max_operand"),
        ({"count": 5, "seed": 0, "operand_counts": (1,)}, "operand counts"),
        ({"count": 500, "seed": 0, "max_operand": 1, "operand_counts": (2,)}, "only"),
    ],
)
def test_bad_arithmetic_arguments_are_one_line_errors(
    kwargs: dict[str, Any], expected: str
) -> None:
    with pytest.raises(MarsError, match=expected) as caught:
        arithmetic_problems(**kwargs)
    assert "\n" not in str(caught.value)
