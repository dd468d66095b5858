"""`debate` against a scripted server: the vote, ties, concurrency within a round, aggregation."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from mas_testkit import close, models_for, role_of, server_usage_by_role

from core.errors import MarsError
from harness.testing.scripted_server import Reply, ScriptedServer
from mas.base import Task, Transcript, get_mas
from mas.debate import majority_vote

TASK = Task(prompt="What is 6 + 1?", suite="gsm8k", sample_id="d1")


def answers_by_model(answers: dict[str, str], delay_s: float = 0.0) -> Callable[..., Reply]:
    """Each agent is mapped to its own model name; the reply text names the call, so every reply
    is unique and can be traced in the later prompts."""
    counter = itertools.count(1)

    def script(request: dict[str, Any]) -> Reply:
        role = role_of(request)
        if role == "aggregator":
            return Reply(text=answers.get("aggregator", "I cannot decide."))
        assert role == "debater"
        answer = answers[request["model"]]
        return Reply(
            text=f"call {next(counter)} by {request['model']}: \\boxed{{{answer}}}", delay_s=delay_s
        )

    return script


async def run_debate(
    script: Callable[..., Reply], agents: int, config: dict[str, Any] | None = None
) -> tuple[Transcript, ScriptedServer]:
    roles = {f"agent_{index}": f"m{index}" for index in range(1, agents + 1)}
    with ScriptedServer(script) as server:
        models = models_for(server.base_url, **roles)
        try:
            transcript = await get_mas("debate")(TASK, models, {"agents": agents, **(config or {})})
        finally:
            await close(models)
    return transcript, server


def last_reply_of(transcript: Transcript, agent: str) -> str:
    return [m.text for m in transcript.messages if m.agent == agent][-1]


async def test_majority_wins_a_two_to_one_split() -> None:
    # The lowest-numbered agent is in the minority, so "first agent wins" would fail here.
    transcript, server = await run_debate(answers_by_model({"m1": "9", "m2": "7", "m3": "7.0"}), 3)

    assert len(server.seen) == 9 and transcript.llm_calls == 9  # 3 agents x (1 + 2 rounds)
    assert transcript.final_answer == last_reply_of(transcript, "agent_2")
    assert transcript.extra["vote"]["votes"] == {"number:9": 1, "number:7": 2}
    assert transcript.stop_reason == "majority_vote"
    assert (transcript.rounds, transcript.ended_early) == (2, False)
    billed = server_usage_by_role(server.seen)["debater"]
    recorded = transcript.tokens_per_agent()
    assert {agent: usage["calls"] for agent, usage in recorded.items()} == {
        "agent_1": 3,
        "agent_2": 3,
        "agent_3": 3,
    }
    for field in ("prompt_tokens", "completion_tokens"):
        assert sum(usage[field] for usage in recorded.values()) == billed[field]


async def test_a_tie_goes_to_the_lowest_numbered_agents_answer() -> None:
    answers = {"m1": "5", "m2": "7", "m3": "7", "m4": "5"}
    transcript, _ = await run_debate(answers_by_model(answers), 4, {"rounds": 1})
    assert transcript.extra["vote"]["tie"] is True
    assert transcript.final_answer == last_reply_of(transcript, "agent_1")
    assert transcript.stop_reason == "majority_tie_lowest_agent"


async def test_agents_of_a_round_run_concurrently_and_see_the_others() -> None:
    delay = 0.5
    transcript, server = await run_debate(
        answers_by_model({"m1": "1", "m2": "2", "m3": "3"}, delay_s=delay), 3
    )
    seen = server.seen
    for round_number in range(3):
        arrivals = [r.at for r in seen[3 * round_number : 3 * round_number + 3]]
        # All three requests of a round arrive before any of them is answered.
        assert max(arrivals) - min(arrivals) < delay * 0.8
    assert seen[3].at - seen[0].at >= delay * 0.9  # and the rounds run one after the other
    # A revision prompt shows the other two agents' previous replies, not the agent's own.
    previous = {m.agent: m.text for m in transcript.messages if m.round == 0}
    for request in seen[3:6]:
        agent = f"agent_{request.body['model'][1:]}"
        prompt = request.body["messages"][-1]["content"]
        assert previous[agent] not in prompt
        assert all(text in prompt for name, text in previous.items() if name != agent)
        assert request.body["messages"][-2] == {"role": "assistant", "content": previous[agent]}


async def test_aggregate_adds_one_call_and_grades_its_reply() -> None:
    answers = {"m1": "7", "m2": "7", "m3": "9", "aggregator": "Checked all: \\boxed{7}"}
    transcript, server = await run_debate(answers_by_model(answers), 3, {"aggregate": True})
    assert len(server.seen) == 10
    assert role_of(server.seen[-1].body) == "aggregator"
    assert transcript.final_answer == "Checked all: \\boxed{7}"
    assert transcript.stop_reason == "aggregated"
    assert transcript.extra["vote"]["winner"] == "7"


async def test_unreadable_aggregator_falls_back_to_the_vote() -> None:
    answers = {"m1": "7", "m2": "9", "m3": "9"}
    transcript, _ = await run_debate(answers_by_model(answers), 3, {"aggregate": True})
    assert transcript.final_answer == last_reply_of(transcript, "agent_2")
    assert transcript.stop_reason == "aggregator_unreadable_majority_vote"


async def test_stop_on_consensus_skips_the_remaining_rounds() -> None:
    answers = {"m1": "7", "m2": "7", "m3": "7"}
    transcript, server = await run_debate(answers_by_model(answers), 3, {"stop_on_consensus": True})
    assert len(server.seen) == 3
    assert (transcript.rounds, transcript.ended_early) == (0, True)


def test_vote_ignores_replies_without_an_answer() -> None:
    replies = [("a", "no idea"), ("b", "so \\boxed{4}"), ("c", "\\boxed{5}"), ("d", "\\boxed{5}")]
    winner, tally = majority_vote(TASK, replies)
    assert winner == 2 and tally["winner"] == "5"
    assert majority_vote(TASK, [("a", "no idea")])[0] is None


@pytest.mark.parametrize("config", [{"agents": 0}, {"rounds": -1}, {"aggregate": 1}])
async def test_bad_options_are_user_errors(config: dict[str, Any]) -> None:
    with pytest.raises(MarsError):
        await run_debate(answers_by_model({}), 3, config)
