"""Acceptance: every gold answer of every suite, written back as a response, grades correct."""

from __future__ import annotations

import csv
import json
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from conftest import DATA_DIR

from core.files import jsonl_slots
from harness.benchmarks import LoadResult, get_suite, list_suites
from harness.benchmarks.grading import math_verify_equal
from harness.benchmarks.sources import read_csv_line_by_line, read_local_with_datasets

EXPECTED_COUNTS = {
    "gsm8k": 1319,
    "math500": 500,
    "aqua": 254,
    "aime24": 30,
    "amc23": 40,
    "gpqa_diamond": 198,
    "mmlu_stem": 3018,
}

DATA_ROOT = DATA_DIR
pytestmark = pytest.mark.skipif(
    not DATA_ROOT.is_dir(), reason=f"benchmark data not found at {DATA_ROOT}"
)


@pytest.fixture(scope="module")
def loaded() -> Iterator[dict[str, LoadResult]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("MARS_DATA_DIR", str(DATA_ROOT))
        yield {name: get_suite(name).load() for name in EXPECTED_COUNTS}


def test_all_seven_suites_are_registered() -> None:
    reasoning = [name for name in list_suites() if get_suite(name).kind in ("math", "choice")]
    assert reasoning == sorted(EXPECTED_COUNTS)


@pytest.mark.parametrize("name", sorted(EXPECTED_COUNTS))
def test_full_local_file_loads_without_skips(loaded: dict[str, LoadResult], name: str) -> None:
    result = loaded[name]
    assert len(result.samples) == EXPECTED_COUNTS[name]
    assert result.skipped == 0
    assert result.source == f"local:{DATA_ROOT / get_suite(name).local.relative_path}"
    assert result.root == "$MARS_DATA_DIR" and result.notes == []  # the hub is not asked
    ids = [sample.id for sample in result.samples]
    assert len(set(ids)) == len(ids), "sample ids must be unique"


@pytest.mark.parametrize("name", sorted(EXPECTED_COUNTS))
def test_boxed_gold_grades_correct(loaded: dict[str, LoadResult], name: str) -> None:
    suite = get_suite(name)
    failures = []
    for sample in loaded[name].samples:
        response = f"Working through it step by step.\nSo the result is \\boxed{{{sample.gold}}}."
        verdict = suite.grade(response, sample.gold, sample.choices)
        if not verdict.correct or verdict.extraction_failed:
            failures.append((sample.id, sample.gold, verdict.extracted))
    assert failures == []


@pytest.mark.parametrize("name", ["aqua", "gpqa_diamond", "mmlu_stem"])
def test_stated_gold_letter_grades_correct(loaded: dict[str, LoadResult], name: str) -> None:
    suite = get_suite(name)
    for sample in loaded[name].samples:
        verdict = suite.grade(
            f"Checking each option...\nThe answer is ({sample.gold}).", sample.gold, sample.choices
        )
        assert verdict.correct, (sample.id, sample.gold, verdict)


def test_gsm8k_gold_with_thousands_separators_and_dollars(loaded: dict[str, LoadResult]) -> None:
    suite = get_suite("gsm8k")
    for sample in loaded["gsm8k"].samples:
        response = f"The total is \\boxed{{\\${int(sample.gold):,}.00}}"
        assert suite.grade(response, sample.gold).correct, sample


def test_integer_suites_accept_raw_file_answers() -> None:
    # AIME golds are zero-padded strings and AMC golds floats in the files.
    for name, path in (("aime24", "aime24/test.jsonl"), ("amc23", "amc23/test.jsonl")):
        suite = get_suite(name)
        for line in (DATA_ROOT / path).read_text(encoding="utf-8").splitlines():
            raw_answer = json.loads(line)["answer"]
            as_int = int(float(raw_answer))
            verdict = suite.grade(f"\\boxed{{{as_int}}}", str(raw_answer))
            assert verdict.correct, (name, raw_answer)
            assert not suite.grade(f"\\boxed{{{as_int + 1}}}", str(raw_answer)).correct


def test_math_verify_accepts_every_math500_gold(loaded: dict[str, LoadResult]) -> None:
    # The boxed-gold test above mostly takes the exact-text shortcut; this one goes through
    # math-verify for every gold, so a parse failure on any MATH500 answer shows up here.
    started = time.perf_counter()
    rejected = [s.gold for s in loaded["math500"].samples if not math_verify_equal(s.gold, s.gold)]
    elapsed = time.perf_counter() - started
    assert rejected == []
    assert elapsed < 60, f"math-verify took {elapsed:.1f} s over 500 golds"


def test_gpqa_gold_letter_points_at_the_correct_answer(loaded: dict[str, LoadResult]) -> None:
    path = DATA_ROOT / "gpqa_diamond" / "gpqa_diamond.csv"
    with path.open(newline="", encoding="utf-8") as handle:
        correct_by_id = {
            row["Record ID"]: row["Correct Answer"].strip() for row in csv.DictReader(handle)
        }
    for sample in loaded["gpqa_diamond"].samples:
        assert sample.choices is not None and len(sample.choices) == 4
        assert sample.choices["ABCD".index(sample.gold)] == correct_by_id[sample.id]


def test_gpqa_gold_letters_are_spread_over_all_options(loaded: dict[str, LoadResult]) -> None:
    counts = Counter(sample.gold for sample in loaded["gpqa_diamond"].samples)
    assert set(counts) == set("ABCD")
    # 198 samples, 49.5 expected per letter, standard deviation about 6.1.
    assert all(30 <= count <= 70 for count in counts.values()), counts


def test_mmlu_gold_letter_matches_the_answer_index(loaded: dict[str, LoadResult]) -> None:
    lines = (DATA_ROOT / "mmlu_stem" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    for line, sample in zip(lines, loaded["mmlu_stem"].samples, strict=True):
        row = json.loads(line)
        assert sample.gold == "ABCD"[row["answer"]]
        assert sample.choices == [choice.strip() for choice in row["choices"]]
        assert sample.id.startswith(f"{row['type']}/")


@pytest.mark.parametrize("name", sorted(EXPECTED_COUNTS))
def test_datasets_and_line_by_line_readers_agree(name: str) -> None:
    # The line-by-line reader only steps in for damaged files; on intact ones it must see
    # exactly what `datasets` sees, or a damaged file would change every other row too.
    local = get_suite(name).local
    path = DATA_ROOT / local.relative_path
    fallback = read_csv_line_by_line(path) if local.format == "csv" else jsonl_slots(path)
    assert read_local_with_datasets(path, local.format) == fallback
