"""The self-play agent loop against a rollout server that generates with the real tiny model.

verl's own CPU tests fake `server_manager.generate`; here it is `model.generate` of the project's
tiny model in this process (sampling, seeded per request). Each game is then replayed through the
arena's episode engine with the same reply texts, and every output is checked against it: the
prompt token ids are the tokenizer's chat-template encoding of the seat's chat the arena renders,
the response ids are what the model generated and decode to the reply, and the rewards, legality,
seats, turns and episode fields are the arena's. The base tiny model mostly answers with
something that is not a legal move, which exercises the invalid-move rules; a briefly
format-trained tiny model (built by the session, `model_testkit.kuhn_model`) plays whole Kuhn
games with legal moves. Whole games as conversation samples are plumbing, checked with a scripted
server in test_verl_agent_loop.py.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

from model_testkit import kuhn_model
from verl_testkit import Generation, ModelServer, loop_config, make_loop

from core.endpoint import Completion
from core.reasoning import split_reasoning
from core.tiny_model import ensure_tiny_model
from games.engine import EpisodeOptions, play_episode
from games.episode import EpisodeResult
from games.players.llm import FunctionPlayer
from games.spec import get_game
from train_backend.verl import names

RESPONSE_LENGTH = 40  # the server may generate more; the loop keeps this many tokens
PENALTY = {"tic_tac_toe": -11.0, "kuhn_poker": -11.0}  # -1 - 10 (board), -ante - 10 (Kuhn)


@pytest.fixture(scope="module")
def base_server() -> ModelServer:
    return ModelServer(ensure_tiny_model(), seed=7, max_new_tokens=RESPONSE_LENGTH + 8)


@pytest.fixture(scope="module")
def kuhn_server() -> ModelServer:
    return ModelServer(kuhn_model(), seed=3, max_new_tokens=RESPONSE_LENGTH)


async def play(
    server: ModelServer,
    game: str,
    seed: int,
    *,
    style: str = "full",
    invalid: str = "penalty",
    temperature: float = 1.0,
    unit: str = "turn",
) -> tuple[list[Any], list[Generation], dict[str, float]]:
    loop = make_loop(
        server, loop_config(response_length=RESPONSE_LENGTH), tokenizer=server.tokenizer
    )
    start = len(server.generations)
    sampling = {"temperature": temperature, "top_p": 1.0}
    outputs = await loop.run(
        dict(sampling),
        game=game,
        seed=seed,
        prompt_style=style,
        invalid=invalid,
        sample_unit=unit,
        uid=f"u{seed}",
        session_id=2,
    )
    return outputs, server.generations[start:], sampling


async def arena_replay(
    game: str, seed: int, style: str, invalid: str, texts: dict[int, list[str]]
) -> EpisodeResult:
    """The arena's episode engine, each seat answering with the texts the model generated."""
    calls: dict[int, int] = defaultdict(int)

    async def respond(messages: list[dict[str, str]], seat: int, _seed: int) -> Completion:
        text = texts[seat][calls[seat]]
        calls[seat] += 1
        answer, reasoning = split_reasoning(text)
        return Completion(text=answer, reasoning=reasoning)

    player = FunctionPlayer(respond, name="replay")
    return await play_episode(
        get_game(game), [player, player], seed, EpisodeOptions(style, invalid=invalid)
    )


def chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return list(ids)


