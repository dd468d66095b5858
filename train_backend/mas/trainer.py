"""Training inside a MAS workflow on the CPU: AT-GRPO with one shared policy or one per role.

A step: `problems_per_step` training problems, each tree-sampled through the workflow
(`rollout.play_workflow_step`: K branches at every call of the main line); at_grpo advantages over
the branches, grouped by (problem, role, the role's call index); then every policy is updated
(`local.update.update_policy`, the game trainer's PPO update) on the samples of its own roles
only, with its own optimiser. Checkpoints: `RUN/checkpoints/step_N/` with one shared policy (the
game trainer's layout, so `mars loop` follows it), else `RUN/policies/<name>/checkpoints/step_N/`
per policy. At eval steps the workflow answers held-out problems once each (no tree), and
`eval/accuracy` is the share answered right (Wilson 95% interval).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core import branch_log
from core.causal_lm import Policy, load_policy, resolve_model_path
from core.errors import MarsError
from core.runstore import RunDir
from core.stats import wilson_ci
from core.trackers import Trackers
from train_backend.advantage import compute_advantages, needs_state
from train_backend.group_filter import GroupFilter, Selection, kept_advantages, select_step
from train_backend.local import checkpoint, runlog
from train_backend.local.adapters import BaseModel, adapter_parameters, adapter_policies, load_any
from train_backend.local.rollout import StepRollout, make_responder
from train_backend.local.step_metrics import NO_UPDATE_WARNING
from train_backend.local.trainer import learning_rate_at
from train_backend.local.update import (
    UpdateStats,
    step_generator,
    update_policy,
    used_by_update,
)
from train_backend.mas.config import WorkflowTrainConfig
from train_backend.mas.data import Problem
from train_backend.mas.rewards import ROLES, main_line_figures, reward_function
from train_backend.mas.role_models import RoleGeneration, role_generation, role_model
from train_backend.mas.rollout import (
    RoleModel,
    play_workflow_step,
    run_workflow,
    workflow_runners,
)
from train_backend.mas.schedule import step_problems, training_problems
from train_backend.mas.trained import policy_root

TABLE_COLUMNS = ("episode", "game", "seat", "turn", "reward")


@dataclass
class PolicySlot:
    """One trained policy: its model, frozen reference, optimiser and checkpoint folder."""

    name: str
    roles: list[str]
    policy: Policy
    reference: Any
    optimizer: Any  # None for a frozen partner
    root: Path  # the folder whose checkpoints/ holds this policy's checkpoints
    frozen: bool = False  # plays, is never updated, saves nothing
    start_step: int = 0


class WorkflowTrainer:
    def __init__(
        self, config: WorkflowTrainConfig, run: RunDir, *, log: Callable[[str], None] = print
    ) -> None:
        reward_function(config.workflow)  # a workflow without training rewards fails here
        self.config = config
        self.run = run
        self.log = log
        self.roles = ROLES[config.workflow]
        self.role_policy = config.role_policies(self.roles)
        self.pool, self.heldout = training_problems(config)
        self.slots: dict[str, PolicySlot] = {}
        self.last_metrics: dict[str, Any] = {}
        self.trackers = Trackers()  # `config.logger`'s, opened by `train_workflow`

    def policy_root(self, name: str) -> Path:
        return policy_root(self.run.path, name, self.config.multi_policy)

    def load(self) -> None:
        """Each policy from its latest checkpoint (resume) or its starting model; with
        `adapter`, one base and an adapter per trained policy."""
        import torch

        config = self.config
        names = list(dict.fromkeys(self.role_policy.values()))
        trained = [name for name in names if name not in config.frozen_policies]
        latest: dict[str, tuple[int, Path] | None] = {}
        for name in trained:
            checkpoint.remove_partial(self.policy_root(name))
            latest[name] = checkpoint.latest_checkpoint(self.policy_root(name))
        steps = {found[0] if found else 0 for found in latest.values()}
        if len(steps) > 1:
            raise MarsError(f"the policies' last checkpoints are of different steps: {steps}")
        start_step = steps.pop()
        saved = {name: found[1] for name, found in latest.items() if found is not None}
        policies = self._load_policies(trained, saved)
        for name in names:
            roles = [role for role, owner in self.role_policy.items() if owner == name]
            root = self.policy_root(name)
            if name not in trained:
                policy = load_any(resolve_model_path(config.policy_models.get(name, config.model)))
                policy.model.requires_grad_(False)
                self.slots[name] = PolicySlot(name, roles, policy, None, None, root, frozen=True)
                self.log(f"{name}: frozen partner ({policy.source}) for {', '.join(roles)}")
                continue
            policy = policies[name]
            parameters = (
                adapter_parameters(policy)
                if policy.adapter is not None
                else list(policy.model.parameters())
            )
            optimizer = torch.optim.AdamW(
                parameters,
                lr=config.learning_rate,
                betas=tuple(config.adam_betas),
                weight_decay=config.weight_decay,
            )
            if name in saved:
                state = checkpoint.load_trainer_state(saved[name])["optimizer"]
                optimizer.load_state_dict(state)
                self.log(f"{name}: resuming from {saved[name]} (step {start_step})")
            reference = self._reference(name, policy)
            self.slots[name] = PolicySlot(name, roles, policy, reference, optimizer, root)
        for slot in self.slots.values():
            slot.start_step = start_step
        runlog.truncate_after(self.run.path, self.start_step, self.run.records_path)

    def _load_policies(self, names: list[str], saved: dict[str, Path]) -> dict[str, Policy]:
        config = self.config
        if config.adapter is not None:
            base = load_policy(self.base_model)
            return adapter_policies(base, names, config.adapter, saved)
        return {
            name: load_policy(
                saved.get(name) or resolve_model_path(config.policy_models.get(name, config.model))
            )
            for name in names
        }

    def _reference(self, name: str, policy: Policy) -> Any:
        """The frozen KL reference: the base with adapters off, or the starting model."""
        if self.config.kl_coef <= 0:
            return None
        if policy.adapter is not None:
            return BaseModel(policy.model)
        source = resolve_model_path(self.config.policy_models.get(name, self.config.model))
        reference = load_policy(source).model
        reference.requires_grad_(False)
        return reference

    @property
    def base_model(self) -> str:
        """The starting model's folder (the adapters' base), as an absolute path when local."""
        source = resolve_model_path(self.config.model)
        local = Path(source).expanduser()
        return str(local.resolve()) if local.is_dir() else source

    @property
    def start_step(self) -> int:
        return next(iter(self.slots.values())).start_step

    def role_models(
        self, step: int, stream: int, *, evaluation: bool = False
    ) -> dict[str, RoleModel]:
        """Each role's model: its policy, sampled with its role's settings (`role_sampling`, or
        `eval_role_sampling` when evaluating); roles with the same settings share a batcher."""
        models: dict[str, RoleModel] = {}
        index = 0
        for name, slot in self.slots.items():
            by_settings: dict[RoleGeneration, list[str]] = {}
            for role in slot.roles:
                settings = role_generation(self.config, role, evaluation=evaluation)
                by_settings.setdefault(settings, []).append(role)
            for settings, roles in by_settings.items():
                responder = make_responder(
                    slot.policy,
                    settings.sampling,
                    generator=step_generator(self.config.seed, step, stream + 2 * index),
                    max_new_tokens=settings.max_new_tokens,
                    max_context_tokens=self.config.max_game_tokens,
                    keep_tokens=False,
                )
                index += 1
                model = role_model(
                    name, slot.policy, responder.batcher, settings.max_new_tokens, settings.stop
                )
                for role in roles:
                    models[role] = model
        return models

    def updating(self, step: int) -> list[str]:
        """The policies updated at `step` (frozen partners never; `phase_alternate_steps`)."""
        names = list(self.slots)
        return [name for name in names if self.config.updates_at(name, names, step)]

    def step_problems(self, step: int) -> list[Problem]:
        return step_problems(self.config, self.pool, step)

    def rollout(self, step: int) -> StepRollout:
        updating = self.updating(step)
        branch_roles = (
            None
            if len(updating) == len(self.slots)
            else [role for name in updating for role in self.slots[name].roles]
        )
        return asyncio.run(
            play_workflow_step(
                self.config.workflow,
                self.step_problems(step),
                self.role_models(step, 0),
                {**self.config.workflow_options, **workflow_runners()},
                branches=self.config.branches,
                continuation=self.config.continuation,
                seed=self.config.seed * 1_000_003 + step,
                branch_roles=branch_roles,
            )
        )

    def advantages(self, rollout: StepRollout, selection: Selection | None = None) -> np.ndarray:
        """at_grpo per branch row; with a selection, of the kept rows only (the others get 0)."""
        if not rollout.rows:
            return np.zeros(0)
        table = {column: [row[column] for row in rollout.rows] for column in TABLE_COLUMNS}
        if needs_state(self.config.estimator_options):
            table["state"] = [row["state"] for row in rollout.rows]
        if selection is not None:
            return kept_advantages(
                table, selection.keep, "at_grpo", **self.config.estimator_options
            )
        return compute_advantages(table, "at_grpo", **self.config.estimator_options)

    def evaluate(self, step: int) -> dict[str, float]:
        """Held-out accuracy of the workflow as it is played (one run per problem, no tree)."""
        roles = self.role_models(step, 1, evaluation=True)
        right = answered_right(self.config, self.heldout, roles)
        low, high = wilson_ci(sum(right), len(right))
        return {
            "eval/accuracy": sum(right) / len(right),
            "eval/accuracy_ci95_low": low,
            "eval/accuracy_ci95_high": high,
            "eval/n": len(right),
        }

    def train(self) -> dict[str, Any]:
        import torch

        config = self.config
        for step in range(self.start_step + 1, config.steps + 1):
            started = time.perf_counter()
            lr = learning_rate_at(step, config)
            for slot in self.slots.values():
                for group in slot.optimizer.param_groups if slot.optimizer else ():
                    group["lr"] = lr
            rollout = self.rollout(step)
            selection = select_step(rollout.rows, GroupFilter.of(config))
            advantages = self.advantages(rollout, selection)
            keep = selection.keep if selection is not None else np.ones(len(rollout.rows), bool)
            update_started = time.perf_counter()
            metrics: dict[str, Any] = {"step": step, "lr": lr}
            if selection is not None:
                metrics.update(selection.metrics())
            for name in self.updating(step):
                slot = self.slots[name]
                rows = enumerate(rollout.rows)
                mine = [i for i, row in rows if row["policy"] == name and keep[i]]
                stats = update_policy(
                    config,
                    slot.policy,
                    slot.reference,
                    slot.optimizer,
                    [rollout.samples[i] for i in mine],
                    advantages[mine],
                    step,
                )
                metrics.update(_policy_metrics(name, stats, len(mine)))
            metrics.update(rollout_metrics(rollout, self.roles))
            used = used_by_update(config, rollout.samples, advantages, keep)
            branches = branch_log.step_lines(step, rollout.rows, rollout.replies, advantages, used)
            metrics.update(branch_log.sampled_collapse_signals(branches))
            metrics["rollout_s"] = round(rollout.seconds, 3)
            metrics["update_s"] = round(time.perf_counter() - update_started, 3)
            if config.eval_every and (step % config.eval_every == 0 or step == config.steps):
                metrics.update(self.evaluate(step))
            metrics["seconds_per_step"] = round(time.perf_counter() - started, 3)
            self.run.append_many([{**record, "step": step} for record in rollout.records])
            branch_log.write_step(self.run.path, step, branches)
            runlog.append_lines(runlog.metrics_path(self.run.path), [metrics])
            self.trackers.log(metrics, step)
            self.last_metrics = metrics
            self.log(_progress(metrics, config.steps))
            if step % config.save_every == 0 or step == config.steps:
                for slot in self.slots.values():
                    if slot.frozen:
                        continue
                    path = checkpoint.save_checkpoint(
                        slot.root,
                        step,
                        slot.policy,
                        trainer_state={
                            "step": step,
                            "optimizer": slot.optimizer.state_dict(),
                            "torch_rng": torch.get_rng_state(),
                        },
                        config=config.model_dump(mode="json") | {"policy": slot.name},
                        metrics=metrics,
                        adapter_base=self.base_model if slot.policy.adapter else None,
                    )
                    self.log(f"checkpoint ({slot.name}): {path}")
        summary = {
            "steps": config.steps,
            "workflow": config.workflow,
            "policies": {name: slot.roles for name, slot in self.slots.items()},
            "frozen_policies": [name for name, slot in self.slots.items() if slot.frozen],
            "trainable_parameters": {
                name: trainable_parameters(slot.optimizer)
                for name, slot in self.slots.items()
                if slot.optimizer is not None
            },
            # every weight held once (adapters share their base): with the trainable ones,
            # what the model state costs (`bench/mas_training.py`)
            "parameters_in_memory": parameters_in_memory(
                [slot.policy.model for slot in self.slots.values()]
                + [slot.reference for slot in self.slots.values() if slot.reference is not None]
            ),
            "checkpoints": {
                name: [str(p) for _, p in checkpoint.list_checkpoints(slot.root)]
                for name, slot in self.slots.items()
                if not slot.frozen
            },
            "last_metrics": self.last_metrics,
        }
        self.run.write_summary(summary)
        self._log_last_evaluation()
        return summary

    def _log_last_evaluation(self) -> None:
        """The last held-out evaluation, again at the end, where a user looks."""
        for metrics in reversed(runlog.read_lines(runlog.metrics_path(self.run.path))):
            if "eval/accuracy" in metrics:
                self.log(
                    f"last evaluation (step {metrics['step']}): held-out accuracy "
                    f"{metrics['eval/accuracy']:.2f} [{metrics['eval/accuracy_ci95_low']:.2f}, "
                    f"{metrics['eval/accuracy_ci95_high']:.2f}] (n {metrics['eval/n']})"
                )
                return


def answered_right(
    config: WorkflowTrainConfig, problems: Sequence[Problem], roles: dict[str, RoleModel]
) -> list[bool]:
    """Whether the workflow's final answer is right, per problem (one run each, no tree)."""
    options = {**config.workflow_options, **workflow_runners()}

    async def play_all() -> list[bool]:
        runs = await asyncio.gather(
            *(run_workflow(config.workflow, problem, roles, options) for problem in problems)
        )
        return [run.correct for run in runs]

    return asyncio.run(play_all())


