"""One policy per role on verl: alternating phases, the other policies as frozen partners.

verl trains one actor per run. With `policies` (role -> policy), `mars train-mas --trainer verl`
trains the policies in turn: a phase is one verl run of one policy, in its own folder
`RUN/policies/<name>/` (its verl checkpoints, its published `checkpoints/step_N/`), for
`phase_alternate_steps` updates, resuming its own verl checkpoint from the phase before.
Meanwhile every other policy's latest published checkpoint (its starting model before it has
one) is served (`core.model_access.model_endpoint`: vLLM on GPUs, `transformers serve` on a CPU)
and answers for that policy's roles; only the trained policy's calls are branched and become
samples (workflow_loop.py). A policy in `frozen_policies` never gets a phase: it is always a
partner, served from `policy_models[name]` (else `model`). With `adapter` set each policy is a
LoRA adapter on the one base `model` and publishes only its adapter. Policies alternate until
each has made `steps` updates; a rerun skips the phases whose checkpoints are already published.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.endpoint import GenerationConfig
from core.errors import MarsError
from core.runstore import RunDir, RunStatus
from train_backend.local import checkpoint
from train_backend.mas.config import WorkflowTrainConfig
from train_backend.mas.rewards import ROLES
from train_backend.mas.trained import policy_root


@dataclass(frozen=True)
class Phase:
    index: int
    policy: str
    target: int  # the policy's number of updates once the phase is done


def phase_plan(policies: list[str], steps: int, phase_steps: int) -> list[Phase]:
    """The policies in turn, `phase_steps` updates each time (0: all `steps` at once).

    `policies` are those that train (not the frozen ones). Turns of one policy that follow each
    other (one policy left to train) are one phase: nothing it plays against changes between
    them, and each phase is a verl launch.
    """
    size = phase_steps or steps
    done = dict.fromkeys(policies, 0)
    targets: list[tuple[str, int]] = []
    while any(count < steps for count in done.values()):
        for policy in policies:
            if done[policy] < steps:
                done[policy] = min(steps, done[policy] + size)
                if targets and targets[-1][0] == policy:
                    targets.pop()
                targets.append((policy, done[policy]))
    return [Phase(index, policy, target) for index, (policy, target) in enumerate(targets)]


def refuse_schedule_across_phases(config: WorkflowTrainConfig, plan: list[Phase]) -> None:
    """A policy trained in several phases is several verl runs, each knowing only its own steps:
    a cosine schedule would reach its floor at the end of every phase and the next phase would
    start its updates there (measured: lr 0 and an unchanged adapter). Refused in one line."""
    phases = [phase.policy for phase in plan]
    split = sorted({name for name in phases if phases.count(name) > 1})
    if split and config.lr_schedule != "constant":
        raise MarsError(
            f"policy {split[0]} trains in {phases.count(split[0])} verl phases, and a "
            f"{config.lr_schedule} learning-rate schedule would restart in each: set "
            "lr_schedule: constant (as the stronger_mas presets do), or phase_alternate_steps 0"
        )


def trained_policies(config: WorkflowTrainConfig) -> list[str]:
    """The policies that train (not the frozen ones), in order of their first role."""
    role_policy = config.role_policies(ROLES[config.workflow])
    return [
        name for name in dict.fromkeys(role_policy.values()) if name not in config.frozen_policies
    ]


def published_step(root: Path) -> int:
    latest = checkpoint.latest_checkpoint(root)
    return latest[0] if latest else 0


def partner_models(config: WorkflowTrainConfig, run: Path, trained: str) -> dict[str, str]:
    """Every other policy -> the model folder that answers for it now: a frozen policy's
    `policy_models` entry (else `model`), a trained one's newest published checkpoint (its
    starting model before it has one)."""
    found = {}
    for name in dict.fromkeys(config.policies.values()):
        if name == trained:
            continue
        start = config.policy_models.get(name, config.model)
        latest = checkpoint.latest_checkpoint(policy_root(run, name, True))
        found[name] = str(latest[1]) if latest and name not in config.frozen_policies else start
    return found


def partner_generation(config: WorkflowTrainConfig, roles: list[str]) -> GenerationConfig:
    """What a partner's server is asked for: the run's sampling, or its first role's own."""
    own = config.role_sampling.get(roles[0]) if roles else None
    pick = own.model_dump(exclude_none=True) if own else {}
    return GenerationConfig(
        temperature=pick.get("temperature", config.temperature),
        top_p=pick.get("top_p", config.top_p),
        max_tokens=pick.get("max_new_tokens", config.max_new_tokens),
    )


def train_phases(
    config: WorkflowTrainConfig,
    run: RunDir,
    *,
    dry_run: bool,
    run_verl: Callable[..., None],
    serve: Callable[..., Any],
    log: Callable[[str], None] = print,
) -> list[Phase]:
    """Run every phase not yet done; returns the phases run."""
    role_policy = config.role_policies(ROLES[config.workflow])
    plan = phase_plan(trained_policies(config), config.steps, config.phase_alternate_steps)
    refuse_schedule_across_phases(config, plan)
    ran = []
    for phase in plan:
        root = policy_root(run.path, phase.policy, True)
        if published_step(root) >= phase.target:
            continue  # published by an earlier invocation
        partners = partner_models(config, run.path, phase.policy)
        log(
            f"phase {phase.index}: {phase.policy} to step {phase.target}; partners: "
            + ", ".join(f"{name} = {model}" for name, model in partners.items())
        )
        with ExitStack() as servers:
            endpoints = {
                name: served_partner(
                    servers,
                    serve,
                    model,
                    partner_generation(config, [r for r, p in role_policy.items() if p == name]),
                    root,
                    name,
                    dry_run,
                )
                for name, model in partners.items()
            }
            frozen = {
                role: endpoints[name] for role, name in role_policy.items() if name != phase.policy
            }
            phase_config = config.model_copy(
                update={
                    "steps": phase.target,
                    "model": config.policy_models.get(phase.policy, config.model),
                    "frozen_partners": frozen,
                }
            )
            sub_run = RunDir.resolve(out=None, run_dir=root, kind="train", slug=phase.policy)
            sub_run.start(
                command=["mars", "train-mas", "--trainer", "verl", f"(phase {phase.index})"],
                config=phase_config.model_dump(mode="json") | {"policy": phase.policy},
                model=phase_config.model,
                seeds={"seed": config.seed},
            )
            try:
                run_verl(phase_config, sub_run, dry_run=dry_run)
            except KeyboardInterrupt:  # a policy's own run must not read as still running
                sub_run.finish(RunStatus.INTERRUPTED)
                raise
            sub_run.finish(RunStatus.DRY_RUN if dry_run else RunStatus.COMPLETED)
        ran.append(phase)
        if dry_run:
            break  # a dry run shows the first phase's launch
    return ran


def served_partner(
    servers: ExitStack,
    serve: Callable[..., Any],
    model: str,
    gen: GenerationConfig,
    root: Path,
    name: str,
    dry_run: bool,
) -> dict[str, Any]:
    if dry_run:  # nothing is launched: the row names the partner's model only
        return {"base_url": "http://127.0.0.1:0/v1", "model": model}
    log_dir = root / "logs" / f"partner-{name}"
    log_dir.mkdir(parents=True, exist_ok=True)
    config = servers.enter_context(serve(model=model, base_url=None, gen=gen, log_dir=log_dir))
    return config.model_dump()
