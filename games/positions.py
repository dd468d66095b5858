"""The position at every turn of a recorded episode, rebuilt by replaying it in OpenSpiel.

A record holds the episode seed and every turn's action label, which is all a replay needs: the
chance nodes are dealt again from the seed exactly as in play (`ChanceSampler`, under the run's
deal rule), and each legal label is turned back into its OpenSpiel action. An invalid reply
(`action` None) or a re-asked one leaves the position as it was.

Positions are plain JSON-able dicts, one per turn (the position the turn's seat faced, with what
its move does) plus the final one, drawn by the dashboard (`dashboard/boards.py`). What a position
shows is the game's `Board` (its spec's `board`, declared in its catalog module): a board kind the
dashboard draws and the function that reads that kind's fields from a state. The kinds:

- `grid` (Tic-Tac-Toe, Connect Four): `rows` of cells ("" or the mark, "x", "o"), `move_cell`
  [row, col] the turn's move marks (None for an invalid reply), `last_cell` the previous move's
  cell; the first two from the board's reader, the move and last cells worked out here;
- `poker` (Kuhn, Leduc): each seat's private `cards`, the `public` card (Leduc, once dealt),
  each seat's committed `chips`, the `pot`, the `betting` so far per round as [seat, label];
- `hanabi`: both `hands` (card, hinted color and rank, colors and ranks still possible), the
  `fireworks`, `info_tokens` / `life_tokens` with their maxima, `deck`, `discards`, `score`;
- `text` (a game that declares no board): OpenSpiel's state string, `text`.

Every position also has `game` (and `variant_of`, the original game, for an obfuscated variant),
`kind`, `style` (the board's drawing options, e.g. a grid's `pieces`), `to_move` (the acting seat,
None once over), `terminal` and `action` (the turn's label, None on the final position or an
invalid reply). The spectator sees everything, both seats' hidden cards included; a seat's own
view is in the record's prompt.
"""

from __future__ import annotations

from typing import Any

import pyspiel

from core.errors import MarsError
from games.actions import vocabulary
from games.chance import ChanceSampler, deal_table
from games.rules import DEFAULT_RULES, LeducDeals
from games.spec import Board, GameSpec, get_game

Position = dict[str, Any]
# A game that declares no board: OpenSpiel's own (spectator's) state string.
TEXT_BOARD = Board("text", lambda _spec, state: {"text": str(state)})


def board_of(spec: GameSpec) -> Board:
    return spec.board or TEXT_BOARD


def _changed_cell(before: list[list[str]], after: list[list[str]]) -> list[int] | None:
    for r, (old, new) in enumerate(zip(before, after, strict=True)):
        for c, (a, b) in enumerate(zip(old, new, strict=True)):
            if a != b:
                return [r, c]
    return None


def _position(
    spec: GameSpec,
    board: Board,
    state: pyspiel.State,
    after: pyspiel.State | None,
) -> Position:
    body = board.read(spec, state)
    if board.kind == "grid":
        moved = board.read(spec, after)["rows"] if after is not None else None
        body["move_cell"] = _changed_cell(body["rows"], moved) if moved is not None else None
    terminal = state.is_terminal()
    variant = {"variant_of": spec.variant_of} if spec.variant_of else {}
    return {
        "game": spec.name,
        **variant,
        "kind": board.kind,
        "style": dict(board.style),
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
    board = board_of(spec)
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
        position = _position(spec, board, state, after)
        position["action"] = label if action is not None else None
        if board.kind == "grid":
            position["last_cell"] = last_cell
            last_cell = position["move_cell"] or last_cell
        positions.append(position)
        if after is None:
            continue  # an invalid reply: the position stands (re-asked, or the game ends)
        state = after
        _deal(state, chance)
    final = _position(spec, board, state, None)
    final["action"] = None
    if board.kind == "grid":
        final["last_cell"] = last_cell
    positions.append(final)
    return positions
