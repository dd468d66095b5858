"""Options several commands share (the model and sampling options are `core.model_options`)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import typer

from core.errors import MarsError
from core.model_options import ModelOptions, SamplingOptions

TRAINER = typer.Option(None, "--trainer", help="local (the embedded CPU trainer) | verl.")
# The shared model options a trainer has no use for: it loads --model itself and talks to no
# model server. A training command takes them (hidden) only to refuse them in one line.
NOT_FOR_TRAINERS = (
    "base_url", "backend", "api_key_env", "concurrency", "timeout", "max_retries", "cache"
)  # fmt: skip
# `@model_options(**TRAINING_OPTIONS)`: every option unset unless given (the config decides).
TRAINING_OPTIONS: dict[str, Any] = {
    "defaults": {
        name: None for name in (*NOT_FOR_TRAINERS, "temperature", "top_p", "max_tokens", "seed")
    },
    "hidden": NOT_FOR_TRAINERS,
    "helps": {
        "model": "Hugging Face causal-LM folder or hub id (default: the embedded tiny model).",
        "temperature": "Sampling temperature of the rollouts.",
        "top_p": "Nucleus sampling of the rollouts: the top-p mass.",
        "max_tokens": "New tokens per reply (the config's max_new_tokens).",
        "seed": "Run seed (episode seeds, sampling, order).",
    },
}
THREADS = typer.Option(
    1, "--threads", min=1, help="torch CPU threads (local); 1 is fastest for the tiny model."
)
DEVICE = typer.Option(
    None, "--device", help="verl: cuda (GPUs, default) | cpu (rehearse on this machine)."
)
QUIET_STEPS = typer.Option(False, "--quiet", help="No per-step lines.")
# `mars train`'s name for --max-tokens until this release: accepted, with a warning.
MAX_NEW_TOKENS = typer.Option(
    None, "--max-new-tokens", hidden=True, help="Deprecated: --max-tokens."
)


def training_options(
    command: str,
    model_options: ModelOptions,
    sampling: SamplingOptions,
    *,
    max_new_tokens: int | None = None,
) -> dict[str, Any]:
    """The shared options a trainer honours, as plan fields (`model`, `temperature`, `top_p`,
    `max_tokens`, `seed`); any other one given is refused in one line. `--backend` names the
    model server everywhere: `--backend verl|local` (the training commands' old name for
    `--trainer`) says so."""
    if model_options.backend in ("local", "verl"):
        raise MarsError(
            f"--backend {model_options.backend}: --backend names the model server now; choose "
            f"the trainer with --trainer {model_options.backend}"
        )
    refuse_unused(
        command,
        (model_options, sampling),
        NOT_FOR_TRAINERS,
        "the trainer loads --model itself and talks to no model server",
    )
    max_tokens = sampling.max_tokens
    if max_new_tokens is not None:
        print("warning: --max-new-tokens is deprecated; use --max-tokens", file=sys.stderr)
        if max_tokens is not None and max_tokens != max_new_tokens:
            raise MarsError(
                f"--max-tokens {max_tokens} and --max-new-tokens {max_new_tokens} disagree: "
                "use --max-tokens"
            )
        max_tokens = max_new_tokens
    return {
        "model": model_options.model,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": max_tokens,
        "seed": sampling.seed,
    }


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


def refuse_unused(command: str, groups: tuple[Any, ...], unused: tuple[str, ...], why: str) -> None:
    """A shared model or sampling option that `command` takes only to refuse (its `unused`
    fields, hidden from its help): one line naming the flag and why, when one is given."""
    for group in groups:
        for spec in dataclasses.fields(group):
            if spec.name in unused and getattr(group, spec.name) is not None:
                raise MarsError(f"{spec.metadata['flag']} is not a {command} option: {why}")


# `mars loop` serves each checkpoint itself: of the shared options it honours the server's
# backend, the requests in flight and the sampling of each evaluation.
NOT_FOR_THE_LOOP = ("model", "base_url", "api_key_env", "timeout", "max_retries", "cache")
NOT_FOR_THE_LOOP_SAMPLING = ("top_p", "seed")
LOOP_SETTINGS = ("temperature", "max_tokens", "concurrency")  # the checkpoint's unless given
LOOP_OPTIONS: dict[str, Any] = {
    "defaults": {
        name: None
        for name in (*NOT_FOR_THE_LOOP, *NOT_FOR_THE_LOOP_SAMPLING, *LOOP_SETTINGS)
    },
    "hidden": (*NOT_FOR_THE_LOOP, *NOT_FOR_THE_LOOP_SAMPLING),
    # `--timeout` is the loop's own (how long to keep polling); a request's is not the loop's.
    "flags": {"timeout": "--request-timeout"},
    "helps": {
        "backend": "Server for each checkpoint: auto | vllm | transformers.",
        "concurrency": "Requests in flight per evaluation (default 16).",
        "temperature": "Sampling temperature of the evaluations (default 0).",
        "max_tokens": "New tokens per reply (default: the checkpoint's).",
    },
}  # fmt: skip