async def check_against_arena(
    server: ModelServer,
    outputs: list[Any],
    generations: list[Generation],
    *,
    game: str,
    seed: int,
    style: str,
    invalid: str,
    sampling: dict[str, float],
) -> EpisodeResult:
    tokenizer = server.tokenizer
    assert outputs, "the game was dropped"
    assert len(outputs) == len(generations)  # one output per model call, in play order
    texts: dict[int, list[str]] = defaultdict(list)
    for output in outputs:
        reply = tokenizer.decode(output.response_ids, skip_special_tokens=True)
        texts[output.extra_fields[names.SEAT]].append(reply)
    arena = await arena_replay(game, seed, style, invalid, texts)
    assert arena.error is None
    assert len(arena.turns) == len(outputs)

    episode = f"u{seed}_2"
    for output, generation, turn in zip(outputs, generations, arena.turns, strict=True):
        fields = output.extra_fields
        seat = turn["seat"]
        # what the server was sent: the seat's chat, rendered by the model's chat template
        assert generation.request_id == f"{episode}-seat{seat}"
        assert output.prompt_ids == generation.prompt_ids
        assert output.prompt_ids == chat_ids(tokenizer, turn["messages"])
        assert generation.sampling_params == {**sampling, "max_tokens": RESPONSE_LENGTH}
        # what it generated, cut to the response length; the mask covers every kept token
        kept = generation.token_ids[:RESPONSE_LENGTH]
        assert output.response_ids == kept and 0 < len(kept) <= RESPONSE_LENGTH
        assert output.response_mask == [1] * len(kept)
        assert output.response_logprobs == pytest.approx(generation.log_probs[: len(kept)])
        assert all(lp <= 0 for lp in output.response_logprobs)
        reply = tokenizer.decode(kept, skip_special_tokens=True)
        assert split_reasoning(reply)[0] == turn["reply"]
        # the turn as the arena scores it
        assert (fields[names.SEAT], fields[names.TURN]) == (seat, turn["turn"])
        assert (fields[names.ACTION], fields[names.LEGAL]) == (turn["action"], turn["legal"])
        assert fields[names.REWARD] == pytest.approx(turn["reward"])
        assert output.reward_score == pytest.approx(turn["reward"])
        assert (fields[names.GAME], fields[names.SEED]) == (game, seed)
        assert (fields[names.EPISODE], fields[names.GROUP]) == (episode, f"u{seed}")
    for seat in (0, 1):
        seat_outputs = [o for o in outputs if o.extra_fields[names.SEAT] == seat]
        assert [o.extra_fields[names.TURN] for o in seat_outputs] == list(range(len(seat_outputs)))
        total = sum(o.extra_fields[names.REWARD] for o in seat_outputs)
        assert total == pytest.approx(arena.rewards[seat])
    return arena


def check_invalid_rule(outputs: list[Any], arena: EpisodeResult, game: str, invalid: str) -> None:
    """Invalid replies: with `penalty` the game ends at the first one, the offender gets the
    penalty and nobody wins; with `retry:K` the seat is re-asked up to K times for 0 reward."""
    legal = [o.extra_fields[names.LEGAL] for o in outputs]
    rewards = [o.extra_fields[names.REWARD] for o in outputs]
    retries = int(invalid.split(":")[1]) if invalid.startswith("retry:") else 0
    if arena.invalid_seat is None:
        assert all(legal) or retries > 0
        return
    last = outputs[-1].extra_fields
    assert last[names.SEAT] == arena.invalid_seat and last[names.LEGAL] is False
    assert last[names.ACTION] is None
    assert rewards[-1] == pytest.approx(PENALTY[game])
    # the failed asks before it, for the same move of the same seat, were re-asks worth 0
    streak = 0
    for output in reversed(outputs[:-1]):
        fields = output.extra_fields
        if fields[names.LEGAL] or fields[names.SEAT] != arena.invalid_seat:
            break
        assert fields[names.REWARD] == 0.0
        streak += 1
    assert streak == retries
    other = 1 - arena.invalid_seat
    for output in outputs:  # the other seat got its format bonuses only: no win for a forfeit
        if output.extra_fields[names.SEAT] == other:
            bonus = 0.05 if output.extra_fields[names.LEGAL] else 0.0  # 0: a re-asked reply
            assert output.extra_fields[names.REWARD] == pytest.approx(bonus)


@pytest.mark.parametrize("game", ["tic_tac_toe", "kuhn_poker"])
@pytest.mark.parametrize("invalid", ["penalty", "retry:2"])
async def test_games_with_the_tiny_model_generating_match_the_arena(
    base_server: ModelServer, game: str, invalid: str
):
    for seed in (0, 1):
        outputs, generations, sampling = await play(base_server, game, seed, invalid=invalid)
        arena = await check_against_arena(
            base_server, outputs, generations,
            game=game, seed=seed, style="full", invalid=invalid, sampling=sampling,
        )  # fmt: skip
        check_invalid_rule(outputs, arena, game, invalid)


async def test_the_same_seed_replays_the_same_game():
    def server() -> ModelServer:
        return ModelServer(ensure_tiny_model(), seed=7, max_new_tokens=RESPONSE_LENGTH)

    first, *_ = await play(server(), "kuhn_poker", 4, invalid="retry:1")
    again, *_ = await play(server(), "kuhn_poker", 4, invalid="retry:1")
    assert [o.response_ids for o in first] == [o.response_ids for o in again]
    assert [o.prompt_ids for o in first] == [o.prompt_ids for o in again]


def first_re_ask(outputs: list[Any]) -> tuple[Any, Any] | None:
    """An invalid reply and the seat's next ask, if the game has one."""
    for index, output in enumerate(outputs[:-1]):
        if not output.extra_fields[names.LEGAL]:
            following = outputs[index + 1]
            assert following.extra_fields[names.SEAT] == output.extra_fields[names.SEAT]
            return output, following
    return None


