"""The configuration of training inside a MAS workflow (`mars train-mas`; docs/mas_training.md).

It is the game trainer's `TrainConfig` (optimiser, PPO, sampling, schedule, checkpoints: the same
fields, the same meaning, the same update code) plus what a workflow needs: which workflow, its
options, the training problems, and which policy acts for each role. The game fields (`games`,
`opponent`, ...) are not used.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from core.names import unknown_name
from train_backend.config import TrainConfig

SHARED_POLICY = "policy"


class LoraSettings(BaseModel):
    """One LoRA adapter per policy on one shared base (PettingLLMs' `specialization: lora`).

    The defaults are the reference's: rank 16, alpha 32 (docs/references.md §12.7); every linear
    layer of the transformer blocks is adapted.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["lora"] = "lora"
    rank: int = Field(16, ge=1)
    alpha: float = Field(32.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"


class RoleSampling(BaseModel):
    """One role's generation settings; a field left unset is the run's own."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    max_new_tokens: int | None = Field(None, ge=1)
    stop: list[str] | None = None


class WorkflowTrainConfig(TrainConfig):
    workflow: str = "reasoner_tool"
    workflow_options: dict[str, Any] = Field(default_factory=dict)  # e.g. rounds, code_seconds
    train_set: str = "arithmetic"  # arithmetic, gsm8k, math (train_backend.mas.data)
    train_file: str | None = None  # a local JSONL of problems instead of the set's source
    problems_per_step: int = Field(8, ge=1)
    heldout_problems: int = Field(32, ge=1)  # evaluated at eval steps (arithmetic: held-out split)
    branches: int = Field(4, ge=1)  # K runs branched at every call of the main line
    continuation: Literal["greedy", "random"] = "greedy"  # the paper's default in math
    # role -> policy name. Empty: one shared policy for every role (the role is in the prompt).
    policies: dict[str, str] = Field(default_factory=dict)
    # policy name -> its starting model (default: `model`)
    policy_models: dict[str, str] = Field(default_factory=dict)
    # Each policy a LoRA adapter on the one base `model` (`adapter: lora`, or its settings).
    adapter: LoraSettings | None = None
    # Policies that play but never update (frozen partners): their samples get no advantage and
    # no loss; their model is `policy_models[name]` (a checkpoint), else `model`.
    frozen_policies: list[str] = Field(default_factory=list)
    # Per-role generation settings in training rollouts, and in held-out evaluation (the
    # evaluation's own, unset fields falling back to the run's settings, not the training ones).
    role_sampling: dict[str, RoleSampling] = Field(default_factory=dict)
    eval_role_sampling: dict[str, RoleSampling] = Field(default_factory=dict)
    # With several policies, which update when: N > 0 = the policies take turns, N updates each
    # (the others frozen meanwhile); 0 = every policy every step (the CPU trainer, and verl's
    # one job), or on verl with `verl.one_job: false` one phase of `steps` each
    # (train_backend/verl/mas_phases.py).
    phase_alternate_steps: int = Field(
        0, ge=0, validation_alias=AliasChoices("phase_alternate_steps", "phase_steps")
    )
    # Set by the phase runner, not by hand: role -> endpoint config of the frozen partner that
    # answers for it in this phase (its policy's latest checkpoint, served).
    frozen_partners: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Set by the verl launcher, not by hand: role -> policy, in a verl job that trains several
    # policies at once (train_backend/verl/policies.py); empty otherwise.
    job_policies: dict[str, str] = Field(default_factory=dict)

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, name: str | None) -> str | None:
        from train_backend.presets import checked_preset

        return checked_preset(name, workflow=True)

    @field_validator("policies")
    @classmethod
    def _named_policies(cls, policies: dict[str, str]) -> dict[str, str]:
        for role, name in policies.items():
            if not name or "/" in name or name.startswith("."):
                raise ValueError(f"role {role}: policy name {name!r} must be a plain folder name")
        return policies

    @field_validator("adapter", mode="before")
    @classmethod
    def _adapter_by_name(cls, value: Any) -> Any:
        if value in (None, "", "none", "full"):
            return None
        if isinstance(value, str):
            if value != "lora":
                raise ValueError(unknown_name("adapter", value, ["lora", "none"]))
            return {"kind": "lora"}
        return value

    @model_validator(mode="after")
    def _models_of_known_policies(self) -> WorkflowTrainConfig:
        known = set(self.policies.values()) or {SHARED_POLICY}
        for field, names in (
            ("policy_models", self.policy_models),
            ("frozen_policies", self.frozen_policies),
        ):
            unknown = sorted(set(names) - known)
            if unknown:
                raise ValueError(f"{field} names unknown policies: {', '.join(unknown)}")
        if self.frozen_policies and set(self.frozen_policies) >= known:
            raise ValueError("frozen_policies freezes every policy: nothing would train")
        if self.adapter is not None:
            trained = known - set(self.frozen_policies)
            based = sorted(set(self.policy_models) & trained)
            if based:
                raise ValueError(
                    f"adapter: every adapter sits on the one base `model`; policy_models gives "
                    f"{', '.join(based)} a model of its own"
                )
        return self

    def role_policies(self, roles: tuple[str, ...]) -> dict[str, str]:
        """Every role of the workflow -> its policy name (the shared policy when none is set)."""
        from core.errors import MarsError

        unknown = sorted(set(self.policies) - set(roles))
        if unknown:
            raise MarsError(
                f"workflow {self.workflow} has no role {', '.join(unknown)}; roles: "
                f"{', '.join(roles)}"
            )
        for field, settings in (
            ("role_sampling", self.role_sampling),
            ("eval_role_sampling", self.eval_role_sampling),
        ):
            strangers = sorted(set(settings) - set(roles))
            if strangers:
                raise MarsError(
                    f"{field}: workflow {self.workflow} has no role {', '.join(strangers)}; "
                    f"roles: {', '.join(roles)}"
                )
        missing = [role for role in roles if role not in self.policies]
        if self.policies and missing:
            raise MarsError(f"no policy for role(s) {', '.join(missing)} of {self.workflow}")
        return {role: self.policies.get(role, SHARED_POLICY) for role in roles}

    @property
    def multi_policy(self) -> bool:
        return len(set(self.policies.values())) > 1

    @property
    def phase_steps(self) -> int:
        """The verl phase runner's name for `phase_alternate_steps`."""
        return self.phase_alternate_steps

    def updates_at(self, policy: str, policies: list[str], step: int) -> bool:
        """Whether `policy` is updated at `step` (1-based) under `phase_alternate_steps`."""
        if policy in self.frozen_policies:
            return False
        trained = [name for name in policies if name not in self.frozen_policies]
        if not self.phase_alternate_steps or len(trained) < 2:
            return True
        turn = (step - 1) // self.phase_alternate_steps % len(trained)
        return trained[turn] == policy
