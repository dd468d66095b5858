"""Puzzle moves against the reward tables of facts.md 10.2: walls and blocked pushes change
nothing and cost what the table says, shaping and event rewards add up as written, step limits
end the episode, a Sudoku answer that changes a clue is wrong and penalised, observations show
the current state and `answer_text` replays to it."""

from __future__ import annotations

import itertools
import random

import pytest

from harness.benchmarks import get_suite
from harness.puzzles import Level, make_level, new_state, parse_actions
from harness.puzzles.plan_path import PlanPathLayout
from harness.puzzles.sokoban import SokobanLayout

OPEN_4 = ("....", ".#..", "....", "....")
ROOM_6 = ("######", "#____#", "#____#", "#____#", "#____#", "######")


def hand_level(env: str, layout: object, optimal: int | None = None) -> Level:
    return Level(
        env=env,
        version="1",
        split="eval",
        index=0,
        params={},
        ref=f"hand:{env}:{layout!r}",
        solution=(),
        optimal_length=optimal,
        layout=layout,
    )


def plan_level(start: tuple[int, int] = (0, 0), goal: tuple[int, int] = (2, 2)) -> Level:
    return hand_level("plan_path", PlanPathLayout(4, OPEN_4, start, goal), optimal=4)


def without_counter(observation: str) -> str:
    return observation.rsplit("moves taken", 1)[0]


def test_plan_path_walls_and_edges_leave_the_position_and_cost_a_tenth() -> None:
    state = new_state(plan_level())
    before = without_counter(state.observation())
    outcome = state.apply(["U", "L"])  # off the grid, both ways
    assert outcome.rewards == (-0.10, -0.10) and outcome.invalid == 2
    assert without_counter(state.observation()) == before and state.moves_taken == 2
    state.apply(["R"])
    outcome = state.apply(["D"])  # (0, 1) -> (1, 1) is blocked
    assert outcome.rewards == (-0.10,) and "P: (0, 1)" in state.observation()


def test_plan_path_valid_moves_pay_step_and_shaping_and_the_goal_pays_one_or_one_and_a_half() -> (
    None
):
    state = new_state(plan_level())
    outcome = state.apply(["R", "R", "D", "D"])  # distances 4 -> 3 -> 2 -> 1 -> 0, optimal
    distances = [4, 3, 2, 1, 0]
    expected = [-0.01 - 0.99 * after + before for before, after in itertools.pairwise(distances)]
    expected[-1] += 1.0 + 0.5
    assert outcome.rewards == pytest.approx(expected)
    assert outcome.solved and outcome.done

    late = new_state(plan_level())
    outcome = late.apply(["U", "R", "R", "D", "D", "L"])  # a bump first: not the shortest
    assert outcome.rewards[-1] == pytest.approx(-0.01 - 0 + 1 + 1.0)
    assert outcome.applied == 5 and late.moves_taken == 5  # the move after the goal is ignored


def test_plan_path_unknown_tokens_cost_a_tenth_but_are_not_moves() -> None:
    state = new_state(plan_level())
    outcome = state.apply(["X", "up", "Right", "jump"])
    assert outcome.rewards[0] == outcome.rewards[1] == outcome.rewards[3] == -0.10
    assert outcome.invalid == 3 and state.moves_taken == 2
    assert state.answer_text() == "[U, R]"


def test_plan_path_step_limit_ends_the_episode_with_minus_one() -> None:
    state = new_state(plan_level())
    outcome = state.apply(["U"] * 10_005)
    assert outcome.applied == 10_000 and outcome.done and not outcome.solved
    assert outcome.rewards[-1] == pytest.approx(-0.10 - 1.0)
    assert state.apply(["R"]).applied == 0


def test_the_observation_shows_the_current_position_not_the_start() -> None:
    level = make_level("plan_path", "eval", 5)
    state = new_state(level)
    start = level.layout.start
    assert f"P: {start}" in state.observation()
    state.apply(list(level.solution[:3]))
    grid = state.observation().splitlines()[1 : 1 + level.layout.size]
    row = next(r for r, line in enumerate(grid) if "P" in line)
    col = grid[row].split().index("P")
    assert f"P: ({row}, {col})" in state.observation() and (row, col) != start
    assert grid[start[0]].split()[start[1]] == "."


@pytest.mark.parametrize("env", ["plan_path", "sokoban"])
def test_answer_text_replays_every_move_to_the_same_state(env: str) -> None:
    rng = random.Random(4)
    for index in range(10):
        state = new_state(make_level(env, "train", index))
        state.apply([rng.choice("UDLR") for _ in range(30)])
        replayed = new_state(state.level)
        replayed.apply(parse_actions(env, f"#### {state.answer_text()}") or [])
        assert replayed.observation() == state.observation()
        assert (replayed.moves_taken, replayed.done) == (state.moves_taken, state.done)