async def test_a_re_ask_shows_the_model_its_own_invalid_reply(base_server: ModelServer):
    pairs = [
        first_re_ask((await play(base_server, "tic_tac_toe", seed, invalid="retry:1"))[0])
        for seed in range(3)
    ]
    found = [pair for pair in pairs if pair is not None]
    assert found, "the base tiny model made no invalid reply in three games"
    first, second = found[0]
    assert second.extra_fields[names.TURN] == first.extra_fields[names.TURN] + 1
    tokenizer = base_server.tokenizer
    answer, _ = split_reasoning(tokenizer.decode(first.response_ids, skip_special_tokens=True))
    chat = tokenizer.decode(second.prompt_ids, skip_special_tokens=False)
    assert chat.startswith(tokenizer.decode(first.prompt_ids, skip_special_tokens=False))
    assert f"<|im_start|>assistant\n{answer}<|im_end|>" in chat
    assert "That reply is not a valid move" in chat


async def test_whole_kuhn_games_with_a_format_trained_model(kuhn_server: ModelServer):
    for seed in range(3):
        outputs, generations, sampling = await play(
            kuhn_server, "kuhn_poker", seed, style="compact", temperature=0.6
        )
        arena = await check_against_arena(
            kuhn_server, outputs, generations,
            game="kuhn_poker", seed=seed, style="compact", invalid="penalty", sampling=sampling,
        )  # fmt: skip
        assert arena.invalid_seat is None, (
            f"game {seed}: seat {arena.invalid_seat} of the format-trained Kuhn model "
            f"(model_testkit.KUHN_FORMAT) made an invalid move: {arena.turns[-1]['reply']!r}"
        )
        assert arena.outcomes is not None
        seats = {o.extra_fields[names.SEAT] for o in outputs}
        assert seats == {0, 1}  # both seats played the policy
        # the outcome sits on each seat's last turn; earlier turns carry the format bonus
        for seat in seats:
            seat_rewards = [
                o.extra_fields[names.REWARD] for o in outputs if o.extra_fields[names.SEAT] == seat
            ]
            assert seat_rewards[:-1] == pytest.approx([0.05] * (len(seat_rewards) - 1))
            assert seat_rewards[-1] == pytest.approx(0.05 + outcome(arena, seat))


def outcome(arena: EpisodeResult, seat: int) -> float:
    """The game-end reward of a seat: its return, a draw worth +0.1 (facts.md)."""
    value = arena.returns[seat]
    return 0.1 if value == 0 else value


@pytest.mark.parametrize("game", ["tic_tac_toe", "kuhn_poker"])
async def test_conversation_samples_with_the_tiny_model_generating(
    base_server: ModelServer, game: str
):
    tokenizer = base_server.tokenizer
    im_end, newline = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.encode("\n")[0]
    for seed in (0, 1):
        outputs, generations, _ = await play(
            base_server, game, seed, invalid="retry:2", unit="conversation"
        )
        assert outputs, "the game was dropped"
        by_seat = {o.extra_fields[names.SEAT]: o for o in outputs}
        assert len(by_seat) == len(outputs)  # one sample per seat
        texts: dict[int, list[str]] = defaultdict(list)
        for seat, output in by_seat.items():
            calls = [g for g in generations if g.request_id.endswith(f"-seat{seat}")]
            spans = output.extra_fields[names.SPANS]
            sequence = output.prompt_ids + output.response_ids
            assert len(calls) == len(spans) >= 1
            for call, (start, end) in zip(calls, spans, strict=True):
                # the model saw the sample up to this reply, and generated the reply itself
                assert call.prompt_ids == sequence[: len(output.prompt_ids) + start]
                reply = call.token_ids[:RESPONSE_LENGTH]
                assert output.response_ids[start:end] == reply
                assert output.response_logprobs[start:end] == pytest.approx(
                    call.log_probs[: len(reply)]
                )
                if reply[-1] == im_end and end < len(output.response_ids):
                    assert output.response_ids[end] == newline  # as the chat template renders
                texts[seat].append(tokenizer.decode(reply, skip_special_tokens=True))
            replies = {i for start, end in spans for i in range(start, end)}
            assert {i for i, m in enumerate(output.response_mask) if m} == replies
        arena = await arena_replay(game, seed, "full", "retry:2", texts)
        for seat, output in by_seat.items():
            turns = [t for t in arena.turns if t["seat"] == seat]
            assert output.extra_fields[names.TURN] == [t["turn"] for t in turns]
            assert output.extra_fields[names.REWARD] == pytest.approx([t["reward"] for t in turns])
            assert output.prompt_ids == chat_ids(tokenizer, turns[0]["messages"])
