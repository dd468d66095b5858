"""Every information state of a small two-player zero-sum game, and the prompt a model sees there.

An exact best response needs the policy at every information state. `information_states(spec)`
walks the whole game tree (every chance outcome) in a fixed order and keeps, per information
state, the acting seat, its legal actions and one representative history (the first found).

`render_prompt(spec, history, style=...)` replays a history through the same `SeatPrompter` the
episode engine uses, so the messages are exactly those a model seat gets in play. The `full`
style keeps the seat's earlier replies in its chat; a replayed history has none, so each earlier
own move is written as the canonical reply `<answer>LABEL</answer>`. The renderer reads only the
seat's own view and the public action sequence, so every history of one information state gives
the same prompt (`tests/test_exploitability_infostates.py` checks this for Kuhn and Leduc).

Games whose tree is too large for an exact best response (Tic-Tac-Toe has 549,946 histories,
Connect Four far more) and games that are not two-player zero-sum (Hanabi) are refused.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyspiel

from core.errors import MarsError
from games import solvers
from games.actions import vocabulary
from games.prompts import PromptStyle, SeatPrompter
from games.spec import GameSpec, list_games

Message = dict[str, str]
# Histories (nodes of the tree, terminal and chance nodes included) an exact best response may
# walk: Kuhn has 58 and Leduc 9,457; Tic-Tac-Toe (549,946) is refused within a second.
MAX_HISTORIES = 50_000


@dataclass(frozen=True)
class InfoState:
    key: str  # OpenSpiel's information_state_string for the acting seat
    seat: int
    history: tuple[int, ...]  # one history reaching it (chance outcomes included)
    legal: tuple[int, ...]  # legal actions, in OpenSpiel's order


def _unsupported_reason(spec: GameSpec) -> str | None:
    game = spec.game
    kind = game.get_type()
    if game.num_players() != 2 or kind.utility != pyspiel.GameType.Utility.ZERO_SUM:
        return f"{spec.name} is not a two-player zero-sum game"
    if kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        return f"{spec.name} is not a sequential game"
    try:
        _histories(spec)
    except solvers.TooManyHistories:
        return f"{spec.name} has more than {MAX_HISTORIES:,} histories"
    return None


def supported_games() -> list[str]:
    """The registered games whose exploitability can be computed exactly."""
    return [spec.name for spec in list_games() if _unsupported_reason(spec) is None]


def check_exact_best_response(spec: GameSpec) -> None:
    """MarsError, in one line, unless `spec` is a small two-player zero-sum game."""
    reason = _unsupported_reason(spec)
    if reason is not None:
        raise MarsError(
            f"exploitability needs an exact best response over the whole game tree: {reason} "
            f"(games that fit: {', '.join(supported_games())})"
        )


@functools.cache
def _histories(spec: GameSpec) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Every history of every information state, by key, in depth-first action order."""
    return solvers.infostate_histories(spec.game, limit=MAX_HISTORIES)


def histories_by_infostate(spec: GameSpec) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Every history of each information state (first one first); refuses unsupported games."""
    check_exact_best_response(spec)
    return _histories(spec)


@functools.cache
def information_states(spec: GameSpec) -> tuple[InfoState, ...]:
    """One entry per information state of the game, in a fixed order (both seats)."""
    states = []
    for key, histories in histories_by_infostate(spec).items():
        state = replay(spec, histories[0])
        states.append(
            InfoState(key, state.current_player(), histories[0], tuple(state.legal_actions()))
        )
    return tuple(states)


def replay(spec: GameSpec, history: tuple[int, ...]) -> pyspiel.State:
    return solvers.replay(spec.game, history)


def canonical_reply(label: str) -> str:
    """The reply standing in for a seat's earlier move in a replayed `full`-style chat."""
    return f"<answer>{label}</answer>"


def render_prompt(
    spec: GameSpec, history: tuple[int, ...], *, style: PromptStyle, retries: int = 0
) -> list[Message]:
    """The messages the acting seat of `history` is sent, as in `games.engine.play_episode`."""
    seat = replay(spec, history).current_player()
    vocab = vocabulary(spec)
    prompter = SeatPrompter(spec, seat, style, retries)
    moves: list[tuple[int, str]] = []  # (seat, label) of every move, as the engine keeps them
    state = spec.game.new_initial_state()
    for action in history:
        if not state.is_chance_node():
            actor = state.current_player()
            label = vocab.label(actor, action)
            if actor == seat:
                prompter.turn_messages(state, vocab.legal_labels(state, seat), moves)
                prompter.accept_reply(canonical_reply(label))
            moves.append((actor, label))
        state.apply_action(action)
    messages, _ = prompter.turn_messages(state, vocab.legal_labels(state, seat), moves)
    return messages
