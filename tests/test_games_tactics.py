"""The `tactics` player: wins at once, blocks one-move threats, tie-breaks, refusals."""

from __future__ import annotations

import asyncio
import random

import pytest

from core.errors import MarsError
from games.engine import play_episode
from games.players import PlayerContext, make_player
from games.players.tactics import candidate_actions
from games.spec import get_game


def _state_after(game: str, actions: list[int]):  # type: ignore[no-untyped-def]
    state = get_game(game).game.new_initial_state()
    for action in actions:
        state.apply_action(action)
    return state


def _choice(text: str, state, game: str = "tic_tac_toe", seed: int = 0) -> int:  # type: ignore[no-untyped-def]
    player = make_player(text, PlayerContext(spec=get_game(game)))
    return player.agent(seat=0, rng=random.Random(seed), seed=seed).choose(state)  # type: ignore[union-attr]


def test_takes_the_win_before_blocking() -> None:
    # X: 0, 1 (row 0 open at 2); O: 3, 4 (row 1 open at 5); X to move wins at 2.
    state = _state_after("tic_tac_toe", [0, 3, 1, 4])
    assert candidate_actions(state) == [2]
    assert _choice("tactics:first", state) == 2


def test_blocks_the_only_threat() -> None:
    # X: 0, 4 (diagonal open at 8); O to move must take 8, whatever the tie-break.
    state = _state_after("tic_tac_toe", [0, 1, 4])
    assert candidate_actions(state) == [8]
    for text in ("tactics", "tactics:first", "tactics:last"):
        assert _choice(text, state) == 8


def test_with_nothing_at_stake_the_tie_break_decides() -> None:
    state = _state_after("tic_tac_toe", [4])
    assert candidate_actions(state) == state.legal_actions()
    assert _choice("tactics:first", state) == 0
    assert _choice("tactics:last", state) == 8
    assert len({_choice("tactics", state, seed=seed) for seed in range(40)}) > 3


def test_a_double_threat_leaves_every_move_as_a_candidate() -> None:
    # X: 0, 2, 4 with O: 1, 7 -> X threatens 6 (diagonal 2-4-6) and 8 (diagonal 0-4-8); O to
    # move cannot stop both, so no move is safe.
    state = _state_after("tic_tac_toe", [0, 1, 2, 7, 4])
    assert candidate_actions(state) == state.legal_actions()


def test_connect_four_blocks_a_column_threat() -> None:
    # X stacks three in column 3; O (elsewhere) must play column 3.
    state = _state_after("connect_four", [3, 0, 3, 0, 3, 6])
    assert _choice("tactics:last", state, game="connect_four") == 3


def _non_loss(first: str, second: str, seat: int, episodes: int) -> float:
    spec = get_game("tic_tac_toe")
    context = PlayerContext(spec=spec)
    players = [make_player(first, context), make_player(second, context)]

    async def play() -> list[tuple[str, ...]]:
        return [tuple((await play_episode(spec, players, s)).outcomes) for s in range(episodes)]

    outcomes = asyncio.run(play())
    return sum(o[seat] != "loss" for o in outcomes) / episodes


def test_against_random_it_rarely_loses_and_always_taking_the_last_move_often_does() -> None:
    assert _non_loss("tactics:last", "random", 0, 400) > 0.93
    assert _non_loss("random", "tactics:last", 1, 400) > 0.84
    # Never blundering a one-move threat is most of the gap to perfect play against random.
    assert _non_loss("random", "tactics:last", 1, 400) > _non_loss("random", "random", 1, 400) + 0.2


@pytest.mark.parametrize(
    ("text", "game", "message"),
    [
        ("tactics", "kuhn_poker", "deterministic two-player game of perfect information"),
        ("tactics:middle", "tic_tac_toe", "one of random, first, last"),
    ],
)
def test_games_tactics_cannot_play_are_refused(text: str, game: str, message: str) -> None:
    with pytest.raises(MarsError, match=message):
        make_player(text, PlayerContext(spec=get_game(game)))
