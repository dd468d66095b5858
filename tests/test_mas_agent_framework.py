"""`agent_framework` (a Microsoft Agent Framework group chat) and its chat client over the
endpoint layer, against the scripted server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import ChatResponse, Content, Message
from conftest import DATA_DIR, run_mars
from mas_testkit import close, endpoint, models_for, role_of, server_usage_by_role

from core.endpoint import Endpoint, EndpointConfig, GenerationConfig
from core.errors import EndpointError, MarsError
from harness.benchmarks import get_suite
from harness.testing.scripted_server import Reply, ScriptedServer
from mas.agent_framework_client import EndpointAgentClient, to_chat_messages
from mas.base import Conversation, Models, Task, Transcript, check_options, get_mas, list_mas

# The approval word in the task text must not end the chat.
TASK = Task(prompt="Compute 6 * 7. (Do not just write TERMINATE.)", suite="gsm8k", sample_id="a1")
Script = Callable[[dict[str, Any]], Reply]


def chat_script(critic_replies: list[str], solver_replies: list[str]) -> Script:
    """Each agent's n-th reply, told by how many of its own replies the request carries."""

    def script(request: dict[str, Any]) -> Reply:
        role = role_of(request)
        turn = sum(m["role"] == "assistant" for m in request["messages"])
        replies = critic_replies if role == "critic" else solver_replies
        return Reply(text=replies[min(turn, len(replies) - 1)], reasoning=f"{role} thinks")

    return script


def fast_models(base_url: str, *, cache: Path | None = None, retries: int = 0) -> Models:
    config = EndpointConfig(
        base_url=base_url,
        model="scripted",
        max_retries=retries,
        backoff_base_s=0.01,
        timeout_s=20,
        cache_path=str(cache) if cache else None,
    )
    return Models(default=Endpoint(config), gen=GenerationConfig(max_tokens=256))


async def run_chat(
    script: Script, config: dict[str, Any] | None = None, **roles: str
) -> tuple[Transcript, ScriptedServer, Models]:
    with ScriptedServer(script) as server:
        models = models_for(server.base_url, **roles)
        try:
            transcript = await get_mas("agent_framework")(TASK, models, config or {})
        finally:
            await close(models)
    return transcript, server, models


def assert_matches_server(transcript: Transcript, server: ScriptedServer) -> None:
    assert transcript.llm_calls == len(server.seen)
    billed = server_usage_by_role(server.seen)
    assert set(transcript.tokens_per_agent()) == set(billed)
    for agent, usage in transcript.tokens_per_agent().items():
        for field in ("calls", "prompt_tokens", "completion_tokens"):
            assert usage[field] == billed[agent][field], (agent, field)


def test_registered_with_the_other_systems() -> None:
    assert {"agent_framework", "autogen"} <= set(list_mas())


async def test_stops_when_the_critic_approves_and_counts_calls_by_role() -> None:
    solver = ["6 * 7 = 48, so \\boxed{48}. Critic, say TERMINATE if fine.", "So \\boxed{42}"]
    critic = ["6 * 7 is not 48; recompute.", "Correct now. TERMINATE"]
    transcript, server, models = await run_chat(chat_script(critic, solver))

    assert [role_of(r.body) for r in server.seen] == ["solver", "critic", "solver", "critic"]
    assert transcript.stop_reason == "critic_approved"
    assert (transcript.rounds, transcript.ended_early) == (2, True)
    assert transcript.final_answer == solver[1]
    assert [m.agent for m in transcript.messages] == ["solver", "critic", "solver", "critic"]
    assert [m.round for m in transcript.messages] == [1, 1, 2, 2]
    assert transcript.messages[0].reasoning == "solver thinks"
    assert_matches_server(transcript, server)
    # The endpoint's ledger counts the same calls under the same roles.
    ledger = models.default.ledger.by_role()
    assert {role: row["calls"] for role, row in ledger.items()} == {"solver": 2, "critic": 2}
    billed = server_usage_by_role(server.seen)
    assert ledger["critic"]["prompt_tokens"] == billed["critic"]["prompt_tokens"]


async def test_requests_carry_instructions_a_labelled_chat_and_no_reasoning() -> None:
    _, server, _ = await run_chat(chat_script(["No: 48 is wrong."], ["\\boxed{48}"]))
    solver_second = server.seen[2].body["messages"]
    # The solver's own reply comes back as an assistant turn without its reasoning; the
    # critic's reply as a labelled user turn.
    assert [m["role"] for m in solver_second] == ["system", "user", "assistant", "user"]
    assert solver_second[0]["content"].startswith("You are the solver")
    assert solver_second[1:] == [
        {"role": "user", "content": TASK.prompt},
        {"role": "assistant", "content": "\\boxed{48}"},
        {"role": "user", "content": "critic: No: 48 is wrong."},
    ]
    critic_first = server.seen[1].body["messages"]
    assert critic_first[1] == {"role": "user", "content": f"{TASK.prompt}\n\nsolver: \\boxed{{48}}"}
    assert all(r.body["max_tokens"] == 256 for r in server.seen)
    assert "thinks" not in json.dumps([r.body for r in server.seen])


