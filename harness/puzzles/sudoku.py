"""Sudoku 4 x 4 (9 x 9 as an option): fill the grid so every row, column and box holds each
value once, keeping the given clues.

Puzzles have exactly one solution (harness/puzzles/sudoku_solver.py counts them). Success is a
complete, valid grid that keeps every clue (the reference accepts any valid grid). Rewards as
the reference's Sudoku environment (docs/puzzles.md, PettingLLMs `stateful/env_state.py`) for a
full-grid answer and for a list of fills. Details and departures: docs/puzzles.md.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.puzzles.base import Generated, Level, ListOutcome, ParamSpec, PuzzleEnv, PuzzleState
from harness.puzzles.sudoku_solver import candidates, geometry, make_puzzle

VERSION = "1"
STEP_REWARD = -0.01
OUT_OF_RANGE_GRID = -1.0
INVALID_FILL = -0.3
SOLVED_REWARD = 2.0
QUICK_BONUS = 0.5  # solved within as many steps as there were empty cells
FILLED_WEIGHT = 0.5  # x change in the filled share of the grid
UNITS_WEIGHT = 0.02  # x change in the number of completed rows, columns and boxes
RULE_BROKEN = -0.5
SINGLE_CANDIDATE = 0.2
TWO_CANDIDATES = 0.1
MOST_CONSTRAINED = 0.05
STEPS_PER_CELL = 4  # step limit = 4 x cells (ours: the reference ends episodes by turn count)


@dataclass(frozen=True)
class SudokuLayout:
    size: int
    clues: tuple[tuple[int, ...], ...]  # 0 = empty


def format_grid(grid: Sequence[int], n: int) -> str:
    """[[1,2,3,4],[3,4,1,2],...]: the answer format, one line."""
    return (
        "["
        + ",".join(
            "[" + ",".join(str(v) for v in grid[r * n : (r + 1) * n]) + "]" for r in range(n)
        )
        + "]"
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_sequence(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


class SudokuState(PuzzleState):
    def __init__(self, level: Level) -> None:
        self.level = level
        self.n = n = level.layout.size
        self.units, self.peers, self.units_of = geometry(n)
        self.clues = [value for row in level.layout.clues for value in row]
        self.grid = list(self.clues)
        self.blanks = self.clues.count(0)
        self.step_limit = STEPS_PER_CELL * n * n
        self.moves_taken = 0
        self.done = self.solved = False

    def copy(self) -> SudokuState:
        twin = SudokuState.__new__(SudokuState)
        twin.__dict__.update(self.__dict__)
        twin.grid = list(self.grid)
        return twin

    def _unit_complete(self, unit: int) -> bool:
        values = {self.grid[cell] for cell in self.units[unit]}
        return len(values) == self.n and 0 not in values

    def _completed_units(self) -> int:
        return sum(self._unit_complete(unit) for unit in range(len(self.units)))

    def _check_solved(self) -> bool:
        """Complete, every unit holds each value once, and every clue is kept."""
        grid = self.grid
        if 0 in grid or any(c and c != g for c, g in zip(self.clues, grid, strict=True)):
            return False
        return self._completed_units() == len(self.units)

    def _finish_step(self, reward: float) -> float:
        self.solved = self._check_solved()
        if self.solved:
            reward += SOLVED_REWARD + (QUICK_BONUS if self.moves_taken <= self.blanks else 0.0)
            self.done = True
        elif self.moves_taken >= self.step_limit:
            self.done = True
        return reward

    def _invalid_step(self, reward: float) -> tuple[float, bool]:
        """A step that changes nothing: only the step limit can end the episode."""
        self.done = self.moves_taken >= self.step_limit
        return reward, False

    def _grid_step(self, rows: Sequence[Sequence[Any]]) -> tuple[float, bool]:
        """A full-grid answer: (reward, valid)."""
        n = self.n
        self.moves_taken += 1
        values = [value for row in rows for value in row]
        if not all(_is_int(value) and 0 <= value <= n for value in values):
            return self._invalid_step(OUT_OF_RANGE_GRID)
        filled_before, units_before = n * n - self.grid.count(0), self._completed_units()
        self.grid = values
        if self._check_solved():
            return self._finish_step(STEP_REWARD), True
        filled_after, units_after = n * n - values.count(0), self._completed_units()
        clue_changed = any(c and c != v for c, v in zip(self.clues, values, strict=True))
        clash = any(
            value and any(values[peer] == value for peer in self.peers[cell])
            for cell, value in enumerate(values)
        )
        reward = (
            STEP_REWARD
            + FILLED_WEIGHT * (filled_after - filled_before) / (n * n)
            + UNITS_WEIGHT * (units_after - units_before)
            + (RULE_BROKEN if clue_changed or clash else 0.0)
        )
        return self._finish_step(reward), True

    def _fill_step(self, fill: object) -> tuple[float, bool]:
        """One fill [row, column, value] (0-based row and column): (reward, valid)."""
        n, grid, peers = self.n, self.grid, self.peers
        self.moves_taken += 1
        if not (_is_sequence(fill) and len(fill) == 3 and all(_is_int(v) for v in fill)):
            return self._invalid_step(INVALID_FILL)
        row, col, value = fill
        cell = row * n + col
        if not (0 <= row < n and 0 <= col < n and 1 <= value <= n) or self.clues[cell]:
            return self._invalid_step(INVALID_FILL)
        options = candidates(grid, cell, peers, n)
        if not options & (1 << (value - 1)):  # a peer already holds the value
            return self._invalid_step(INVALID_FILL)
        was_empty = grid[cell] == 0
        fewest = min(
            (
                candidates(grid, other, peers, n).bit_count()
                for other in range(n * n)
                if not grid[other]
            ),
            default=0,
        )
        units_before = sum(self._unit_complete(unit) for unit in self.units_of[cell])
        grid[cell] = value
        units_after = sum(self._unit_complete(unit) for unit in self.units_of[cell])
        count = options.bit_count()
        reward = (
            STEP_REWARD
            + _candidate_bonus(count, was_empty)
            + (MOST_CONSTRAINED if was_empty and count == fewest else 0.0)
            + FILLED_WEIGHT * (1 if was_empty else 0) / (n * n)
            + UNITS_WEIGHT * (units_after - units_before)
        )
        return self._finish_step(reward), True

    def is_grid_answer(self, actions: Sequence[Any]) -> bool:
        n = self.n
        return len(actions) == n and all(_is_sequence(row) and len(row) == n for row in actions)

    def apply(self, actions: Sequence[Any]) -> ListOutcome:
        rewards: list[float] = []
        invalid = 0
        steps = [actions] if self.is_grid_answer(actions) else actions
        grid_answer = steps is not actions
        for step in steps:
            if self.done:
                break
            reward, valid = self._grid_step(step) if grid_answer else self._fill_step(step)
            rewards.append(reward)
            invalid += not valid
        return ListOutcome.of(rewards, invalid, self)

    def observation(self) -> str:
        n = self.n
        side = math.isqrt(n)
        rows = ["[" + ",".join(map(str, self.grid[r * n : (r + 1) * n])) + "]" for r in range(n)]
        filled = n * n - self.grid.count(0)
        return (
            f"Grid ({n} x {n}, boxes of {side} x {side}; 0 = empty; rows and columns numbered "
            "from 0):\n[" + ",\n ".join(rows) + "]\n"
            f"Given clues (fixed): {format_grid(self.clues, n)}\n"
            f"Filled cells: {filled} of {n * n}; moves taken so far: {self.moves_taken}."
        )

    def answer_text(self) -> str:
        return format_grid(self.grid, self.n)


class SudokuEnv(PuzzleEnv):
    name = "sudoku"
    version = VERSION
    params: ClassVar[Mapping[str, ParamSpec]] = {
        "size": ParamSpec(default=4, low=4, high=9, choices=(4, 9)),
        "blank_ratio": ParamSpec(default=0.6, low=0.1, high=0.65),
    }

    def generate(self, rng: random.Random, params: Mapping[str, Any]) -> Generated | None:
        n = params["size"]
        made = make_puzzle(rng, n, round(params["blank_ratio"] * n * n))
        if made is None:
            return None
        clues, solution = made
        layout = SudokuLayout(
            size=n, clues=tuple(tuple(clues[r * n : (r + 1) * n]) for r in range(n))
        )
        solved = tuple(tuple(solution[r * n : (r + 1) * n]) for r in range(n))
        return Generated(
            layout=layout, solution=solved, optimal_length=None, content_key=format_grid(clues, n)
        )

    def new_state(self, level: Level) -> SudokuState:
        return SudokuState(level)

    def rules_text(self, level: Level) -> str:
        n = level.layout.size
        side = math.isqrt(n)
        return (
            f"Sudoku {n} x {n}: fill every empty cell (0) with a value from 1 to {n} so that each "
            f"row, each column and each {side} x {side} box holds every value exactly once. The "
            "given clues are fixed: an answer that changes one is wrong. Rows and columns are "
            "numbered from 0 at the top left. Answer either with the complete grid, a list of "
            f"{n} rows of {n} values such as [[{','.join(['v'] * n)}], ...], or with a list of "
            "fills [[row, column, value], ...], for example [[0, 1, 3], [2, 2, 4]]."
        )


def _candidate_bonus(count: int, was_empty: bool) -> float:
    """The reference's bonus for a fill with one or two candidates, paid only when the cell was
    empty: refilling a cell with the value it holds would otherwise pay again and again (ours;
    the reference's loop is worth more than solving)."""
    if not was_empty:
        return 0.0
    return SINGLE_CANDIDATE if count == 1 else TWO_CANDIDATES if count == 2 else 0.0
