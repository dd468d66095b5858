"""The configuration of training inside a MAS workflow (`mars train-mas`; docs/mas_training.md).

It is the game trainer's `TrainConfig` (optimiser, PPO, sampling, schedule, checkpoints: the same
fields, the same meaning, the same update code) plus what a workflow needs: which workflow, its
options, the training problems, and which policy acts for each role. The game fields (`games`,
`opponent`, ...) are not used.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from core.names import unknown_name
from train_backend.config import TrainConfig

SHARED_POLICY = "policy"


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
    # verl with one policy per role: updates of one policy per phase, the phases alternating
    # between the policies (train_backend/verl/mas_phases.py); 0: `steps` (one phase each).
    phase_steps: int = Field(0, ge=0)
    # Set by the phase runner, not by hand: role -> endpoint config of the frozen partner that
    # answers for it in this phase (its policy's latest checkpoint, served).
    frozen_partners: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, name: str | None) -> str | None:
        from train_backend.presets import NO_PRESET, WORKFLOW_PRESETS

        if name is not None and name != NO_PRESET and name not in WORKFLOW_PRESETS:
            raise ValueError(unknown_name("preset", name, [*WORKFLOW_PRESETS, NO_PRESET]))
        return None if name == NO_PRESET else name

    @field_validator("policies")
    @classmethod
    def _named_policies(cls, policies: dict[str, str]) -> dict[str, str]:
        for role, name in policies.items():
            if not name or "/" in name or name.startswith("."):
                raise ValueError(f"role {role}: policy name {name!r} must be a plain folder name")
        return policies

    @model_validator(mode="after")
    def _models_of_known_policies(self) -> WorkflowTrainConfig:
        known = set(self.policies.values()) or {SHARED_POLICY}
        unknown = sorted(set(self.policy_models) - known)
        if unknown:
            raise ValueError(f"policy_models names unknown policies: {', '.join(unknown)}")
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
        missing = [role for role in roles if role not in self.policies]
        if self.policies and missing:
            raise MarsError(f"no policy for role(s) {', '.join(missing)} of {self.workflow}")
        return {role: self.policies.get(role, SHARED_POLICY) for role in roles}

    @property
    def multi_policy(self) -> bool:
        return len(set(self.policies.values())) > 1
