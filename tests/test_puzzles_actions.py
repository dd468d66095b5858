"""Reading action lists out of replies, and writing them back canonically."""

from __future__ import annotations

import pytest

from core.errors import MarsError
from harness.puzzles import format_actions, parse_actions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I go right twice.\n#### [R, R, D]", ["R", "R", "D"]),
        ("**Actions List**: [up, Down, LEFT, right]", ["U", "D", "L", "R"]),
        ("Actions: ['U', \"R\"]", ["U", "R"]),
        ("The plan:\n  [u, r, r]\nDone.", ["U", "R", "R"]),
        ("#### [U R D]", ["U", "R", "D"]),
        ("#### Final moves: [L, U]", ["L", "U"]),
        ("#### []", []),
        ("#### [U, jump, R]", ["U", "jump", "R"]),  # kept: applying it is an invalid move
        ("first #### [U]\nthen, thinking again:\n#### [D, D]", ["D", "D"]),
        ("#### [R, R]\nCheck:\n[L, L]", ["L", "L"]),  # the last list, whatever its form
        ("#### [R, R]\n[1] see the grid above", ["R", "R"]),  # not a list of moves
        ("#### [R, R]\n[U, D] is what I rejected", ["R", "R"]),  # not alone on its line
    ],
)
def test_move_lists_in_their_accepted_forms(text: str, expected: list[str]) -> None:
    assert parse_actions("plan_path", text) == expected
    assert parse_actions("sokoban", text) == expected


@pytest.mark.parametrize(
    "text",
    ["no list here", "#### U, R", "[jump, run]", "#### [U, R", "#### [[U], [R]]", ""],
)
def test_nothing_parses_is_none(text: str) -> None:
    assert parse_actions("plan_path", text) is None


def test_sudoku_grids_and_fills() -> None:
    grid = "#### [[1,2,3,4],\n [3,4,1,2],\n [2,1,4,3],\n [4,3,2,1]]"
    assert parse_actions("sudoku", grid) == [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
    fills = "Fill these.\n**Actions List**: [[0, 1, 3], [2, 2, 4]]"
    assert parse_actions("sudoku", fills) == [[0, 1, 3], [2, 2, 4]]
    assert parse_actions("sudoku", "#### [[0, 1]]") is None  # neither a grid nor fills
    assert parse_actions("sudoku", "[(0, 1, 3), (2, 2, 4)]") == [[0, 1, 3], [2, 2, 4]]  # print()
    assert parse_actions("sudoku", "#### [[1,2,3],[3,1,2],[2,3,1]]") == [
        [1, 2, 3],
        [3, 1, 2],
        [2, 3, 1],
    ]  # three fills, not a 3 x 3 grid
    assert parse_actions("sudoku", "#### [[1,'a',3]]") is None
    assert parse_actions("sudoku", "#### [U, R]") is None
    rows_only = "[[1,2,3,4],\n[3,4,1,2],\n[2,1,4,3],\n[4,3,2,1]]\nrow check: [1, 2, 3]"
    assert parse_actions("sudoku", rows_only) == [
        [1, 2, 3, 4],
        [3, 4, 1, 2],
        [2, 1, 4, 3],
        [4, 3, 2, 1],
    ]


def test_canonical_text_round_trips() -> None:
    moves = ["U", "down", "Left", "r"]
    assert format_actions("sokoban", moves) == "[U, D, L, R]"
    assert parse_actions("sokoban", f"#### {format_actions('sokoban', moves)}") == list("UDLR")
    grid = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
    assert format_actions("sudoku", grid) == "[[1,2,3,4],[3,4,1,2],[2,1,4,3],[4,3,2,1]]"
    assert parse_actions("sudoku", format_actions("sudoku", grid)) == grid


def test_unknown_environment_or_non_list_is_one_line_of_error() -> None:
    with pytest.raises(MarsError, match="unknown puzzle environment"):
        parse_actions("maze", "#### [U]")
    with pytest.raises(MarsError, match="is a list"):
        format_actions("plan_path", "UDLR")
