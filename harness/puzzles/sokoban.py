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

from harness.puzzles.base import Generated, Level, ListOutcome, ParamSpec, PuzzleEnv, PuzzleState
from harness.puzzles.moves import MOVES, move_index
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
    return {
        row * layout.size + col
        for row, line in enumerate(layout.rows)
        for col, symbol in enumerate(line)
        if symbol != WALL
    }


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


class SokobanState(PuzzleState):
    def __init__(self, level: Level) -> None:
        self.level = level
        self._board = board = _board(level)
        layout: SokobanLayout = level.layout
        self.player = layout.player[0] * board.size + layout.player[1]
        self.boxes = set(_cells(layout, layout.boxes))
        self.on_goal = len(self.boxes & board.goals)
        self.distance_sum = sum(board.nearest_goal[box] for box in self.boxes)  # -phi
        self.moves_taken = 0
        self.history: list[str] = []
        self.done = self.solved = False

    def copy(self) -> SokobanState:
        twin = SokobanState.__new__(SokobanState)
        twin.__dict__.update(self.__dict__)
        twin.boxes, twin.history = set(self.boxes), list(self.history)
        return twin

    def apply(self, actions: Sequence[Any]) -> ListOutcome:
        board = self._board
        is_open, deltas, goals, nearest = board.open, board.deltas, board.goals, board.nearest_goal
        boxes, box_count = self.boxes, len(self.boxes)
        rewards: list[float] = []
        invalid = 0
        for action in actions:
            if self.done:
                break
            move = move_index(action)
            if move is None:  # not a move: penalised, not counted as a move
                rewards.append(INVALID_REWARD)
                invalid += 1
                continue
            self.moves_taken += 1
            self.history.append(MOVES[move])
            delta = deltas[move]
            target = self.player + delta
            reward, moved = INVALID_REWARD, False
            if is_open[target]:
                before = self.distance_sum
                if target not in boxes:
                    self.player, moved = target, True
                    reward = STEP_REWARD + SHAPING_WEIGHT * (1.0 - GAMMA) * before
                else:
                    pushed_to = target + delta
                    if is_open[pushed_to] and pushed_to not in boxes:
                        boxes.remove(target)
                        boxes.add(pushed_to)
                        self.player, moved = target, True
                        after = before - nearest[target] + nearest[pushed_to]
                        self.distance_sum = after
                        reward = STEP_REWARD + SHAPING_WEIGHT * (before - GAMMA * after)
                        if pushed_to in goals and target not in goals:
                            reward += BOX_ON_GOAL
                            self.on_goal += 1
                        elif target in goals and pushed_to not in goals:
                            reward += BOX_OFF_GOAL
                            self.on_goal -= 1
                        if self.on_goal == box_count:
                            reward += SOLVED_REWARD
                            self.solved = self.done = True
            if not moved:  # a wall, or a box that cannot move
                invalid += 1
            if not self.done and self.moves_taken >= STEP_LIMIT:
                reward += STEP_LIMIT_PENALTY
                self.done = True
            rewards.append(reward)
        return ListOutcome.of(rewards, invalid, self)

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

    def answer_text(self) -> str:
        return "[" + ", ".join(self.history) + "]"


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
        rows = tuple(
            "".join(FLOOR if row * size + col in floor else WALL for col in range(size))
            for row in range(size)
        )
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
