"""Options several commands share (the model and sampling options are `core.model_options`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from core.errors import MarsError

TRAINERS = ("local", "verl")
TRAINER = typer.Option(None, "--trainer", help="local (the embedded CPU trainer) | verl.")
# `--backend` names the model server everywhere else; training commands took it for the trainer.
TRAINER_AS_BACKEND = typer.Option(None, "--backend", hidden=True, help="Deprecated: --trainer.")


def trainer_choice(trainer: str | None, backend: str | None) -> str:
    """`--trainer` (default local), or the deprecated `--backend` of a training command, with a
    warning on stderr."""
    if backend is not None:
        print("warning: --backend is deprecated here; use --trainer", file=sys.stderr)
        if trainer is not None and trainer != backend:
            raise MarsError(f"--trainer {trainer} and --backend {backend} disagree: use --trainer")
    chosen = trainer or backend or "local"
    if chosen not in TRAINERS:
        raise MarsError(f"--trainer must be one of {', '.join(TRAINERS)}, not {chosen!r}")
    return chosen


OUT = typer.Option(
    Path("runs"), "--out", help="Root folder; a new run directory is created inside it."
)
GRADER = typer.Option(
    "rules",
    "--grader",
    help="rules (the suite's rule-based grader), or judge[:ROLE]: an LLM judge's verdict is the "
    "score, the rule-based grade kept beside it; the judge is the model of ROLE (default "
    "'grader'; map it with --role grader=MODEL@URL, else the evaluated model).",
)
JUDGE_TEMPERATURE = typer.Option(
    0.5, "--judge-temperature", min=0.0, help="The LLM judge's temperature (MASLab's 0.5)."
)
JUDGE_MAX_TOKENS = typer.Option(
    2048, "--judge-max-tokens", min=1, help="The LLM judge's new tokens (MASLab's 2048)."
)
ROLE = typer.Option(
    [],
    "--role",
    help="Map a role to another model: ROLE=MODEL@URL, e.g. judge=Qwen3-4B@http://host:8000/v1 "
    "(repeatable; the older ROLE=URL/v1/NAME works too).",
)
ROLE_SAMPLING = typer.Option(
    [],
    "--role-sampling",
    help="A role's own generation settings: ROLE:KEY=VALUE,... with keys temperature, top_p, "
    "top_k, max_tokens, stop (several stops: a|b), e.g. reasoner:temperature=0.6,max_tokens=512 "
    "(repeatable; the other roles use --temperature etc.; with --trained the run's "
    "eval_role_sampling is the default).",
)
ROLE_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "stop")
RUN_DIR = typer.Option(
    None, "--run-dir", help="Exactly this run directory; rerunning with the same path resumes."
)


def parse_role_mapping(values: list[str]) -> dict[str, tuple[str, str]]:
    """`--role` values to {role: (base URL, model name)}.

    `ROLE=MODEL@URL` (e.g. `judge=Qwen3-4B@https://host/v1`) keeps the URL whole: the model is
    what comes before the first `@` that starts an http(s) URL, so model names with `@` and URLs
    with a user name both work. The older `ROLE=URL/v1/NAME` still works (the base URL ends at
    `/v1`, the name may hold slashes). Anything else (a URL with no model, or no `/v1/` to tell
    the base URL from the name) is refused in one line.
    """
    from core.errors import MarsError

    mapping: dict[str, tuple[str, str]] = {}
    for value in values:
        role, sep, target = value.partition("=")
        role, target = role.strip(), target.strip()
        if not sep or not role or not target:
            raise MarsError(
                f"--role expects ROLE=MODEL@URL (or the older ROLE=URL/NAME, URL ending in /v1), "
                f"got '{value}'"
            )
        model, at, url = target.partition("@http")
        if at and url.startswith(("://", "s://")):
            base_url = ("http" + url).rstrip("/")
            if not model.strip():
                raise MarsError(f"--role {value}: no model name before '@'")
        elif target.startswith(("http://", "https://")) and "/v1/" in target:
            base_url, _, model = target.partition("/v1/")
            base_url += "/v1"
            model = model.strip("/")
            if not model:
                raise MarsError(f"--role {value}: no model name after /v1/; write {role}=MODEL@URL")
        elif target.rstrip("/").endswith("/v1"):
            raise MarsError(f"--role {value}: no model name; write {role}=MODEL@{target}")
        elif target.startswith(("http://", "https://")):
            raise MarsError(
                f"--role {value}: cannot tell the base URL from the model name; "
                f"write {role}=MODEL@URL"
            )
        else:
            raise MarsError(f"--role {value}: no server URL; write {role}=MODEL@URL")
        if "://" not in base_url or not base_url.split("://", 1)[1]:
            raise MarsError(f"--role {value}: the URL names no host")
        if role in mapping:
            raise MarsError(f"--role gives the role {role!r} twice; give each role once")
        mapping[role] = (base_url, model.strip())
    return mapping


def parse_role_sampling(values: list[str]) -> dict[str, dict[str, Any]]:
    """`--role-sampling` values to {role: {setting: value}}; one line for anything malformed."""
    from core.names import unknown_name

    settings: dict[str, dict[str, Any]] = {}
    for value in values:
        role, sep, pairs = value.partition(":")
        role = role.strip()
        if not sep or not role or not pairs.strip():
            raise MarsError(f"--role-sampling expects ROLE:KEY=VALUE,..., got '{value}'")
        own = settings.setdefault(role, {})
        for pair in pairs.split(","):
            key, eq, raw = (part.strip() for part in pair.partition("="))
            if not eq or not raw:
                raise MarsError(f"--role-sampling {value}: expected KEY=VALUE, got '{pair}'")
            if key not in ROLE_SAMPLING_KEYS:
                raise MarsError(
                    f"--role-sampling: {unknown_name('setting', key, ROLE_SAMPLING_KEYS)}"
                )
            if key in own:
                raise MarsError(f"--role-sampling gives {role}'s {key} twice; give it once")
            own[key] = _sampling_value(key, raw, value)
    return settings


def _sampling_value(key: str, raw: str, value: str) -> Any:
    if key == "stop":
        return [stop for stop in raw.split("|") if stop]
    try:
        number = float(raw) if key in ("temperature", "top_p") else int(raw)
    except ValueError:
        raise MarsError(f"--role-sampling {value}: {key} must be a number, got '{raw}'") from None
    low_ok = number > 0 if key in ("top_p", "max_tokens") else number >= 0
    if not low_ok or (key == "top_p" and number > 1):
        raise MarsError(f"--role-sampling {value}: {key} {raw} is out of range")
    return number
