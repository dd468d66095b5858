"""The rule judge (`mars failures --rules`): each rule on a transcript built to show it (and on
one built not to), and the command end to end on a real eval run folder, resumable, refusing a
folder an LLM judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from core.errors import MarsError
from dashboard import synthetic
from harness.failures import FAILURES_FILE, FAILURES_SUMMARY_FILE, summarize_failures
from harness.failures.rules import RULES_JUDGE, message_answer, rule_modes, rule_verdict


def _message(agent: str, round_: int, text: str, finish: str = "stop") -> dict[str, Any]:
    return {
        "agent": agent,
        "role": "assistant",
        "round": round_,
        "text": text,
        "finish_reason": finish,
    }


def _record(messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    transcript = {
        "messages": messages,
        "final_answer": fields.pop("final_answer", "\\boxed{7}"),
        "rounds": fields.pop("rounds", 2),
        "ended_early": fields.pop("ended_early", False),
        "stop_reason": fields.pop("stop_reason", "max_rounds"),
    }
    return {"suite": "gsm8k", "sample_id": "1", "epoch": 0, "correct": False,
            "extraction_failed": False, "transcript": transcript, **fields}  # fmt: skip


def _debate(*rounds: tuple[str, str, str]) -> list[dict[str, Any]]:
    return [
        _message(agent, number, f"round {number}: \\boxed{{{answer}}}")
        for number, answers in enumerate(rounds, start=1)
        for agent, answer in zip(("a", "b", "c"), answers, strict=True)
    ]


@pytest.mark.parametrize(
    ("text", "answer"),
    [("x \\boxed{12} y \\boxed{ 13 }.", "13"), ("\\boxed 8 = 21}", "8 = 21"), ("no box 5", None)],
)
def test_the_answer_a_message_commits_to(text: str, answer: str | None) -> None:
    assert message_answer(text) == answer


def test_a_clean_disagreement_shows_no_structural_failure() -> None:
    assert rule_modes(_record(_debate(("1", "2", "3"), ("4", "5", "6")))) == {}


def test_a_wrong_consensus_is_incorrect_verification_and_early_end_is_premature() -> None:
    record = _record(_debate(("1", "2", "7"), ("7", "7", "7")), ended_early=True)
    modes = rule_modes(record)
    assert set(modes) == {"FM-3.1", "FM-3.3"} and "'7'" in modes["FM-3.3"]
    assert rule_modes({**record, "correct": True}) == {}  # a right consensus is no failure


def test_an_agent_ignoring_the_others_consensus() -> None:
    modes = rule_modes(_record(_debate(("1", "5", "5"), ("1", "5", "6"))))
    assert set(modes) == {"FM-2.5"} and modes["FM-2.5"].startswith("a kept '1'")


def test_structural_signs_each_with_its_evidence() -> None:
    messages = [
        _message("a", 1, "think \\boxed{3}"),
        _message("b", 1, "cut off at 12", finish="length"),
        _message("a", 2, "think \\boxed{3}"),  # word for word again
        _message("b", 2, "I do not know."),  # b answers elsewhere: no attempt here
        _message("b", 3, "\\boxed{4}"),
        _message("judge", 3, "{not json"),
    ]
    record = _record(
        messages, extraction_failed=True, final_answer="\\boxed{x}", stop_reason="judge_unreadable"
    )
    modes = rule_modes(record)
    assert set(modes) == {"FM-1.1", "FM-1.2", "FM-1.3", "FM-1.5", "FM-2.3"}
    assert modes["FM-1.2"] == "[judge, round 3] {not json"
    assert modes["FM-1.3"].startswith("[a, round 2]")
    assert modes["FM-1.5"].startswith("[b, round 1] cut off")
    assert modes["FM-2.3"] == "[b, round 2] I do not know."
    verdict = rule_verdict(record)
    assert verdict["parsed"] and verdict["judge_model"] == RULES_JUDGE
    assert verdict["categories"] == ["misalignment", "specification"]
    assert summarize_failures([verdict])["categories"]["specification"]["count"] == 1


def _cli(*args: str) -> Any:
    import mars.commands.failures  # noqa: F401  registers the command
    from mars.main import app, register_commands

    register_commands()
    return CliRunner().invoke(app, ["failures", *args], catch_exceptions=False)


def test_mars_failures_rules_judges_without_a_server_and_resumes(tmp_path: Path) -> None:
    run = tmp_path / "eval"
    synthetic.write_eval_run(run, [synthetic.eval_record(i, correct=i % 4 != 0) for i in range(12)])
    result = _cli(str(run), "--rules", "--quiet")
    assert result.exit_code == 0, result.output
    verdicts = [json.loads(line) for line in (run / FAILURES_FILE).read_text().splitlines()]
    assert sorted(v["sample_id"] for v in verdicts) == ["gsm8k-0", "gsm8k-4", "gsm8k-8"]
    assert all(v["parsed"] and v["judge_model"] == RULES_JUDGE for v in verdicts)
    summary = json.loads((run / FAILURES_SUMMARY_FILE).read_text())
    assert summary["n_judged"] == 3 and summary["judge"] == {"model": RULES_JUDGE}
    before = (run / FAILURES_FILE).read_text()
    assert _cli(str(run), "--rules", "--quiet").exit_code == 0
    assert (run / FAILURES_FILE).read_text() == before  # nothing judged twice

    # A folder judged by rules is not silently mixed with a model's verdicts.
    with pytest.raises(MarsError, match="--fresh"):
        _cli(str(run), "--judge-model", "some-judge", "--base-url", "http://127.0.0.1:9/v1")