async def test_stops_at_the_round_cap_and_keeps_the_last_readable_answer() -> None:
    solver = ["first try \\boxed{41}", "second try \\boxed{42}", "I am no longer sure."]
    transcript, server, _ = await run_chat(
        chat_script(["Wrong, check again."], solver), solver="solver-model"
    )
    assert [role_of(r.body) for r in server.seen] == ["solver", "critic"] * 2 + ["solver"]
    assert transcript.stop_reason == "max_rounds"
    assert (transcript.rounds, transcript.ended_early) == (3, False)
    assert transcript.final_answer == "second try \\boxed{42}"
    # The solver's role went to its own model; the critic used the default.
    assert [r.body["model"] for r in server.seen] == ["solver-model", "scripted"] * 2 + [
        "solver-model"
    ]
    assert_matches_server(transcript, server)


async def test_round_options_and_unknown_options() -> None:
    transcript, server, _ = await run_chat(chat_script(["No."], ["\\boxed{1}"]), {"max_rounds": 2})
    assert [role_of(r.body) for r in server.seen] == ["solver", "critic"]
    assert transcript.stop_reason == "max_rounds"
    transcript, server, _ = await run_chat(
        chat_script(["No."], ["\\boxed{1}"]), {"max_solver_turns": 2}
    )
    assert len(server.seen) == 3
    # No MASLab protocol here: `protocol` is none of its options (checked before any sample).
    with pytest.raises(
        MarsError,
        match=r"^MAS 'agent_framework' has no option 'protocol'; it reads approval_word, "
        r"max_rounds, max_solver_turns$",
    ):
        await check_options(
            get_mas("agent_framework"), {"protocol": "maslab"}, name="agent_framework"
        )
    with pytest.raises(MarsError, match="max_rounds"):
        await run_chat(chat_script(["No."], ["\\boxed{1}"]), {"max_rounds": 0})


async def test_a_retry_after_429_and_500_is_counted() -> None:
    lock, attempts = threading.Lock(), Counter[str]()
    faults = [Reply(text="slow down", status=429), Reply(text="oops", status=500)]

    def script(request: dict[str, Any]) -> Reply:
        role = role_of(request)
        with lock:
            attempts[role] += 1
            n = attempts[role]
        if role == "critic" and n <= len(faults):
            return faults[n - 1]
        return chat_script(["Correct. TERMINATE"], ["\\boxed{42}"])(request)

    with ScriptedServer(script) as server:
        models = fast_models(server.base_url, retries=3)
        transcript = await get_mas("agent_framework")(TASK, models, {})
        await close(models)
    assert [m.retries for m in transcript.messages] == [0, 2]
    assert len(server.seen) == 2 + 2
    ledger = models.default.ledger.by_role()
    assert (ledger["critic"]["retries"], ledger["critic"]["calls"]) == (2, 1)
    assert (ledger["solver"]["retries"], ledger["solver"]["errors"]) == (0, 0)
    assert transcript.stop_reason == "critic_approved"


async def test_the_response_cache_serves_a_second_identical_run(tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    script = chat_script(["48 is wrong.", "Right. TERMINATE"], ["\\boxed{48}", "\\boxed{42}"])
    with ScriptedServer(script) as server:
        runs = []
        for _ in range(2):
            models = fast_models(server.base_url, cache=cache)
            runs.append((await get_mas("agent_framework")(TASK, models, {}), models))
            await close(models)
        seen = len(server.seen)
    (first, _), (second, second_models) = runs
    assert seen == 4  # the second run made no request
    assert [m.cached for m in first.messages] == [False] * 4
    assert [m.cached for m in second.messages] == [True] * 4
    assert [m.text for m in second.messages] == [m.text for m in first.messages]
    assert second.final_answer == first.final_answer == "\\boxed{42}"
    assert {r: u["cached"] for r, u in second_models.default.ledger.by_role().items()} == {
        "solver": 2,
        "critic": 2,
    }


async def test_an_endpoint_failure_surfaces_as_endpoint_error() -> None:
    def script(request: dict[str, Any]) -> Reply:
        if role_of(request) == "critic":
            return Reply(text="bad request", status=400)
        return Reply(text="\\boxed{42}")

    with pytest.raises(EndpointError, match="400"):
        await run_chat(script)


# --- the chat client on its own ------------------------------------------------------------------


def test_chat_message_conversion() -> None:
    chat = to_chat_messages(
        [
            Message(role="system", contents=["sys"]),
            Message(role="user", contents=["task"]),
            Message(role="assistant", contents=["looks wrong"], author_name="critic"),
            Message(
                role="assistant",
                contents=[Content.from_text_reasoning(text="hidden"), Content.from_text("mine")],
                author_name="solver",
            ),
            Message(role="user", contents=["part one", "part two"], author_name="critic"),
        ],
        agent="solver",
    )
    assert chat == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task\n\ncritic: looks wrong"},
        {"role": "assistant", "content": "mine"},
        {"role": "user", "content": "critic: part one\npart two"},
    ]
    with pytest.raises(ValueError, match="'tool' messages"):
        to_chat_messages([Message(role="tool", contents=["x"])], agent="a")
    image = Content.from_uri("https://example.org/a.png", media_type="image/png")
    with pytest.raises(ValueError, match="content"):
        to_chat_messages([Message(role="user", contents=[image])], agent="a")


