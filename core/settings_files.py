"""YAML settings files read into pydantic models, with one-line errors (training configs,
pre-training recipes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from core.errors import MarsError


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """The mapping in a YAML file (an empty file is an empty mapping); `what` names it in errors."""
    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise MarsError(f"cannot read {what} {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise MarsError(yaml_error_line(exc, what, path)) from exc
    if not isinstance(loaded, dict):
        raise MarsError(f"{what} {path} must be a mapping of settings")
    return loaded


def yaml_error_line(exc: yaml.YAMLError, what: str, path: Path) -> str:
    """A YAML parser's error as one line: where, and what it expected (its own text spans
    several lines and quotes the document)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{what} {path} is not valid YAML{where}: {problem}"


def first_problem(exc: ValidationError) -> tuple[str, str]:
    """Where the first problem of a validation error is (dotted, "" at the top) and what it is
    (without pydantic's "Value error, " before a validator's own message)."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return where, str(first["msg"]).removeprefix("Value error, ")


def settings_error(exc: ValidationError, kind: str) -> MarsError:
    """The first problem of a validation error as one line: an unknown key or a bad value."""
    where, message = first_problem(exc)
    if exc.errors()[0]["type"] == "extra_forbidden":
        return MarsError(f"unknown {kind} setting {where!r}")
    return MarsError(f"bad {kind} setting{f' {where}' if where else ''}: {message}")


def validation_error_line(error: ValidationError) -> str:
    """One line for a JSON file pydantic refused (run.json): broken JSON, or the first bad field."""
    problems = error.errors()
    first = problems[0] if problems else {"msg": str(error), "loc": ()}
    where = ".".join(str(part) for part in first.get("loc", ()))
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    text = first["msg"] if not where else f"{where}: {first['msg']}"
    if first.get("type") == "json_invalid":
        text = f"not valid JSON ({first['msg']}); the file was cut short or edited by hand"
    return text + more
