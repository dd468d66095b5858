"""The `llm` player over real HTTP: a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

import pytest

from core.endpoint import Endpoint, EndpointConfig, GenerationConfig
from games.arena import ArenaConfig, run_arena
from games.engine import EpisodeOptions
from games.players import PlayerContext, make_player
from games.prompts import legal_actions_in
from games.spec import get_game
from harness.testing.scripted_server import Reply, ScriptedServer

LONG_FILLER = "lorem ipsum " * 8_500  # ~100 KB, 17,000 "tokens" (the server counts words)
BEHAVIOURS = ("legal", "illegal", "garbage", "empty", "long_garbage", "long_legal")


def behaviour_of(content: str) -> str:
    # Decided by the prompt's text, so the script is the same whatever order requests arrive in.
    return BEHAVIOURS[zlib.crc32(content.encode()) % len(BEHAVIOURS)]


def reply_for(request: dict[str, Any]) -> Reply:
    content = request["messages"][-1]["content"]
    legal = legal_actions_in(content)
    kind = behaviour_of(content)
    if kind == "legal":
        return Reply(text=f"The best move is clear.\n<answer>{legal[-1]}</answer>")
    if kind == "illegal":
        return Reply(text="<answer><X(7,7)></answer>")
    if kind == "garbage":
        return Reply(text="¯\\_(ツ)_/¯ <answ3r>??</answer")
    if kind == "empty":
        return Reply(text="")
    if kind == "long_garbage":
        return Reply(text=LONG_FILLER)
    return Reply(text=LONG_FILLER + f"<answer>{legal[0]}</answer>")


def expected_turn_reward(kind: str) -> float:
    cap = 0.5  # 17,000 tokens is far over 2048: the length penalty is capped
    return {
        "legal": 0.05,
        "long_legal": 0.05 - cap,
        "illegal": -11.0,
        "garbage": -11.0,
        "empty": -11.0,
        "long_garbage": -11.0 - cap,
    }[kind]


async def play_arena(base_url: str, invalid: str) -> tuple[list[dict], dict, Endpoint]:
    spec = get_game("tic_tac_toe")
    endpoint = Endpoint(
        EndpointConfig(base_url=base_url, model="scripted", concurrency=4, max_retries=0)
    )
    context = PlayerContext(spec=spec, endpoint=endpoint, gen=GenerationConfig(max_tokens=64))
    records: list[dict] = []
    config = ArenaConfig(episodes=12, concurrency=6, options=EpisodeOptions(invalid=invalid))
    try:
        summary = await run_arena(
            spec,
            make_player("llm", context),
            make_player("random", context),
            config,
            on_record=records.append,
        )
    finally:
        await endpoint.aclose()
    return records, summary, endpoint


def test_every_episode_completes_and_invalid_replies_are_penalised() -> None:
    with ScriptedServer(reply_for) as server:
        records, summary, endpoint = asyncio.run(play_arena(server.base_url, "penalty"))
        requests = len(server.seen)
    assert len(records) == 24 and not any(r["error"] for r in records)
    kinds_seen = set()
    invalid_turns = model_turns = 0
    for record in records:
        seat = 0 if record["seat"] == "first" else 1
        mine = [t for t in record["turns"] if t["seat"] == seat]
        for index, turn in enumerate(mine):
            kind = behaviour_of(turn["prompt"][-1]["content"])
            kinds_seen.add(kind)
            model_turns += 1
            valid = kind in ("legal", "long_legal")
            assert turn["legal"] is valid
            invalid_turns += not valid
            if not valid:
                assert index == len(mine) - 1  # the game stopped at once
                assert record["invalid_seat"] == seat
                assert record["returns"][seat] == -1.0 and record["outcomes"][seat] == "loss"
                assert turn["reward"] == pytest.approx(expected_turn_reward(kind))
            elif index < len(mine) - 1:
                assert turn["reward"] == pytest.approx(expected_turn_reward(kind))
        if record["invalid_seat"] is None:
            assert record["returns"][seat] in (-1.0, 0.0, 1.0)
    assert kinds_seen == set(BEHAVIOURS)
    assert requests == model_turns
    stats = [summary["seats"][s] for s in ("first", "second")]
    assert sum(s["model_turns"] for s in stats) == model_turns
    invalid_rate = sum(s["invalid_rate"] * s["model_turns"] for s in stats) / model_turns
    assert invalid_rate == pytest.approx(invalid_turns / model_turns)
    usage = endpoint.ledger.by_role()
    assert usage["first"]["calls"] + usage["second"]["calls"] == model_turns


def test_retry_mode_reasks_over_http_then_penalises() -> None:
    with ScriptedServer(reply_for) as server:
        records, _, _ = asyncio.run(play_arena(server.base_url, "retry:2"))
        bodies = [seen.body for seen in server.seen]
    assert len(records) == 24 and not any(r["error"] for r in records)
    reasks = [b for b in bodies if "not a valid move" in b["messages"][-1]["content"]]
    assert reasks, "some replies were invalid, so some requests must be re-asks"
    for body in reasks:
        assert body["messages"][-2]["role"] == "assistant"
        assert len(body["messages"][-2]["content"]) <= 2005  # a 100 KB reply is cut when echoed
    for record in records:
        seat = 0 if record["seat"] == "first" else 1
        mine = [t for t in record["turns"] if t["seat"] == seat]
        streak = 0
        for turn in mine:
            streak = 0 if turn["legal"] else streak + 1
            assert streak <= 3
            assert turn["retried"] == (not turn["legal"] and streak <= 2)
        if record["invalid_seat"] == seat:
            assert [t["legal"] for t in mine[-3:]] == [False, False, False]
