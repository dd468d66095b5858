"""The self-play agent loop plays whole games through a scripted rollout server, like the arena,
as one sample per model call (`sample_unit: turn`) or per seat's conversation (the default)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

from verl_testkit import (
    Script,
    ScriptedServer,
    first_legal,
    loop_config,
    make_loop,
    tiny_tokenizer,
)

from games.engine import EpisodeOptions, play_episode
from games.spec import get_game
from games.testing import scripted_player
from train_backend.verl import names

TRAINING_GAMES = ("tic_tac_toe", "kuhn_poker", "mini_hanabi")


def random_legal(legal: list[str], seat: int, call: int) -> str:
    rng = random.Random(f"{seat}/{call}")
    return f"<think>thinking {rng.random():.3f}</think>\n<answer>{rng.choice(legal)}</answer>"


async def play(game: str, seed: int, script, unit: str = "turn", **row):
    server = ScriptedServer(script)
    row = {"prompt_style": "full", "invalid": "penalty", **row}
    outputs = await make_loop(server).run(
        {"temperature": 1.0}, game=game, seed=seed, sample_unit=unit, **row
    )
    return outputs, server


@pytest.mark.parametrize("game", TRAINING_GAMES)
async def test_full_game_matches_the_arena_turn_for_turn(game):
    seed = 11
    outputs, server = await play(game, seed, random_legal, uid="p7", session_id=1)
    arena = await play_episode(
        get_game(game), [scripted_player(random_legal)] * 2, seed, EpisodeOptions("full")
    )
    assert arena.invalid_seat is None and len(arena.turns) >= 2
    played = [
        (
            o.extra_fields[names.SEAT],
            o.extra_fields[names.TURN],
            o.extra_fields[names.ACTION],
            o.extra_fields[names.LEGAL],
        )
        for o in outputs
    ]
    assert played == [(t["seat"], t["turn"], t["action"], t["legal"]) for t in arena.turns]
    rewards = [o.extra_fields[names.REWARD] for o in outputs]
    assert rewards == pytest.approx([t["reward"] for t in arena.turns])
    assert [o.reward_score for o in outputs] == pytest.approx(rewards)
    for seat in (0, 1):
        seat_rewards = [
            r for o, r in zip(outputs, rewards, strict=True) if o.extra_fields[names.SEAT] == seat
        ]
        assert sum(seat_rewards) == pytest.approx(arena.rewards[seat])
    for output, request in zip(outputs, server.requests, strict=True):
        fields = output.extra_fields
        assert (fields[names.GAME], fields[names.SEED]) == (game, seed)
        assert (fields[names.EPISODE], fields[names.GROUP]) == ("p7_1", "p7")
        assert fields["reward_extra_info"] == {}
        assert fields["min_global_steps"] == fields["max_global_steps"] == server.global_steps
        assert output.prompt_ids == request["prompt_ids"]
        assert output.response_ids == request["token_ids"]
        assert output.response_mask == [1] * len(output.response_ids)
        assert output.response_logprobs == [-0.25] * len(output.response_ids)
        assert request["request_id"] == f"p7_1-seat{fields[names.SEAT]}"


async def test_tic_tac_toe_outcome_on_the_last_turns():
    # First legal move every time: X takes (0,0), (0,2), (1,1), (2,0) and wins on the diagonal.
    outputs, _ = await play("tic_tac_toe", 0, first_legal)
    actions = [o.extra_fields[names.ACTION] for o in outputs]
    assert actions == [
        "<X(0,0)>", "<O(0,1)>", "<X(0,2)>", "<O(1,0)>", "<X(1,1)>", "<O(1,2)>", "<X(2,0)>"
    ]  # fmt: skip
    rewards = [o.extra_fields[names.REWARD] for o in outputs]
    assert rewards == pytest.approx([0.05] * 5 + [-1 + 0.05, 1 + 0.05])


async def test_seat_sees_its_own_chat_with_earlier_answers_but_not_reasoning():
    outputs, _ = await play("tic_tac_toe", 0, first_legal)
    tokenizer = tiny_tokenizer()
    x_third_turn = tokenizer.decode(outputs[4].prompt_ids, skip_special_tokens=False)
    # X's two earlier replies are in its chat, as answer text only
    assert x_third_turn.count("<|im_start|>assistant\n<answer><X(") == 2
    assert "the first option is fine" not in x_third_turn
    assert "Your opponent (O) chose <O(1,0)>" in x_third_turn
    assert x_third_turn.rstrip().endswith("assistant")
    o_first_turn = tokenizer.decode(outputs[1].prompt_ids, skip_special_tokens=False)
    assert "player 2 of 2" in o_first_turn and "assistant\n<answer>" not in o_first_turn


async def test_invalid_move_ends_the_game_with_the_board_penalty():
    def o_slips_on_second_move(legal: list[str], seat: int, call: int) -> str:
        if seat == 1 and call == 1:
            return "<answer><X(9,9)></answer>"
        return first_legal(legal, seat, call)

    outputs, _ = await play("tic_tac_toe", 0, o_slips_on_second_move)
    seats = [o.extra_fields[names.SEAT] for o in outputs]
    assert seats == [0, 1, 0, 1]  # the game stops at O's invalid reply
    rewards = [o.extra_fields[names.REWARD] for o in outputs]
    # X gets only its format bonuses (no win); O: -1 - 10, no format bonus for the invalid turn.
    assert rewards == pytest.approx([0.05, 0.05, 0.05, -11.0])
    assert outputs[-1].extra_fields[names.LEGAL] is False
    assert outputs[-1].extra_fields[names.ACTION] is None


async def test_invalid_first_bet_in_kuhn_costs_the_ante_plus_ten():
    outputs, _ = await play("kuhn_poker", 3, lambda legal, seat, call: "no tags at all")
    assert len(outputs) == 1
    assert outputs[0].extra_fields[names.REWARD] == pytest.approx(-1 - 10)


async def test_game_whose_chat_outgrows_the_prompt_budget_is_dropped():
    server = ScriptedServer(first_legal)
    loop = make_loop(server, loop_config(prompt_length=200))
    outputs = await loop.run({}, game="tic_tac_toe", seed=0, prompt_style="full")
    assert outputs == [] and server.requests == []


async def test_conversation_game_whose_chat_outgrows_the_budget_is_dropped():
    # The first prompts fit, but the seats' chats outgrow 650 tokens within the game.
    server = ScriptedServer(first_legal)
    loop = make_loop(server, loop_config(prompt_length=650))
    outputs = await loop.run({}, game="tic_tac_toe", seed=0, sample_unit="conversation")
    assert outputs == [] and len(server.requests) >= 2


async def test_replies_are_cut_to_the_response_length():
    long_reply = lambda legal, seat, call: "<think>" + "x " * 300 + "</think>"  # noqa: E731
    server = ScriptedServer(long_reply)
    loop = make_loop(server, loop_config(response_length=16))
    outputs = await loop.run({}, game="kuhn_poker", seed=0, sample_unit="turn")
    assert len(outputs) == 1 and len(outputs[0].response_ids) == 16
    assert outputs[0].extra_fields[names.REWARD] == pytest.approx(-11)  # cut off: no answer


async def test_retry_mode_trains_on_the_re_asked_turn_too():
    def o_slips_once(legal: list[str], seat: int, call: int) -> str:
        return "<answer>pass</answer>" if (seat, call) == (1, 0) else first_legal(legal, seat, call)

    server = ScriptedServer(o_slips_once)
    outputs = await make_loop(server).run(
        {}, game="tic_tac_toe", seed=0, invalid="retry:1", sample_unit="turn"
    )
    arena = await play_episode(
        get_game("tic_tac_toe"),
        [scripted_player(o_slips_once)] * 2,
        0,
        EpisodeOptions("full", invalid="retry:1"),
    )
    assert [(o.extra_fields[names.SEAT], o.extra_fields[names.TURN]) for o in outputs][:3] == [
        (0, 0), (1, 0), (1, 1)
    ]  # fmt: skip
    assert outputs[1].extra_fields[names.LEGAL] is False
    assert outputs[1].extra_fields[names.REWARD] == 0.0  # re-asked: no bonus, no penalty
    assert [o.extra_fields[names.REWARD] for o in outputs] == pytest.approx(
        [t["reward"] for t in arena.turns]
    )
    # the re-ask shows the model its invalid reply and the reason
    re_ask = tiny_tokenizer().decode(outputs[2].prompt_ids, skip_special_tokens=True)
    assert "That reply is not a valid move" in re_ask


# ---- one sample per seat's conversation --------------------------------------------------------


def conversation_turns(output) -> list[tuple[int, int, float, list[int]]]:
    """(seat, turn, reward, reply token ids) of each turn in a conversation sample."""
    fields = output.extra_fields
    return [
        (fields[names.SEAT], turn, reward, output.response_ids[start:end])
        for turn, reward, (start, end) in zip(
            fields[names.TURN], fields[names.REWARD], fields[names.SPANS], strict=True
        )
    ]


@pytest.mark.parametrize("game", TRAINING_GAMES)
async def test_a_conversation_sample_is_the_seats_whole_chat_with_loss_on_its_replies(game):
    outputs, server = await play(
        game, 11, random_legal, unit="conversation", uid="p7", session_id=1
    )
    arena = await play_episode(
        get_game(game), [scripted_player(random_legal)] * 2, 11, EpisodeOptions("full")
    )
    assert [o.extra_fields[names.SEAT] for o in outputs] == [0, 1]  # one sample per seat
    for output in outputs:
        seat = output.extra_fields[names.SEAT]
        calls = [r for r in server.requests if r["request_id"] == f"p7_1-seat{seat}"]
        turns = [t for t in arena.turns if t["seat"] == seat]
        mine = conversation_turns(output)
        assert [t for _, t, _, _ in mine] == [t["turn"] for t in turns]
        assert [r for *_, r, _ in mine] == pytest.approx([t["reward"] for t in turns])
        assert len(calls) == len(mine) >= 1
        sequence = output.prompt_ids + output.response_ids
        for call, (start, end), (*_, reply) in zip(
            calls, output.extra_fields[names.SPANS], mine, strict=True
        ):
            # each call saw exactly the sample up to its reply (earlier replies verbatim)...
            assert call["prompt_ids"] == sequence[: len(output.prompt_ids) + start]
            # ...and its reply is in the sample token for token, the only tokens with loss
            assert reply == call["token_ids"]
            assert output.response_mask[start:end] == [1] * (end - start)
        replies = sum(end - start for start, end in output.extra_fields[names.SPANS])
        assert sum(output.response_mask) == replies
        # observations follow every reply but the last
        assert (replies < len(output.response_ids)) == (len(mine) > 1)
        assert output.response_logprobs == [-0.25 if m else 0.0 for m in output.response_mask]
        assert output.prompt_ids == calls[0]["prompt_ids"]


def salted_legal(salt: int) -> Script:
    """A legal move drawn from (salt, seat, call): each salt plays its own betting line."""

    def script(legal: list[str], seat: int, call: int) -> str:
        rng = random.Random(f"{salt}/{seat}/{call}")
        return f"<think>salt {salt}</think>\n<answer>{rng.choice(legal)}</answer>"

    return script


async def test_whole_kuhn_games_as_conversation_samples_pay_the_outcome_on_the_last_turn():
    returns = set()
    for seed in range(6):
        script = salted_legal(seed)
        outputs, _ = await play("kuhn_poker", seed, script, unit="conversation")
        arena = await play_episode(
            get_game("kuhn_poker"), [scripted_player(script)] * 2, seed, EpisodeOptions("full")
        )
        assert arena.invalid_seat is None and arena.outcomes is not None
        assert [o.extra_fields[names.SEAT] for o in outputs] == [0, 1]
        for output in outputs:
            seat = output.extra_fields[names.SEAT]
            rewards = output.extra_fields[names.REWARD]
            turns = [t for t in arena.turns if t["seat"] == seat]
            assert rewards == pytest.approx([t["reward"] for t in turns])
            # the format bonus on every turn; the fold or showdown pays on the seat's last one
            assert rewards[:-1] == pytest.approx([0.05] * (len(rewards) - 1))
            assert rewards[-1] == pytest.approx(0.05 + arena.returns[seat])
        returns.add(tuple(arena.returns))
    assert len(returns) > 1  # the games ended differently: the outcome is the game's own


async def test_a_conversation_keeps_the_reasoning_and_shows_the_opponents_moves():
    outputs, _ = await play("tic_tac_toe", 0, first_legal, unit="conversation")
    tokenizer = tiny_tokenizer()
    x_chat = tokenizer.decode(outputs[0].prompt_ids + outputs[0].response_ids)
    # all four of X's replies, reasoning included (the arena's chat keeps only the answers)
    assert x_chat.count("<think>the first option is fine</think>") == 4
    assert "Your opponent (O) chose <O(1,0)>" in x_chat
    observation = outputs[0].response_mask.index(0)
    assert "chose <O(0,1)>" in tokenizer.decode(outputs[0].response_ids[observation:])
    rewards = [r for _, _, r, _ in conversation_turns(outputs[0])]
    assert rewards == pytest.approx([0.05, 0.05, 0.05, 1.05])  # X wins on its fourth move


async def test_a_conversation_holds_the_re_asked_turns_too():
    def x_slips_twice(legal: list[str], seat: int, call: int) -> str:
        return "<answer>pass</answer>" if seat == 0 else first_legal(legal, seat, call)

    outputs, server = await play(
        "tic_tac_toe", 0, x_slips_twice, unit="conversation", invalid="retry:2"
    )
    assert len(outputs) == 1  # X never moved, so O never played
    assert [t for _, t, _, _ in conversation_turns(outputs[0])] == [0, 1, 2]
    assert [r for *_, r, _ in conversation_turns(outputs[0])] == pytest.approx([0, 0, -11.0])
    text = tiny_tokenizer().decode(outputs[0].response_ids, skip_special_tokens=True)
    assert text.count("That reply is not a valid move") == 2
    assert len(server.requests) == 3


async def test_compact_prompts_stand_alone_so_each_turn_is_its_own_sample():
    outputs, _ = await play(
        "tic_tac_toe", 0, first_legal, unit="conversation", prompt_style="compact"
    )
    assert len(outputs) == 7 and all(
        not isinstance(o.extra_fields[names.TURN], list) for o in outputs
    )
