"""The reasoner + tool workflow as evaluation runs it: one endpoint per role over HTTP (a scripted
server on 127.0.0.1), the tool agent's programs run in the sandbox."""

from __future__ import annotations

import asyncio
from typing import Any

from mas_testkit import close, models_for

from harness.testing.scripted_server import Reply, ScriptedServer
from mas.base import Task, get_mas

TASK = Task(prompt="What is 6 * 7? Put the answer in \\boxed{}.", kind="math")


def _run(script: Any, config: dict[str, Any]) -> tuple[Any, list[str]]:
    with ScriptedServer(script) as server:
        models = models_for(server.base_url, tool="coder", reasoner="thinker")

        async def go() -> Any:
            try:
                return await get_mas("reasoner_tool")(TASK, models, config)
            finally:
                await close(models)

        transcript = asyncio.run(go())
        return transcript, [seen.body["model"] for seen in server.seen]


def test_each_role_asks_its_own_model_and_agreement_ends_the_rounds() -> None:
    def script(request: dict[str, Any]) -> Reply:
        if request["model"] == "coder":
            return Reply(text="Here:\n```python\nx = 6 * 7\nprint('thinking')\nprint(x)\n```")
        assert "Printed (ok):\nthinking\n42" in request["messages"][-1]["content"]
        return Reply(text="The program is right. \\boxed{42}")

    transcript, asked = _run(script, {"rounds": 3, "code_seconds": 5})
    assert asked == ["coder", "thinker"]
    (only,) = transcript.extra["rounds"]
    assert only["execution"] == "ok" and only["tool_answer"] == "42"
    assert only["reasoner_answer"] == "42" and transcript.stop_reason == "agreed"
    assert [m.agent for m in transcript.messages] == ["tool", "reasoner"]


def test_a_reply_without_code_or_a_crash_is_recorded_and_rounds_go_to_the_limit() -> None:
    replies = iter(["no program here", "```python\nraise ValueError('x')\n```"])
    tool_prompts: list[str] = []

    def script(request: dict[str, Any]) -> Reply:
        if request["model"] == "coder":
            tool_prompts.append(request["messages"][-1]["content"])
            return Reply(text=next(replies))
        return Reply(text="\\boxed{41}")

    transcript, asked = _run(script, {"rounds": 2, "code_seconds": 5})
    assert asked == ["coder", "thinker", "coder", "thinker"]
    assert [r["execution"] for r in transcript.extra["rounds"]] == ["no_code", "error"]
    assert transcript.stop_reason == "round_limit" and transcript.rounds == 2
    # The second round's tool prompt shows how the first program ended and what was answered.
    assert "(no_code)" not in tool_prompts[0]
    assert "printed: (nothing) (no_code). The reasoner answered: 41" in tool_prompts[1]