def sokoban_level(boxes: list[tuple[int, int]], goals: list[tuple[int, int]], player) -> Level:
    layout = SokobanLayout(6, ROOM_6, tuple(sorted(goals)), tuple(sorted(boxes)), player)
    return hand_level("sokoban", layout)


def nearest(box: tuple[int, int], goals: list[tuple[int, int]]) -> int:
    return min(abs(box[0] - g[0]) + abs(box[1] - g[1]) for g in goals)


def test_sokoban_pushing_a_box_into_a_wall_changes_nothing_and_costs_five_hundredths() -> None:
    state = new_state(sokoban_level([(1, 1)], [(3, 3)], (1, 2)))
    before = without_counter(state.observation())
    outcome = state.apply(["L", "U"])  # the box against the wall; the wall itself
    assert outcome.rewards == (-0.05, -0.05) and outcome.invalid == 2
    assert without_counter(state.observation()) == before


def test_sokoban_pushing_a_box_into_another_box_is_invalid() -> None:
    state = new_state(sokoban_level([(2, 2), (2, 3)], [(4, 1), (4, 2)], (2, 1)))
    before = without_counter(state.observation())
    assert state.apply(["R"]).rewards == (-0.05,)
    assert without_counter(state.observation()) == before


def test_sokoban_rewards_for_walking_pushing_onto_and_off_a_goal() -> None:
    goals = [(2, 3), (4, 4)]
    state = new_state(sokoban_level([(2, 2), (4, 2)], goals, (1, 1)))
    far = nearest((2, 2), goals) + nearest((4, 2), goals)  # -phi
    walk = state.apply(["D"])  # to (2, 1): no box moves
    assert walk.rewards == (pytest.approx(-0.01 + 0.1 * (0.99 * -far + far)),)
    onto = state.apply(["R"])  # box (2, 2) -> (2, 3), a goal
    after = nearest((2, 3), goals) + nearest((4, 2), goals)
    assert onto.rewards == (pytest.approx(-0.01 + 0.1 * (far - 0.99 * after) + 1.0),)
    off = state.apply(["R"])  # (2, 3) -> (2, 4): off the goal
    later = nearest((2, 4), goals) + nearest((4, 2), goals)
    assert off.rewards == (pytest.approx(-0.01 + 0.1 * (after - 0.99 * later) - 0.5),)
    assert not off.done


def test_sokoban_solving_pays_ten_and_ends_the_episode() -> None:
    state = new_state(sokoban_level([(2, 2)], [(2, 3)], (2, 1)))
    outcome = state.apply(["R", "R", "L"])
    assert outcome.rewards == (pytest.approx(-0.01 + 0.1 * (1 - 0) + 1.0 + 10.0),)
    assert outcome.solved and outcome.done and outcome.applied == 1
    assert "*" in state.observation() and "boxes on goals: 1 of 1" in state.observation()


def test_sokoban_step_limit_is_minus_five_and_done_but_not_solved() -> None:
    state = new_state(sokoban_level([(3, 3)], [(4, 4)], (1, 1)))
    outcome = state.apply(["U"] * 205)
    assert outcome.applied == 200 and outcome.done and not outcome.solved
    assert outcome.rewards[-1] == pytest.approx(-0.05 - 5.0)


def units_done(grid: list[int]) -> int:
    cells = [[r * 4 + c for c in range(4)] for r in range(4)]
    cells += [[r * 4 + c for r in range(4)] for c in range(4)]
    cells += [
        [r * 4 + c for r in (br, br + 1) for c in (bc, bc + 1)] for br in (0, 2) for bc in (0, 2)
    ]
    return sum(sorted(grid[i] for i in unit) == [1, 2, 3, 4] for unit in cells)


def options(grid: list[int], cell: int) -> set[int]:
    row, col = divmod(cell, 4)
    peers = {row * 4 + c for c in range(4)} | {r * 4 + col for r in range(4)}
    br, bc = row - row % 2, col - col % 2
    peers |= {r * 4 + c for r in (br, br + 1) for c in (bc, bc + 1)}
    return {1, 2, 3, 4} - {grid[p] for p in peers - {cell}}


