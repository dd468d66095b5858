"""Training and evaluation levels are disjoint by content (the reference evaluates on training
puzzles), even where the space of puzzles is small enough for random draws to repeat."""

from __future__ import annotations

from collections import Counter

import pytest

from harness.puzzles import make_level


def content(level) -> tuple:
    layout = level.layout
    if level.env == "sudoku":
        return layout.clues
    if level.env == "plan_path":
        return (layout.rows, layout.start, layout.goal)
    return (layout.rows, layout.goals, layout.boxes, layout.player)


@pytest.mark.parametrize(
    ("env", "params", "train_count", "eval_count"),
    [
        ("sudoku", {"size": 4}, 2500, 300),
        ("plan_path", {"size": 3, "block_ratio": 0.0}, 2000, 300),  # 72 puzzles in all
        ("plan_path", {"size": 5}, 1000, 200),
        ("sokoban", {"size": 5}, 600, 150),
    ],
)
def test_no_training_level_equals_an_evaluation_level(
    env: str, params: dict, train_count: int, eval_count: int
) -> None:
    evaluation = {content(make_level(env, "eval", i, **params)) for i in range(eval_count)}
    training = Counter(content(make_level(env, "train", i, **params)) for i in range(train_count))
    assert evaluation.isdisjoint(training)
    if env == "plan_path" and params["size"] == 3:
        # The space is tiny, so draws repeat: it is the split rule, not luck, that keeps them
        # apart, and both sides still get a share of it.
        assert len(evaluation) + len(training) <= 72
        assert len(evaluation) >= 5 and len(training) >= 30


def test_the_same_index_in_the_two_splits_is_a_different_level() -> None:
    for env in ("plan_path", "sokoban", "sudoku"):
        for index in range(20):
            train, evaluation = make_level(env, "train", index), make_level(env, "eval", index)
            assert content(train) != content(evaluation)
            assert (train.split, evaluation.split) == ("train", "eval")
