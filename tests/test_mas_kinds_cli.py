"""A workflow meets only the tasks it can run: one line, before any sample or step, when a suite
or a training set is of another kind, and when an LLM judge is asked to grade a puzzle or code."""

from __future__ import annotations

from pathlib import Path

from conftest import run_mars

NO_SERVER = ("--base-url", "http://127.0.0.1:9/v1", "--model", "x")


def _refused(*args: str) -> str:
    done = run_mars(*args)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return line


def test_eval_refuses_a_workflow_on_another_kind_of_suite_and_a_judge_on_puzzles(
    tmp_path: Path,
) -> None:
    out = ("--out", str(tmp_path))
    line = _refused("eval", "--mas", "plan_tool", "--suite", "gsm8k,sudoku", *NO_SERVER, *out)
    assert line == "error: MAS 'plan_tool' runs on puzzle suites; gsm8k is not"
    line = _refused("eval", "--mas", "code_tester", "--suite", "plan_path", *NO_SERVER, *out)
    assert "runs on code suites; plan_path is not" in line
    line = _refused("eval", "--suite", "sudoku,apps", "--grader", "judge", *NO_SERVER, *out)
    assert "--grader judge cannot grade apps, sudoku" in line
    assert not list(tmp_path.iterdir())  # nothing was started, nothing left behind


def test_training_refuses_problems_the_workflow_cannot_score(tmp_path: Path) -> None:
    line = _refused("train-mas", "--workflow", "plan_tool", "--out", str(tmp_path))
    assert "workflow plan_tool trains on puzzle problems; the training set 'arithmetic'" in line
    assert not list(tmp_path.iterdir())
