"""Puzzle environments of Stronger-MAS: Plan-Path, Sokoban and Sudoku.

Each is a seeded generator with a certified solution, a text observation of the current state,
an action format, a step limit, a success test (`solved`) and the reference's per-move rewards.
Typical use:

    level = make_level("plan_path", "eval", 0)          # or level_from_ref(level.ref)
    state = new_state(level)
    outcome = state.apply(parse_actions("plan_path", reply) or [])
    outcome.solved, outcome.reward, state.observation(), state.answer_text()

docs/puzzles.md has the rules, reward tables and their sources.
"""

from harness.puzzles.actions import format_actions, parse_actions
from harness.puzzles.base import Level, ListOutcome, PuzzleState
from harness.puzzles.levels import ENVIRONMENTS, level_from_ref, make_level, new_state, rules_text

__all__ = [
    "ENVIRONMENTS",
    "Level",
    "ListOutcome",
    "PuzzleState",
    "format_actions",
    "level_from_ref",
    "make_level",
    "new_state",
    "parse_actions",
    "rules_text",
]
