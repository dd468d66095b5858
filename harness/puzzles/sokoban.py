"""Sokoban: push every box onto a goal in a small walled room.

Levels from reverse play (harness/puzzles/sokoban_generator.py), each certified by a BFS
solver whose shortest move list is the level's solution. Rewards and step limit as the
reference's Sokoban environment (docs/puzzles.md, PettingLLMs `stateful/env_state.py`); success is
`solved` (every box on a goal), never merely `done`. Details and departures: docs/puzzles.md.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from harness.puzzles.base import Generated, Level, ParamSpec, PuzzleEnv
from harness.puzzles.moves import MoveListState, grid_rows, open_grid_cells
from harness.puzzles.sokoban_generator import (
    box_distances,
    carve_room,
    farthest_positions,
    reverse_play,
    solve,
)

VERSION = "1"
STEP_REWARD = -0.01
INVALID_REWARD = -0.05
BOX_ON_GOAL = 1.0
BOX_OFF_GOAL = -0.5
SHAPING_WEIGHT = 0.1
GAMMA = 0.99
SOLVED_REWARD = 10.0
STEP_LIMIT = 200
STEP_LIMIT_PENALTY = -5.0
WALL, FLOOR, GOAL, BOX, BOX_ON_GOAL_SYMBOL, PLAYER, PLAYER_ON_GOAL = "#_.$*@+"


@dataclass(frozen=True)
class SokobanLayout:
    size: int
    rows: tuple[str, ...]  # WALL / FLOOR per cell, row 0 at the top
    goals: tuple[tuple[int, int], ...]  # (row, column), 0-based, sorted
    boxes: tuple[tuple[int, int], ...]
    player: tuple[int, int]


def _cells(layout: SokobanLayout, points: Sequence[tuple[int, int]]) -> list[int]:
    return [row * layout.size + col for row, col in points]


def floor_cells(layout: SokobanLayout) -> set[int]:
    return open_grid_cells(layout.rows, WALL)


class _Board:
    """What every state on one level reads: open cells, goals, distance to the nearest goal."""

    def __init__(self, layout: SokobanLayout) -> None:
        size = layout.size
        self.size = size
        self.deltas = (-size, size, -1, 1)
        self.open = bytearray(size * size)
        for cell in floor_cells(layout):
            self.open[cell] = 1
        self.goals = frozenset(_cells(layout, layout.goals))
        self.nearest_goal = box_distances(range(size * size), self.goals, size)


@lru_cache(maxsize=256)
def _board(level: Level) -> _Board:
    return _Board(level.layout)


class SokobanState(MoveListState):
    invalid_reward = INVALID_REWARD
    step_limit = STEP_LIMIT
    step_limit_penalty = STEP_LIMIT_PENALTY

    def __init__(self, level: Level) -> None:
        super().__init__(level)
        self._board = board = _board(level)
        layout: SokobanLayout = level.layout
        self.player = layout.player[0] * board.size + layout.player[1]
        self.boxes = set(_cells(layout, layout.boxes))
        self.on_goal = len(self.boxes & board.goals)
        self.distance_sum = sum(board.nearest_goal[box] for box in self.boxes)  # -phi

    def copy(self) -> SokobanState:
        twin = SokobanState.__new__(SokobanState)
        twin.__dict__.update(self.__dict__)
        twin.boxes, twin.history = set(self.boxes), list(self.history)
        return twin

    def step(self, move: int) -> tuple[float, bool]:
        board, boxes = self._board, self.boxes
        delta = board.deltas[move]
        target = self.player + delta
        if not board.open[target]:  # a wall
            return INVALID_REWARD, False
        before = self.distance_sum
        if target not in boxes:
            self.player = target
            return STEP_REWARD + SHAPING_WEIGHT * (1.0 - GAMMA) * before, True
        pushed_to = target + delta
        if not board.open[pushed_to] or pushed_to in boxes:  # a box that cannot move
            return INVALID_REWARD, False
        boxes.remove(target)
        boxes.add(pushed_to)
        self.player = target
        nearest, goals = board.nearest_goal, board.goals
        after = before - nearest[target] + nearest[pushed_to]
        self.distance_sum = after
        reward = STEP_REWARD + SHAPING_WEIGHT * (before - GAMMA * after)
        if pushed_to in goals and target not in goals:
            reward += BOX_ON_GOAL
            self.on_goal += 1
        elif target in goals and pushed_to not in goals:
            reward += BOX_OFF_GOAL
            self.on_goal -= 1
        if self.on_goal == len(boxes):
            reward += SOLVED_REWARD
            self.solved = self.done = True
        return reward, True

    def observation(self) -> str:
        board, layout = self._board, self.level.layout
        size = board.size
        lines = []
        for row, line in enumerate(layout.rows):
            symbols = []
            for col, symbol in enumerate(line):
                cell = row * size + col
                goal = cell in board.goals
                if cell == self.player:
                    symbol = PLAYER_ON_GOAL if goal else PLAYER
                elif cell in self.boxes:
                    symbol = BOX_ON_GOAL_SYMBOL if goal else BOX
                elif goal:
                    symbol = GOAL
                symbols.append(symbol)
            lines.append(" ".join(symbols))
        player = divmod(self.player, size)
        boxes = sorted(divmod(box, size) for box in self.boxes)
        return (
            f"Room ({size} x {size}; row 0 at the top, column 0 at the left):\n"
            + "\n".join(lines)
            + f"\nPlayer at {player}; boxes at {', '.join(map(str, boxes))}; goals at "
            f"{', '.join(map(str, layout.goals))}; boxes on goals: {self.on_goal} of "
            f"{len(self.boxes)}; moves taken so far: {self.moves_taken} of {STEP_LIMIT}."
        )


class SokobanEnv(PuzzleEnv):
    name = "sokoban"
    version = VERSION
    params: ClassVar[Mapping[str, ParamSpec]] = {
        "size": ParamSpec(default=6, low=5, high=10),
        "boxes": ParamSpec(default=1, low=1, high=4),
        "num_steps": ParamSpec(default=25, low=1, high=1000),
        "p_change_directions": ParamSpec(default=0.35, low=0.0, high=1.0),
        "search_depth": ParamSpec(default=200, low=1, high=1000),
        "min_box_distance": ParamSpec(default=2, low=1, high=16),
        "tries": ParamSpec(default=20, low=1, high=100),
        "max_player_moves": ParamSpec(default=3, low=0, high=20),
    }

    def generate(self, rng: random.Random, params: Mapping[str, Any]) -> Generated | None:
        size, box_count = params["size"], params["boxes"]
        for _ in range(params["tries"]):
            floor = carve_room(rng, size, params["num_steps"], params["p_change_directions"])
            if len(floor) < box_count + 2:
                continue
            placed = rng.sample(sorted(floor), box_count + 1)
            goals = tuple(sorted(placed[:box_count]))
            seen = reverse_play(floor, goals, placed[box_count], size, params["search_depth"])
            candidates = farthest_positions(seen, goals, size, params["min_box_distance"])
            if candidates:
                break
        else:
            return None
        player, boxes = rng.choice(candidates)
        for _ in range(rng.randint(0, params["max_player_moves"])):
            d_row, d_col = rng.choice(((-1, 0), (1, 0), (0, -1), (0, 1)))
            target = player + d_row * size + d_col
            if target in floor and target not in boxes:
                player = target
        solution = solve(floor, frozenset(goals), player, boxes, size)
        if solution is None:
            return None
        rows = grid_rows(size, floor, FLOOR, WALL)
        layout = SokobanLayout(
            size=size,
            rows=rows,
            goals=tuple(divmod(goal, size) for goal in goals),
            boxes=tuple(divmod(box, size) for box in boxes),
            player=divmod(player, size),
        )
        key = f"{size}|{'/'.join(rows)}|{layout.goals}|{layout.boxes}|{layout.player}"
        return Generated(
            layout=layout, solution=solution, optimal_length=len(solution), content_key=key
        )

    def new_state(self, level: Level) -> SokobanState:
        return SokobanState(level)

    def rules_text(self, level: Level) -> str:
        count = len(level.layout.boxes)
        boxes = "the box onto the goal" if count == 1 else f"all {count} boxes onto goals"
        return (
            f"Sokoban: push {boxes}. Symbols: '{WALL}' wall, '{FLOOR}' floor, '{GOAL}' goal, "
            f"'{BOX}' box, '{BOX_ON_GOAL_SYMBOL}' box on a goal, '{PLAYER}' you, "
            f"'{PLAYER_ON_GOAL}' you on a goal. Rows are numbered from 0 at the top, columns "
            "from 0 at the left, and a position is written (row, column). Moves: U (row - 1), "
            "D (row + 1), L (column - 1), R (column + 1). Walking into a box pushes it one cell "
            "the same way if that cell is floor or a goal; you cannot pull a box, push two boxes "
            "at once or walk through a wall, and such a move is invalid and changes nothing. "
            f"The episode ends after {STEP_LIMIT} moves. A move list is written in square "
            "brackets, for example [U, R, R, D]."
        )
