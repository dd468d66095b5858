"""`mars grade`, single and --file modes, through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import mars.commands.grade
from core.errors import MarsError
from mars.commands.app import app


@pytest.fixture(scope="module")
def mars() -> typer.Typer:
    # Mounted under a wrapper so that `mars grade` stays a subcommand even while it is the only
    # command registered (typer collapses a one-command app into that command).
    wrapper = typer.Typer()
    wrapper.add_typer(app)
    return wrapper


def invoke(mars: typer.Typer, args: list[str], stdin: str | None = None) -> Any:
    return CliRunner().invoke(mars, [str(app.info.name), "grade", *args], input=stdin)


def test_single_case_prints_one_json_verdict(mars: typer.Typer) -> None:
    result = invoke(
        mars, ["--suite", "math500", "--gold", r"\frac{1}{2}", "--response", r"\boxed{0.5}"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0]) == {
        "extracted": "0.5",
        "gold": r"\frac{1}{2}",
        "correct": True,
        "extraction_failed": False,
    }


def test_single_case_with_choices(mars: typer.Typer) -> None:
    options = ["5(√3 + 1)", "6(√3 + √2)", "7(√3 – 1)", "8(√3 – 2)", "None of these"]
    choice_flags = [flag for option in options for flag in ("--choices", option)]
    args = ["--suite", "aqua", "--gold", "C", "--response", r"\boxed{7(√3 – 1)}", *choice_flags]
    verdict = json.loads(invoke(mars, args).stdout)
    assert (verdict["extracted"], verdict["correct"]) == ("C", True)
    wrong = json.loads(invoke(mars, [*args[:5], r"The answer is (B)", *choice_flags]).stdout)
    assert (wrong["extracted"], wrong["correct"], wrong["extraction_failed"]) == ("B", False, False)


def test_single_case_reads_the_response_from_stdin(mars: typer.Typer) -> None:
    result = invoke(
        mars, ["--suite", "gsm8k", "--gold", "1000", "--response", "-"], stdin="so \\boxed{1,000}\n"
    )
    assert json.loads(result.stdout)["correct"] is True


def test_missing_answer_is_an_extraction_failure(mars: typer.Typer) -> None:
    result = invoke(mars, ["--suite", "aime24", "--gold", "025", "--response", "I give up."])
    verdict = json.loads(result.stdout)
    assert verdict["extraction_failed"] is True and verdict["correct"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--suite", "nope", "--gold", "1", "--response", "x"],
            "unknown suite 'nope'; known: aime24",
        ),
        (["--suite", "gsm8k", "--gold", "1"], "missing --response"),
        (["--file", "cases.jsonl", "--suite", "gsm8k"], "cannot be combined"),
        (["--file", "/no/such/cases.jsonl"], "no such cases file"),
    ],
)
def test_bad_input_raises_a_one_line_mars_error(
    mars: typer.Typer, args: list[str], message: str
) -> None:
    result = invoke(mars, args)
    assert isinstance(result.exception, MarsError)
    assert message in str(result.exception)


def test_file_mode_prints_one_verdict_per_case(mars: typer.Typer, tmp_path: Path) -> None:
    cases = [
        {"suite": "gsm8k", "gold": "18", "response": r"\boxed{18}", "id": "g1"},
        {"suite": "amc23", "gold": 27.0, "response": r"\boxed{27}"},
        {
            "suite": "gpqa_diamond",
            "gold": "B",
            "response": "The answer is (A)",
            "choices": ["w", "x", "y", "z"],
        },
        {"suite": "math500", "gold": "3", "response": "no idea"},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(case) for case in cases) + "\n\n", encoding="utf-8")
    result = invoke(mars, ["--file", str(path)])
    assert result.exit_code == 0, result.output
    verdicts = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [v["correct"] for v in verdicts] == [True, True, False, False]
    assert [v["extraction_failed"] for v in verdicts] == [False, False, False, True]
    assert [v["line"] for v in verdicts] == [1, 2, 3, 4]
    assert verdicts[0]["id"] == "g1" and verdicts[2]["extracted"] == "A"
    assert "graded 4 cases, 0 with errors" in result.stderr


def test_file_mode_turns_malformed_cases_into_error_lines(
    mars: typer.Typer, tmp_path: Path
) -> None:
    lines = [
        json.dumps({"suite": "gsm8k", "gold": "5", "response": r"\boxed{5}"}),
        "{not json",
        json.dumps(["a", "list"]),
        json.dumps({"suite": "gsm8k", "gold": "5"}),
        json.dumps({"suite": "unknown_suite", "gold": "5", "response": "x"}),
        json.dumps({"suite": "mmlu_stem", "gold": "Q", "response": r"\boxed{A}"}),
        json.dumps({"suite": "aqua", "gold": "A", "response": "x", "choices": "A) 1"}),
        json.dumps({"suite": "gsm8k", "gold": "6", "response": r"\boxed{7}"}),
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = invoke(mars, ["--file", str(path)])
    assert result.exit_code == 0, result.output
    verdicts = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert len(verdicts) == len(lines)
    assert ["error" in verdict for verdict in verdicts] == [False, *[True] * 6, False]
    assert "missing field(s): response" in verdicts[3]["error"]
    assert "unknown suite" in verdicts[4]["error"]
    assert verdicts[0]["correct"] is True and verdicts[-1]["correct"] is False
    assert "6 with errors" in result.stderr


def test_file_mode_reads_stdin(mars: typer.Typer) -> None:
    case = json.dumps({"suite": "aqua", "gold": "E", "response": r"\boxed{E}"})
    result = invoke(mars, ["--file", "-"], stdin=case + "\n")
    assert json.loads(result.stdout)["correct"] is True
