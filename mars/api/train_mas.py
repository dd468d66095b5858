"""`mars.train_mas`: train the agents of a MAS workflow by AT-GRPO inside it.

One shared policy for every role by default; `policies={"tool": "coder", "reasoner": "thinker"}`
(`--policies tool=coder,reasoner=thinker`) trains one policy per role (each with its own optimiser
and checkpoints), on the embedded CPU trainer. `trainer="verl"` trains through verl's agent loop
(one policy per role: every policy in one verl job). docs/mas_training.md, docs/verl.md.

`mars train-mas` parses its options into a `TrainMasPlan` and calls `train_mas`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.lifecycle import invocation
from mars.api.plans import build_plan, loggers, names
from mars.api.results import RunResult, read_train
from mars.api.train import dry_run_result, launch_verl_run, refuse_other_training, trainer_name


@dataclasses.dataclass(frozen=True)
class TrainMasPlan:
    """What `mars train-mas` runs. A setting left None comes from the layers under it: the
    defaults, the preset (this one, else the config file's), `config_file`. `policies` maps a role
    to its policy (or is `ROLE=POLICY,...`); `frozen` names policies that never update;
    `max_tokens` is the config's `max_new_tokens`."""

    workflow: str | None = None
    config_file: Path | None = None
    preset: str | None = None
    model: str | None = None
    policies: str | Mapping[str, str] | None = None
    adapter: str | None = None
    frozen: str | Sequence[str] | None = None
    phase_alternate_steps: int | None = None
    train_set: str | None = None
    train_file: Path | None = None
    steps: int | None = None
    problems_per_step: int | None = None
    branches: int | None = None
    learning_rate: float | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    run_dir: Path | None = None
    out: Path = Path("runs")
    threads: int = 1
    quiet: bool = False
    logger: str | Sequence[str] | None = None  # trackers; None: the config's
    dry_run: bool = False
    trainer: str | None = None  # local (default) | verl
    device: str | None = None


def train_mas(plan: TrainMasPlan | None = None, /, **kwargs: Any) -> RunResult:
    """Train as `plan` (or the plan the keyword arguments build) says and return the run (its
    figures: `mars.api.results.train_figures`). A rerun into the same run directory resumes; a
    dry run trains nothing: its summary holds the resolved `config` and `dry_run: True`."""
    plan = build_plan(TrainMasPlan, plan, kwargs)
    trainer = trainer_name(plan.trainer)
    refuse_other_training(plan.run_dir, workflow=True)
    data = _settings(plan)
    # The CPU-sized defaults serve the local trainer and verl on a CPU; verl on GPUs starts from
    # the paper-sized ones (TrainConfig's), as `mars train` does.
    config = checked_config(data, cpu_sized=trainer != "verl" or plan.device == "cpu")
    if trainer == "verl":
        path = _train_verl(
            config, device=plan.device, run_path=plan.run_dir, out=plan.out, dry_run=plan.dry_run
        )
        return dry_run_result(path, config) if plan.dry_run else read_train(path)
    if plan.device is not None:
        raise MarsError("--device is for --trainer verl (the local trainer runs on the CPU)")
    if plan.dry_run:
        print(json.dumps(config.model_dump(mode="json"), indent=2))
        return dry_run_result(plan.run_dir or plan.out, config)
    return read_train(_train_local(config, plan))


def _settings(plan: TrainMasPlan) -> dict[str, Any]:
    """defaults < the preset (the plan's, else the file's) < the file < the plan's settings."""
    from core.settings_files import read_yaml_mapping
    from train_backend.presets import preset_settings

    policies = plan.policies
    if policies is None or isinstance(policies, str):
        policies = parse_role_map(policies, "--policies")
    frozen = list(names(plan.frozen, "--frozen")) if plan.frozen else None
    flags: dict[str, Any] = {
        "workflow": plan.workflow,
        "model": plan.model,
        "policies": dict(policies) or None,
        "adapter": plan.adapter,
        "frozen_policies": frozen,
        "phase_alternate_steps": plan.phase_alternate_steps,
        "train_set": plan.train_set,
        "train_file": str(plan.train_file) if plan.train_file else None,
        "steps": plan.steps,
        "problems_per_step": plan.problems_per_step,
        "branches": plan.branches,
        "learning_rate": plan.learning_rate,
        "temperature": plan.temperature,
        "top_p": plan.top_p,
        "max_new_tokens": plan.max_tokens,
        "seed": plan.seed,
        "logger": loggers(plan.logger),
    }
    data = read_yaml_mapping(plan.config_file, "config") if plan.config_file else {}
    data.update({key: value for key, value in flags.items() if value is not None})
    if plan.preset is not None:
        data["preset"] = plan.preset
    return {**preset_settings(data.get("preset"), workflow=True), **data}


def _train_local(config: Any, plan: TrainMasPlan) -> Path:
    import torch

    from core.lifecycle import run_lifecycle
    from train_backend.local.runlog import training_identity
    from train_backend.mas.trainer import train_workflow

    torch.set_num_threads(plan.threads)
    log = (lambda _line: None) if plan.quiet else print
    identity = training_identity(config.model_dump(mode="json"))
    slug = f"mas-{config.workflow}"
    with run_lifecycle(
        out=plan.out, run_dir=plan.run_dir, kind="train", slug=slug, identity=identity
    ) as life:
        train_workflow(config, life.run, command=invocation(), log=log)
    print(f"run dir: {life.path}")
    return life.path


def parse_role_map(text: str | None, flag: str) -> dict[str, str]:
    """`role=name,role=name` -> {role: name}; one clear line for anything else."""
    if not text:
        return {}
    pairs: dict[str, str] = {}
    for item in text.split(","):
        role, sep, name = item.partition("=")
        if not sep or not role.strip() or not name.strip():
            raise MarsError(f"{flag}: expected ROLE=NAME[,ROLE=NAME...], got {item!r}")
        if role.strip() in pairs:
            raise MarsError(f"{flag} gives the role {role.strip()!r} twice; give each role once")
        pairs[role.strip()] = name.strip()
    return pairs


def checked_config(data: dict[str, Any], *, cpu_sized: bool = True) -> Any:
    """The training config of `data` as the command checks it before anything runs (its dry
    run too, and the benches' dry runs): validated, a workflow with training rewards and the
    roles named, a known training set, workflow options the workflow reads."""
    config = _validated(data, cpu_sized=cpu_sized)
    _check_names(config)
    _check_workflow_options(config.workflow, config.workflow_options)
    return config


def _check_names(config: Any) -> None:
    """A workflow with training rewards, a training set a loader knows."""
    from core.names import unknown_name
    from train_backend.mas.data import check_train_set_name
    from train_backend.mas.rewards import ROLES

    if config.workflow not in ROLES:
        raise MarsError(unknown_name("training workflow", config.workflow, ROLES))
    config.role_policies(ROLES[config.workflow])  # a role the workflow lacks
    check_train_set_name(config.train_set)


def _check_workflow_options(workflow: str, workflow_options: dict[str, Any]) -> None:
    """The config's `workflow_options` as `mars eval` checks `--mas-option`s: a value the
    workflow cannot use, or a key it never reads, is refused in one line before training."""
    import asyncio

    from mas.base import check_options, get_mas

    asyncio.run(check_options(get_mas(workflow), workflow_options, name=workflow))


def _validated(data: dict[str, Any], *, cpu_sized: bool = True) -> Any:
    from pydantic import ValidationError

    from core.settings_files import settings_error
    from train_backend.mas.config import WorkflowTrainConfig

    try:
        if cpu_sized:
            return WorkflowTrainConfig.for_local(**data)
        return WorkflowTrainConfig(**data)
    except ValidationError as exc:
        raise settings_error(exc, "training") from exc


def _train_verl(
    config: Any, *, device: str | None, run_path: Path | None, out: Path, dry_run: bool
) -> Path:
    """verl's agent loop (train_backend/verl/workflow_loop.py): one shared policy in one run, or
    one policy per role, every policy in one job (train_backend/verl/mas_job.py)."""
    if config.model is None:
        raise MarsError("--trainer verl needs --model: a Hugging Face model folder or hub id")
    verl = config.verl.model_dump(exclude_unset=True) | ({"device": device} if device else {})
    config = config.model_copy(
        update={
            "estimator": "at_grpo",  # branches grouped by (problem, role, call index)
            "tree": config.tree.model_copy(update={"branches": config.branches}),
            "verl": type(config.verl).model_validate(verl),
        }
    )
    try:
        from train_backend.verl.launch import preflight, run_verl
    except ModuleNotFoundError as exc:
        raise MarsError("verl backend not installed: make setup-verl") from exc

    def launch(config: Any, run: Any, *, dry_run: bool) -> None:
        if not config.multi_policy:
            run_verl(config, run, dry_run=dry_run)
            return
        from core.model_access import model_endpoint
        from train_backend.verl.mas_job import runs_in_one_job, train_job
        from train_backend.verl.mas_phases import train_phases

        # every trained policy in one job, or (verl.one_job: false) one launch per phase
        trainer = train_job if runs_in_one_job(config) else train_phases
        trainer(config, run, dry_run=dry_run, run_verl=run_verl, serve=model_endpoint)

    return launch_verl_run(
        config, out=out, run_path=run_path, slug=f"mas-{config.workflow}",
        dry_run=dry_run, preflight=preflight, launch=launch,
    )  # fmt: skip
