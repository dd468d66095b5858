"""`mad` against a scripted server: early stop, the judge, malformed verdicts, role mapping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mas_testkit import close, models_for, role_of, server_usage_by_role

from core.errors import MarsError
from harness.testing.scripted_server import Reply, ScriptedServer
from mas.base import Task, Transcript, get_mas

TASK = Task(prompt="Tom has 3 apples and buys 4. How many now?", suite="gsm8k", sample_id="t1")
AFFIRMATIVE_TEXT = "Affirmative: 3 + 4 = 9, so the answer is \\boxed{9}"
NEGATIVE_TEXT = "Negative: the affirmative added wrongly; 3 + 4 = 7. \\boxed{7}"


def debaters_then(
    moderator: Callable[[int], str], judge: str = "{}"
) -> Callable[[dict[str, Any]], Reply]:
    """A script: fixed debater replies; the moderator's reply chosen by the round number."""

    def script(request: dict[str, Any]) -> Reply:
        role = role_of(request)
        if role == "affirmative":
            return Reply(text=AFFIRMATIVE_TEXT, reasoning="thinking it over")
        if role == "negative":
            return Reply(text=NEGATIVE_TEXT)
        if role == "moderator":
            round_number = sum(m["role"] == "user" for m in request["messages"])
            return Reply(text=moderator(round_number))
        if role == "judge":
            return Reply(text=judge)
        raise AssertionError(role)

    return script


async def run_mad(
    script: Callable[[dict[str, Any]], Reply], config: dict[str, Any] | None = None, **roles: str
) -> tuple[Transcript, ScriptedServer]:
    with ScriptedServer(script) as server:
        models = models_for(server.base_url, **roles)
        try:
            transcript = await get_mas("mad")(TASK, models, config or {})
        finally:
            await close(models)
    return transcript, server


def assert_matches_server(transcript: Transcript, server: ScriptedServer) -> None:
    assert transcript.llm_calls == len(server.seen)
    billed = server_usage_by_role(server.seen)
    recorded = transcript.tokens_per_agent()
    assert set(recorded) == set(billed)
    for agent, usage in recorded.items():
        for field in ("calls", "prompt_tokens", "completion_tokens"):
            assert usage[field] == billed[agent][field], (agent, field)


async def test_stops_early_when_the_moderator_names_an_answer() -> None:
    verdict = '{"preferred_side": "negative", "answer": "7", "reason": "3 + 4 is 7"}'
    transcript, server = await run_mad(debaters_then(lambda _round: verdict))

    assert [role_of(r.body) for r in server.seen] == ["affirmative", "negative", "moderator"]
    assert (transcript.rounds, transcript.ended_early) == (1, True)
    assert transcript.stop_reason == "moderator_decided"
    # The graded answer is the chosen side's whole reply, reasoning and box.
    assert transcript.final_answer == NEGATIVE_TEXT
    assert transcript.extra["chosen_side"] == "negative"
    assert_matches_server(transcript, server)


async def test_goes_to_the_judge_when_no_round_is_decisive() -> None:
    undecided = '{"preferred_side": "none", "answer": "", "reason": "both plausible"}'
    judge = 'After checking: {"winner": "affirmative", "answer": "9", "reason": "..."}'
    transcript, server = await run_mad(
        debaters_then(lambda _round: undecided, judge), judge="judge-model"
    )

    roles = [role_of(r.body) for r in server.seen]
    assert roles == ["affirmative", "negative", "moderator"] * 3 + ["judge"]
    assert (transcript.rounds, transcript.ended_early) == (3, False)
    assert transcript.stop_reason == "judge_decided"
    assert transcript.final_answer == AFFIRMATIVE_TEXT
    # Only the judge's calls went to the model mapped to its role.
    assert [r.body["model"] for r in server.seen] == ["scripted"] * 9 + ["judge-model"]
    assert_matches_server(transcript, server)
    # Reasoning is kept apart from the answer text in the transcript.
    first = transcript.messages[0]
    assert (first.agent, first.reasoning, first.text) == (
        "affirmative",
        "thinking it over",
        AFFIRMATIVE_TEXT,
    )


