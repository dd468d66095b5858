"""The checkpoints a `mars train-mas` run produced, role by role, for evaluation.

`mars eval --mas WORKFLOW --trained RUN [--trained-step N]` evaluates exactly the MAS that was
trained: each role answered by its own policy's checkpoint of step N (the last step every
policy saved, by default), with the workflow options the run trained with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import MarsError
from train_backend.local import checkpoint
from train_backend.mas.config import SHARED_POLICY
from train_backend.mas.rewards import ROLES


def policy_root(run_path: Path, name: str, multi_policy: bool) -> Path:
    """The folder whose `checkpoints/` holds policy `name`'s checkpoints."""
    return run_path / "policies" / name if multi_policy else run_path


@dataclass
class TrainedMas:
    workflow: str
    workflow_options: dict[str, Any]
    step: int
    role_models: dict[str, Path]  # role -> the checkpoint folder that answers for it
    policies: dict[str, str] = field(default_factory=dict)  # role -> policy name


def mas_training_run(watch: Path) -> Path | None:
    """The `mars train-mas` run `watch` is, or whose `checkpoints/` it is; None otherwise."""
    for candidate in (watch, watch.parent):
        try:
            recorded = json.loads((candidate / "run.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        return candidate if _workflow_of(recorded) is not None else None
    return None


def _workflow_of(recorded: Any) -> str | None:
    if not isinstance(recorded, dict) or recorded.get("kind") != "train":
        return None
    workflow = (recorded.get("config") or {}).get("workflow")
    return workflow if workflow in ROLES else None


def saved_steps(run: Path, config: dict[str, Any]) -> dict[int, dict[str, Path]]:
    """Step -> role -> checkpoint folder, for the steps at which every trained policy saved. A
    frozen policy (`frozen_policies`) never saves: its roles answer from the model it played
    with at every step (`policy_models[name]`, else the run's `model`)."""
    roles = ROLES[config["workflow"]]
    named = dict(config.get("policies") or {})
    policies = {role: named.get(role, SHARED_POLICY) for role in roles}
    multi = len(set(policies.values())) > 1
    frozen = set(config.get("frozen_policies") or []) & set(policies.values())
    saved = {
        name: dict(checkpoint.list_checkpoints(policy_root(run, name, multi)))
        for name in set(policies.values()) - frozen
    }
    if not saved:
        return {}
    played_with = {name: Path(_frozen_model(config, name)) for name in frozen}
    common = set.intersection(*(set(steps) for steps in saved.values()))
    return {
        step: {
            role: played_with[name] if name in frozen else saved[name][step]
            for role, name in policies.items()
        }
        for step in sorted(common)
    }


def _frozen_model(config: dict[str, Any], name: str) -> str:
    from core.causal_lm import resolve_model_path

    return resolve_model_path((config.get("policy_models") or {}).get(name) or config.get("model"))


def trained_mas(run: Path, step: int | None = None) -> TrainedMas:
    """Role -> checkpoint of a MAS training run; a one-line MarsError for anything else."""
    try:
        recorded = json.loads((run / "run.json").read_text())
    except FileNotFoundError:
        raise MarsError(f"--trained {run}: no run.json there (not a run directory)") from None
    except json.JSONDecodeError as error:
        raise MarsError(f"--trained {run}: run.json is not JSON ({error.msg})") from None
    workflow = _workflow_of(recorded)
    if workflow is None:
        raise MarsError(f"--trained {run}: not a MAS training run (mars train-mas makes one)")
    config = recorded["config"]
    steps = saved_steps(run, config)
    if not steps:
        raise MarsError(f"--trained {run}: no step has a checkpoint of every policy yet")
    chosen = max(steps) if step is None else step
    if chosen not in steps:
        raise MarsError(
            f"--trained-step {chosen}: no checkpoint of every policy at that step in {run} "
            f"(steps: {', '.join(map(str, steps))})"
        )
    named = dict(config.get("policies") or {})
    return TrainedMas(
        workflow=workflow,
        workflow_options=dict(config.get("workflow_options") or {}),
        step=chosen,
        role_models=steps[chosen],
        policies={role: named.get(role, SHARED_POLICY) for role in ROLES[workflow]},
    )


def eval_role_sampling(run: Path) -> dict[str, dict[str, Any]]:
    """The run's per-role evaluation settings (`eval_role_sampling`), as recorded."""
    try:
        recorded = json.loads((run / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    settings = (recorded.get("config") or {}).get("eval_role_sampling") or {}
    return {role: dict(own) for role, own in settings.items() if isinstance(own, dict)}
