"""Numbers to trust: no score from no data (eval and arena, real CLI runs against a scripted server
answering 404 to everything), intervals clustered by question, maj@k and pass@k against hand
counts, and `mars report` on each metric with paired differences over questions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, run_mars
from typer.testing import CliRunner

from core.runstore import RUN_FILE, RunDir
from core.stats import Attempt, clustered_wilson_ci, majority_correct, pass_at_k, wilson_ci
from core.usage import add_usage
from dashboard import data, synthetic
from harness.evaluation import summarize
from harness.report import build_report, to_csv, to_markdown
from harness.report_metrics import parse_metric
from harness.testing.scripted_server import Reply, ScriptedServer
from harness.unscored import NO_SCORE_EXIT_CODE

NOT_FOUND = "The model `scriptd` does not exist"


def not_found(_request: dict[str, Any]) -> Reply:
    return Reply(status=404, text=NOT_FOUND)


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")
def test_an_eval_where_every_request_failed_has_no_score_and_exits_4(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with ScriptedServer(not_found) as server:
        result = run_mars(
            "eval", "--suite", "gsm8k,aqua", "--limit", "3", "--base-url", server.base_url,
            "--model", "scriptd", "--data-dir", str(DATA_DIR), "--run-dir", str(run_dir),
            "--quiet",
        )  # fmt: skip
    assert result.returncode == NO_SCORE_EXIT_CODE == 4
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 2 and "Traceback" not in result.stderr
    assert errors[0].startswith("error: aqua has no score: all 3 samples failed; first error:")
    assert errors[1].startswith("error: gsm8k has no score: all 3 samples failed; first error:")
    assert all("404" in line and NOT_FOUND in line for line in errors)
    assert "no score" in result.stdout and "0.0 [0.0, 0.0]" not in result.stdout
    assert result.stdout.strip().splitlines()[-1] == f"run dir: {run_dir}"
    summary = json.loads((run_dir / "summary.json").read_text())["suites"]["gsm8k"]
    assert summary["n"] == 0 and summary["errors"] == 3
    assert summary["accuracy"] is None and summary["ci95"] is None
    assert summary["extraction_failure_rate"] is None and NOT_FOUND in summary["first_error"]
    assert json.loads((run_dir / RUN_FILE).read_text())["status"] == "failed"

    # mars report and the dashboard say "no score" too, never 0.
    report = build_report([run_dir])
    assert report["cells"]["run"]["gsm8k"]["value"] is None
    assert "| gsm8k | no score err=3 |" in to_markdown(report)
    assert "run,gsm8k,accuracy,0,,,,3" in to_csv(report)
    (row,) = [
        r
        for r in data.accuracy_rows(
            data.eval_frame(RunDir.open(run_dir).records()), run="r", mas="single", model="m"
        )
        if r["suite"] == "gsm8k"
    ]
    assert row["accuracy"] is None and row["ci_low"] is None and row["errors"] == 3


def test_an_arena_where_every_request_failed_has_no_score_per_seat(tmp_path: Path) -> None:
    run_dir = tmp_path / "arena"
    with ScriptedServer(not_found) as server:
        result = run_mars(
            "arena", "--game", "tic_tac_toe", "--player", "llm", "--opponent", "random",
            "--episodes", "2", "--base-url", server.base_url, "--model", "scriptd",
            "--run-dir", str(run_dir), "--quiet",
        )  # fmt: skip
    assert result.returncode == 4, result.stderr
    errors = result.stderr.strip().splitlines()
    assert [line.split(":")[1].strip() for line in errors] == [
        "seat first has no score",
        "seat second has no score",
    ]
    assert all("all 2 episodes failed; first error:" in line and "404" in line for line in errors)
    assert "no score" in result.stdout
    seats = json.loads((run_dir / "summary.json").read_text())["seats"]
    for stats in seats.values():
        assert stats["n"] == 0 and stats["errors"] == 2
        assert stats["win"] is None and stats["win_ci"] is None
        assert stats["normalized_return"] is None and stats["mean_return"] is None
    assert json.loads((run_dir / RUN_FILE).read_text())["status"] == "failed"


# ------------------------------------------------------------------ hand-made runs

# (question, epoch) -> (extracted, correct); None extracted is an extraction failure.
HAND = {
    "A": [("18", True), ("5", False), ("5", False)],  # majority 5: wrong
    "B": [("7", False), ("18", True), ("18", True)],  # majority right
    "C": [("3", False), ("4", False), ("18", True)],  # three-way tie: 3 came first: wrong
    "D": [("18", True), ("9", False), (None, False)],  # tie right vs 9: right came first
    "E": [(None, False), (None, False), (None, False)],  # no vote: wrong
    "F": [(" 5 ", False), ("5", False), ("18", True)],  # " 5 " and "5" are one answer: wrong
}


def hand_records(plan: dict[str, list[tuple[str | None, bool]]]) -> list[dict[str, Any]]:
    return [
        {
            "suite": "gsm8k",
            "sample_id": qid,
            "epoch": epoch,
            "question": f"question {qid}",
            "gold": "18",
            "extracted": extracted,
            "correct": correct,
            "extraction_failed": extracted is None,
            "error": None,
            "final_answer": f"\\boxed{{{extracted}}}",
            "latency_s": 0.1,
        }
        for qid, attempts in plan.items()
        for epoch, (extracted, correct) in enumerate(attempts)
    ]


def write_run(path: Path, records: list[dict[str, Any]]) -> Path:
    run = RunDir.resolve(out=None, run_dir=path, kind="eval", slug="hand")
    run.start(command=["mars", "eval"], config={"suites": ["gsm8k"], "mas": "single"})
    run.append_many(records)
    run.write_summary(summarize(records))
    run.finish()
    return path


def test_maj_at_k_and_pass_at_k_match_hand_counts() -> None:
    majority = {
        qid: majority_correct([Attempt(e, x, c) for e, (x, c) in enumerate(attempts)])
        for qid, attempts in HAND.items()
    }
    assert majority == {"A": False, "B": True, "C": False, "D": True, "E": False, "F": False}
    suite = summarize(hand_records(HAND))["suites"]["gsm8k"]
    assert suite["epochs"] == 3 and suite["samples"] == 6 and suite["n"] == 18
    assert suite["maj_at_k"] == pytest.approx(2 / 6)
    assert suite["maj_at_k_ci95"] == pytest.approx(list(wilson_ci(2, 6)))
    # Correct per question: A1 B2 C1 D1 E0 F1 of 3. pass@1 = 6/18; pass@2 = 1 - C(3-c,2)/C(3,2):
    # c=1 -> 2/3, c=2 -> 1, c=0 -> 0, so (4 * 2/3 + 1) / 6 = 11/18; pass@3 = 5/6.
    assert suite["pass_at"] == pytest.approx({"1": 6 / 18, "2": 11 / 18, "3": 5 / 6})
    assert suite["pass_at_k"] == pytest.approx(5 / 6)
    assert suite["accuracy"] == pytest.approx(6 / 18)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    with pytest.raises(ValueError, match="pass@4"):
        pass_at_k(3, 1, 4)


def test_clustered_interval_is_wider_than_wilson_with_three_epochs(tmp_path: Path) -> None:
    # 10 questions x 3 epochs: 5 always right, 4 always wrong, 1 right once.
    plan = {f"q{i}": [("18", True)] * 3 for i in range(5)}
    plan |= {f"q{i}": [("1", False)] * 3 for i in range(5, 9)}
    plan["q9"] = [("18", True), ("1", False), ("1", False)]
    suite = summarize(hand_records(plan))["suites"]["gsm8k"]
    assert (suite["n"], suite["correct"], suite["ci_method"]) == (30, 16, "clustered")
    low, high = suite["ci95"]
    w_low, w_high = wilson_ci(16, 30)
    assert low < w_low and high > w_high  # wider on both sides
    assert 10 <= suite["effective_n"] < 30
    # The effective size: p(1-p) over the CR1 variance of the ratio, within [questions, attempts].
    p = 16 / 30
    residuals = 5 * (3 - 3 * p) ** 2 + 4 * (3 * p) ** 2 + (1 - 3 * p) ** 2
    variance = 10 / 9 * residuals / 30**2
    assert suite["effective_n"] == pytest.approx(max(10, p * (1 - p) / variance), abs=1e-3)
    assert (low, high) == pytest.approx(wilson_ci(p * suite["effective_n"], suite["effective_n"]))
    # One attempt per question: exactly Wilson; all right: n_eff is the number of questions.
    one = clustered_wilson_ci([1, 0, 1], [1, 1, 1])
    assert one is not None and (one.low, one.high) == wilson_ci(2, 3) and not one.clustered
    all_right = clustered_wilson_ci([3, 3], [3, 3])
    assert all_right is not None and all_right.effective_n == 2
    assert clustered_wilson_ci([], []) is None


def test_report_compares_runs_on_each_metric_paired_over_questions(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", hand_records(HAND))
    solved = {qid: [("18", True)] * 3 for qid in HAND}
    trained = write_run(tmp_path / "trained", hand_records(solved))

    maj = build_report([base, trained], "maj@k")
    assert maj["cells"]["base"]["gsm8k"]["value"] == pytest.approx(2 / 6)
    paired = maj["paired"]["gsm8k"]
    assert paired["n"] == 6 and paired["diff"] == pytest.approx(4 / 6)
    assert paired["ci95"][0] <= 4 / 6 <= paired["ci95"][1]

    two = build_report([base, trained], "pass@2")
    assert two["cells"]["base"]["gsm8k"]["value"] == pytest.approx(11 / 18)
    assert two["paired"]["gsm8k"]["diff"] == pytest.approx(7 / 18)
    assert build_report([base, trained], "pass@k")["k"] == {"gsm8k": 3}

    accuracy = build_report([base, trained], "accuracy")
    assert accuracy["cells"]["base"]["gsm8k"]["n"] == 18  # graded attempts
    assert accuracy["paired"]["gsm8k"]["n"] == 6  # paired over questions
    assert accuracy["paired"]["gsm8k"]["diff"] == pytest.approx(1 - 6 / 18)

    too_many = build_report([base], "pass@4")["cells"]["base"]["gsm8k"]
    assert too_many["value"] is None and too_many["left_out"] == 6

    from mars.main import app, register_commands

    register_commands()
    args = ["report", str(base), str(trained), "--metric", "maj@k", "--save", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "report.md").read_text()
    assert "Paired difference (trained - base) in maj@k" in markdown
    assert "| gsm8k | 6 | +66.7 |" in markdown
    for bad in ("maj@0", "pass@x", "median"):
        with pytest.raises(Exception, match="--metric"):
            parse_metric(bad)


def test_usage_adds_up_over_attempts() -> None:
    first = {"totals": {"calls": 2, "latency_s": 0.5}, "by_role": {"solver": {"calls": 2}}}
    second = {"totals": {"calls": 1, "latency_s": 0.25}, "by_role": {"critic": {"calls": 1}}}
    assert add_usage(first, second) == {
        "totals": {"calls": 3, "latency_s": 0.75},
        "by_role": {"solver": {"calls": 2}, "critic": {"calls": 1}},
    }


def test_the_dashboard_counts_run_directories_it_could_not_read(tmp_path: Path) -> None:
    synthetic.write_eval_run(tmp_path / "good", [synthetic.eval_record(0, correct=True)])
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / RUN_FILE).write_text('{"kind": "eval", "attempts": "many"')
    (tmp_path / "nested" / "bad").mkdir(parents=True)
    (tmp_path / "nested" / "bad" / RUN_FILE).write_text("[]")
    scan = data.scan_runs(tmp_path)
    assert [e.name for e in scan.entries] == ["good"]
    assert [name for name, _ in scan.unreadable] == ["broken", "nested/bad"]
    assert all("cannot read" in why and "\n" not in why for _, why in scan.unreadable)


def test_the_dashboard_shows_no_score_and_the_unreadable_count(tmp_path: Path) -> None:
    from dashboard_apptest import page_opener, row_where, table_with, texts

    failed = [synthetic.eval_record(i, correct=False, error="EndpointError: 404") for i in range(3)]
    synthetic.write_eval_run(tmp_path / "eval-404", failed)
    synthetic.write_arena_run(
        tmp_path / "arena-404",
        [synthetic.arena_record(0, "first")],
        summary={
            "game": "tic_tac_toe",
            "player": "llm",
            "opponent": "random",
            # An older summary wrote 0 for a seat without a graded episode.
            "seats": {"first": {"n": 0, "win": 0.0, "draw": 0.0, "loss": 0.0, "errors": 4}},
        },
    )
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / RUN_FILE).write_text("{not json")
    with page_opener(tmp_path) as open_page:
        test = open_page("Runs")
    accuracy = table_with(test, "suite", "accuracy %", "95% CI")
    row = row_where(accuracy, run="eval-404")
    assert (row["n"], row["errors"], row["accuracy %"], row["95% CI"]) == (0, 3, "no score", "-")
    seats = table_with(test, "seat", "win %")
    assert row_where(seats, seat="first")["win %"] == "no score"
    warnings = texts(test.sidebar.warning)
    assert "1 run directory could not be read" in warnings
