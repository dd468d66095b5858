"""`--mas-option protocol=maslab`: MASLab's MAD, LLM-Debate and "AutoGen" protocols make exactly
MASLab's calls, in its order, with its information in each prompt (scripted server on 127.0.0.1)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from mas_testkit import close, models_for

from core.errors import MarsError
from harness.testing.scripted_server import Reply, ScriptedServer
from mas.base import Task, get_mas

TASK = Task(prompt="What is 6 x 7? Put the answer in \\boxed{}.", suite="gsm8k", kind="math")


def _mad_agent(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"]
    last = body["messages"][-1]["content"]
    if system.startswith("You are a debater"):
        first_user = body["messages"][1]["content"]
        return "negative" if "You disagree with my answer" in first_user else "affirmative"
    if last.startswith("The affirmative side argued:"):
        return "judge_candidates"
    if last.startswith("So: "):
        return "judge_decision"
    assert "round of the debate has now ended" in last
    return "moderator"


def _verdict(answer: str, preference: str = "No") -> str:
    return json.dumps(
        {
            "Whether there is a preference": preference,
            "Supported Side": "Affirmative",
            "Reason": "checked",
            "debate_answer": answer,
        }
    )


async def _run(system: str, script: Callable[[dict[str, Any]], Reply], **config: Any) -> Any:
    with ScriptedServer(script) as server:
        models = models_for(server.base_url)
        try:
            transcript = await get_mas(system)(TASK, models, {"protocol": "maslab", **config})
        finally:
            await close(models)
        return transcript, [request.body for request in server.seen]


@pytest.mark.parametrize(
    ("decisive_round", "calls", "stop"),
    [(1, 3, "moderator_answered"), (2, 6, "moderator_answered"), (3, 9, "moderator_answered")],
)
async def test_mad_stops_at_the_first_verdict_with_an_answer(
    decisive_round: int, calls: int, stop: str
) -> None:
    moderator_calls = 0

    def script(body: dict[str, Any]) -> Reply:
        nonlocal moderator_calls
        agent = _mad_agent(body)
        if agent != "moderator":
            return Reply(text=f"{agent} says \\boxed{{42}}")
        moderator_calls += 1
        if moderator_calls < decisive_round:  # a preference without an answer does not stop it
            return Reply(text=_verdict("", preference="Yes"))
        return Reply(text="```json\n" + _verdict("42") + "\n```")

    transcript, bodies = await _run("mad", script)
    assert len(bodies) == transcript.llm_calls == calls
    assert [m.agent for m in transcript.messages[:3]] == ["affirmative", "negative", "moderator"]
    assert transcript.stop_reason == stop and transcript.rounds == decisive_round
    # The bare debate_answer "42" holds no answer the suite reads: it is graded boxed.
    assert transcript.final_answer == "checked\n\nFinal answer: \\boxed{42}"
    assert bodies[0]["messages"][1]["content"] == TASK.prompt  # the topic, unchanged
    assert bodies[1]["messages"][1]["content"].startswith("affirmative says")


async def test_mad_without_an_answer_asks_the_judge_twice_about_the_first_round() -> None:
    rounds: dict[str, int] = {"affirmative": 0, "negative": 0}

    def script(body: dict[str, Any]) -> Reply:
        agent = _mad_agent(body)
        if agent in rounds:
            rounds[agent] += 1
            return Reply(text=f"{agent} round {rounds[agent]}: \\boxed{{4{rounds[agent]}}}")
        if agent == "moderator":
            return Reply(text="I cannot decide yet." if rounds["negative"] == 2 else _verdict(""))
        if agent == "judge_candidates":
            return Reply(text="41 and 41")
        return Reply(text=_verdict("41"))

    transcript, bodies = await _run("mad", script)
    assert len(bodies) == transcript.llm_calls == 11
    agents = [m.agent for m in transcript.messages]
    assert agents == ["affirmative", "negative", "moderator"] * 3 + ["judge", "judge"]
    candidates = bodies[9]["messages"]
    assert candidates[0]["content"].startswith("You are the moderator")  # the moderator's system
    assert "affirmative round 1" in candidates[-1]["content"]
    assert "negative round 1" in candidates[-1]["content"]
    assert "round 3" not in candidates[-1]["content"]
    decision = bodies[10]["messages"]
    assert [m["role"] for m in decision] == ["system", "user", "assistant", "user"]
    assert transcript.stop_reason == "judge_answered"
    assert transcript.extra["verdicts"][1] == {"parsed": False, "answer": ""}
    assert transcript.final_answer.endswith("\\boxed{41}")


async def test_llm_debate_is_three_answers_one_revision_and_an_aggregator() -> None:
    openings = 0

    def script(body: dict[str, Any]) -> Reply:
        nonlocal openings
        messages = body["messages"]
        if messages[0]["content"].startswith("Task:"):
            return Reply(text="aggregated: \\boxed{42}")
        if len(messages) == 1:
            openings += 1
            return Reply(text=f"opening number {openings}: \\boxed{{4{openings}}}")
        return Reply(text="revised \\boxed{42}")

    transcript, bodies = await _run("debate", script)
    assert len(bodies) == transcript.llm_calls == 7
    agents = [m.agent for m in transcript.messages]
    assert sorted(agents[:3]) == ["agent_1", "agent_2", "agent_3"]
    assert sorted(agents[3:6]) == ["agent_1", "agent_2", "agent_3"] and agents[6] == "aggregator"
    opened = {m.agent: m.text for m in transcript.messages[:3]}
    assert len(set(opened.values())) == 3
    for body in bodies:
        assert body["messages"][0]["role"] == "user"  # MASLab's debaters have no system prompt
    revisions = [b for b in bodies if len(b["messages"]) == 3]
    assert len(revisions) == 3
    for body in revisions:
        own = body["messages"][1]["content"]
        shown = body["messages"][2]["content"]
        others = [text for text in opened.values() if text != own]
        assert own not in shown and all(text in shown for text in others)
        assert shown.endswith(f"The original problem: {TASK.prompt}.")
    aggregator = bodies[-1]["messages"]
    assert len(aggregator) == 1 and aggregator[0]["content"].count("revised \\boxed{42}") == 3
    assert transcript.final_answer == "aggregated: \\boxed{42}"


@pytest.mark.parametrize(
    ("terminate_at", "calls", "stop"),
    [
        (1, 1, "assistant_terminated"),
        (2, 2, "user_proxy_terminated"),
        (3, 3, "assistant_terminated"),
        (None, 5, "max_turns"),
    ],
)
async def test_autogen_assistant_and_user_proxy_take_one_to_five_calls(
    terminate_at: int | None, calls: int, stop: str
) -> None:
    count = 0

    def script(body: dict[str, Any]) -> Reply:
        nonlocal count
        count += 1
        word = " TERMINATE" if count == terminate_at else ""
        if body["messages"][0]["role"] == "system":
            return Reply(text=f"assistant {count}: The final answer is \\boxed{{42}}.{word}")
        return Reply(text=f"proxy {count}: please check again.{word}")

    transcript, bodies = await _run("autogen", script)
    assert len(bodies) == transcript.llm_calls == calls
    assert transcript.stop_reason == stop
    assert [m.agent for m in transcript.messages] == (["assistant", "user_proxy"] * 3)[:calls]
    assert bodies[0]["messages"][0]["content"].startswith("You are a helpful AI assistant")
    if calls >= 2:
        proxy = bodies[1]["messages"]  # no system prompt; the task as its own earlier turn
        assert [m["role"] for m in proxy] == ["assistant", "user"]
        assert proxy[0]["content"] == TASK.prompt and proxy[1]["content"].startswith("assistant 1")
    if calls >= 3:
        roles = [m["role"] for m in bodies[2]["messages"]]
        assert roles == ["system", "user", "assistant", "user"]
    final = [m.text for m in transcript.messages if m.agent == "assistant"][-1]
    assert transcript.final_answer == final


async def test_maslab_refuses_options_of_the_default_protocol() -> None:
    with pytest.raises(MarsError, match="'force_rounds' does not apply with protocol=maslab"):
        await get_mas("mad")(TASK, None, {"protocol": "maslab", "force_rounds": True})  # type: ignore[arg-type]
    with pytest.raises(MarsError, match="must be one of default, maslab"):
        await get_mas("debate")(TASK, None, {"protocol": "MASLab"})  # type: ignore[arg-type]
