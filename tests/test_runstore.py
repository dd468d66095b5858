"""The run directory: naming, appends, malformed lines, resume compaction; and the statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import MarsError
from core.runstore import RunDir, list_runs
from core.stats import bootstrap_mean_ci, paired_bootstrap_diff, pass_at_k, wilson_ci


def _key(record: dict) -> tuple:
    return (record["suite"], record["sample_id"], record["epoch"])


def test_new_run_directories_are_named_by_kind_time_and_slug(tmp_path: Path) -> None:
    first = RunDir.resolve(out=tmp_path, run_dir=None, kind="eval", slug="single gsm8k/math")
    second = RunDir.resolve(out=tmp_path, run_dir=None, kind="eval", slug="single gsm8k/math")
    assert first.path != second.path
    assert first.path.parent == tmp_path
    assert first.path.name.startswith("eval-") and first.path.name.endswith("single-gsm8k-math")


def test_start_finish_and_secrets_stay_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    run = RunDir.resolve(out=None, run_dir=tmp_path / "r", kind="eval", slug="x")
    run.start(
        command=["mars", "eval"],
        config={"a": 1},
        endpoint={"base_url": "http://h/v1", "api_key_env": "OPENAI_API_KEY"},
    )
    info = run.info()
    assert info.status == "running" and info.schema_version == 1
    assert "python" in info.versions and "openai" in info.versions
    run.finish("completed")
    assert run.info().status == "completed" and run.info().ended_at
    assert "sk-very-secret" not in (tmp_path / "r" / "run.json").read_text()
    run.start(command=["mars", "eval"], config={"a": 1})
    assert run.info().attempts == 2


def test_malformed_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    run = RunDir.resolve(out=None, run_dir=tmp_path / "r", kind="eval", slug="x")
    run.append({"suite": "s", "sample_id": "1", "epoch": 0})
    with run.records_path.open("a") as handle:
        handle.write("{not json\n[1, 2]\n\n")
    run.append({"suite": "s", "sample_id": "2", "epoch": 0})
    with run.records_path.open("a") as handle:
        handle.write('{"suite": "s", "sample_id": "3", "ep')  # a write cut by SIGKILL
    records = run.records()
    assert [r["sample_id"] for r in records] == ["1", "2"]
    assert run.malformed_lines == 3


def test_prepare_resume_keeps_one_good_record_per_key(tmp_path: Path) -> None:
    run = RunDir.resolve(out=None, run_dir=tmp_path / "r", kind="eval", slug="x")
    run.append({"suite": "s", "sample_id": "1", "epoch": 0, "error": None, "v": "first"})
    run.append({"suite": "s", "sample_id": "1", "epoch": 0, "error": None, "v": "duplicate"})
    run.append({"suite": "s", "sample_id": "2", "epoch": 0, "error": "HTTP 500"})
    run.append({"suite": "s", "sample_id": "3", "epoch": 1, "error": None})
    with run.records_path.open("a") as handle:
        handle.write('{"suite": "s", "sample')
    done = run.prepare_resume(_key)
    assert done == {("s", "1", 0), ("s", "3", 1)}
    lines = run.records_path.read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["v"] == "first"


def test_resume_refuses_a_run_of_another_kind(tmp_path: Path) -> None:
    run = RunDir.resolve(out=None, run_dir=tmp_path / "r", kind="arena", slug="x")
    run.start(command=[], config={})
    with pytest.raises(MarsError, match="holds an 'arena' run"):
        RunDir.resolve(out=None, run_dir=tmp_path / "r", kind="eval", slug="x")
    with pytest.raises(MarsError, match="not a run directory"):
        RunDir.open(tmp_path)
    assert [r.path for r in list_runs(tmp_path)] == [tmp_path / "r"]


def test_wilson_interval_matches_known_values() -> None:
    lo, hi = wilson_ci(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    assert wilson_ci(0, 0) == (0.0, 0.0)
    lo, hi = wilson_ci(0, 20)
    assert lo == 0.0 and 0.15 < hi < 0.17


def test_bootstrap_intervals() -> None:
    lo, hi = bootstrap_mean_ci([1.0] * 50 + [0.0] * 50, seed=1)
    assert lo < 0.5 < hi and hi - lo < 0.3
    diff, lo, hi = paired_bootstrap_diff([0, 0, 0, 0, 1] * 20, [1, 1, 1, 0, 1] * 20)
    assert diff == pytest.approx(0.6) and lo > 0.4 and hi < 0.8


def test_pass_at_k() -> None:
    assert pass_at_k(2, 1, 2) == 1.0
    assert pass_at_k(2, 0, 2) == 0.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)


def test_appends_are_on_disk_at_once_and_survive_resume_and_finish(tmp_path: Path) -> None:
    run = RunDir.resolve(out=tmp_path, run_dir=None, kind="eval", slug="x")
    run.start(command=["x"], config={})
    run.append({"suite": "s", "sample_id": "1", "epoch": 0})
    # Flushed once written: another reader sees it while the handle stays open.
    assert json.loads(run.records_path.read_text())["sample_id"] == "1"
    run.prepare_resume(_key)  # replaces records.jsonl with a new file
    run.append({"suite": "s", "sample_id": "2", "epoch": 0})
    assert [r["sample_id"] for r in run.records()] == ["1", "2"]
    run.append_many([{"suite": "s", "sample_id": "3", "epoch": 0}])
    run.finish()
    run.append({"suite": "s", "sample_id": "4", "epoch": 0})  # reopened after finish
    assert [r["sample_id"] for r in run.records()] == ["1", "2", "3", "4"]
    run.close()


def test_a_records_file_removed_or_rotated_mid_run_is_recreated_not_written_blind(
    tmp_path: Path,
) -> None:
    run = RunDir.resolve(out=tmp_path, run_dir=None, kind="eval", slug="x")
    run.start(command=["x"], config={})
    run.append({"suite": "s", "sample_id": "1", "epoch": 0})
    rotated = run.records_path.with_name("records.jsonl.1")
    run.records_path.rename(rotated)  # log rotation: the open handle now points at records.1
    run.append({"suite": "s", "sample_id": "2", "epoch": 0})
    assert [r["sample_id"] for r in run.records()] == ["2"]
    assert [json.loads(x)["sample_id"] for x in rotated.read_text().splitlines()] == ["1"]
    run.records_path.unlink()  # removed outright
    run.append_many([{"suite": "s", "sample_id": "3", "epoch": 0}])
    assert [r["sample_id"] for r in run.records()] == ["3"]
    run.close()


def test_a_run_status_is_written_and_compared_as_its_plain_string(tmp_path: Path) -> None:
    from core.runstore import FINISHED_STATUSES, RunStatus

    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="eval", slug="x")
    run.start(command=["mars"], config={})
    assert json.loads(run.info_path.read_text())["status"] == "running"
    run.finish(RunStatus.after(2))
    stored = json.loads(run.info_path.read_text())["status"]
    assert stored == "completed_with_errors" == RunStatus.COMPLETED_WITH_ERRORS
    assert stored in FINISHED_STATUSES and "running" not in FINISHED_STATUSES
    assert f"{RunStatus.after(0)}" == "completed" and str(RunStatus.DRY_RUN) == "dry_run"