def test_sudoku_a_valid_grid_that_changes_clues_is_not_solved_and_loses_half_a_point() -> None:
    level = make_level("sudoku", "eval", 2)
    clues = [v for row in level.layout.clues for v in row]
    relabel = {1: 2, 2: 1, 3: 3, 4: 4}  # still a valid complete grid: the reference accepts it
    echoed = [[relabel[v] for v in row] for row in level.solution]
    state = new_state(level)
    outcome = state.apply(echoed)
    assert not outcome.solved and not state.solved
    expected = -0.01 + 0.5 * clues.count(0) / 16 + 0.02 * (12 - units_done(clues)) - 0.5
    assert outcome.rewards == (pytest.approx(expected),)
    suite = get_suite("sudoku")
    assert not suite.grade(f"#### {echoed}", level.ref).correct
    assert suite.grade(f"#### {[list(r) for r in level.solution]}", level.ref).correct


def test_sudoku_fills_pay_as_the_table_says_and_the_right_ones_solve() -> None:
    level = make_level("sudoku", "eval", 4)
    clues = [v for row in level.layout.clues for v in row]
    fills = [[c // 4, c % 4, level.solution[c // 4][c % 4]] for c in range(16) if not clues[c]]
    random.Random(1).shuffle(fills)
    state, grid = new_state(level), list(clues)
    for step, (row, col, value) in enumerate(fills, start=1):
        cell = row * 4 + col
        count = len(options(grid, cell))
        fewest = min(len(options(grid, other)) for other in range(16) if not grid[other])
        before = units_done(grid)
        grid[cell] = value
        expected = -0.01 + {1: 0.2, 2: 0.1}.get(count, 0.0) + (0.05 if count == fewest else 0)
        expected += 0.5 / 16 + 0.02 * (units_done(grid) - before)
        if step == len(fills):
            expected += 2.0 + 0.5  # solved within as many steps as blanks
        assert state.apply([[row, col, value]]).rewards == (pytest.approx(expected),)
    assert state.solved and state.answer_text() == str([list(r) for r in level.solution]).replace(
        " ", ""
    )


def test_sudoku_refilling_a_cell_earns_no_bonus_so_loops_cannot_beat_solving() -> None:
    level = make_level("sudoku", "eval", 4)
    clues = [v for row in level.layout.clues for v in row]
    cell = next(c for c in range(16) if not clues[c])
    fill = [cell // 4, cell % 4, level.solution[cell // 4][cell % 4]]
    state = new_state(level)
    first = state.apply([fill]).reward
    again = state.apply([fill] * 30)
    assert first > 0 and again.invalid == 0
    assert max(again.rewards) == pytest.approx(-0.01)  # the step cost, no bonus
    solved = new_state(level).apply([list(row) for row in level.solution])
    assert solved.solved and solved.reward > first + again.reward


def test_sudoku_bad_fills_and_out_of_range_grids_change_nothing() -> None:
    level = make_level("sudoku", "eval", 6)
    clues = [v for row in level.layout.clues for v in row]
    clue = next(c for c in range(16) if clues[c])
    empty = next(c for c in range(16) if not clues[c])
    clash = next(v for v in range(1, 5) if v not in options(clues, empty))
    state = new_state(level)
    before = state.observation().rsplit("moves taken", 1)[0]
    outcome = state.apply(
        [
            [clue // 4, clue % 4, 1 + clues[clue] % 4],  # a clue cell
            [empty // 4, empty % 4, clash],  # a peer holds the value
            [empty // 4, empty % 4, 5],  # out of range
            [4, 0, 1],  # off the grid
            ["a", 0, 1],
        ]
    )
    assert outcome.rewards == (-0.3,) * 5 and outcome.invalid == 5
    assert state.observation().rsplit("moves taken", 1)[0] == before
    grid = [list(row) for row in level.solution]
    grid[0][0] = 7
    assert state.apply(grid).rewards == (-1.0,) and state.grid == clues


def test_sudoku_answer_text_of_a_partial_grid_replays() -> None:
    level = make_level("sudoku", "train", 9)
    clues = [v for row in level.layout.clues for v in row]
    empty = [c for c in range(16) if not clues[c]][:3]
    state = new_state(level)
    state.apply([[c // 4, c % 4, level.solution[c // 4][c % 4]] for c in empty])
    assert "Filled cells: 9 of 16" in state.observation()
    replayed = new_state(level)
    outcome = replayed.apply(parse_actions("sudoku", f"#### {state.answer_text()}") or [])
    assert replayed.grid == state.grid and outcome.rewards[0] == pytest.approx(
        -0.01 + 0.5 * 3 / 16 + 0.02 * (units_done(state.grid) - units_done(clues))
    )


def test_sudoku_step_limit_is_four_steps_a_cell_and_ends_unsolved() -> None:
    state = new_state(make_level("sudoku", "eval", 1))
    outcome = state.apply([[9, 9, 9]] * 70)
    assert outcome.applied == 64 and outcome.done and not outcome.solved
    assert outcome.reward == pytest.approx(-0.3 * 64)
