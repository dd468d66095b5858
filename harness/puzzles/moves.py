"""Move tokens of the grid puzzles (Plan-Path, Sokoban): U/D/L/R and their spellings."""

from __future__ import annotations

MOVES: tuple[str, ...] = ("U", "D", "L", "R")
DELTAS: dict[str, tuple[int, int]] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}

_WORDS = {"UP": "U", "DOWN": "D", "LEFT": "L", "RIGHT": "R"}
_SPELLINGS: dict[str, str] = {}
for _move in MOVES:
    _SPELLINGS[_move] = _SPELLINGS[_move.lower()] = _move
for _word, _move in _WORDS.items():
    for _spelling in (_word, _word.lower(), _word.capitalize()):
        _SPELLINGS[_spelling] = _move


def canonical_move(token: object) -> str | None:
    """ "U", "u", "up", "Up", "UP" -> "U"; None for anything that is not a move."""
    if isinstance(token, str):
        move = _SPELLINGS.get(token)  # the common case: already canonical
        if move is None:
            move = _SPELLINGS.get(token.strip().strip("'\"`").upper())
        return move
    return None


_MOVE_INDEX = {move: index for index, move in enumerate(MOVES)}


def move_index(action: object) -> int | None:
    """The index in MOVES of a move token in any spelling, or None for anything else."""
    move = _MOVE_INDEX.get(action) if isinstance(action, str) else None  # the common case
    if move is None:
        canonical = canonical_move(action)
        move = None if canonical is None else _MOVE_INDEX[canonical]
    return move


def step_table(rows: int, cols: int, open_cells: set[int] | frozenset[int]) -> list[list[int]]:
    """For each cell index (row * cols + col) and move (in MOVES order), the cell it leads to,
    or -1 when that is off the grid or not open."""
    table: list[list[int]] = []
    for cell in range(rows * cols):
        row, col = divmod(cell, cols)
        targets = []
        for move in MOVES:
            d_row, d_col = DELTAS[move]
            r, c = row + d_row, col + d_col
            target = r * cols + c
            inside = 0 <= r < rows and 0 <= c < cols
            targets.append(target if inside and target in open_cells else -1)
        table.append(targets)
    return table
