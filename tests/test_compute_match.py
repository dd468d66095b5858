"""Compute-matched baselines: `mars eval --match-compute MAS_RUN` runs the single agent with a
majority vote over k samples per question at the MAS run's tokens per question, and `mars
report` shows tokens and calls per question (and per role) and what the baseline matched."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, run_mars
from mas_testkit import role_of, words
from typer.testing import CliRunner, Result

from core.errors import MarsError
from core.runstore import RunDir
from core.stats import majority_correct
from harness.compute_match import choose_k
from harness.evaluation import question_attempts
from harness.report import build_report, to_csv, to_markdown
from harness.testing.scripted_server import Reply, ScriptedServer, SeenRequest
from mas.single import SOLVER_SYSTEM

LIMIT = 3
DEBATER_TEXT = " ".join(["because"] * 150) + " so the answer is \\boxed{18}."
VERDICT = '{"preferred_side": "affirmative", "answer": "18", "reason": "checked"}'


def mars(*args: str) -> Result:
    from mars.main import app, register_commands

    register_commands()
    return CliRunner().invoke(app, list(args))


def script(request: dict[str, Any]) -> Reply:
    """MAD's debaters answer at length and the moderator decides in round 1 (3 calls a
    question); the single agent answers in 41 words, wrong on one request seed in three, so a
    question's k samples disagree and the vote is not the mean."""
    if request["messages"][0]["content"] == SOLVER_SYSTEM:
        answer = "-1" if request.get("seed", 0) % 3 == 0 else "18"
        return Reply(text=" ".join(["step"] * 40) + f" \\boxed{{{answer}}}")
    role = role_of(request)
    return Reply(text=VERDICT if role == "moderator" else DEBATER_TEXT)


def billed_tokens(seen: list[SeenRequest]) -> int:
    """What the scripted server counted (its usage field counts words)."""
    return sum(words(str(m["content"])) for r in seen for m in r.body["messages"]) + sum(
        words(r.reply.text) for r in seen
    )


def eval_args(server: ScriptedServer, run_dir: Path, *extra: str) -> list[str]:
    return [
        "eval", "--suite", "gsm8k", "--limit", str(LIMIT), "--base-url", server.base_url,
        "--model", "scripted", "--data-dir", str(DATA_DIR), "--run-dir", str(run_dir),
        "--quiet", *extra,
    ]  # fmt: skip


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")
def test_the_matched_baseline_spends_the_mas_tokens_per_question(tmp_path: Path) -> None:
    mad, base = tmp_path / "mad", tmp_path / "base"
    with ScriptedServer(script) as server:
        done = run_mars(*eval_args(server, mad, "--mas", "mad"))
        assert done.returncode == 0, done.stderr
        mad_seen = server.seen
        matched_args = eval_args(server, base, "--match-compute", str(mad), "--temperature", "0.7")
        matched = run_mars(*matched_args)
        assert matched.returncode == 0, matched.stderr
        base_seen = server.seen[len(mad_seen) :]
    mad_tokens = billed_tokens(mad_seen) / LIMIT  # the server's count, not ours
    sample_tokens = billed_tokens(base_seen) / len(base_seen)
    k = choose_k(mad_tokens, sample_tokens)
    assert k > 3 and len(base_seen) == k * LIMIT  # the first epoch, then k - 1 more

    match = json.loads((base / "summary.json").read_text())["compute_match"]
    figures = match["suites"]["gsm8k"]
    assert (match["run"], match["mas"], match["matched_on"]) == (str(mad), "mad", "tokens")
    assert figures["k"] == k and figures["mas_calls_per_question"] == 3
    assert figures["mas_tokens_per_question"] == pytest.approx(mad_tokens)
    assert figures["tokens_per_question"] == pytest.approx(billed_tokens(base_seen) / LIMIT)
    assert figures["calls_per_question"] == k
    assert 0.9 <= figures["ratio"] <= 1.1  # the target: within 10% of the MAS's tokens
    assert figures["ratio"] == pytest.approx(figures["tokens_per_question"] / mad_tokens)
    config = json.loads((base / "run.json").read_text())["config"]
    assert config["compute_match"]["suites"]["gsm8k"]["k"] == k and config["epochs"] == k
    assert f"compute match gsm8k: k={k}, maj@k" in matched.stdout

    # Asked again: k is kept and everything is recorded, so no server is needed.
    again = mars(*matched_args)
    assert again.exit_code == 0, again.output
    assert f"nothing to run: all {k * LIMIT} attempts are recorded" in again.stdout

    # The report: the baseline scored by its vote, compute beside it, the match named.
    report = build_report([mad, base])
    assert report["run_metrics"] == {"mad": "accuracy", "base": "maj@k"}
    attempts = question_attempts(RunDir.open(base).records())["gsm8k"]
    vote = sum(majority_correct(a) for a in attempts.values()) / LIMIT
    assert report["cells"]["base"]["gsm8k"]["value"] == pytest.approx(vote)
    assert vote != report["runs"]["base"]["suites"]["gsm8k"]["accuracy"]  # the vote, not the mean
    assert report["compute"]["base"]["gsm8k"]["calls"] == pytest.approx(k)
    assert report["compute"]["mad"]["gsm8k"]["tokens"] == pytest.approx(mad_tokens)
    markdown = to_markdown(report)
    assert "| suite | mad | extraction failed | errors | tokens/q | calls/q | base (maj@k) |" in (
        markdown
    )
    assert f"| base | gsm8k | mad (mad) | {k} |" in markdown
    assert "Paired difference (base maj@k - mad accuracy)" in markdown
    shown = mars("report", str(mad), str(base), "--save", str(tmp_path))
    assert shown.exit_code == 0, shown.output
    assert "compute-matched baselines" in shown.stdout


