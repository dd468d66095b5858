"""Each evaluation of a checkpoint as the real `mars` command that runs it."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.model_options import ModelOptions, SamplingOptions, as_argv
from mars.orchestration.loop.checkpoints import Checkpoint, checkpoint_defaults
from mars.orchestration.loop.spec import ArenaItem, ExploitItem, Item, LoopSpec, RatingItem


@dataclass(frozen=True)
class Settings:
    """What one checkpoint's evaluations run with, after the checkpoint's own defaults."""

    prompt_style: str
    parse_mode: str | None  # None: each command's default (lenient)
    max_tokens: int
    temperature: float
    top_p: float
    concurrency: int


def resolve_settings(spec: LoopSpec, checkpoint: Checkpoint) -> Settings:
    defaults = checkpoint_defaults(checkpoint)
    return Settings(
        prompt_style=spec.prompt_style or defaults.get("prompt_style", "full"),
        parse_mode=defaults.get("parse_mode"),
        max_tokens=spec.max_tokens or defaults.get("max_tokens", 1024),
        temperature=spec.temperature,
        top_p=spec.top_p,
        concurrency=spec.concurrency,
    )


@dataclass(frozen=True)
class SubCommand:
    """One evaluation's `mars` command line and what the loop needs to know about it."""

    argv: list[str]
    run_dir: Path
    prompt_style: str | None = None  # arena and exploitability items


def sub_command(
    item: Item,
    spec: LoopSpec,
    settings: Settings,
    *,
    base_url: str,
    model: str,
    run_dir: Path,
    model_label: str | None = None,
    opponent: str | None = None,
    trained: tuple[Path, int] | None = None,
    mas_options: dict[str, Any] | None = None,
) -> SubCommand:
    """The `mars` command line of one evaluation against the served checkpoint (`opponent`: the
    one a rating item plays in this command; `trained`: a MAS training run and step, whose
    policies the eval serves itself, one per role)."""
    endpoint = ModelOptions(model=model, base_url=base_url, concurrency=settings.concurrency)
    sampling = SamplingOptions(
        temperature=settings.temperature, top_p=settings.top_p, max_tokens=settings.max_tokens
    )
    # `--trained`: the eval serves the run's policies itself, one per role.
    served = as_argv(endpoint, skip=("model", "base_url") if trained else ())
    if trained is not None:
        served += ["--trained", str(trained[0]), "--trained-step", str(trained[1])]
    common = [*served, *as_argv(sampling), "--run-dir", str(run_dir), "--quiet"]
    mars = [sys.executable, "-m", "mars"]
    prompt_style = getattr(item, "prompt_style", None) or settings.prompt_style
    # games are read as the checkpoint's training read them
    parse_mode = ["--parse-mode", settings.parse_mode] if settings.parse_mode else []
    if isinstance(item, ArenaItem | RatingItem):
        argv = [
            *mars,
            "arena",
            "--game",
            item.game,
            "--player",
            "llm",
            "--opponent",
            opponent or getattr(item, "opponent", ""),
            "--episodes",
            str(item.episodes),
            "--seats",
            getattr(item, "seats", "both"),
            "--invalid",
            item.invalid,
            "--prompt-style",
            prompt_style,
            *parse_mode,
            # the checkpoint's name in records: its folder, as `llm:FOLDER` names it elsewhere
            *(["--model-label", model_label] if model_label else []),
            *common,
        ]
        return SubCommand(argv, run_dir, prompt_style)
    if isinstance(item, ExploitItem):
        argv = [
            *mars,
            "exploitability",
            "--game",
            item.game,
            "--samples",
            str(item.samples),
            "--bootstrap",
            str(item.bootstrap),
            "--prompt-style",
            prompt_style,
            *parse_mode,
            *common,
        ]
        return SubCommand(argv, run_dir, prompt_style)
    command = [*mars, "eval", "--suite", item.suite, "--mas", item.mas]
    command += ["--epochs", str(item.epochs)]
    if item.limit is not None:
        command += ["--limit", str(item.limit)]
    if spec.data_dir:
        command += ["--data-dir", spec.data_dir]
    for key, value in (mas_options or {}).items():
        command += ["--mas-option", f"{key}={json.dumps(value)}"]
    return SubCommand(command + common, run_dir)
