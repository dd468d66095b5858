"""The checkpoints a loop watches: a training run's `step_N/` folders (or a MAS training
run's per-policy ones), and whether the training that writes them has finished."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import checkpoints as contract
from core.errors import MarsError
from core.runstore import FINISHED_STATUSES, RUN_FILE
from games.rules import PROMPT_STYLES
from mars.orchestration.loop.spec import LoopSpec, SuiteItem


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path
    # A `mars train-mas` run: its eval items run `mars eval --trained RUN --trained-step STEP`,
    # each role answered by its own policy's checkpoint (`path` is the first role's).
    mas_run: Path | None = None
    # The MAS options a suite item runs with (a MAS run's baseline: the workflow as trained).
    mas_options: dict[str, Any] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        """checkpoint.json as a dict ({} if unreadable: the row then says so)."""
        try:
            return contract.read_checkpoint(self.path)
        except MarsError:
            return {}


def checkpoints_folder(watch: Path) -> Path:
    """The folder holding `step_N/`: `watch` itself, or `watch/checkpoints` (a training run)."""
    nested = watch / contract.CHECKPOINTS_DIR
    if nested.is_dir() and not any(contract.step_of(p.name) is not None for p in watch.iterdir()):
        return nested
    return watch


def complete_checkpoints(folder: Path) -> list[Checkpoint]:
    """`step_N/` folders holding checkpoint.json, by step."""
    return [Checkpoint(step, path) for step, path in contract.complete_checkpoints(folder)]


def mas_checkpoints(run: Path) -> list[Checkpoint]:
    """The steps of a MAS training run at which every policy saved a checkpoint."""
    from train_backend.mas.trained import saved_steps

    config = json.loads((run / RUN_FILE).read_text())["config"]
    return [
        Checkpoint(step, next(iter(roles.values())), mas_run=run)
        for step, roles in saved_steps(run, config).items()
    ]


def check_mas_spec(spec: LoopSpec, run: Path) -> None:
    """A MAS training run is evaluated by suites through the workflow it trained, only."""
    workflow = json.loads((run / RUN_FILE).read_text())["config"]["workflow"]
    for item in spec.evals:
        if not isinstance(item, SuiteItem):
            raise MarsError(
                f"{run} is a MAS training run: evaluate it with eval:SUITE:{workflow}:N items "
                f"(not {item.kind})"
            )
        if item.mas != workflow:
            raise MarsError(
                f"{run} trained the MAS {workflow!r}: the eval item {item.key} runs {item.mas!r}"
            )


def training_status(folder: Path) -> str | None:
    """The status of the training run that writes `folder` (its run.json), when known.

    Only known when the checkpoints sit in a run directory (`RUN/checkpoints/`); otherwise None
    and the loop runs until --timeout.
    """
    for candidate in (folder, folder.parent):
        if (candidate / RUN_FILE).is_file():
            try:
                return json.loads((candidate / RUN_FILE).read_text()).get("status")
            except (OSError, json.JSONDecodeError):
                return None
    return None


def training_finished(folder: Path) -> bool:
    """Whether the training run that writes `folder` says it has stopped."""
    return training_status(folder) in FINISHED_STATUSES


def checkpoint_defaults(checkpoint: Checkpoint) -> dict[str, Any]:
    """Prompt style, reply reading (when strict) and reply length the checkpoint was trained
    with, when it says so."""
    config = checkpoint.info().get("config")
    if not isinstance(config, dict):
        return {}
    out: dict[str, Any] = {}
    if config.get("prompt_style") in PROMPT_STYLES:
        out["prompt_style"] = config["prompt_style"]
    if config.get("parse_mode") == "strict":  # lenient is every command's default
        out["parse_mode"] = "strict"
    if isinstance(config.get("max_new_tokens"), int) and config["max_new_tokens"] > 0:
        out["max_tokens"] = config["max_new_tokens"]
    return out
