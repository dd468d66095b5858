"""`autogen` (a real autogen-agentchat team) and its model client over the endpoint layer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from autogen_core.models import AssistantMessage, CreateResult, SystemMessage, UserMessage
from mas_testkit import close, endpoint, models_for, role_of, server_usage_by_role

from core.endpoint import Endpoint, EndpointConfig, GenerationConfig
from core.errors import EndpointError
from harness.testing.scripted_server import Reply, ScriptedServer
from mas.autogen_client import EndpointChatClient, to_chat_messages
from mas.base import Conversation, Models, Task, Transcript, get_mas

# The approval word in the task text must not end the chat.
TASK = Task(prompt="Compute 6 * 7. (Do not just write TERMINATE.)", suite="gsm8k", sample_id="a1")


def team_script(
    critic_replies: list[str], solver_replies: list[str]
) -> Callable[[dict[str, Any]], Reply]:
    def script(request: dict[str, Any]) -> Reply:
        role = role_of(request)
        turn = sum(m["role"] == "assistant" for m in request["messages"])
        replies = critic_replies if role == "critic" else solver_replies
        return Reply(text=replies[min(turn, len(replies) - 1)])

    return script


async def run_team(
    script: Callable[[dict[str, Any]], Reply], config: dict[str, Any] | None = None, **roles: str
) -> tuple[Transcript, ScriptedServer]:
    with ScriptedServer(script) as server:
        models = models_for(server.base_url, **roles)
        try:
            transcript = await get_mas("autogen")(TASK, models, config or {})
        finally:
            await close(models)
    return transcript, server


def assert_matches_server(transcript: Transcript, server: ScriptedServer) -> None:
    assert transcript.llm_calls == len(server.seen)
    billed = server_usage_by_role(server.seen)
    for agent, usage in transcript.tokens_per_agent().items():
        for field in ("calls", "prompt_tokens", "completion_tokens"):
            assert usage[field] == billed[agent][field], (agent, field)


async def test_stops_when_the_critic_approves() -> None:
    solver = [
        "6 * 7 = 48, so \\boxed{48}. Critic, say TERMINATE if this is fine.",
        "Corrected: 6 * 7 = 42, \\boxed{42}",
    ]
    critic = ["6 * 7 is not 48; recompute.", "Correct now. TERMINATE"]
    transcript, server = await run_team(team_script(critic, solver))

    assert [role_of(r.body) for r in server.seen] == ["solver", "critic", "solver", "critic"]
    assert transcript.stop_reason == "critic_approved"
    assert (transcript.rounds, transcript.ended_early) == (2, True)
    assert transcript.final_answer == solver[1]
    assert [m.agent for m in transcript.messages] == ["solver", "critic", "solver", "critic"]
    assert [m.round for m in transcript.messages] == [1, 1, 2, 2]
    assert_matches_server(transcript, server)


async def test_stops_at_the_message_cap_and_keeps_the_last_boxed_answer() -> None:
    solver = ["first try \\boxed{41}", "second try \\boxed{42}", "I am no longer sure."]
    critic = ["Wrong, check again."]
    transcript, server = await run_team(team_script(critic, solver), solver="solver-model")

    # task + solver, critic, solver, critic, solver = the default cap of 6 messages
    assert [role_of(r.body) for r in server.seen] == ["solver", "critic"] * 2 + ["solver"]
    assert transcript.stop_reason == "max_messages"
    assert (transcript.rounds, transcript.ended_early) == (3, False)
    assert transcript.final_answer == "second try \\boxed{42}"
    # The solver's role went to its own model; the critic used the default.
    assert [r.body["model"] for r in server.seen] == ["solver-model", "scripted"] * 2 + [
        "solver-model"
    ]
    assert_matches_server(transcript, server)


async def test_message_cap_option() -> None:
    transcript, server = await run_team(
        team_script(["No."], ["\\boxed{1}"]), {"max_solver_turns": 2}
    )
    assert len(server.seen) == 3  # task + solver, critic, solver
    assert transcript.stop_reason == "max_messages"


async def test_requests_carry_max_tokens_and_a_labelled_chat() -> None:
    solver = ["\\boxed{42}"]
    transcript, server = await run_team(team_script(["Fine. TERMINATE"], solver))
    assert all(r.body["max_tokens"] == 256 for r in server.seen)
    critic_messages = server.seen[1].body["messages"]
    assert [m["role"] for m in critic_messages] == ["system", "user"]
    # The task and the solver's reply reach the critic as one user turn, the reply labelled.
    assert critic_messages[1]["content"] == f"{TASK.prompt}\n\nsolver: \\boxed{{42}}"
    assert transcript.final_answer == "\\boxed{42}"


async def test_an_endpoint_failure_surfaces_as_endpoint_error() -> None:
    def script(request: dict[str, Any]) -> Reply:
        if role_of(request) == "critic":
            return Reply(text="bad request", status=400)
        return Reply(text="\\boxed{42}")

    with pytest.raises(EndpointError):
        await run_team(script)


# --- the model client on its own ------------------------------------------------------------------


def test_chat_message_conversion() -> None:
    chat = to_chat_messages(
        [
            SystemMessage(content="sys"),
            UserMessage(content="task", source="user"),
            UserMessage(content="looks wrong", source="critic"),
            AssistantMessage(content="my answer", source="solver", thought="hidden"),
            UserMessage(content=["part one", "part two"], source="critic"),
        ]
    )
    assert chat == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task\n\ncritic: looks wrong"},
        {"role": "assistant", "content": "my answer"},
        {"role": "user", "content": "critic: part one\npart two"},
    ]


async def test_client_records_usage_honours_create_args_and_counts_cache_hits(
    tmp_path: Path,
) -> None:
    with ScriptedServer(lambda _req: Reply(text="the answer is 42", reasoning="r r")) as server:
        config = EndpointConfig(
            base_url=server.base_url, model="scripted", cache_path=str(tmp_path / "cache.sqlite")
        )
        models = Models(default=Endpoint(config))
        conversation = Conversation(models, Task(prompt="p"))
        client = EndpointChatClient(conversation, agent="helper")
        messages = [SystemMessage(content="be brief"), UserMessage(content="hi", source="user")]
        first = await client.create(messages, extra_create_args={"max_tokens": 33})
        again = await client.create(messages, extra_create_args={"max_tokens": 33})
        streamed = [chunk async for chunk in client.create_stream(messages)]
        await close(models)

    assert len(server.seen) == 2  # the second identical request was a cache hit
    assert server.seen[0].body["max_tokens"] == 33
    assert server.seen[1].body["max_tokens"] == GenerationConfig().max_tokens
    assert (first.content, first.thought, first.cached, again.cached) == (
        "the answer is 42",
        "r r",
        False,
        True,
    )
    assert len(streamed) == 1 and isinstance(streamed[0], CreateResult)
    per_call = first.usage
    assert (per_call.prompt_tokens, per_call.completion_tokens) == (3, 6)
    assert client.total_usage().prompt_tokens == 3 * per_call.prompt_tokens
    assert client.actual_usage().prompt_tokens == 2 * per_call.prompt_tokens
    assert [m.agent for m in conversation.transcript.messages] == ["helper"] * 3
    assert [m.cached for m in conversation.transcript.messages] == [False, True, False]


async def test_client_refuses_what_the_model_info_rules_out() -> None:
    models = Models(default=endpoint("http://127.0.0.1:9/v1"))
    client = EndpointChatClient(Conversation(models, Task(prompt="p")), agent="a")
    info = client.model_info
    assert (info["vision"], info["function_calling"], info["json_output"]) == (False,) * 3
    assert (info["family"], info["structured_output"]) == ("unknown", False)
    messages = [UserMessage(content="x" * 400, source="user")]
    with pytest.raises(ValueError, match="JSON"):
        await client.create(messages, json_output=True)
    with pytest.raises(ValueError, match="unsupported create arguments"):
        await client.create(messages, extra_create_args={"logprobs": True})
    assert client.count_tokens(messages) == 104
    assert client.remaining_tokens(messages) == 32768 - 104
    assert client.total_usage().prompt_tokens == 0  # refused calls never reached the endpoint
    await close(models)
