"""The `minimax` player: exact Tic-Tac-Toe play through OpenSpiel, and clear refusals."""

from __future__ import annotations

import asyncio
import random

import pytest

from core.errors import MarsError
from games.engine import play_episode
from games.players import PlayerContext, make_player
from games.players.minimax import best_actions
from games.spec import get_game


def _outcomes(first: str, second: str, episodes: int) -> list[list[str]]:
    spec = get_game("tic_tac_toe")
    context = PlayerContext(spec=spec)
    players = [make_player(first, context), make_player(second, context)]

    async def play() -> list[list[str]]:
        return [
            list((await play_episode(spec, players, seed)).outcomes) for seed in range(episodes)
        ]

    return asyncio.run(play())


@pytest.mark.parametrize("player", ["minimax", "minimax:first", "minimax:last"])
def test_minimax_never_loses_to_random_from_either_seat(player: str) -> None:
    as_first = _outcomes(player, "random", 300)
    as_second = _outcomes("random", player, 300)
    assert all(outcome[0] != "loss" for outcome in as_first)
    assert all(outcome[1] != "loss" for outcome in as_second)
    # Perfect play also punishes random mistakes: it wins most games, not merely draws.
    assert sum(o[0] == "win" for o in as_first) / 300 > 0.9
    assert sum(o[1] == "win" for o in as_second) / 300 > 0.6


def test_minimax_against_itself_is_always_a_draw() -> None:
    assert {tuple(o) for o in _outcomes("minimax", "minimax", 40)} == {("draw", "draw")}


def test_best_actions_are_the_moves_that_keep_the_value() -> None:
    spec = get_game("tic_tac_toe")
    make_player("minimax", PlayerContext(spec=spec))
    state = spec.game.new_initial_state()
    assert best_actions(spec.game, state) == list(range(9))  # every opening draws
    for action in (4, 0, 8):  # X centre, O corner, X the opposite corner; O to move
        state.apply_action(action)
    best = best_actions(spec.game, state)
    assert best and set(best) <= set(state.legal_actions())
    # Brute force: a move is best iff the opponent cannot then force a win.
    for action in state.legal_actions():
        child = state.child(action)
        assert (action in best) == _draw_or_better(child, mover=state.current_player())


def _draw_or_better(state, mover: int) -> bool:  # type: ignore[no-untyped-def]
    if state.is_terminal():
        return state.returns()[mover] >= 0
    children = [state.child(a) for a in state.legal_actions()]
    if state.current_player() == mover:
        return any(_draw_or_better(c, mover) for c in children)
    return all(_draw_or_better(c, mover) for c in children)


def test_tie_breaks_are_deterministic_and_random_uses_the_rng() -> None:
    spec = get_game("tic_tac_toe")
    context = PlayerContext(spec=spec)
    state = spec.game.new_initial_state()
    first = make_player("minimax:first", context).agent(seat=0, rng=random.Random(0), seed=0)
    last = make_player("minimax:last", context).agent(seat=0, rng=random.Random(0), seed=0)
    assert first.choose(state) == 0 and last.choose(state) == 8  # type: ignore[union-attr]
    picks = {
        make_player("minimax", context)
        .agent(seat=0, rng=random.Random(seed), seed=seed)
        .choose(state)  # type: ignore[union-attr]
        for seed in range(40)
    }
    assert len(picks) > 3


@pytest.mark.parametrize(
    ("text", "game", "message"),
    [
        ("minimax", "kuhn_poker", "deterministic two-player zero-sum"),
        ("minimax:middle", "tic_tac_toe", "one of random, first, last"),
        ("minimax", "connect_four", "solves only small games"),
    ],
)
def test_games_minimax_cannot_play_are_refused(text: str, game: str, message: str) -> None:
    with pytest.raises(MarsError, match=message):
        make_player(text, PlayerContext(spec=get_game(game)))
