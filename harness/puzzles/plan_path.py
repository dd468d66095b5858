"""Plan-Path: walk from the start to the goal on an N x N grid with blocked cells.

Generator, rewards and step limit as the reference's planning environment (docs/puzzles.md,
PettingLLMs `stateful/env_state.py`); the observation shows the current position (the
reference shows only the start). Details and departures: docs/puzzles.md.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from harness.puzzles.base import Generated, Level, ParamSpec, PuzzleEnv
from harness.puzzles.moves import MOVES, MoveListState, grid_rows, open_grid_cells, step_table

VERSION = "1"
STEP_REWARD = -0.01
INVALID_REWARD = -0.10
GAMMA = 0.99
GOAL_REWARD = 1.0
OPTIMAL_BONUS = 0.5
STEP_LIMIT = 10_000
STEP_LIMIT_PENALTY = -1.0
BLOCKED, FREE = "#", "."


@dataclass(frozen=True)
class PlanPathLayout:
    size: int
    rows: tuple[str, ...]  # BLOCKED / FREE per cell, row 0 at the top
    start: tuple[int, int]  # (row, column), 0-based
    goal: tuple[int, int]


def shortest_path(table: list[list[int]], start: int, goal: int) -> tuple[str, ...] | None:
    """The BFS shortest move list from `start` to `goal` (moves tried in U, D, L, R order)."""
    parent: dict[int, tuple[int, int]] = {start: (-1, -1)}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            moves: list[str] = []
            while cell != start:
                cell, move = parent[cell]
                moves.append(MOVES[move])
            return tuple(reversed(moves))
        for move, target in enumerate(table[cell]):
            if target >= 0 and target not in parent:
                parent[target] = (cell, move)
                queue.append(target)
    return None


class _Board:
    """What every state on one level reads: moves as a table, distances to the goal."""

    def __init__(self, layout: PlanPathLayout) -> None:
        size = layout.size
        self.size = size
        self.table = step_table(size, size, open_grid_cells(layout.rows, BLOCKED))
        self.start = layout.start[0] * size + layout.start[1]
        self.goal = layout.goal[0] * size + layout.goal[1]
        goal_row, goal_col = layout.goal
        self.distance = [
            abs(cell // size - goal_row) + abs(cell % size - goal_col)
            for cell in range(size * size)
        ]


@lru_cache(maxsize=256)
def _board(level: Level) -> _Board:
    return _Board(level.layout)


class PlanPathState(MoveListState):
    invalid_reward = INVALID_REWARD
    step_limit = STEP_LIMIT
    step_limit_penalty = STEP_LIMIT_PENALTY

    def __init__(self, level: Level) -> None:
        super().__init__(level)
        self._board = _board(level)
        self.position = self._board.start

    def copy(self) -> PlanPathState:
        twin = PlanPathState.__new__(PlanPathState)
        twin.level, twin._board, twin.position = self.level, self._board, self.position
        twin.moves_taken, twin.history = self.moves_taken, list(self.history)
        twin.done, twin.solved = self.done, self.solved
        return twin

    def step(self, move: int) -> tuple[float, bool]:
        board, position = self._board, self.position
        target = board.table[position][move]
        if target < 0:  # a blocked cell or off the grid: the position stays
            return INVALID_REWARD, False
        reward = STEP_REWARD - GAMMA * board.distance[target] + board.distance[position]
        self.position = target
        if target == board.goal:
            reward += GOAL_REWARD
            if self.moves_taken == self.level.optimal_length:
                reward += OPTIMAL_BONUS
            self.solved = self.done = True
        return reward, True

    def observation(self) -> str:
        size, layout = self._board.size, self.level.layout
        row, col = divmod(self.position, size)
        lines = []
        goal_row, goal_col = layout.goal
        for r, line in enumerate(layout.rows):
            symbols = list(line)
            if r == goal_row:
                symbols[goal_col] = "G"
            if r == row:
                symbols[col] = "P"
            lines.append(" ".join(symbols))
        where = "on the goal" if self.solved else f"goal at {layout.goal}"
        return (
            f"Grid ({size} x {size}; row 0 at the top, column 0 at the left):\n"
            + "\n".join(lines)
            + f"\nCurrent position P: ({row}, {col}); {where}; moves taken so far: "
            f"{self.moves_taken}."
        )


class PlanPathEnv(PuzzleEnv):
    name = "plan_path"
    version = VERSION
    params: ClassVar[Mapping[str, ParamSpec]] = {
        "size": ParamSpec(default=10, low=3, high=30),
        "block_ratio": ParamSpec(default=0.22, low=0.0, high=0.5),
    }

    def generate(self, rng: random.Random, params: Mapping[str, Any]) -> Generated | None:
        size = params["size"]
        cells = size * size
        blocked = set(rng.sample(range(cells), round(params["block_ratio"] * cells)))
        open_cells = [cell for cell in range(cells) if cell not in blocked]
        start, goal = rng.sample(open_cells, 2)
        path = shortest_path(step_table(size, size, set(open_cells)), start, goal)
        if path is None:
            return None
        rows = grid_rows(size, open_cells, FREE, BLOCKED)
        layout = PlanPathLayout(size, rows, divmod(start, size), divmod(goal, size))
        key = f"{size}|{'/'.join(rows)}|{layout.start}|{layout.goal}"
        return Generated(layout=layout, solution=path, optimal_length=len(path), content_key=key)

    def new_state(self, level: Level) -> PlanPathState:
        return PlanPathState(level)

    def rules_text(self, level: Level) -> str:
        size = level.layout.size
        return (
            f"Plan-Path: move from your position P to the goal G on a {size} x {size} grid. "
            f"'{BLOCKED}' is a blocked cell and '{FREE}' a free one; rows are numbered from 0 "
            "at the top, columns from 0 at the left, and a position is written (row, column). "
            "Moves: U (row - 1), D (row + 1), L (column - 1), R (column + 1). A move into a "
            "blocked cell or off the grid is invalid and leaves you where you are. Reach G in as "
            "few moves as possible. A move list is written in square brackets, for example "
            "[U, R, R, D]."
        )