async def test_client_options_streaming_and_usage() -> None:
    with ScriptedServer(lambda _req: Reply(text="the answer is 42", reasoning="r r")) as server:
        models = Models(default=endpoint(server.base_url))
        conversation = Conversation(models, Task(prompt="p"))
        client = EndpointAgentClient(conversation, agent="helper")
        messages = [Message(role="user", contents=["hi"])]
        options = {"instructions": "be brief", "max_tokens": 33, "tool_choice": "auto"}
        response = await client.get_response(messages, options=options)
        streamed = client.get_response(messages, stream=True, options={"temperature": 0.5})
        updates = [update async for update in streamed]
        final = await streamed.get_final_response()
        for refused in ({"response_format": {"type": "json_object"}}, {"model": "other"}):
            with pytest.raises(ValueError, match="helper"):
                await client.get_response(messages, options=refused)
        await close(models)

    assert len(server.seen) == 2  # refused calls never reached the endpoint
    first, second = (r.body for r in server.seen)
    assert first["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert (first["max_tokens"], second["temperature"]) == (33, 0.5)
    assert isinstance(response, ChatResponse)
    assert response.text == "the answer is 42"
    assert [c.type for c in response.messages[0].contents] == ["text_reasoning", "text"]
    assert response.usage_details is not None
    assert response.usage_details["input_token_count"] == 3  # "be brief" + "hi"
    assert response.usage_details["output_token_count"] == 6
    assert response.finish_reason == "stop"
    assert len(updates) == 1 and final.text == "the answer is 42"
    assert final.usage_details is not None and final.usage_details["output_token_count"] == 6
    assert [(m.agent, m.round) for m in conversation.transcript.messages] == [
        ("helper", 1),
        ("helper", 2),
    ]


# --- `mars eval --mas agent_framework` end to end ------------------------------------------------


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")
def test_mars_eval_grades_the_solvers_final_answer(tmp_path: Path) -> None:
    samples = get_suite("gsm8k").load(data_dir=DATA_DIR, limit=4).samples
    answers = {s.question[:80]: s.gold if i % 2 == 0 else "-12345" for i, s in enumerate(samples)}

    def script(request: dict[str, Any]) -> Reply:
        task = request["messages"][1]["content"]
        answer = next(a for fragment, a in answers.items() if fragment in task)
        if role_of(request) == "critic":
            return Reply(text="Checked. TERMINATE")
        return Reply(text=f"Working.\nThe answer is \\boxed{{{answer}}}.")

    run_dir = tmp_path / "run"
    with ScriptedServer(script) as server:
        result = run_mars(
            "eval", "--suite", "gsm8k", "--limit", "4", "--mas", "agent_framework",
            "--mas-option", "max_solver_turns=2", "--base-url", server.base_url,
            "--model", "scripted", "--data-dir", str(DATA_DIR), "--run-dir", str(run_dir),
            "--quiet",
        )  # fmt: skip
        seen = len(server.seen)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert len(records) == 4 and seen == 8
    by_id = {r["sample_id"]: r for r in records}
    for i, sample in enumerate(samples):
        record = by_id[sample.id]
        assert record["correct"] is (i % 2 == 0)
        assert record["extracted"] == (sample.gold if i % 2 == 0 else "-12345")
        assert [m["agent"] for m in record["transcript"]["messages"]] == ["solver", "critic"]
        assert record["metrics"]["stop_reason"] == "critic_approved"
    summary = json.loads((run_dir / "summary.json").read_text())["suites"]["gsm8k"]
    assert (summary["n"], summary["correct"]) == (4, 2)
    usage = json.loads((run_dir / "usage.json").read_text())["by_role"]
    assert {role: row["calls"] for role, row in usage.items()} == {"solver": 4, "critic": 4}
    config = json.loads((run_dir / "run.json").read_text())["config"]
    assert (config["mas"], config["mas_config"]) == ("agent_framework", {"max_solver_turns": 2})
