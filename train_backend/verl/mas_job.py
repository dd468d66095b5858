"""One policy per role on verl, in one job: every trained policy every step (policies.py).

`mars train-mas --trainer verl --policies ROLE=NAME,...` launches one verl job over the run
folder: verl's own checkpoints under `RUN/verl/`, each policy's published checkpoints under
`RUN/policies/<name>/checkpoints/step_N/` (the CPU trainer's layout). A policy in
`frozen_policies` never trains: it is served beside the job from `policy_models[name]` (else
`model`) and answers for its roles as a partner (workflow_loop.py). With
`phase_alternate_steps` N > 0 the trained policies take turns inside the job, N updates each.
With `verl.one_job: false` (or one trained policy) the phases of mas_phases.py run instead.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from core.runstore import RunDir
from train_backend.mas.config import WorkflowTrainConfig
from train_backend.mas.rewards import ROLES
from train_backend.mas.trained import policy_root
from train_backend.verl.mas_phases import partner_generation, served_partner, trained_policies


def runs_in_one_job(config: WorkflowTrainConfig) -> bool:
    return config.verl.one_job and len(trained_policies(config)) > 1


def train_job(
    config: WorkflowTrainConfig,
    run: RunDir,
    *,
    dry_run: bool,
    run_verl: Callable[..., None],
    serve: Callable[..., Any],
    log: Callable[[str], None] = print,
) -> None:
    role_policy = config.role_policies(ROLES[config.workflow])
    trained = trained_policies(config)
    log(
        f"one verl job: {', '.join(trained)} updated "
        + (
            f"in turns of {config.phase_alternate_steps} step(s)"
            if config.phase_alternate_steps
            else "every step"
        )
    )
    with ExitStack() as servers:
        frozen = {}
        for name in dict.fromkeys(role_policy.values()):
            if name in trained:
                continue
            roles = [role for role, own in role_policy.items() if own == name]
            model = config.policy_models.get(name, config.model)
            log(f"partner {name} (frozen) = {model}")
            endpoint = served_partner(
                servers,
                serve,
                model,
                partner_generation(config, roles),
                policy_root(run.path, name, True),
                name,
                dry_run,
            )
            frozen.update(dict.fromkeys(roles, endpoint))
        job = config.model_copy(
            update={
                "model": config.policy_models.get(trained[0], config.model),
                "frozen_partners": frozen,
                "job_policies": {
                    role: name for role, name in role_policy.items() if name in trained
                },
            }
        )
        run_verl(job, run, dry_run=dry_run)
