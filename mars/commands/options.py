"""Options several commands share (the model and sampling options are `core.model_options`)."""

from __future__ import annotations

import sys
from pathlib import Path

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
RUN_DIR = typer.Option(
    None, "--run-dir", help="Exactly this run directory; rerunning with the same path resumes."
)