def parameters_in_memory(models: Sequence[Any]) -> int:
    """Distinct weight tensors over `models`, counted once (a shared base, a reference that is
    the same model with adapters off)."""
    seen: dict[int, int] = {}
    for model in models:
        inner = model.peft_model if isinstance(model, BaseModel) else model
        for param in inner.parameters():
            seen[id(param)] = param.numel()
    return sum(seen.values())


def trainable_parameters(optimizer: Any) -> int:
    return sum(param.numel() for group in optimizer.param_groups for param in group["params"])


def _policy_metrics(name: str, stats: UpdateStats, samples: int) -> dict[str, Any]:
    return {
        f"policy/{name}/samples": samples,
        f"policy/{name}/loss": stats.loss,
        f"policy/{name}/kl": stats.kl,
        f"policy/{name}/grad_norm": stats.grad_norm,
        f"policy/{name}/updates": stats.updates,
    }


def rollout_metrics(rollout: StepRollout, roles: Sequence[str]) -> dict[str, Any]:
    """Per role, the mean branch return; the main lines' accuracy on the training problems."""
    metrics: dict[str, Any] = {
        "branches": len(rollout.rows),
        "train_accuracy": float(np.mean([r["correct"] for r in rollout.records]))
        if rollout.records
        else 0.0,
        "generated_tokens": rollout.generated_tokens,
    }
    for role in roles:
        returns = [row["reward"] for row in rollout.rows if row["role"] == role]
        if returns:
            metrics[f"return_mean/{role}"] = float(np.mean(returns))
    per_line = [main_line_figures(record["transcript"]) for record in rollout.records]
    for name in sorted({key for figures in per_line for key in figures}):
        values = [figures[name] for figures in per_line if name in figures]
        metrics[name] = float(np.mean(values))
    return metrics


def _progress(metrics: dict[str, Any], steps: int) -> str:
    accuracy = metrics.get("eval/accuracy")
    shown = f"  held-out {accuracy:.2f}" if accuracy is not None else ""
    updates = [value for key, value in metrics.items() if key.endswith("/updates")]
    idle = updates and not any(updates)
    return (
        f"step {metrics['step']}/{steps}  train accuracy {metrics['train_accuracy']:.2f}"
        f"{shown}  {metrics['seconds_per_step']:.1f} s" + (NO_UPDATE_WARNING if idle else "")
    )


def train_workflow(
    config: WorkflowTrainConfig,
    run: RunDir,
    *,
    command: list[str],
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    trainer = WorkflowTrainer(config, run, log=log)
    trainer.load()
    return runlog.train_tracked(
        run, trainer, config, command=command, model=str(resolve_model_path(config.model))
    )
