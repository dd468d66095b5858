"""Sokoban levels by reverse play, and the BFS solver that certifies them.

The generator follows the description of gym-sokoban's `generate_room` as PettingLLMs
configures it (docs/puzzles.md): carve a room by a random walk, put the boxes on their goals and
the player on a free cell, then play backwards (the player walks and pulls boxes) and keep the
reachable position whose boxes lie farthest from the goals; up to `tries` rooms, then a few
random player steps. Playing backwards can only reach positions from which the goals are
reachable forwards, and `solve` checks that again and gives the optimal move count.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable

from harness.puzzles.moves import MOVES

# Small floor patterns carved around each position of the walk (offsets from it).
_PATTERNS: tuple[tuple[tuple[int, int], ...], ...] = (
    ((0, 0),),
    ((0, 0), (0, 1)),
    ((0, 0), (1, 0)),
    ((0, 0), (0, 1), (1, 0), (1, 1)),
    ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)),
)
_DIRECTIONS = ((-1, 0), (1, 0), (0, -1), (0, 1))
REVERSE_STATE_CAP = 50_000
SOLVER_STATE_CAP = 200_000

Position = tuple[int, tuple[int, ...]]  # (player cell, sorted box cells); cell = row * size + col


def carve_room(rng: random.Random, size: int, num_steps: int, p_change: float) -> set[int]:
    """Floor cells of a `size` x `size` room whose border is wall: a random walk of
    `num_steps` steps that changes direction with probability `p_change` at each step."""
    inner_low, inner_high = 1, size - 2
    row, col = rng.randint(inner_low, inner_high), rng.randint(inner_low, inner_high)
    d_row, d_col = rng.choice(_DIRECTIONS)
    floor: set[int] = set()
    for _ in range(num_steps):
        if rng.random() < p_change:
            d_row, d_col = rng.choice(_DIRECTIONS)
        for o_row, o_col in rng.choice(_PATTERNS):
            r, c = row + o_row, col + o_col
            if inner_low <= r <= inner_high and inner_low <= c <= inner_high:
                floor.add(r * size + c)
        row = min(max(row + d_row, inner_low), inner_high)
        col = min(max(col + d_col, inner_low), inner_high)
    return floor


def _deltas(size: int) -> tuple[int, int, int, int]:
    return (-size, size, -1, 1)  # U, D, L, R in cell-index steps


def reverse_play(
    floor: set[int], goals: tuple[int, ...], player: int, size: int, search_depth: int
) -> dict[Position, int]:
    """Every position reachable backwards from the solved one (boxes on `goals`) within
    `search_depth` reverse moves: the player steps to a free cell, pulling or not a box that
    stands on the opposite side. Values are depths; insertion order is deterministic."""
    start: Position = (player, tuple(sorted(goals)))
    seen: dict[Position, int] = {start: 0}
    frontier = [start]
    deltas = _deltas(size)
    for depth in range(1, search_depth + 1):
        following: list[Position] = []
        for position, boxes in frontier:
            box_set = set(boxes)
            for delta in deltas:
                target = position + delta
                if target not in floor or target in box_set:
                    continue
                reached = [(target, boxes)]
                behind = position - delta
                if behind in box_set:
                    pulled = tuple(sorted(position if box == behind else box for box in boxes))
                    reached.append((target, pulled))
                for state in reached:
                    if state not in seen:
                        seen[state] = depth
                        following.append(state)
        frontier = following
        if not frontier or len(seen) > REVERSE_STATE_CAP:
            break
    return seen


def box_distances(boxes: Iterable[int], goals: Iterable[int], size: int) -> list[int]:
    """Each box's Manhattan distance to its nearest goal."""
    goal_cells = [divmod(goal, size) for goal in goals]
    distances = []
    for box in boxes:
        row, col = divmod(box, size)
        distances.append(min(abs(row - g_row) + abs(col - g_col) for g_row, g_col in goal_cells))
    return distances


def farthest_positions(
    seen: dict[Position, int], goals: tuple[int, ...], size: int, min_box_distance: int
) -> list[Position]:
    """The positions whose boxes are farthest (in total) from the goals, among those where every
    box is at least `min_box_distance` from its nearest goal; empty when there is none."""
    best_score, best = 0, []
    for state in seen:
        distances = box_distances(state[1], goals, size)
        if min(distances) < min_box_distance:
            continue
        score = sum(distances)
        if score > best_score:
            best_score, best = score, [state]
        elif score == best_score:
            best.append(state)
    return best


def solve(
    floor: set[int], goals: frozenset[int], player: int, boxes: tuple[int, ...], size: int
) -> tuple[str, ...] | None:
    """The shortest move list (in moves, pushes and walks alike) that puts every box on a goal,
    by BFS over (player, boxes); None when there is none or the search passes its cap."""
    start: Position = (player, tuple(sorted(boxes)))
    parent: dict[Position, tuple[Position, int] | None] = {start: None}
    queue = deque([start])
    deltas = _deltas(size)
    while queue:
        state = queue.popleft()
        position, boxes_now = state
        if goals.issuperset(boxes_now):
            moves: list[str] = []
            link = parent[state]
            while link is not None:
                state, move = link
                moves.append(MOVES[move])
                link = parent[state]
            return tuple(reversed(moves))
        box_set = set(boxes_now)
        for move, delta in enumerate(deltas):
            target = position + delta
            if target not in floor:
                continue
            if target in box_set:
                pushed_to = target + delta
                if pushed_to not in floor or pushed_to in box_set:
                    continue
                after = tuple(sorted(pushed_to if box == target else box for box in boxes_now))
            else:
                after = boxes_now
            reached = (target, after)
            if reached not in parent:
                parent[reached] = (state, move)
                queue.append(reached)
        if len(parent) > SOLVER_STATE_CAP:
            return None
    return None
