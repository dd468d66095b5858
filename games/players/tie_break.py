"""How rule players (`minimax`, `tactics`) choose among equally good moves: `NAME` picks at random
with the episode's RNG; `NAME:first` / `NAME:last` always take the first / last in the legal
list (a deterministic policy, easier for a small model to imitate). Also the games they play."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyspiel

from core.errors import MarsError

if TYPE_CHECKING:
    from games.players.base import PlayerContext

TIE_BREAKS = ("random", "first", "last")


def parse_tie_break(player: str, argument: str | None) -> str:
    tie_break = (argument or "random").strip().lower()
    if tie_break not in TIE_BREAKS:
        raise MarsError(f"{player}:{argument}: the argument is one of {', '.join(TIE_BREAKS)}")
    return tie_break


def player_name(player: str, tie_break: str) -> str:
    return player if tie_break == "random" else f"{player}:{tie_break}"


def pick(candidates: Sequence[int], tie_break: str, rng: random.Random) -> int:
    """One of `candidates` (in legal-list order) by the tie-break."""
    if tie_break == "first":
        return candidates[0]
    if tie_break == "last":
        return candidates[-1]
    return rng.choice(candidates)


def check_rule_game(player: str, context: PlayerContext, needs: str, *, zero_sum: bool) -> None:
    """MarsError ("player 'NAME' needs `needs`") unless the game is a deterministic two-player
    game of perfect information, and zero-sum when `zero_sum`."""
    game = context.spec.game
    info = game.get_type()
    if (
        not context.spec.perfect_information
        or game.num_players() != 2
        or (zero_sum and info.utility != pyspiel.GameType.Utility.ZERO_SUM)
        or info.chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC
    ):
        raise MarsError(f"player '{player}' needs {needs}; {context.spec.name} is not one")
