"""Turn rewards, outcomes and penalties, checked by hand on constructed episodes."""

from __future__ import annotations

import asyncio
import dataclasses
import re

import pytest

from core.errors import MarsError
from games.chance import ChanceSampler
from games.engine import EpisodeOptions, play_episode
from games.episode import EpisodeResult, conversation
from games.players.base import Player
from games.spec import GameSpec, get_game
from games.testing import scripted_player


def moves_player(moves_by_seat: dict[int, list[str]]) -> Player:
    """A model seat answering with the given labels in order ('GARBAGE': no answer tag)."""

    def script(legal: list[str], seat: int, call: int) -> str:
        move = moves_by_seat[seat][call]
        if move == "GARBAGE":
            return "I am not sure what to do here."
        return f"Reasoning...\n<answer>{move}</answer>"

    return scripted_player(script)


def play(
    game: str | GameSpec, moves: dict[int, list[str]], seed: int = 0, **options
) -> EpisodeResult:
    spec = get_game(game) if isinstance(game, str) else game
    player = moves_player(moves)
    return asyncio.run(play_episode(spec, [player, player], seed, EpisodeOptions(**options)))


def rewards(result: EpisodeResult, seat: int) -> list[float]:
    return [t["reward"] for t in result.seat_turns(seat)]


def test_win_and_loss() -> None:
    result = play(
        "tic_tac_toe",
        {0: ["<X(0,0)>", "<X(0,1)>", "<X(0,2)>"], 1: ["<O(1,0)>", "<O(1,1)>"]},
    )
    assert result.returns == [1.0, -1.0] and result.outcomes == ["win", "loss"]
    assert rewards(result, 0) == pytest.approx([0.05, 0.05, 1.05])
    assert rewards(result, 1) == pytest.approx([0.05, -0.95])
    assert result.rewards == pytest.approx([1.15, -0.9])
    assert result.num_actions == 5 and not result.invalid and not result.truncated


def test_draw_pays_both_seats_the_draw_reward() -> None:
    cells = ["(0,0)", "(1,1)", "(0,2)", "(0,1)", "(2,1)", "(1,2)", "(1,0)", "(2,0)", "(2,2)"]
    result = play(
        "tic_tac_toe",
        {0: [f"<X{c}>" for c in cells[0::2]], 1: [f"<O{c}>" for c in cells[1::2]]},
    )
    assert result.returns == [0.0, 0.0] and result.outcomes == ["draw", "draw"]
    assert rewards(result, 0) == pytest.approx([0.05, 0.05, 0.05, 0.05, 0.15])
    assert rewards(result, 1) == pytest.approx([0.05, 0.05, 0.05, 0.15])


def test_invalid_board_move_ends_the_game_with_the_penalty() -> None:
    result = play("tic_tac_toe", {0: ["<X(1,1)>"], 1: ["GARBAGE"]})
    assert result.invalid_seat == 1 and result.num_actions == 1
    assert result.returns == [0.0, -1.0] and result.outcomes == ["draw", "loss"]
    assert rewards(result, 1) == [-11.0]  # -1 - 10, no format bonus
    assert rewards(result, 0) == [0.05]  # the other seat gets nothing for that step
    offending = result.seat_turns(1)[0]
    assert offending["legal"] is False and offending["action"] is None
    assert "no <answer>" in offending["error"]


def test_an_illegal_but_well_formed_move_is_invalid_too() -> None:
    result = play("tic_tac_toe", {0: ["<X(1,1)>"], 1: ["<O(1,1)>"]})  # the cell is taken
    assert result.invalid_seat == 1 and rewards(result, 1) == [-11.0]


def test_kuhn_penalty_is_own_bet_plus_ten() -> None:
    # Seed 0 deals J to player 1 and Q to player 2; player 1 bets, player 2 answers garbage.
    result = play("kuhn_poker", {0: ["<BET>"], 1: ["GARBAGE"]}, seed=0)
    assert result.returns == [0.0, -1.0]
    assert rewards(result, 1) == [-11.0] and rewards(result, 0) == [0.05]


def test_leduc_penalty_counts_every_chip_put_in() -> None:
    # Raise (1 + 2 = 3 in), re-raise (1 + 4 = 5 in), then the first player fails: 3 chips lost.
    result = play("leduc_poker", {0: ["<RAISE>", "GARBAGE"], 1: ["<RAISE>"]}, seed=3)
    assert result.invalid_seat == 0
    assert result.returns == [-3.0, 0.0] and result.outcomes == ["loss", "draw"]
    assert rewards(result, 0) == pytest.approx([0.05, -13.0])
    assert rewards(result, 1) == [0.05]
    # Raise, re-raise, call (5 chips each); in round 2 player 1 raises and player 2 fails.
    result = play(
        "leduc_poker", {0: ["<RAISE>", "<CALL>", "<RAISE>"], 1: ["<RAISE>", "GARBAGE"]}, seed=3
    )
    assert result.returns == [0.0, -5.0] and rewards(result, 1) == pytest.approx([0.05, -15.0])
    assert rewards(result, 0) == pytest.approx([0.05, 0.05, 0.05])


def test_poker_outcome_is_the_chip_result() -> None:
    # Seed 0: J vs Q. Bet, call: the showdown gives player 2 the pot of 4 (2 from each).
    result = play("kuhn_poker", {0: ["<BET>"], 1: ["<BET>"]}, seed=0)
    assert result.returns == [-2.0, 2.0]
    assert rewards(result, 0) == pytest.approx([-1.95]) and rewards(result, 1) == [2.05]


