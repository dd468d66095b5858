"""Puzzle levels: every generated level is certified (solvable, with a BFS-shortest solution, or
uniquely solvable), the certified solution scores success, levels are reproducible one by one,
and refs name them in one line. The checks solve the levels again by other means (a search
through the environment's own step function, all 288 complete 4 x 4 grids)."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

from core.errors import MarsError
from harness.puzzles import Level, level_from_ref, make_level, new_state
from harness.puzzles import levels as levels_module
from harness.puzzles.sokoban_generator import box_distances


def grid_moves_bfs(level: Level, cap: int = 20_000) -> int | None:
    """Shortest number of moves to `solved`, searching through copies of the real state (so
    through the environment's own rules), states told apart by their observation text."""
    start = new_state(level)
    seen = {start.observation().rsplit("moves taken", 1)[0]}
    queue = deque([(start, 0)])
    while queue:
        state, depth = queue.popleft()
        for move in "UDLR":
            child = state.copy()
            outcome = child.apply([move])
            if outcome.solved:
                return depth + 1
            key = child.observation().rsplit("moves taken", 1)[0]
            if key not in seen:
                seen.add(key)
                queue.append((child, depth + 1))
        assert len(seen) < cap
    return None


@pytest.mark.parametrize(("size", "count"), [(10, 60), (5, 120)])
def test_plan_path_levels_are_reachable_and_their_solution_is_shortest_with_the_bonus(
    size: int, count: int
) -> None:
    for split in ("eval", "train"):
        for index in range(count):
            level = make_level("plan_path", split, index, size=size)
            layout = level.layout
            blocked = sum(line.count("#") for line in layout.rows)
            assert blocked == round(0.22 * size * size)
            for row, col in (layout.start, layout.goal):
                assert layout.rows[row][col] == "."
            assert layout.start != layout.goal
            assert grid_moves_bfs(level) == level.optimal_length == len(level.solution)
            outcome = new_state(level).apply(list(level.solution))
            assert outcome.solved and outcome.done and outcome.invalid == 0
            # The last move goes from distance 1 to 0: step, shaping, goal and the optimal bonus.
            assert outcome.rewards[-1] == pytest.approx(-0.01 + 1.0 + 1.0 + 0.5)


def test_sokoban_levels_are_certified_and_their_solution_is_move_optimal() -> None:
    for split, count in (("eval", 120), ("train", 120)):
        for index in range(count):
            level = make_level("sokoban", split, index)
            layout = level.layout
            assert layout.size == 6 and len(layout.rows) == 6
            assert layout.rows[0] == layout.rows[-1] == "######"
            assert all(line[0] == line[-1] == "#" for line in layout.rows)
            assert len(layout.boxes) == len(layout.goals) == 1
            cells = [r * 6 + c for r, c in layout.boxes]
            goals = [r * 6 + c for r, c in layout.goals]
            assert min(box_distances(cells, goals, 6)) >= 2  # min box distance 2
            assert grid_moves_bfs(level) == level.optimal_length == len(level.solution)
            outcome = new_state(level).apply(list(level.solution))
            assert outcome.solved and outcome.invalid == 0
            assert outcome.rewards[-1] > 10.0  # the last push solves it: +1 onto the goal, +10


def test_sokoban_with_two_boxes_is_certified_too() -> None:
    for index in range(15):
        level = make_level("sokoban", "eval", index, size=7, boxes=2)
        assert len(level.layout.boxes) == 2
        assert new_state(level).apply(list(level.solution)).solved
        assert grid_moves_bfs(level, cap=60_000) == level.optimal_length


def all_4x4_grids() -> list[tuple[int, ...]]:
    rows = list(itertools.permutations((1, 2, 3, 4)))
    grids = []
    for grid in itertools.product(rows, repeat=4):
        columns_ok = all(len({row[c] for row in grid}) == 4 for c in range(4))
        boxes_ok = all(
            len({grid[r][c] for r in (br, br + 1) for c in (bc, bc + 1)}) == 4
            for br in (0, 2)
            for bc in (0, 2)
        )
        if columns_ok and boxes_ok:
            grids.append(tuple(value for row in grid for value in row))
    return grids


def test_sudoku_4x4_levels_have_exactly_one_solution_and_it_is_the_certified_one() -> None:
    grids = all_4x4_grids()
    assert len(grids) == 288
    for split in ("eval", "train"):
        for index in range(150):
            level = make_level("sudoku", split, index)
            clues = [value for row in level.layout.clues for value in row]
            assert clues.count(0) == round(0.6 * 16)
            matches = [
                grid for grid in grids if all(c in (0, g) for c, g in zip(clues, grid, strict=True))
            ]
            assert matches == [tuple(value for row in level.solution for value in row)]
            outcome = new_state(level).apply([list(row) for row in level.solution])
            assert outcome.solved and outcome.rewards == (pytest.approx(-0.01 + 2.0 + 0.5),)


def count_9x9(grid: list[int], limit: int = 2) -> int:
    """A plain backtracking count (no shared code with the generator's solver)."""
    try:
        cell = grid.index(0)
    except ValueError:
        return 1
    row, col = divmod(cell, 9)
    used = {grid[row * 9 + c] for c in range(9)} | {grid[r * 9 + col] for r in range(9)}
    br, bc = row - row % 3, col - col % 3
    used |= {grid[r * 9 + c] for r in range(br, br + 3) for c in range(bc, bc + 3)}
    found = 0
    for value in range(1, 10):
        if value not in used:
            grid[cell] = value
            found += count_9x9(grid, limit - found)
            grid[cell] = 0
            if found >= limit:
                break
    return found


def test_sudoku_9x9_levels_are_uniquely_solvable() -> None:
    for index in range(3):
        level = make_level("sudoku", "eval", index, size=9)
        clues = [value for row in level.layout.clues for value in row]
        assert count_9x9(list(clues)) == 1
        assert new_state(level).apply([list(row) for row in level.solution]).solved


def test_a_level_is_rebuilt_alone_and_the_same_whatever_was_made_before() -> None:
    first = {env: make_level(env, "eval", 7) for env in ("plan_path", "sokoban", "sudoku")}
    levels_module._make.cache_clear()
    for env in ("plan_path", "sokoban", "sudoku"):
        make_level(env, "train", 7)  # other levels first: they must not shift the stream
        again = make_level(env, "eval", 7)
        assert again == first[env] and again is not first[env]
        assert make_level(env, "eval", 8) != again


@pytest.mark.parametrize(
    ("env", "params"),
    [("plan_path", {"size": 6}), ("sokoban", {"boxes": 2, "size": 7}), ("sudoku", {"size": 9})],
)
def test_a_ref_names_its_level_in_one_line(env: str, params: dict) -> None:
    level = make_level(env, "eval", 3, **params)
    assert "\n" not in level.ref and level.ref.startswith(f"{env}:v{level.version}:eval:3:")
    assert level_from_ref(level.ref) == level
    assert level_from_ref(level.ref).params == {**level.params}
    assert hash(level_from_ref(level.ref)) == hash(level)


@pytest.mark.parametrize(
    "ref",
    [
        "plan_path:v1:eval:3",
        "chess:v1:eval:3:size=8:abc",
        "plan_path:v999:eval:3:block_ratio=0.22,size=10:abc",
        "plan_path:v1:test:3:block_ratio=0.22,size=10:abc",
        "plan_path:v1:eval:x:block_ratio=0.22,size=10:abc",
        "plan_path:v1:eval:3:colour=2:abc",
        "plan_path:v1:eval:3:size=ten:abc",
        "plan_path:v1:eval:3:block_ratio=0.22,size=10:0000000000",  # content differs
    ],
)
def test_a_bad_ref_is_one_line_of_error(ref: str) -> None:
    with pytest.raises(MarsError) as caught:
        level_from_ref(ref)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("args", "params", "words"),
    [
        (("maze", "eval", 0), {}, "unknown puzzle environment"),
        (("plan_path", "test", 0), {}, "unknown split"),
        (("plan_path", "eval", -1), {}, "index"),
        (("plan_path", "eval", 0), {"colour": 1}, "unknown parameter 'colour'"),
        (("plan_path", "eval", 0), {"size": 2}, "size must lie in"),
        (("plan_path", "eval", 0), {"block_ratio": "high"}, "must be a number"),
        (("sokoban", "eval", 0), {"boxes": 1.5}, "whole number"),
        (("sudoku", "eval", 0), {"size": 6}, "one of 4, 9"),
    ],
)
def test_bad_arguments_are_one_line_of_error(args: tuple, params: dict, words: str) -> None:
    with pytest.raises(MarsError) as caught:
        make_level(*args, **params)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_an_impossible_setting_fails_after_bounded_attempts() -> None:
    with pytest.raises(MarsError, match="after 400 attempts"):
        make_level("sokoban", "eval", 0, size=5, min_box_distance=16, tries=1)
