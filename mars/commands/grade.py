"""`mars grade`: grade responses against gold answers with a suite's own extraction and rules.

One case from flags, printing one JSON verdict:
    mars grade --suite gsm8k --gold 18 --response 'so \\boxed{18}'
Many cases from a JSON Lines file (`-` for stdin), printing one verdict line per case:
    mars grade --file cases.jsonl
Each case line holds `suite`, `gold`, `response` and, for choice suites, optionally `choices`
(option texts in display order). A malformed case yields a line with an `error` field.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import typer

from core.errors import MarsError
from mars.commands.app import app


@app.command("grade")
def grade(
    suite: str | None = typer.Option(None, "--suite", help="Suite whose rules to use."),
    gold: str | None = typer.Option(None, "--gold", help="Gold answer (a letter for choices)."),
    response: str | None = typer.Option(
        None, "--response", help="Model response text, or '-' to read it from stdin."
    ),
    choices: list[str] | None = typer.Option(
        None, "--choices", help="Option text, repeated once per option in display order."
    ),
    file: Path | None = typer.Option(
        None, "--file", help="JSON Lines of cases (suite, gold, response, choices?); '-' = stdin."
    ),
) -> None:
    """Grade one response, or every case in a JSON Lines file, and print JSON verdicts."""
    if file is not None:
        if any(value is not None for value in (suite, gold, response)) or choices:
            raise MarsError("--file cannot be combined with --suite/--gold/--response/--choices")
        _grade_file(file)
        return
    missing = [
        flag
        for flag, value in (("--suite", suite), ("--gold", gold), ("--response", response))
        if value is None
    ]
    if missing:
        raise MarsError(f"missing {', '.join(missing)} (or pass --file CASES.jsonl)")
    assert suite is not None and gold is not None and response is not None
    text = sys.stdin.read() if response == "-" else response
    typer.echo(json.dumps(grade_case(suite, gold, text, choices or None), ensure_ascii=False))


def grade_case(
    suite_name: str, gold: str, response: str, choices: list[str] | None
) -> dict[str, Any]:
    """The verdict of one case as a plain dict (raises MarsError on bad input)."""
    from harness.benchmarks import get_suite

    verdict = get_suite(suite_name).grade(response, gold, choices)
    return verdict.model_dump()


def _grade_file(path: Path) -> None:
    if str(path) == "-":
        errors, total = _print_verdicts(sys.stdin)
    elif not path.is_file():
        raise MarsError(f"no such cases file: {path}")
    else:
        with path.open(encoding="utf-8") as handle:
            errors, total = _print_verdicts(handle)
    if total == 0 or errors == total:
        raise MarsError(
            f"no case of {path} could be graded ({total} read): each line needs suite, gold and "
            "response (docs/benchmarks.md)"
        )
    typer.echo(f"graded {total} cases, {errors} with errors", err=True)


def _print_verdicts(lines: Iterable[str]) -> tuple[int, int]:
    errors = total = 0
    for line_number, case in _cases(lines):
        total += 1
        result = _grade_file_case(case)
        if "error" in result:
            errors += 1
        typer.echo(json.dumps({"line": line_number, **result}, ensure_ascii=False))
    return errors, total


def _cases(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    for line_number, line in enumerate(lines, start=1):
        if line.strip():
            yield line_number, line


def _grade_file_case(line: str) -> dict[str, Any]:
    try:
        case = json.loads(line)
    except json.JSONDecodeError as exc:
        return {"error": f"not valid JSON: {exc.msg}"}
    if not isinstance(case, dict):
        return {"error": "a case must be a JSON object"}
    echo = {key: case[key] for key in ("id", "suite") if key in case}
    try:
        suite, gold, response, choices = _case_fields(case)
        return {**echo, **grade_case(suite, gold, response, choices)}
    except MarsError as exc:
        return {**echo, "error": str(exc)}


def _case_fields(case: dict[str, Any]) -> tuple[str, str, str, list[str] | None]:
    missing = [key for key in ("suite", "gold", "response") if key not in case]
    if missing:
        raise MarsError(f"missing field(s): {', '.join(missing)}")
    suite, gold, response = case["suite"], case["gold"], case["response"]
    if not isinstance(suite, str):
        raise MarsError("'suite' must be a string")
    if isinstance(gold, bool) or not isinstance(gold, str | int | float):
        raise MarsError("'gold' must be a string or a number")
    if not isinstance(response, str):
        raise MarsError("'response' must be a string")
    choices = case.get("choices")
    if choices is not None and (
        not isinstance(choices, list) or not all(isinstance(item, str) for item in choices)
    ):
        raise MarsError("'choices' must be a list of option texts")
    return suite, str(gold), response, choices or None
