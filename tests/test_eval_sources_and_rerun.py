"""What a newcomer sees of an eval: each suite's data source, the extraction-failure and error
rates beside accuracy, a finished run asked again without a model server, and `mars report`
going on past directories that hold no records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import DATA_DIR, run_mars
from typer.testing import CliRunner, Result

from dashboard import synthetic
from harness.report import NothingToReport
from harness.testing.scripted_server import Reply, ScriptedServer


def mars(*args: str) -> Result:
    from mars.main import app, register_commands

    register_commands()
    return CliRunner().invoke(app, list(args))


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")
def test_a_finished_eval_asked_again_starts_no_server_and_names_its_sources(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    with ScriptedServer(lambda request: Reply(text="I would rather not say.")) as server:
        args = [
            "eval", "--suite", "gsm8k", "--limit", "2", "--base-url", server.base_url,
            "--model", "scripted", "--run-dir", str(run_dir), "--quiet",
        ]  # fmt: skip
        first = run_mars(*args)
    assert first.returncode == 0, first.stderr
    root = Path(os.environ["MARS_DATA_DIR"])  # conftest's default: the shared test sets
    origin = f"local:{root / 'gsm8k' / 'test.jsonl'} (root: $MARS_DATA_DIR)"
    assert f"gsm8k: 2 samples from {origin}" in first.stdout.splitlines()
    # Every answer failed extraction: the table says so beside the accuracy.
    (row,) = [line for line in first.stdout.splitlines() if line.startswith("│ gsm8k")]
    assert [cell.strip() for cell in row.strip("│").split("│")][2:] == ["100.0%", "0.0%"]
    assert f"gsm8k: {origin}" in first.stdout.splitlines()
    summary = json.loads((run_dir / "summary.json").read_text())["suites"]["gsm8k"]
    assert summary["source"] == origin and summary["extraction_failure_rate"] == 1.0
    run_json = (run_dir / "run.json").read_text()

    # The server is gone: a rerun that opened an endpoint would fail to reach it.
    again = mars(*args)
    assert again.exit_code == 0, again.output
    assert f"nothing to run: all 2 attempts are recorded in {run_dir}" in again.stdout
    assert again.stdout.splitlines()[-1] == f"run dir: {run_dir}"
    assert (run_dir / "run.json").read_text() == run_json  # no attempt, same status


def test_report_goes_on_past_directories_without_records(tmp_path: Path) -> None:
    records = [
        synthetic.eval_record(i, correct=False, extraction_failed=i < 3) for i in range(4)
    ] + [synthetic.eval_record(4, error="EndpointError: boom")]
    good = synthetic.write_eval_run(tmp_path / "eval-good", records).path
    failed = tmp_path / "eval-failed"  # a server that did not start leaves its log only
    failed.mkdir()
    (failed / "server-transformers-8123.log").write_text("loading\nOSError: out of memory\n\n")
    empty = synthetic.write_eval_run(tmp_path / "eval-empty", []).path

    result = mars("report", str(failed), str(good), str(empty))
    assert result.exit_code == 0, result.output
    assert [line for line in result.stdout.splitlines() if line.startswith("not reported")] == [
        f"not reported: {failed}: failed before recording anything (no run.json, only "
        "server-transformers-8123.log: the model server did not start?); the log ends: "
        "OSError: out of memory",
        f"not reported: {empty}: empty: no records (status completed)",
    ]
    markdown = (good / "report.md").read_text()  # the last run that was reported
    assert "| suite | eval-good | extraction failed | errors |" in markdown
    assert "n=4 err=1 | 75.0% | 20.0% |" in markdown  # 3 of 4 graded; 1 of 5 attempts
    assert f"- {failed}: failed before recording anything" in markdown
    row = (good / "report.csv").read_text().splitlines()[1].split(",")
    assert row[7:10] == ["1", "0.750000", "0.200000"]  # errors, extraction failed, error rate

    # Nothing to report: one line naming each; 4 (no score) for failed runs, 2 for wrong paths.
    nothing = mars("report", str(failed), str(empty))
    assert isinstance(nothing.exception, NothingToReport) and nothing.exception.exit_code == 4
    assert str(nothing.exception).startswith(f"nothing to report: {failed}: failed before")
    assert f"; {empty}: empty: no records" in str(nothing.exception)
    wrong = mars("report", str(tmp_path / "typo"))
    assert isinstance(wrong.exception, NothingToReport) and wrong.exception.exit_code == 2
    assert str(wrong.exception) == f"nothing to report: {tmp_path / 'typo'}: no such directory"