def test_hanabi_penalty_is_the_score_so_far_plus_ten() -> None:
    penalties = {}
    for seed in range(12):
        result = play("mini_hanabi", {0: ["<Play card 1>"], 1: ["GARBAGE"]}, seed=seed)
        prompt = result.seat_turns(1)[0]["messages"][-1]["content"]
        fireworks = re.search(r"Fireworks: (.*)", prompt).group(1)
        score = sum(int(pile[1:]) for pile in fireworks.split())
        assert result.returns == [0.0, 0.0] and result.outcomes == ["loss", "loss"]
        assert rewards(result, 1) == [-score - 10.0]
        assert rewards(result, 0) == [0.05]
        penalties[score] = seed
    assert set(penalties) == {0, 1}  # both cases occur among these seeds


def test_length_penalty_is_small_and_linear() -> None:
    long_reply = "word " * 4096  # the scripted player counts words as completion tokens
    spec = get_game("tic_tac_toe")

    def script(legal: list[str], seat: int, call: int) -> str:
        return (long_reply if seat == 0 and call == 0 else "") + f"<answer>{legal[0]}</answer>"

    player = scripted_player(script)
    result = asyncio.run(play_episode(spec, [player, player], 0))
    first = result.seat_turns(0)[0]
    tokens = first["usage"]["completion_tokens"]
    assert tokens == 4097
    assert first["reward"] == pytest.approx(0.05 - 0.1 * (tokens - 2048) / 2048)
    assert result.seat_turns(0)[1]["reward"] == pytest.approx(0.05)


def test_retry_mode_reasks_with_the_error_then_plays_on() -> None:
    result = play(
        "tic_tac_toe",
        {0: ["GARBAGE", "<X(0,0)>", "<X(0,1)>", "<X(0,2)>"], 1: ["<O(1,0)>", "<O(1,1)>"]},
        invalid="retry:2",
    )
    assert result.returns == [1.0, -1.0] and not result.invalid
    first, second = result.seat_turns(0)[:2]
    assert first["retried"] and not first["legal"] and first["reward"] == 0.0
    assert second["legal"] and second["attempt"] == 1 and second["turn"] == 1
    notice = second["messages"][-1]["content"]
    assert "not a valid move" in notice and "Legal actions: <X(0,0)>" in notice
    assert second["messages"][-2]["role"] == "assistant"  # the invalid reply, echoed
    assert [t["turn"] for t in result.seat_turns(0)] == [0, 1, 2, 3]


def test_retry_mode_gives_the_penalty_after_k_reasks() -> None:
    result = play("tic_tac_toe", {0: ["GARBAGE"] * 3, 1: []}, invalid="retry:2")
    assert result.invalid_seat == 0 and result.num_actions == 0
    assert [t["attempt"] for t in result.turns] == [0, 1, 2]
    assert [t["retried"] for t in result.turns] == [True, True, False]
    assert rewards(result, 0) == [0.0, 0.0, -11.0]
    assert result.model_turns == [3, 0] and result.invalid_turns == [3, 0]


def test_the_action_cap_ends_the_game_without_a_draw_bonus() -> None:
    spec = get_game("tic_tac_toe")
    capped = dataclasses.replace(spec, rewards=dataclasses.replace(spec.rewards, max_actions=3))
    result = play(capped, {0: ["<X(0,0)>", "<X(2,2)>"], 1: ["<O(1,1)>"]})
    assert result.truncated and result.num_actions == 3
    assert result.returns == [0.0, 0.0] and result.outcomes == ["draw", "draw"]
    assert result.rewards == pytest.approx([0.1, 0.05])


def test_conversation_rebuilds_the_chat_from_recorded_turns() -> None:
    result = play(
        "tic_tac_toe",
        {0: ["<X(0,0)>", "<X(0,1)>", "<X(0,2)>"], 1: ["<O(1,0)>", "<O(1,1)>"]},
    )
    record = result.to_record()
    seat0 = [t for t in record["turns"] if t["seat"] == 0]
    assert "messages" not in seat0[0]  # only what each turn added is written
    chat = conversation(seat0)
    last = result.seat_turns(0)[-1]
    assert chat[:-1] == last["messages"]
    assert chat[-1] == {"role": "assistant", "content": last["reply"]}


def test_invalid_option_is_checked() -> None:
    with pytest.raises(MarsError, match="retry:K"):
        EpisodeOptions(invalid="retry:zero")
    with pytest.raises(MarsError, match="prompt-style"):
        EpisodeOptions(prompt_style="chatty")  # type: ignore[arg-type]


@pytest.mark.parametrize(("game", "deals"), [("kuhn_poker", 6), ("leduc_poker", 120)])
def test_deals_cycle_through_every_deal_over_consecutive_seeds(game: str, deals: int) -> None:
    spec = get_game(game)
    assert spec.deal_count == deals

    def deal(seed: int) -> tuple[int, ...]:
        sampler, state, cards = ChanceSampler(spec, seed), spec.game.new_initial_state(), []
        while not state.is_terminal():
            if state.is_chance_node():
                cards.append(sampler.sample(state))
                state.apply_action(cards[-1])
            else:
                state.apply_action(1)  # call / bet: reaches every chance node
        return tuple(cards)

    first_cycle = [deal(seed) for seed in range(deals)]
    assert len(set(first_cycle)) == deals
    assert [deal(seed) for seed in range(deals, 2 * deals)] == first_cycle
