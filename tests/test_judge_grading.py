"""`--grader judge[:ROLE]`: an LLM judge's scripted verdicts become the score, the rule-based
grade stays beside it, an unreadable verdict is that sample's error, and `mars report` shows how
often the two agree (scripted server on 127.0.0.1, the real `mars` CLI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, run_mars

from core.errors import MarsError
from harness.benchmarks import get_suite
from harness.benchmarks.judge import JUDGE_SYSTEM, agreement, parse_answer_verdict
from harness.graders import GradingPlan, parse_grader
from harness.testing.scripted_server import Reply, ScriptedServer

pytestmark = pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("Correct", True),
        ("[Correct]", True),
        ("**Incorrect**.", False),
        ("Verdict: incorrect", False),
        ("Judgement:\n[Correct]", True),
        ("Correct or Incorrect", None),
        ("The response is not correct", None),
        ("", None),
    ],
)
def test_the_verdict_is_read_strictly(reply: str, verdict: bool | None) -> None:
    assert parse_answer_verdict(reply) is verdict


def test_grader_option_forms() -> None:
    assert parse_grader("rules") == ("rules", None)
    assert parse_grader("judge") == ("judge", "grader")
    assert parse_grader("judge:referee") == ("judge", "referee")
    for bad in ("judge:", "llm", "rules:x"):
        with pytest.raises(MarsError):
            parse_grader(bad)
    plan = GradingPlan.from_options("judge", 0.5, 2048)
    assert plan.config() == {
        "grader": "judge:grader",
        "judge": {"temperature": 0.5, "top_p": 1.0, "max_tokens": 2048},
    }
    assert GradingPlan.from_options("rules", 0.5, 2048).config() == {}
    assert plan.extra_sampling(["grader"]) == []  # its own model: no shared sampling
    assert plan.extra_sampling([])[0].temperature == 0.5


def test_judge_grading_on_scripted_verdicts_and_the_agreement_report(tmp_path: Path) -> None:
    samples = get_suite("gsm8k").load(data_dir=DATA_DIR, limit=5).samples
    # (the solver's answer, the judge's reply) per sample
    plan = [
        (samples[0].gold, "Correct"),  # both right
        (samples[1].gold, "[Incorrect]"),  # the rules say right, the judge wrong
        ("-12345", "**Correct**"),  # the judge says right, the rules wrong
        ("-12345", "Incorrect"),  # both wrong
        (samples[4].gold, "I would say it is right"),  # unreadable: a grading error
    ]
    by_question = {s.question[:80]: script for s, script in zip(samples, plan, strict=True)}

    def script(body: dict[str, Any]) -> Reply:
        text = body["messages"][-1]["content"]
        answer, verdict = next(v for q, v in by_question.items() if q in text)
        if body["messages"][0]["content"] == JUDGE_SYSTEM:
            assert f"\\boxed{{{answer}}}" in text  # the judge reads the solver's response
            return Reply(text=verdict)
        return Reply(text=f"Let me see. \\boxed{{{answer}}}")

    run_dir = tmp_path / "run"
    with ScriptedServer(script) as server:
        result = run_mars(
            "eval", "--suite", "gsm8k", "--limit", "5", "--base-url", server.base_url,
            "--model", "scripted", "--grader", "judge", "--judge-max-tokens", "300",
            "--data-dir", str(DATA_DIR), "--run-dir", str(run_dir), "--quiet", timeout=120,
        )  # fmt: skip
        judge_requests = [
            r.body for r in server.seen if r.body["messages"][0]["content"] == JUDGE_SYSTEM
        ]
    assert result.returncode == 0, result.stderr
    assert len(judge_requests) == 5
    assert {(r["temperature"], r["max_tokens"]) for r in judge_requests} == {(0.5, 300)}

    records = {r["sample_id"]: r for r in map(json.loads, (run_dir / "records.jsonl").open())}
    ordered = [records[s.id] for s in samples]
    assert [r["correct"] for r in ordered[:4]] == [True, False, True, False]  # the judge's
    assert [r["grades"]["rules"]["correct"] for r in ordered[:4]] == [True, True, False, False]
    assert ordered[4]["error"].startswith("GradingError: the judge answered neither Correct")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["config"]["grader"] == "judge:grader"
    usage = json.loads((run_dir / "usage.json").read_text())
    assert usage["by_role"]["grader"]["calls"] == 5  # the judge's calls, apart from the solver's
    summary = json.loads((run_dir / "summary.json").read_text())["suites"]["gsm8k"]
    assert (summary["n"], summary["correct"], summary["errors"]) == (4, 2, 1)

    table = agreement(list(records.values()))
    assert table["gsm8k"] == {
        "n": 4, "agree": 2, "rate": 0.5,
        "both_correct": 1, "judge_only": 1, "rules_only": 1, "both_wrong": 1,
    }  # fmt: skip
    report = run_mars("report", str(run_dir), timeout=120)
    assert report.returncode == 0, report.stderr
    assert "judge vs rule-based grading" in report.stdout
    markdown = (run_dir / "report.md").read_text()
    assert "| gsm8k | 4 | 2 | 50.0% | 1 | 1 | 1 | 1 |" in markdown


def test_a_bad_grader_or_role_is_one_line(tmp_path: Path) -> None:
    result = run_mars("eval", "--suite", "gsm8k", "--grader", "llm", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --grader must be 'rules', 'judge' or 'judge:ROLE', got 'llm'"
    ]
    result = run_mars("eval", "--suite", "gsm8k", "--role", "judge=https://host/v1", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --role judge=https://host/v1: no model name; write judge=MODEL@https://host/v1"
    ]


def test_role_keeps_the_url_whole() -> None:
    from mars.api.inputs import parse_role_mapping

    assert parse_role_mapping(["judge=Qwen3-4B@https://host/v1"]) == {
        "judge": ("https://host/v1", "Qwen3-4B")
    }
    assert parse_role_mapping(["judge=org/m@rev@http://user:pw@host:8000/v1/"]) == {
        "judge": ("http://user:pw@host:8000/v1", "org/m@rev")
    }
    assert parse_role_mapping(["judge=http://host:8000/v1/Qwen/Qwen3-4B"]) == {
        "judge": ("http://host:8000/v1", "Qwen/Qwen3-4B")  # the older form, unambiguous
    }
    for bad, why in [
        ("judge=http://host:8000/Qwen3", "cannot tell the base URL from the model name"),
        ("judge=Qwen3", "no server URL"),
        ("judge=@http://host/v1", "no model name before '@'"),
        ("judge", "expects ROLE=MODEL@URL"),
    ]:
        with pytest.raises(MarsError, match=why):
            parse_role_mapping([bad])
