"""Code training problems: the procedural miniature's set (its tests agree with its reference
solutions in the sandbox; train and held-out never share a statement), and a JSONL file checked
against the code suites' test sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import MarsError
from harness.benchmarks import get_suite
from harness.sandbox import TestCase, run_tests
from train_backend.mas.code_problems import code_problems
from train_backend.mas.data import load_code_train_file

CODE_FIXTURES = Path(__file__).parent / "data" / "code"


def test_the_miniatures_tests_pass_their_reference_solution_and_the_splits_are_apart() -> None:
    train, heldout = code_problems(120, 0), code_problems(30, 0, "heldout")
    assert {p.question for p in train}.isdisjoint(p.question for p in heldout)
    assert code_problems(120, 0) == train and len({p.id for p in train}) == 120
    for problem in (train[0], heldout[0]):
        tests = [TestCase(t["stdin"], t["expected"]) for t in problem.metadata["tests"]]
        result = run_tests(problem.metadata["solution"], tests, per_test_seconds=5)
        assert result.ok and result.pass_ratio == 1.0, result
    with pytest.raises(MarsError, match=r"only \d+ heldout code problems exist"):
        code_problems(200, 0, "heldout")


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_code_file_is_read_and_a_test_set_question_is_refused(tmp_path: Path) -> None:
    mine = {
        "question": "Print the sum of the two integers on the first line, times three.",
        "tests": [{"stdin": "1 2\n", "expected": "9\n"}],
        "solution": "a, b = map(int, input().split())\nprint(3 * (a + b))\n",
    }
    loaded = load_code_train_file(
        _write(tmp_path / "mine.jsonl", [mine, {"question": "no tests"}]),
        benchmarks_dir=CODE_FIXTURES,
    )
    (problem,) = loaded.problems
    assert loaded.skipped == 1 and problem.kind == "code"
    assert problem.metadata == {"tests": mine["tests"], "solution": mine["solution"]}
    taken = get_suite("apps").load(data_dir=CODE_FIXTURES).samples[0]
    copied = {**mine, "question": taken.question}
    path = _write(tmp_path / "copied.jsonl", [mine, copied])
    with pytest.raises(MarsError, match=r"1 question\(s\) of local:.* are in the evaluation test"):
        load_code_train_file(path, benchmarks_dir=CODE_FIXTURES)
    kept = load_code_train_file(path, benchmarks_dir=CODE_FIXTURES, drop_overlap=True)
    assert [p.question for p in kept.problems] == [mine["question"]] and kept.dropped_overlap == 1


def test_code_test_sets_that_cannot_be_loaded_stop_the_check(tmp_path: Path) -> None:
    row = {"question": "Print 1.", "tests": [{"stdin": "", "expected": "1\n"}]}
    with pytest.raises(MarsError, match="cannot check the code training data"):
        load_code_train_file(_write(tmp_path / "one.jsonl", [row]), benchmarks_dir=tmp_path)
