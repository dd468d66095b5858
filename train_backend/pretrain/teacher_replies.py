"""Replies that name a move drawn from a strong policy, tempered and mixed with random moves.

A format pre-training's `reply_teachers` (one per game) replace the fixed rules of
`format_data` (the last legal move listed, a bot's own choice) with a draw from

    p(a) = (1 - random_share) * q(a)^(1/T) / sum_b q(b)^(1/T) + random_share / |legal|

where q is the strong policy at the position: OpenSpiel's CFR average policy (`cfr:ITERS`) or
CFR+'s near-equilibrium (`nash`) in the poker games, the root visit counts of a fresh OpenSpiel
MCTS search (`mcts:SIMS`; a move that wins at once takes them all) in perfect-information
games, or uniform (`random`). T (`temperature`)
and the share of random moves set the level: the start leans towards good moves and still
varies, neither random nor one fixed move per position, so self-play from it plays different
games and has something to compare.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pyspiel
from pydantic import BaseModel, ConfigDict, Field

from core.errors import MarsError
from games.players import PlayerContext, make_player
from games.players.base import positive_int_argument
from games.players.classic import MCTSAgent
from games.spec import GameSpec

POLICIES = ("cfr", "nash", "mcts", "random")


class ReplyTeacher(BaseModel):
    """Which policy a game's replies are drawn from, and at what level."""

    model_config = ConfigDict(extra="forbid")

    policy: str  # cfr:ITERS | nash | mcts:SIMS | random
    temperature: float = Field(1.0, gt=0)  # q^(1/T): above 1 flatter, below 1 sharper
    random_share: float = Field(0.0, ge=0, le=1)  # this share of the draw is uniform


def check_teacher(spec: GameSpec, teacher: ReplyTeacher) -> None:
    """One line when the policy cannot teach this game; solves and searches nothing."""
    name, _, argument = teacher.policy.strip().lower().partition(":")
    where = f"reply teacher {teacher.policy!r} for {spec.name}"
    if name not in POLICIES:
        raise MarsError(f"{where}: a reply teacher is one of cfr:ITERS, nash, mcts:SIMS, random")
    if name in ("nash", "random") and argument:
        raise MarsError(f"{where}: {name} takes no argument")
    if name == "mcts" or (name == "cfr" and argument):  # cfr alone: its default iterations
        positive_int_argument(name, argument or None, default=None)
    if name in ("cfr", "nash") and not spec.extra.get("solvable"):
        raise MarsError(f"{where}: {name} needs a poker game OpenSpiel solves")
    if name == "mcts" and not spec.perfect_information:
        raise MarsError(f"{where}: mcts needs a perfect-information game")


def tempered(
    weights: dict[int, float], legal: Sequence[int], temperature: float, random_share: float
) -> dict[int, float]:
    """The draw's distribution over `legal` from the strong policy's `weights` (probabilities
    or visit counts; missing actions weigh 0)."""
    powered = {a: max(weights.get(a, 0.0), 0.0) ** (1.0 / temperature) for a in legal}
    total = sum(powered.values())
    uniform = 1.0 / len(legal)
    if total <= 0:  # nothing to lean on (no visits): uniform
        return dict.fromkeys(legal, uniform)
    return {a: (1.0 - random_share) * powered[a] / total + random_share * uniform for a in legal}


class ReplySampler:
    """Draws the move a reply names at a position, for one game. An MCTS teacher searches
    afresh at every position with its own seeded bot, so a seed fixes every draw."""

    def __init__(self, spec: GameSpec, teacher: ReplyTeacher, seed: int) -> None:
        check_teacher(spec, teacher)
        self.teacher = teacher
        name, _, argument = teacher.policy.strip().lower().partition(":")
        self._search: MCTSAgent | None = None
        if name == "mcts":
            simulations = positive_int_argument("mcts", argument, default=None)
            self._search = MCTSAgent(spec.game, simulations, seed)
        else:
            self._player = make_player(teacher.policy, PlayerContext(spec=spec))

    def strong(self, state: pyspiel.State) -> dict[int, float]:
        """The strong policy's weights at `state` (before temperature and random moves)."""
        if self._search is not None:
            return self._search.policy(state)
        probabilities = self._player.action_probabilities(state)
        if probabilities is None:
            raise MarsError(f"player {self.teacher.policy!r} gives no action probabilities")
        return probabilities

    def distribution(self, state: pyspiel.State) -> dict[int, float]:
        teacher = self.teacher
        return tempered(
            self.strong(state), state.legal_actions(), teacher.temperature, teacher.random_share
        )

    def sample(self, state: pyspiel.State, rng: random.Random) -> int:
        distribution = self.distribution(state)
        actions = list(distribution)
        return rng.choices(actions, [distribution[a] for a in actions])[0]