async def test_each_side_debates_against_the_others_latest_reply() -> None:
    transcript, server = await run_mad(debaters_then(lambda _round: "undecided", "{}"))
    affirmative_round_2 = [r.body for r in server.seen if role_of(r.body) == "affirmative"][1]
    messages = affirmative_round_2["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == AFFIRMATIVE_TEXT  # its own earlier reply, without reasoning
    assert NEGATIVE_TEXT in messages[3]["content"]
    moderator_round_3 = [r.body for r in server.seen if role_of(r.body) == "moderator"][2]
    assert sum(m["role"] == "user" for m in moderator_round_3["messages"]) == 3
    assert [m.round for m in transcript.messages] == [1, 1, 1, 2, 2, 2, 3, 3, 3, None]


async def test_survives_malformed_moderator_json() -> None:
    replies = {
        1: "The negative side seems right {but I am not sure",
        2: "```json\n{'preferred_side': 'Negative', 'answer': '7',}\n```",
    }
    transcript, server = await run_mad(debaters_then(lambda round_number: replies[round_number]))

    assert len(server.seen) == 6
    assert transcript.rounds == 2 and transcript.ended_early
    assert transcript.final_answer == NEGATIVE_TEXT
    assert transcript.extra["verdicts"][0]["parsed"] is False
    assert transcript.extra["unparsed_verdicts"] == 1


async def test_unreadable_moderator_and_judge_fall_back_to_a_fixed_rule() -> None:
    transcript, server = await run_mad(debaters_then(lambda _round: "???", "no idea"))

    assert len(server.seen) == 10
    assert transcript.stop_reason == "judge_unreadable"
    assert transcript.extra["side_rule"] == "fallback_affirmative"
    assert transcript.final_answer == AFFIRMATIVE_TEXT


async def test_a_verdict_answer_without_a_side_picks_the_side_that_gave_it() -> None:
    verdict = '{"preferred_side": "none", "answer": "\\\\boxed{7}"}'
    transcript, _ = await run_mad(debaters_then(lambda _round: verdict))
    assert transcript.extra["side_rule"] == "answer_match"
    assert transcript.final_answer == NEGATIVE_TEXT


async def test_a_verdict_answer_matching_no_side_is_graded_from_the_verdict() -> None:
    verdict = '{"answer": "11", "reason": "both sides misread the question"}'
    transcript, _ = await run_mad(debaters_then(lambda _round: verdict))
    assert transcript.extra["chosen_side"] is None
    assert "\\boxed{11}" in transcript.final_answer
    assert transcript.final_answer.startswith("both sides misread")


async def test_force_rounds_runs_every_round_and_uses_the_last_verdict() -> None:
    verdicts = {
        1: '{"preferred_side": "affirmative", "answer": "9"}',
        2: '{"preferred_side": "affirmative", "answer": "9"}',
        3: '{"preferred_side": "negative", "answer": "7"}',
    }
    transcript, server = await run_mad(
        debaters_then(lambda round_number: verdicts[round_number]), {"force_rounds": True}
    )
    assert len(server.seen) == 9  # three full rounds, no judge
    assert (transcript.rounds, transcript.ended_early) == (3, False)
    assert transcript.final_answer == NEGATIVE_TEXT
    assert_matches_server(transcript, server)


async def test_rounds_option_limits_the_debate() -> None:
    transcript, server = await run_mad(debaters_then(lambda _round: "{}", "{}"), {"rounds": 1})
    assert [role_of(r.body) for r in server.seen] == [
        "affirmative",
        "negative",
        "moderator",
        "judge",
    ]
    assert transcript.rounds == 1


@pytest.mark.parametrize("config", [{"rounds": 0}, {"rounds": "3"}, {"force_rounds": "yes"}])
async def test_bad_options_are_user_errors(config: dict[str, Any]) -> None:
    with pytest.raises(MarsError):
        await run_mad(debaters_then(lambda _round: "{}"), config)
