"""The position at every turn of a recorded episode, rebuilt by replaying it in OpenSpiel.

A record holds the episode seed and every turn's action label, which is all a replay needs: the
chance nodes are dealt again from the seed exactly as in play (`ChanceSampler`, under the run's
deal rule), and each legal label is turned back into its OpenSpiel action. An invalid reply
(`action` None) or a re-asked one leaves the position as it was.

Positions are plain JSON-able dicts, one per turn (the position the turn's seat faced, with what
its move does) plus the final one, drawn by the dashboard (`dashboard/boards.py`):

- `grid` (Tic-Tac-Toe, Connect Four): `rows` of cells ("x", "o" or ""), `move_cell` [row, col]
  the turn's move marks (None for an invalid reply), `last_cell` the previous move's cell;
- `poker` (Kuhn, Leduc): each seat's private `cards`, the `public` card (Leduc, once dealt),
  each seat's committed `chips`, the `pot`, the `betting` so far per round as [seat, label];
- `hanabi`: both `hands` (card, hinted color and rank, colors and ranks still possible), the
  `fireworks`, `info_tokens` / `life_tokens` with their maxima, `deck`, `discards`, `score`.

Every position also has `game` (and `variant_of`, the original game, for an obfuscated variant),
`kind`, `to_move` (the acting seat, None once over), `terminal` and `action` (the turn's label,
None on the final position or an invalid reply). The spectator sees everything, both seats'
hidden cards included; a seat's own view is in the record's prompt.
"""

from __future__ import annotations

import re
from typing import Any

import pyspiel

from core.errors import MarsError
from games.actions import vocabulary
from games.catalog.hanabi import CardLine, parse_observation
from games.catalog.poker import KUHN_CARDS, leduc_card
from games.chance import ChanceSampler, deal_table
from games.rules import DEFAULT_RULES, LeducDeals
from games.spec import GameSpec, get_game

Position = dict[str, Any]
# Leduc's information state: [Private: 5], [Public: 2], [Round1: 2 1] (the moves as codes)
_LEDUC_FIELD = re.compile(r"\[(Private|Public|Round1|Round2): ?([^\]]*)\]")
_KUHN_MOVES = {"p": "<PASS>", "b": "<BET>"}
_LEDUC_MOVES = {"0": "<FOLD>", "1": "<CALL>", "2": "<RAISE>"}


def _grid(state: pyspiel.State) -> list[list[str]]:
    """The board's cells from OpenSpiel's state string ('.', 'x', 'o' per cell, top row first)."""
    rows = [line.strip() for line in str(state).split("\n") if line.strip()]
    return [["" if ch == "." else ch for ch in row] for row in rows]


def _changed_cell(before: list[list[str]], after: list[list[str]]) -> list[int] | None:
    for r, (old, new) in enumerate(zip(before, after, strict=True)):
        for c, (a, b) in enumerate(zip(old, new, strict=True)):
            if a != b:
                return [r, c]
    return None


def _grid_position(state: pyspiel.State, after: pyspiel.State | None) -> Position:
    rows = _grid(state)
    return {
        "kind": "grid",
        "rows": rows,
        "move_cell": _changed_cell(rows, _grid(after)) if after is not None else None,
    }


def _poker_cards(spec: GameSpec, state: pyspiel.State, seat: int) -> tuple[str | None, str | None]:
    """(the seat's private card, the public card) from the seat's own information state."""
    info = state.information_state_string(seat)
    if spec.openspiel_name == "kuhn_poker":
        return (KUHN_CARDS[int(info[0])] if info[:1].isdigit() else None), None
    fields = dict(_LEDUC_FIELD.findall(info))
    private, public = fields.get("Private", "").strip(), fields.get("Public", "").strip()
    card = leduc_card(int(private)) if private.lstrip("-").isdigit() and int(private) >= 0 else None
    shown = leduc_card(int(public)) if public.isdigit() else None
    return card, shown


def _betting(spec: GameSpec, state: pyspiel.State) -> list[list[list[Any]]]:
    """The moves so far per betting round as [seat, label]; the first seat opens every round."""
    info = state.information_state_string(0)
    if spec.openspiel_name == "kuhn_poker":
        rounds = [[_KUHN_MOVES[ch] for ch in info[1:] if ch in _KUHN_MOVES]]
    else:
        fields = dict(_LEDUC_FIELD.findall(info))
        rounds = [
            [_LEDUC_MOVES[code] for code in fields.get(name, "").split() if code in _LEDUC_MOVES]
            for name in ("Round1", "Round2")
        ]
        if not rounds[1]:
            rounds = rounds[:1] if "Public" not in fields else rounds
    return [[[k % 2, label] for k, label in enumerate(moves)] for moves in rounds]


