"""NashConv, exploitability, CFR and best responses of tabular policies: OpenSpiel's solvers, once.

A policy is a table, information state -> [(action, probability), ...] over its legal actions
(the input of `pyspiel.TabularPolicy`); a game is a `pyspiel.Game` or its OpenSpiel name (loaded
once per process). Everything that scores or solves a policy of a small two-player zero-sum game
goes through here: `games.infostates` and `games.exploitability` (`mars exploitability`, the
trainers' exploitability), the CFR bots (`games.players.solvers`) and the dashboard's policy view
(`dashboard/data/equilibrium.py`, `dashboard/data/policy.py`).

NashConv is the sum over both seats of what a best response to the other seat gains over the
policy's own value; in a two-player zero-sum game exploitability is NashConv / 2 (OpenSpiel's
definitions, C++ `pyspiel.nash_conv` and `pyspiel.exploitability`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pyspiel

Table = dict[str, list[tuple[int, float]]]
Method = Literal["cfr", "cfr+"]


class TooManyHistories(Exception):
    """The game tree has more histories than the walk was allowed to visit."""


@functools.cache
def _loaded(name: str) -> pyspiel.Game:
    return pyspiel.load_game(name)


def load(game: str | pyspiel.Game) -> pyspiel.Game:
    """`game` itself, or the OpenSpiel game of that name (loaded once per process)."""
    return _loaded(game) if isinstance(game, str) else game


def infostate_histories(
    game: str | pyspiel.Game, limit: int | None = None
) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Every history (chance outcomes included) of every information state of the acting seat,
    keyed by OpenSpiel's `information_state_string`, walked depth first in action order (the
    first history of a key is the first found). TooManyHistories past `limit` nodes."""
    found: dict[str, list[tuple[int, ...]]] = {}
    visited = 0
    stack: list[tuple[pyspiel.State, tuple[int, ...]]] = [(load(game).new_initial_state(), ())]
    while stack:
        state, history = stack.pop()
        visited += 1
        if limit is not None and visited > limit:
            raise TooManyHistories
        if state.is_terminal():
            continue
        if state.is_chance_node():
            actions = [action for action, _ in state.chance_outcomes()]
        else:
            actions = state.legal_actions()
            found.setdefault(state.information_state_string(), []).append(history)
        # Reversed onto the stack, so children are visited in action order.
        for action in reversed(actions):
            stack.append((state.child(action), (*history, action)))
    return {key: tuple(histories) for key, histories in found.items()}


def replay(game: str | pyspiel.Game, history: tuple[int, ...]) -> pyspiel.State:
    state = load(game).new_initial_state()
    for action in history:
        state.apply_action(action)
    return state


def nash_conv(game: str | pyspiel.Game, table: Table) -> float:
    """OpenSpiel's NashConv of the policy (`table` holds every information state of the game)."""
    return float(pyspiel.nash_conv(load(game), pyspiel.TabularPolicy(table)))


def exploitability(game: str | pyspiel.Game, table: Table) -> float:
    """OpenSpiel's exploitability of the policy: NashConv / the number of players."""
    return float(pyspiel.exploitability(load(game), pyspiel.TabularPolicy(table)))


def cfr_average_policy(game: str | pyspiel.Game, method: Method, iterations: int) -> Table:
    """The average policy of OpenSpiel's C++ CFR (`cfr`) or CFR+ (`cfr+`) solver after
    `iterations`, at every information state."""
    loaded = load(game)
    solver = pyspiel.CFRSolver(loaded) if method == "cfr" else pyspiel.CFRPlusSolver(loaded)
    for _ in range(iterations):
        solver.evaluate_and_update_policy()
    average = solver.average_policy()
    return {key: list(average.get_state_policy(key)) for key in infostate_histories(loaded)}


def own_reach(
    game: str | pyspiel.Game,
    table: Mapping[str, list[tuple[int, float]]],
    seat: int,
    history: Sequence[int],
) -> float:
    """The probability that `seat`'s own moves along `history` are played under `table` (chance
    and the other seat's moves left out)."""
    state = load(game).new_initial_state()
    reach = 1.0
    for action in history:
        if not state.is_chance_node() and state.current_player() == seat:
            reach *= dict(table[state.information_state_string(seat)]).get(action, 0.0)
        state.apply_action(action)
    return reach


@dataclass(frozen=True)
class StateResponse:
    """OpenSpiel's best response of one seat at one of its information states, to the other
    seat's policy: counterfactual values (chance and the other seat's reach) of each action and
    of the policy's own mix there, each followed by best play."""

    key: str
    seat: int
    values: dict[int, float]  # per legal action
    best: int  # the best response's action
    policy_value: float  # of the policy's own mix at this state
    reach: float  # the policy's own reach of the state (its seat's earlier moves)

    @property
    def gain(self) -> float:
        """reach x (best value - policy value): a seat's gains add up to what its best response
        wins over the policy, so all gains add up to NashConv."""
        return self.reach * (self.values[self.best] - self.policy_value)


def best_responses(game: str | pyspiel.Game, table: Table) -> list[StateResponse]:
    """Every information state's best response (seat 0's states, then seat 1's)."""
    from open_spiel.python import policy as os_policy
    from open_spiel.python.algorithms.best_response import BestResponsePolicy

    class _Fixed(os_policy.Policy):
        def action_probabilities(
            self, state: pyspiel.State, player_id: int | None = None
        ) -> dict[int, float]:
            return dict(table[state.information_state_string()])

    loaded = load(game)
    fixed = _Fixed(loaded, list(range(loaded.num_players())))
    found = []
    for seat in range(loaded.num_players()):
        responder = BestResponsePolicy(loaded, seat, fixed)
        for key, nodes in responder.infosets.items():
            mix = dict(table[key])
            actions = nodes[0][0].legal_actions(seat)
            values = {a: sum(p * responder.q_value(node, a) for node, p in nodes) for a in actions}
            best = responder.best_response_action(key)
            own = sum(mix.get(a, 0.0) * values[a] for a in actions)
            reach = own_reach(loaded, table, seat, nodes[0][0].history())
            found.append(StateResponse(key, seat, values, best, own, reach))
    return found
