"""Tic-Tac-Toe and Connect Four: perfect-information board games (win +1, loss -1, draw 0)."""

from __future__ import annotations

from typing import Any

import pyspiel

from games.spec import Board, GameSpec, RewardRules, SeatView, register_game

BOARD_REWARDS = RewardRules(penalty_kind="board", draw_reward=0.1, step_terminal_zero=0.1)


def grid_cells(_spec: GameSpec, state: pyspiel.State) -> dict[str, Any]:
    """A replay's `grid` board: the cells of OpenSpiel's state string, one line per row, top row
    first ('.' empty, else the mark: "x", "o"), as `rows` of "" / "x" / "o"."""
    rows = [line.strip() for line in str(state).split("\n") if line.strip()]
    return {"rows": [["" if ch == "." else ch for ch in row] for row in rows]}


# How replays draw a grid of marks (Tic-Tac-Toe) and of falling discs (Connect Four).
MARKS_BOARD = Board("grid", grid_cells)
DISCS_BOARD = Board("grid", grid_cells, style={"pieces": "discs"})


def bracket_upper(text: str, _seat: int, _action: int) -> str:
    """OpenSpiel's own action string, upper-cased in angle brackets: x(0,0) -> <X(0,0)>."""
    return f"<{text.upper()}>"


def _grid_rows(observation: str) -> list[str]:
    return [row for row in observation.split("\n") if row]


def _tic_tac_toe_view(state: pyspiel.State, seat: int) -> SeatView:
    rows = _grid_rows(state.observation_string(seat))
    lines = ["    " + " ".join(str(c) for c in range(len(rows[0])))]
    lines += [f" {r}  " + " ".join(row) for r, row in enumerate(rows)]
    return SeatView(state="\n".join(lines), compact="\n".join(rows))


def _connect_four_view(state: pyspiel.State, seat: int) -> SeatView:
    rows = _grid_rows(state.observation_string(seat))
    header = " ".join(str(c) for c in range(len(rows[0])))
    lines = [header] + [" ".join(row) for row in rows]
    return SeatView(state="\n".join(lines), compact="\n".join([header.replace(" ", ""), *rows]))


TIC_TAC_TOE_RULES = """\
Tic-Tac-Toe is played by two players on a 3x3 grid. The first player marks cells with X, the \
second with O, taking turns; each move marks one empty cell. A player who gets three of their \
marks in a row, a column or a diagonal wins at once. If all nine cells are filled without such a \
line, the game is a draw.
The board is shown with '.' for an empty cell, 'x' for X and 'o' for O. Cells are named \
(row,column), rows and columns numbered 0 to 2 from the top-left corner. The action <X(1,2)> \
marks the cell in row 1, column 2 with X."""

CONNECT_FOUR_RULES = """\
Connect Four is played by two players on a grid of 6 rows and 7 columns that stands upright. The \
first player uses x pieces, the second o pieces, taking turns. A move drops one of your pieces \
into a column that is not full; it falls to the lowest empty cell of that column. A player who \
gets four of their pieces in a line (horizontal, vertical or diagonal) wins at once. If the grid \
fills up without such a line, the game is a draw.
The board is shown top row first, '.' for an empty cell; columns are numbered 0 to 6 from the \
left. The action <X3> drops an x piece into column 3."""

register_game(
    GameSpec(
        name="tic_tac_toe",
        title="Tic-Tac-Toe",
        openspiel_name="tic_tac_toe",
        params={},
        split="train",
        rules=TIC_TAC_TOE_RULES,
        compact_rules="Tic-tac-toe: get 3 in a row on the 3x3 board. Cells (row,col) from 0.",
        seat_names=("X", "O"),
        label=bracket_upper,
        view=_tic_tac_toe_view,
        rewards=BOARD_REWARDS,
        board=MARKS_BOARD,
    )
)

register_game(
    GameSpec(
        name="connect_four",
        title="Connect Four",
        openspiel_name="connect_four",
        params={},
        split="heldout",
        rules=CONNECT_FOUR_RULES,
        compact_rules="Connect four: drop pieces in columns 0-6; get 4 in a line to win.",
        seat_names=("x", "o"),
        label=bracket_upper,
        view=_connect_four_view,
        rewards=BOARD_REWARDS,
        board=DISCS_BOARD,
    )
)