def _poker_position(spec: GameSpec, state: pyspiel.State) -> Position:
    cards, public = [], None
    for seat in range(2):
        card, shown = _poker_cards(spec, state, seat)
        cards.append(card)
        public = public or shown
    chips = [int(spec.own_bet(state, seat)) if spec.own_bet else 0 for seat in range(2)]
    return {
        "kind": "poker",
        "cards": cards,
        "public": public,
        "chips": chips,
        "pot": sum(chips),
        "betting": _betting(spec, state),
    }


def _card(line: CardLine) -> dict[str, str]:
    return {
        "card": line.card,
        "hinted": line.hinted,
        "colors": line.possible_colors,
        "ranks": line.possible_ranks,
    }


def _hanabi_position(spec: GameSpec, state: pyspiel.State) -> Position:
    seen = parse_observation(str(state))  # the spectator's string: both hands face up
    if seen is None:
        raise MarsError(f"{spec.name}: OpenSpiel's Hanabi state string has an unknown layout")
    fireworks = {item[0]: int(item[1:]) for item in seen.fireworks if item[1:].isdigit()}
    params = spec.params
    return {
        "kind": "hanabi",
        "hands": [
            [_card(line) for line in seen.own_hand],
            [_card(line) for line in seen.partner_hand],
        ],
        "fireworks": fireworks,
        "score": sum(fireworks.values()),
        "info_tokens": int(seen.info_tokens),
        "max_info_tokens": int(params.get("max_information_tokens", 8)),
        "life_tokens": int(seen.lives),
        "max_life_tokens": int(params.get("max_life_tokens", 3)),
        "deck": int(seen.deck_size),
        "discards": seen.discards,
    }


def _kind(spec: GameSpec) -> str:
    if spec.openspiel_name in ("tic_tac_toe", "connect_four"):
        return "grid"
    if spec.openspiel_name in ("kuhn_poker", "leduc_poker"):
        return "poker"
    if spec.openspiel_name == "hanabi":
        return "hanabi"
    raise MarsError(f"no board drawing for {spec.name}")


def _position(
    spec: GameSpec,
    kind: str,
    state: pyspiel.State,
    after: pyspiel.State | None,
) -> Position:
    if kind == "grid":
        body = _grid_position(state, after)
    elif kind == "poker":
        body = _poker_position(spec, state)
    else:
        body = _hanabi_position(spec, state)
    terminal = state.is_terminal()
    variant = {"variant_of": spec.variant_of} if spec.variant_of else {}
    return {
        "game": spec.name,
        **variant,
        "to_move": None if terminal else state.current_player(),
        "terminal": terminal,
        **body,
    }


def _deal(state: pyspiel.State, chance: ChanceSampler) -> None:
    while state.is_chance_node():
        state.apply_action(chance.sample(state))


def replay_positions(
    record: dict[str, Any], leduc_deals: LeducDeals | None = None
) -> list[Position]:
    """One position per recorded turn (before its move) and the final one.

    `leduc_deals`: the run's deal rule (`rules.leduc_deals` in its run.json; default natural).
    Raises MarsError when the record does not replay: an unknown game, or a recorded move that is
    not legal in the replayed position (the record was made under other rules).
    """
    game = record.get("game")
    if not isinstance(game, str):
        raise MarsError("the record names no game")
    spec = get_game(game)
    kind = _kind(spec)
    seed = record.get("seed")
    if not isinstance(seed, int):
        raise MarsError("the record has no episode seed")
    deals = deal_table(spec, leduc_deals or DEFAULT_RULES.leduc_deals)
    chance = ChanceSampler(spec, seed, deals)
    labels = vocabulary(spec)
    state = spec.game.new_initial_state()
    _deal(state, chance)
    positions: list[Position] = []
    last_cell: list[int] | None = None  # the cell of the last move played (grids)
    for index, turn in enumerate(record.get("turns") or []):
        if not isinstance(turn, dict):
            continue
        if state.is_terminal():
            raise MarsError(f"turn {index}: the replayed game is already over")
        seat = state.current_player()
        if isinstance(turn.get("seat"), int) and turn["seat"] != seat:
            raise MarsError(f"turn {index}: seat {turn['seat']} moves, the replay has seat {seat}")
        label = turn.get("action") if turn.get("legal", True) else None
        action = None
        if isinstance(label, str):
            action = labels.action(seat, label)
            if action is None or action not in state.legal_actions(seat):
                raise MarsError(
                    f"turn {index}: {label} is not legal in the replayed position "
                    "(was the run played under other rules?)"
                )
        after = None
        if action is not None:
            after = state.clone()
            after.apply_action(action)
        position = _position(spec, kind, state, after)
        position["action"] = label if action is not None else None
        if kind == "grid":
            position["last_cell"] = last_cell
            last_cell = position["move_cell"] or last_cell
        positions.append(position)
        if after is None:
            continue  # an invalid reply: the position stands (re-asked, or the game ends)
        state = after
        _deal(state, chance)
    final = _position(spec, kind, state, None)
    final["action"] = None
    if kind == "grid":
        final["last_cell"] = last_cell
    positions.append(final)
    return positions
