"""Loading: lookup order, malformed rows, limits, bad input, the GPQA shuffle, the hub mapping."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.errors import MarsError
from harness.benchmarks import get_suite, list_suites, sources
from harness.benchmarks.choice_suites import shuffled_order


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("MARS_DATA_DIR", raising=False)
    # No test may fall through to real data (the shared folder, a filled cache) unless it asks.
    monkeypatch.setattr(sources, "cache_data_root", lambda: tmp_path / "no-cache-data")


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def gsm8k_row(number: int) -> dict[str, str]:
    return {
        "question": f"What is {number} + 0?",
        "answer": f"{number} + 0 = {number}\n#### {number}",
    }


def test_unknown_suite_lists_the_known_ones() -> None:
    with pytest.raises(MarsError) as caught:
        get_suite("gsm9k")
    message = str(caught.value)
    assert "gsm9k" in message
    for name in list_suites():
        assert name in message


def test_missing_data_names_every_place_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_dir = tmp_path / "from-env"
    monkeypatch.setenv("MARS_DATA_DIR", str(env_dir))
    with pytest.raises(MarsError) as caught:
        get_suite("math500").load()
    message = str(caught.value)
    assert str(env_dir / "math500" / "test.jsonl") in message
    assert str(tmp_path / "no-cache-data" / "math500" / "test.jsonl") in message
    assert "HF_HUB_OFFLINE=1" in message and "`mars data fetch math500`" in message
    assert "\n" not in message


def test_missing_data_without_data_dir_says_why_the_hub_was_skipped() -> None:
    with pytest.raises(MarsError) as caught:
        get_suite("gsm8k").load()
    assert "HF_HUB_OFFLINE=1" in str(caught.value)
    assert "openai/gsm8k" in str(caught.value)


def test_lookup_order_is_data_dir_then_env_then_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given, env_dir, cache = tmp_path / "given", tmp_path / "env", tmp_path / "cache"
    for root, number in ((given, 1), (env_dir, 2), (cache, 3)):
        write_jsonl(root / "gsm8k" / "test.jsonl", [gsm8k_row(number)])
    monkeypatch.setattr(sources, "cache_data_root", lambda: cache)
    monkeypatch.setenv("MARS_DATA_DIR", str(env_dir))
    suite = get_suite("gsm8k")
    assert suite.load(data_dir=given).samples[0].gold == "1"
    assert suite.load().samples[0].gold == "2"
    monkeypatch.delenv("MARS_DATA_DIR")
    result = suite.load()
    assert result.samples[0].gold == "3"
    assert result.source == f"local:{cache / 'gsm8k' / 'test.jsonl'}"
    assert result.root == "cache"


def test_broken_jsonl_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "gsm8k" / "test.jsonl",
        [
            gsm8k_row(10),
            '{"question": "cut off half way',  # not JSON
            gsm8k_row(12),
            {"question": "no final answer", "answer": "it is 13"},  # no ####
            {"answer": "#### 14"},  # no question
            "[1, 2]",  # JSON but not an object
            gsm8k_row(16),
        ],
    )
    result = get_suite("gsm8k").load(data_dir=tmp_path)
    assert result.skipped == 4
    assert [sample.gold for sample in result.samples] == ["10", "12", "16"]
    # Ids are record positions, so they do not shift when a row before them is broken.
    assert [sample.id for sample in result.samples] == ["0", "2", "6"]


def test_rows_with_bad_values_are_skipped_and_counted(tmp_path: Path) -> None:
    good = {
        "question": "2+2?",
        "type": "elementary_mathematics",
        "choices": list("1234"),
        "answer": 3,
    }
    write_jsonl(
        tmp_path / "mmlu_stem" / "test.jsonl",
        [
            good,
            {**good, "answer": 7},  # index out of range
            {**good, "choices": ["only", "three", "options"]},
            {**good, "type": "world_religions"},  # not STEM
            {**good, "question": "3+3?", "answer": 0},
        ],
    )
    result = get_suite("mmlu_stem").load(data_dir=tmp_path)
    assert result.skipped == 3
    assert [(sample.question, sample.gold) for sample in result.samples] == [
        ("2+2?", "D"),
        ("3+3?", "A"),
    ]
    assert [sample.id for sample in result.samples] == [
        "elementary_mathematics/0",
        "elementary_mathematics/1",
    ]


def gpqa_rows(count: int) -> list[dict[str, str]]:
    return [
        {
            "Record ID": f"rec{index:04d}",
            "Question": f"Question {index}?",
            "Correct Answer": f"right {index}",
            "Incorrect Answer 1": f"wrong {index}a",
            "Incorrect Answer 2": f"wrong {index}b",
            "Incorrect Answer 3": f"wrong {index}c",
            "High-level domain": "Physics",
        }
        for index in range(count)
    ]


def write_gpqa(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_gpqa_csv_rows_missing_an_answer_are_skipped(tmp_path: Path) -> None:
    rows = gpqa_rows(4)
    rows[1]["Incorrect Answer 2"] = ""
    write_gpqa(tmp_path / "gpqa_diamond" / "gpqa_diamond.csv", rows)
    result = get_suite("gpqa_diamond").load(data_dir=tmp_path)
    assert result.skipped == 1
    assert [sample.id for sample in result.samples] == ["rec0000", "rec0002", "rec0003"]
    correct_by_id = {row["Record ID"]: row["Correct Answer"] for row in rows}
    for sample in result.samples:
        assert sample.choices is not None
        assert sample.choices["ABCD".index(sample.gold)] == correct_by_id[sample.id]


def test_gpqa_csv_with_a_ragged_row_is_read_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "gpqa_diamond" / "gpqa_diamond.csv"
    write_gpqa(path, gpqa_rows(3))
    with path.open("a", encoding="utf-8") as handle:
        handle.write("recXXXX,too,many,fields,for,the,header,row,here\n")
    result = get_suite("gpqa_diamond").load(data_dir=tmp_path)
    assert result.skipped == 1
    assert len(result.samples) == 3


@pytest.mark.parametrize("limit", [0, -3])
def test_non_positive_limit_is_refused(tmp_path: Path, limit: int) -> None:
    write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [gsm8k_row(1)])
    with pytest.raises(MarsError, match="limit"):
        get_suite("gsm8k").load(data_dir=tmp_path, limit=limit)


def test_limit_takes_the_first_samples_in_file_order(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [gsm8k_row(n) for n in (5, 4, 3, 2, 1)])
    result = get_suite("gsm8k").load(data_dir=tmp_path, limit=3)
    assert [sample.gold for sample in result.samples] == ["5", "4", "3"]
    assert len(get_suite("gsm8k").load(data_dir=tmp_path, limit=99)) == 5


def test_gpqa_shuffle_is_fixed_across_processes_and_hash_seeds() -> None:
    ids = [f"rec{index:04d}" for index in range(40)]
    here = [shuffled_order(sample_id, 4) for sample_id in ids]
    script = (
        "import json, sys\n"
        "from harness.benchmarks.choice_suites import shuffled_order\n"
        "print(json.dumps([shuffled_order(i, 4) for i in json.loads(sys.argv[1])]))\n"
    )
    for hash_seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        output = subprocess.run(
            [sys.executable, "-c", script, json.dumps(ids)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            cwd=Path(__file__).parents[1],
        ).stdout
        assert json.loads(output) == here
    assert all(sorted(order) == [0, 1, 2, 3] for order in here)
    assert len({tuple(order) for order in here}) > 10  # not one fixed permutation


def test_hub_rows_are_mapped_to_the_same_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub route cannot run here; feed `load_dataset` hub-shaped rows instead."""
    import datasets

    calls: list[tuple[Any, ...]] = []
    hub_rows = [
        {"question": "Q1", "subject": "college_physics", "choices": list("abcd"), "answer": 1},
        {"question": "Q2", "subject": "world_religions", "choices": list("abcd"), "answer": 0},
        {"question": "Q3", "subject": "college_physics", "choices": list("abcd"), "answer": 2},
    ]

    def fake_load_dataset(path: str, name: str | None = None, split: str | None = None) -> Any:
        calls.append((path, name, split))
        return hub_rows

    monkeypatch.setattr(sources, "hub_unavailable_reason", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    result = get_suite("mmlu_stem").load()
    assert calls == [("cais/mmlu", "all", "test")]
    assert result.source == "hub:cais/mmlu[all]:test"
    assert [(s.id, s.question, s.gold) for s in result.samples] == [
        ("college_physics/0", "Q1", "B"),
        ("college_physics/1", "Q3", "C"),
    ]


def test_local_copies_come_before_the_hub_and_a_hub_failure_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("hub went away")

    monkeypatch.setattr(sources, "hub_unavailable_reason", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(MarsError, match="hub went away"):
        get_suite("gsm8k").load()
    write_jsonl(tmp_path / "no-cache-data" / "gsm8k" / "test.jsonl", [gsm8k_row(7)])
    result = get_suite("gsm8k").load()  # the hub is not asked
    assert [sample.gold for sample in result.samples] == ["7"]
    assert result.source.startswith("local:") and result.notes == []


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_offline_env_vars_skip_the_hub(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", value)
    assert sources.hub_unavailable_reason() == f"HF_DATASETS_OFFLINE={value}"


def test_unreachable_hub_endpoint_is_detected_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import time

    with socket.socket() as probe:  # a loopback port with nothing listening on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    started = time.perf_counter()
    reason = sources.hub_unavailable_reason()
    assert reason is not None and f"127.0.0.1:{port}" in reason
    assert time.perf_counter() - started < sources.HUB_CHECK_TIMEOUT_S + 1
