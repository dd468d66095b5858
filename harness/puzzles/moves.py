"""What the grid puzzles (Plan-Path, Sokoban) share: U/D/L/R and their spellings, the grid as
rows of symbols, and the episode of a move list applied one move at a time."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from harness.puzzles.base import Level, ListOutcome, PuzzleState

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


def grid_rows(size: int, open_cells: Iterable[int], opened: str, closed: str) -> tuple[str, ...]:
    """A size x size grid as text rows (row 0 first): `opened` on the open cells (index
    row * size + col), `closed` elsewhere."""
    is_open = set(open_cells)
    return tuple(
        "".join(opened if row * size + col in is_open else closed for col in range(size))
        for row in range(size)
    )


def open_grid_cells(rows: Sequence[str], closed: str) -> set[int]:
    """The indices (row * width + col) of the cells of `rows` that are not `closed`."""
    return {
        row * len(line) + col
        for row, line in enumerate(rows)
        for col, symbol in enumerate(line)
        if symbol != closed
    }


class MoveListState(PuzzleState):
    """An episode of a grid puzzle: moves applied in order until `done`. A token that is not a
    move earns `invalid_reward` and is not counted as a move; every move is counted, recorded in
    `history` and handed to `step`; the move that reaches `step_limit` ends the episode with
    `step_limit_penalty` added (unless it ended it already)."""

    invalid_reward: ClassVar[float]
    step_limit: ClassVar[int]
    step_limit_penalty: ClassVar[float]

    def __init__(self, level: Level) -> None:
        self.level = level
        self.moves_taken = 0
        self.history: list[str] = []
        self.done = self.solved = False

    @abstractmethod
    def step(self, move: int) -> tuple[float, bool]:
        """Apply the counted move `move` (an index in MOVES): its reward, and whether it was
        valid (an invalid one changes nothing)."""

    def apply(self, actions: Sequence[Any]) -> ListOutcome:
        step, record, limit = self.step, self.history.append, self.step_limit
        rewards: list[float] = []
        invalid = 0
        for action in actions:
            if self.done:
                break
            move = move_index(action)
            if move is None:  # not a move: penalised, not counted as a move
                rewards.append(self.invalid_reward)
                invalid += 1
                continue
            self.moves_taken += 1
            record(MOVES[move])
            reward, valid = step(move)
            if not valid:
                invalid += 1
            if not self.done and self.moves_taken >= limit:
                reward += self.step_limit_penalty
                self.done = True
            rewards.append(reward)
        return ListOutcome.of(rewards, invalid, self)

    def answer_text(self) -> str:
        return "[" + ", ".join(self.history) + "]"
