"""A role's model on the CPU: how its replies are sampled (its own settings over the run's) and
the `RoleModel` that generates them from a policy through the batcher (train_backend.mas.trainer,
and the benches that run a workflow on in-process policies).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.batcher import Sampling
from core.causal_lm import Policy
from train_backend.local.trainer import sampling_of
from train_backend.mas.config import WorkflowTrainConfig
from train_backend.mas.rollout import CallPlace, RoleModel


@dataclass(frozen=True)
class RoleGeneration:
    """How one role's replies are sampled."""

    sampling: Sampling
    max_new_tokens: int
    stop: tuple[str, ...] = ()


def role_generation(
    config: WorkflowTrainConfig, role: str, *, evaluation: bool = False
) -> RoleGeneration:
    """The role's own settings (`role_sampling`, or `eval_role_sampling` when evaluating) over
    the run's."""
    own = (config.eval_role_sampling if evaluation else config.role_sampling).get(role)
    run = sampling_of(config)
    if own is None:
        return RoleGeneration(run, config.max_new_tokens)
    return RoleGeneration(
        Sampling(
            temperature=run.temperature if own.temperature is None else own.temperature,
            top_p=run.top_p if own.top_p is None else own.top_p,
            top_k=run.top_k if own.top_k is None else own.top_k,
        ),
        own.max_new_tokens or config.max_new_tokens,
        tuple(own.stop or ()),
    )


def role_model(
    name: str, policy: Policy, batcher: Any, max_new_tokens: int, stop: Sequence[str] = ()
) -> RoleModel:
    """A role's model backed by `policy`, its replies generated through `batcher` and cut after
    the first of `stop` (the reply keeps the stop text, as the sampled tokens do)."""

    async def generate(prompt_ids: list[int], _place: CallPlace) -> list[int]:
        # the batcher decodes when the event loop is quiet: reproducible without seeding by place
        generated = await batcher.submit(prompt_ids, max_new_tokens)
        return cut_at_stop(policy, generated.completion_ids, stop)

    return RoleModel(name, policy.encode_chat, generate, policy.decode)


def cut_at_stop(policy: Policy, ids: list[int], stop: Sequence[str]) -> list[int]:
    """The shortest prefix of `ids` whose text holds one of `stop` (all of `ids` if none)."""
    if not stop or not any(text in policy.decode(ids) for text in stop):
        return ids
    for end in range(1, len(ids) + 1):
        if any(text in policy.decode(ids[:end]) for text in stop):
            return ids[:end]
    return ids
