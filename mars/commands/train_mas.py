"""`mars train-mas`: train the agents of a MAS workflow by AT-GRPO inside it.

One shared policy for every role by default; `--policies tool=coder,reasoner=thinker` trains one
policy per role (each with its own optimiser and checkpoints), on the embedded CPU trainer.
`--trainer verl` trains through verl's agent loop (one policy per role: alternating phases).
docs/mas_training.md, docs/verl.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from core.errors import MarsError
from core.names import comma_list
from mars.commands import options
from mars.commands.app import app


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


@app.command("train-mas")
def train_mas_command(
    workflow: str = typer.Option(
        None,
        "--workflow",
        help="The MAS to train in: reasoner_tool (default), plan_tool, plan_single, code_tester, "
        "ensemble_judge, single, mad.",
    ),
    config_file: Path = typer.Option(None, "--config", help="A YAML file of config fields."),
    preset: str = typer.Option(
        None,
        "--preset",
        help="The paper's settings: stronger_mas_plan | stronger_mas_code | stronger_mas_math "
        "(under --config and flags).",
    ),
    model: str = typer.Option(None, "--model", help="Starting model (default: the tiny model)."),
    policies: str = typer.Option(
        None, "--policies", help="ROLE=POLICY,...: one policy per role (default: one shared)."
    ),
    adapter: str = typer.Option(
        None,
        "--adapter",
        help="lora: each policy a LoRA adapter on the one base --model (rank 16, alpha 32; "
        "`adapter:` in --config sets more); none: whole models.",
    ),
    frozen: str = typer.Option(
        None,
        "--frozen",
        help="POLICY,...: policies that play but never update (their model: policy_models, "
        "else --model).",
    ),
    phase_alternate_steps: int = typer.Option(
        None,
        "--phase-alternate-steps",
        min=0,
        help="N: the policies take turns, N updates each (0: all every step; verl: phases).",
    ),
    train_set: str = typer.Option(
        None,
        "--train-set",
        help="arithmetic | gsm8k | math | code_mini | a puzzle suite (plan_path, plan_path_5x5, "
        "sokoban, sudoku, sudoku_9x9).",
    ),
    train_file: Path = typer.Option(None, "--train-file", help="A local JSONL of problems."),
    steps: int = typer.Option(None, "--steps", help="Updates to make."),
    problems_per_step: int = typer.Option(None, "--problems-per-step"),
    branches: int = typer.Option(None, "--branches", help="K runs branched at every call."),
    lr: float = typer.Option(None, "--lr", help="Learning rate."),
    seed: int = typer.Option(None, "--seed"),
    run_dir: Path = typer.Option(None, "--run-dir", help="Exactly this run directory (resumes)."),
    out: Path = typer.Option(Path("runs"), "--out", help="Parent folder of a new run directory."),
    threads: int = typer.Option(
        1, "--threads", min=1, help="torch CPU threads (local); 1 is fastest for the tiny model."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No per-step lines."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved config and stop."),
    trainer: str = options.TRAINER,
    backend: str = options.TRAINER_AS_BACKEND,
    device: str = typer.Option(
        None, "--device", help="verl: cuda (GPUs, default) | cpu (rehearse on this machine)."
    ),
) -> None:
    """AT-GRPO inside a MAS workflow (Stronger-MAS), on the embedded CPU trainer or verl."""
    from core.settings_files import read_yaml_mapping
    from mars.commands.train import refuse_other_training

    trainer = options.trainer_choice(trainer, backend)
    refuse_other_training(run_dir, workflow=True)
    flags: dict[str, Any] = {
        "workflow": workflow,
        "model": model,
        "policies": parse_role_map(policies, "--policies") or None,
        "adapter": adapter,
        "frozen_policies": comma_list(frozen, "--frozen") if frozen else None,
        "phase_alternate_steps": phase_alternate_steps,
        "train_set": train_set,
        "train_file": str(train_file) if train_file else None,
        "steps": steps,
        "problems_per_step": problems_per_step,
        "branches": branches,
        "learning_rate": lr,
        "seed": seed,
    }
    from train_backend.presets import preset_settings

    data = read_yaml_mapping(config_file, "config") if config_file else {}
    data.update({key: value for key, value in flags.items() if value is not None})
    if preset is not None:
        data["preset"] = preset
    # defaults < the preset (the flag's, else the file's) < the file < the flags
    data = {**preset_settings(data.get("preset"), workflow=True), **data}
    # The CPU-sized defaults serve the local trainer and verl on a CPU; verl on GPUs starts from
    # the paper-sized ones (TrainConfig's), as `mars train` does.
    config = checked_config(data, cpu_sized=trainer != "verl" or device == "cpu")
    if trainer == "verl":
        _train_verl(config, device=device, run_path=run_dir, out=out, dry_run=dry_run)
        return
    if device is not None:
        raise MarsError("--device is for --trainer verl (the local trainer runs on the CPU)")
    if dry_run:
        print(json.dumps(config.model_dump(mode="json"), indent=2))
        return
    import torch

    from core.lifecycle import run_lifecycle
    from train_backend.local.runlog import training_identity
    from train_backend.mas.trainer import train_workflow

    torch.set_num_threads(threads)
    log = (lambda _line: None) if quiet else print
    identity = training_identity(config.model_dump(mode="json"))
    slug = f"mas-{config.workflow}"
    with run_lifecycle(
        out=out, run_dir=run_dir, kind="train", slug=slug, identity=identity
    ) as life:
        train_workflow(config, life.run, command=["mars", *sys.argv[1:]], log=log)
    print(f"run dir: {life.path}")


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
) -> None:
    """verl's agent loop (train_backend/verl/workflow_loop.py): one shared policy in one run, or
    one policy per role in alternating phases (train_backend/verl/mas_phases.py)."""

    from mars.commands.train import launch_verl_run

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
        if config.multi_policy:  # one verl run per phase, the other policies served
            from core.model_access import model_endpoint
            from train_backend.verl.mas_phases import train_phases

            train_phases(config, run, dry_run=dry_run, run_verl=run_verl, serve=model_endpoint)
        else:
            run_verl(config, run, dry_run=dry_run)

    launch_verl_run(
        config, out=out, run_path=run_path, slug=f"mas-{config.workflow}",
        dry_run=dry_run, preflight=preflight, launch=launch,
    )  # fmt: skip
