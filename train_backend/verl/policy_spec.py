"""One policy per role in one verl job: what the launcher tells the trainer (no verl import).

`mars train-mas --trainer verl --policies ROLE=NAME,...` launches one verl job whose trainer
(policies.py) builds one actor worker group with its own rollout per trained policy, answers
each role's calls with its own policy and updates every policy every step on its own roles'
samples. The launcher writes the policies into the workers' environment (`POLICIES_ENV`, JSON):

    {"policies": [{"name": "coder", "roles": ["tool"], "model": "/path"}, ...],
     "phase_alternate_steps": 0}

The first policy is the one verl's config describes (`actor_rollout_ref.model.path`): verl's own
setup builds it and saves it under `global_step_N/actor/`; every other one is saved under
`global_step_N/actor_<name>/` of the same step folder, before verl writes its tracker file, so a
step is resumable only once every policy of it is on disk.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

POLICIES_ENV = "MARS_VERL_POLICIES"
TRAINER_NAME = "mars_policies"  # trainer.v1.trainer_mode of a job with several policies
POLICY_FIELD = "mars_policy"  # rollout.custom key naming a worker group's policy


@dataclass(frozen=True)
class PolicySpec:
    name: str
    roles: tuple[str, ...]
    model: str


@dataclass(frozen=True)
class PoliciesSpec:
    policies: tuple[PolicySpec, ...]
    phase_alternate_steps: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "policies": [asdict(policy) for policy in self.policies],
                "phase_alternate_steps": self.phase_alternate_steps,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> PoliciesSpec:
        data = json.loads(text)
        policies = tuple(
            PolicySpec(str(item["name"]), tuple(item["roles"]), str(item["model"]))
            for item in data["policies"]
        )
        return cls(policies, int(data.get("phase_alternate_steps") or 0))

    @classmethod
    def from_environment(cls) -> PoliciesSpec | None:
        text = os.environ.get(POLICIES_ENV)
        return cls.from_json(text) if text else None

    @property
    def names(self) -> list[str]:
        return [policy.name for policy in self.policies]

    def role_policies(self) -> dict[str, str]:
        return {role: policy.name for policy in self.policies for role in policy.roles}

    def updating(self, step: int) -> list[str]:
        """The policies that update at `step` (from 1): all of them, or with
        `phase_alternate_steps` N > 0 one at a time, each for N steps in turn."""
        if self.phase_alternate_steps <= 0:
            return self.names
        turn = (step - 1) // self.phase_alternate_steps
        return [self.names[turn % len(self.policies)]]


def actor_folder(spec: PoliciesSpec | None, name: str) -> str:
    """The folder of a step's verl checkpoint that holds policy `name`'s actor."""
    if spec is None or name == spec.policies[0].name:
        return "actor"
    return f"actor_{name}"


def job_spec(config: Any) -> PoliciesSpec | None:
    """The policies of a workflow run's verl job (`job_policies`, set by the launcher, in order
    of first role), each from its own start model; None for a job of one policy."""
    job = dict(getattr(config, "job_policies", None) or {})
    if len(set(job.values())) < 2:
        return None
    roles: dict[str, list[str]] = {}
    for role, name in job.items():
        roles.setdefault(name, []).append(role)
    policies = tuple(
        PolicySpec(name, tuple(own), str(config.policy_models.get(name, config.model)))
        for name, own in roles.items()
    )
    return PoliciesSpec(policies, config.phase_alternate_steps)


def policy_of(rollout_config: Any) -> str | None:
    """The policy a rollout config names (`rollout.custom`), None outside a job of several."""
    custom = getattr(rollout_config, "custom", None)
    if custom is None and hasattr(rollout_config, "get"):
        custom = rollout_config.get("custom")
    return (custom or {}).get(POLICY_FIELD) if hasattr(custom or {}, "get") else None


def name_servers_by_policy(cls: type) -> None:
    """verl names a rollout replica's server actor `{prefix}server_{replica}_{node}` on both
    sides (the replica that starts it, the worker that finds it), with a prefix from the engine
    alone: every policy's replica 0 would be `vllm_server_0_0`. Both sides' prefix then names
    the rollout's policy (`vllm_coder_server_0_0`); unchanged outside a job of several."""
    original = cls._get_server_name_prefix  # type: ignore[attr-defined]
    if getattr(original, "names_policy", False):
        return

    def prefix(self: Any) -> str:
        policy = policy_of(self.config)
        return f"{original(self)}{policy}_" if policy else original(self)

    prefix.names_policy = True  # type: ignore[attr-defined]
    cls._get_server_name_prefix = prefix  # type: ignore[attr-defined]
