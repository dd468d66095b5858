"""Classic bots: uniform random, and OpenSpiel's MCTS (C++ MCTSBot, random-rollout evaluator)."""

from __future__ import annotations

import random

import pyspiel

from core.errors import MarsError
from games.players.base import (
    BotAgent,
    Player,
    PlayerContext,
    positive_int_argument,
    register_player,
)

MCTS_UCT_C = 2.0
MCTS_ROLLOUTS = 10
MCTS_MAX_MEMORY_MB = 1000


class RandomAgent(BotAgent):
    __slots__ = ("_rng",)

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def choose(self, state: pyspiel.State) -> int:
        legal = state.legal_actions()
        return legal[int(self._rng.random() * len(legal))]


class RandomPlayer(Player):
    name = "random"

    def agent(self, *, seat: int, rng: random.Random, seed: int) -> RandomAgent:
        return RandomAgent(rng)

    def action_probabilities(self, state: pyspiel.State) -> dict[int, float]:
        legal = state.legal_actions()
        return dict.fromkeys(legal, 1.0 / len(legal))


@register_player("random", "uniform over legal actions")
def _random(argument: str | None, context: PlayerContext) -> Player:
    if argument:
        raise MarsError(f"player 'random' takes no argument (got 'random:{argument}')")
    return RandomPlayer()


class MCTSAgent(BotAgent):
    __slots__ = ("_bot", "_evaluator")

    def __init__(self, game: pyspiel.Game, simulations: int, seed: int) -> None:
        # The evaluator must outlive the bot, which only keeps a C++ reference to it.
        self._evaluator = pyspiel.RandomRolloutEvaluator(MCTS_ROLLOUTS, seed)
        self._bot = pyspiel.MCTSBot(
            game,
            self._evaluator,
            MCTS_UCT_C,
            simulations,
            MCTS_MAX_MEMORY_MB,
            False,  # no MCTS-Solver: a proven draw would stop it exploiting a weak opponent
            seed + 1,
            False,
        )

    def choose(self, state: pyspiel.State) -> int:
        return self._bot.step(state)

    def policy(self, state: pyspiel.State) -> dict[int, float]:
        """One fresh search's policy at `state`: each legal action's share of the root visits,
        except that moves ending the game in a win at once take all of it. A terminal child's
        value is its outcome with no exploration bonus, so it gets few visits however good
        (one of 200 for Connect Four's winning column, measured); `choose` plays it anyway,
        since the bot's final choice prefers a known outcome."""
        mover = state.current_player()
        children = self._bot.mcts_search(state).children
        wins = [child.action for child in children if child.outcome and child.outcome[mover] > 0]
        if wins:
            return dict.fromkeys(wins, 1.0 / len(wins))
        total = sum(child.explore_count for child in children)
        if total == 0:
            return {child.action: 1.0 / len(children) for child in children}
        return {child.action: child.explore_count / total for child in children}


class MCTSPlayer(Player):
    def __init__(self, game: pyspiel.Game, simulations: int) -> None:
        self.game = game
        self.simulations = simulations
        self.name = f"mcts:{simulations}"

    def agent(self, *, seat: int, rng: random.Random, seed: int) -> MCTSAgent:
        return MCTSAgent(self.game, self.simulations, rng.getrandbits(30))


@register_player("mcts", "mcts:SIMS, OpenSpiel MCTS with SIMS simulations (perfect information)")
def _mcts(argument: str | None, context: PlayerContext) -> Player:
    simulations = positive_int_argument("mcts", argument, default=None)
    if not context.spec.perfect_information:
        raise MarsError(
            f"player 'mcts' needs a perfect-information game; {context.spec.name} is not one"
        )
    return MCTSPlayer(context.spec.game, simulations)
