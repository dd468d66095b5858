"""The ensemble workflow (reasoners, tool agents, a judge) over HTTP against a scripted server on
127.0.0.1, its programs in the sandbox; and the training rewards read from its transcript."""

from __future__ import annotations

import asyncio
from typing import Any

from mas_testkit import close, models_for

from harness.testing.scripted_server import Reply, ScriptedServer
from mas.base import Task, get_mas
from train_backend.mas.rewards import ensemble_judge_rewards

TASK = Task(prompt="What is 6 * 7? Put the answer in \\boxed{}.", kind="math")


def _run(script: Any, config: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    with ScriptedServer(script) as server:
        models = models_for(server.base_url, reasoner="r", tool="t", judge="j")

        async def go() -> Any:
            try:
                return await get_mas("ensemble_judge")(TASK, models, config)
            finally:
                await close(models)

        transcript = asyncio.run(go())
        return transcript, [seen.body for seen in server.seen]


def test_the_judge_sees_every_solution_cut_and_every_program_output() -> None:
    long_solution = "x" * 2500 + " \\boxed{41}"

    def script(request: dict[str, Any]) -> Reply:
        content = request["messages"][-1]["content"]
        if request["model"] == "r":
            return Reply(text="6*7 = \\boxed{42}" if "Solver 1 of 2" in content else long_solution)
        if request["model"] == "t":
            if "Tool agent 1 of 2" in content:
                return Reply(text="```python\nprint(6 * 7)\n```")
            return Reply(text="```python\nwhile True: pass\n```")
        assert "Solution 1:\n6*7 = \\boxed{42}" in content
        assert "x" * 2000 in content and "x" * 2001 not in content  # cut at 2,000 characters
        assert "Program 1 (ok) printed:\n42" in content
        assert "Program 2 (timeout) printed:\n(nothing)" in content
        return Reply(text="The first is right: \\boxed{42}")

    transcript, asked = _run(script, {"reasoners": 2, "tools": 2, "code_seconds": 1})
    assert [body["model"] for body in asked] == ["r", "r", "t", "t", "j"]
    assert transcript.extra["reasoner_answers"] == ["42", "41"]  # its own, from the whole reply
    assert [p["execution"] for p in transcript.extra["programs"]] == ["ok", "timeout"]
    rewards = ensemble_judge_rewards(transcript, "42", TASK)
    assert rewards == {
        ("reasoner", 0): 1.0,
        ("reasoner", 1): 0.0,
        ("tool", 0): 1.0,
        ("tool", 1): -1.0,
        ("judge", 0): 1.0,
    }


def test_a_wrong_judge_and_a_wrong_program_score_zero() -> None:
    def script(request: dict[str, Any]) -> Reply:
        if request["model"] == "t":
            return Reply(text="```python\nprint(41)\n```")
        return Reply(text="\\boxed{41}")

    transcript, _ = _run(script, {"reasoners": 1, "tools": 1})
    rewards = ensemble_judge_rewards(transcript, "42", TASK)
    assert rewards == {("reasoner", 0): 0.0, ("tool", 0): 0.0, ("judge", 0): 0.0}
