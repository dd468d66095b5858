"""The procedural puzzle suites as `mars eval` uses them: loaded by name, prompted, and graded
through `get_suite`, inline and in a grading worker process."""

from __future__ import annotations

import pytest

from core.errors import MarsError
from harness.benchmarks import get_suite, list_suites
from harness.benchmarks.grading_worker import GradingPool, grade_inline
from harness.puzzles import level_from_ref, new_state

SUITES = {
    "plan_path": ("plan_path", {"size": 10}),
    "plan_path_5x5": ("plan_path", {"size": 5}),
    "sokoban": ("sokoban", {"size": 6, "boxes": 1}),
    "sudoku": ("sudoku", {"size": 4}),
    "sudoku_9x9": ("sudoku", {"size": 9}),
}


def right_answer(gold: str) -> str:
    level = level_from_ref(gold)
    if level.env == "sudoku":
        return f"Here it is.\n#### {[list(row) for row in level.solution]}"
    return f"Let me walk it.\n#### [{', '.join(level.solution)}]"


@pytest.mark.parametrize("name", sorted(SUITES))
def test_a_suite_loads_evaluation_levels_as_samples(name: str) -> None:
    env, params = SUITES[name]
    suite = get_suite(name)
    loaded = suite.load(limit=3)
    assert suite.kind == "puzzle" and name in list_suites()
    assert loaded.source == f"procedural:{env}:v{suite.version}"
    assert [sample.id for sample in loaded.samples] == ["0", "1", "2"]
    for index, sample in enumerate(loaded.samples):
        level = level_from_ref(sample.gold)
        assert (level.env, level.split, level.index) == (env, "eval", index)
        assert {key: level.params[key] for key in params} == params
        assert sample.metadata == {"environment": sample.gold}
        assert new_state(level).observation() in sample.question
        assert suite.prompt(sample).startswith(sample.question)
        assert "#### [" in suite.prompt(sample).splitlines()[-1]


def test_the_default_is_the_papers_hundred_levels_and_limit_takes_fewer() -> None:
    suite = get_suite("plan_path_5x5")
    assert len(suite.load()) == 100
    assert len(suite.load(limit=250)) == 100
    with pytest.raises(MarsError, match="--limit"):
        suite.load(limit=0)


@pytest.mark.parametrize("name", sorted(SUITES))
def test_grading_a_right_a_wrong_and_an_unreadable_answer(name: str) -> None:
    suite = get_suite(name)
    gold = suite.load(limit=1).samples[0].gold
    right = suite.grade(right_answer(gold), gold)
    assert right.correct and not right.extraction_failed and right.extracted
    level = level_from_ref(gold)
    wrong_text = "#### [[0, 0, 1]]" if level.env == "sudoku" else "#### [U, D]"
    wrong = suite.grade(wrong_text, gold)
    assert not wrong.correct and not wrong.extraction_failed
    unreadable = suite.grade("I give up.", gold)
    assert unreadable.extraction_failed and unreadable.extracted is None
    assert not unreadable.correct


def test_a_gold_from_another_environment_or_a_bad_ref_is_an_error() -> None:
    sokoban_gold = get_suite("sokoban").load(limit=1).samples[0].gold
    with pytest.raises(MarsError, match="is a sokoban level"):
        get_suite("plan_path").grade("#### [U]", sokoban_gold)
    with pytest.raises(MarsError, match="malformed puzzle ref"):
        get_suite("plan_path").grade("#### [U]", "not a ref")


async def test_grading_by_suite_name_in_a_worker_process_and_inline() -> None:
    gold = get_suite("sokoban").load(limit=2).samples[1].gold
    pool = GradingPool(workers=1)
    try:
        right = await pool.grade("sokoban", right_answer(gold), gold)
        wrong = await pool.grade("sokoban", "#### [L, L, L]", gold)
    finally:
        pool.close()
    assert right.correct and not wrong.correct
    sudoku_gold = get_suite("sudoku").load(limit=1).samples[0].gold
    inline = grade_inline("sudoku", right_answer(sudoku_gold), sudoku_gold)
    assert inline is not None and inline.correct
