"""`minimax`: perfect play in small deterministic two-player zero-sum games (Tic-Tac-Toe).

The whole game tree is solved once per game by memoised negamax over OpenSpiel states (4,520
decision states in Tic-Tac-Toe, a fraction of a second) and kept for the process. A game whose
tree exceeds `MAX_STATES` (Connect Four) is refused with a clear error rather than searched for
hours.

Among equally good moves the player picks at random with the episode's RNG (`minimax`), or
always the first or last in the legal list (`minimax:first`, `minimax:last`), a deterministic
policy that is easier for a small model to imitate.
"""

from __future__ import annotations

import random

import pyspiel

from core.errors import MarsError
from games.players.base import BotAgent, Player, PlayerContext, register_player
from games.players.tie_break import check_rule_game, parse_tie_break, pick, player_name

MAX_STATES = 200_000


class _TooLarge(Exception):
    pass


_SOLVED: dict[str, dict[str, float]] = {}  # by the game's string (name and parameters)


def solved_values(game: pyspiel.Game) -> dict[str, float]:
    """Value of every decision state for the player to move, keyed by `str(state)`."""
    solved = _SOLVED.get(str(game))
    if solved is not None:
        return solved
    values: dict[str, float] = {}

    def value(state: pyspiel.State) -> float:
        key = str(state)
        known = values.get(key)
        if known is not None:
            return known
        if len(values) >= MAX_STATES:
            raise _TooLarge
        best = max(_action_values(state, value).values())
        values[key] = best
        return best

    try:
        value(game.new_initial_state())
    except _TooLarge:
        raise MarsError(
            f"player 'minimax' solves only small games; {game} has more than {MAX_STATES:,} states"
        ) from None
    _SOLVED[str(game)] = values
    return values


def _action_values(state: pyspiel.State, value: object) -> dict[int, float]:
    mover = state.current_player()
    out: dict[int, float] = {}
    for action in state.legal_actions():
        child = state.child(action)
        if child.is_terminal():
            out[action] = child.returns()[mover]
        elif child.current_player() == mover:
            out[action] = value(child)  # type: ignore[operator]
        else:
            out[action] = -value(child)  # type: ignore[operator]
    return out


def best_actions(game: pyspiel.Game, state: pyspiel.State) -> list[int]:
    """The legal actions of `state` that keep its game-theoretic value, in legal-list order."""
    values = solved_values(game)
    action_values = _action_values(state, lambda child: values[str(child)])
    top = max(action_values.values())
    return [action for action, v in action_values.items() if v >= top - 1e-9]


class MinimaxAgent(BotAgent):
    __slots__ = ("_game", "_rng", "_tie_break")

    def __init__(self, game: pyspiel.Game, tie_break: str, rng: random.Random) -> None:
        self._game, self._tie_break, self._rng = game, tie_break, rng

    def choose(self, state: pyspiel.State) -> int:
        best = best_actions(self._game, state)
        return pick(best, self._tie_break, self._rng)


class MinimaxPlayer(Player):
    def __init__(self, game: pyspiel.Game, tie_break: str) -> None:
        self.game, self.tie_break = game, tie_break
        self.name = player_name("minimax", tie_break)

    def agent(self, *, seat: int, rng: random.Random, seed: int) -> MinimaxAgent:
        return MinimaxAgent(self.game, self.tie_break, rng)


@register_player(
    "minimax", "minimax[:first|last], perfect play in small deterministic zero-sum games"
)
def _minimax(argument: str | None, context: PlayerContext) -> Player:
    tie_break = parse_tie_break("minimax", argument)
    needs = "a deterministic two-player zero-sum game"
    check_rule_game("minimax", context, needs, zero_sum=True)
    game = context.spec.game
    solved_values(game)  # solve (or refuse) now, not in the middle of an episode
    return MinimaxPlayer(game, tie_break)