def _record(sample: int, epoch: int, correct: bool, agents: dict[str, tuple[int, int]]) -> dict:
    """An eval record whose agents used (prompt, completion) tokens in one call each."""
    return {
        "suite": "gsm8k",
        "sample_id": str(sample),
        "epoch": epoch,
        "gold": "1",
        "extracted": "1" if correct else "2",
        "correct": correct,
        "extraction_failed": False,
        "error": None,
        "latency_s": 1.0,
        "metrics": {
            "llm_calls": len(agents),
            "tokens_per_agent": {
                agent: {"calls": 1, "prompt_tokens": p, "completion_tokens": c}
                for agent, (p, c) in agents.items()
            },
        },
    }


def _write_run(path: Path, records: list[dict], config: dict[str, Any]) -> Path:
    run = RunDir.resolve(out=None, run_dir=path, kind="eval", slug="x")
    run.start(command=["mars", "eval"], config=config, model="m")
    run.append_many(records)
    run.finish()
    return path


def test_the_report_shows_compute_per_scored_answer_and_per_role(tmp_path: Path) -> None:
    debate = {"affirmative": (100, 50), "negative": (200, 50), "moderator": (300, 10)}
    records = [_record(q, e, q != 1, debate) for q in range(2) for e in range(2)]
    mad = _write_run(tmp_path / "mad", records, {"suites": ["gsm8k"], "mas": "mad"})

    accuracy = build_report([mad])
    assert accuracy["compute"]["mad"]["gsm8k"]["tokens"] == 710  # one attempt
    text = to_markdown(accuracy)
    assert "| 710 | 3.0 |" in text
    assert "| mad | gsm8k | moderator | 310 | 10 | 1.00 |" in text
    row = next(csv.DictReader(io.StringIO(to_csv(accuracy))))
    assert (row["tokens_per_question"], row["completion_tokens_per_question"]) == (
        "710.000000",
        "110.000000",
    )
    assert row["calls_per_question"] == "3.000000" and row["matches"] == ""
    # Under maj@k an answer is a question's vote: both of its attempts' compute.
    assert build_report([mad], "maj@k")["compute"]["mad"]["gsm8k"]["tokens"] == 1420


def test_a_matched_baseline_is_named_with_its_ratio_in_the_csv(tmp_path: Path) -> None:
    decision = {
        "run": str(tmp_path / "mad"),
        "mas": "mad",
        "model": "m",
        "suites": {
            "gsm8k": {
                "mas_tokens_per_question": 600.0,
                "mas_completion_tokens_per_question": 110.0,
                "mas_calls_per_question": 3.0,
                "sample_tokens": 150.0,
                "k": 4,
                "k_if_completion_matched": 2,
            }
        },
    }
    records = [_record(q, e, e != 3, {"solver": (100, 50)}) for q in range(2) for e in range(4)]
    config = {"suites": ["gsm8k"], "mas": "single", "compute_match": decision}
    base = _write_run(tmp_path / "base", records, config)
    report = build_report([base])
    assert report["cells"]["base"]["gsm8k"]["value"] == 1.0  # maj@k: 3 of 4 votes right
    row = next(csv.DictReader(io.StringIO(to_csv(report))))
    assert (row["metric"], row["matches"], row["matched_k"]) == ("maj@k", decision["run"], "4")
    assert row["matched_ratio"] == "1.000000" and row["tokens_per_question"] == "600.000000"


@pytest.mark.parametrize(
    ("target", "args", "message"),
    [
        ("arena", [], "is an 'arena' run; it needs a mars eval run"),
        ("missing", [], "is not a run directory (no run.json)"),
        ("eval", ["--suite", "aqua"], "ran the suites gsm8k, not aqua"),
        ("eval", ["--limit", "3"], "ran --limit none, not 3"),
        ("eval", ["--mas", "mad"], "--match-compute runs the single agent, not --mas mad"),
        ("eval", ["--epochs", "4"], "chooses the epochs (k) itself"),
    ],
)
def test_a_baseline_that_cannot_match_is_refused_in_one_line(
    target: str, args: list[str], message: str, tmp_path: Path
) -> None:
    path = tmp_path / target
    if target == "arena":
        RunDir.resolve(out=None, run_dir=path, kind="arena", slug="a").start(
            command=["mars", "arena"], config={}
        )
    elif target == "eval":
        _write_run(path, [_record(0, 0, True, {"solver": (1, 1)})], {"suites": ["gsm8k"]})
    if "--suite" not in args:
        args = ["--suite", "gsm8k", *args]
    result = mars("eval", *args, "--match-compute", str(path), "--out", str(tmp_path / "o"))
    assert isinstance(result.exception, MarsError), result.output
    assert message in str(result.exception) and "\n" not in str(result.exception)
    assert not (tmp_path / "o").exists()  # refused before any run directory


def test_k_is_the_closest_whole_number_of_samples_and_at_least_one() -> None:
    assert choose_k(1000, 300) == 3 and choose_k(1050, 300) == 4
    assert choose_k(100, 300) == 1 and choose_k(500, None) == 1 and choose_k(500, 0) == 1
