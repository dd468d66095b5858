"""Training inside a MAS workflow on verl: one problem per dataset row, tree-sampled by replay.

The agent loop runs the registered MAS itself (`train_backend.mas.rollout.tree_sample`, the CPU
trainer's tree, unchanged): at every call of the main line K runs replay the calls before it, each
samples its own reply from verl's rollout server and finishes the workflow (a Monte Carlo
continuation); one branch continues the main line. Every role's calls go to the one policy verl
trains (the role is in the workflow's own system prompt). A tool agent's programs run in the
sandbox, each distinct program once per row.

Each branch is one turn sample: the call's prompt, the branch's reply, its return (that agent's
rewards from that call to the end of its run) as the reward, and the group key (problem, role,
the role's call index) the mars trainer writes into verl's `uid`, so at_grpo normalises within the
K replies sampled at one state.

verl plays each row `rollout.n` (`group_size`) times under one uid, as sessions 0..n-1: each
session is a tree of its own, so its group keys start with `{uid}_{session}` (the episode), and the
uid is the prompt group (`names.GROUP`).

With one policy per role (train_backend/verl/mas_phases.py), a row also names `partners`: the
roles of the policies not trained in this phase, each answered by an OpenAI-compatible server of
its policy's latest checkpoint. Their calls are not branched and yield no samples; the main line
goes through them.

A dataset row gives `workflow`, the problem (`problem_id`, `question`, `answer`, `answers_are`,
`kind`, `metadata` (JSON: a puzzle's level, a code problem's tests), `source`),
`workflow_options` (JSON), `branches`, `continuation`, `seed`, `max_new_tokens` and `partners`
(JSON, {role: endpoint config}; see data.py).

With verl's `rollout.full_determinism` (`verl: {deterministic: true}`) every request carries its
own sampling seed, drawn from the row's seed, the session and the call's place in the tree
(`call_seed`): a call's reply then depends on its prompt, its place and the weights, not on how the
server batched it or in which order the branches' replies came back, so a run resumed after a kill
samples what it would have sampled straight through.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from typing import Any

import numpy as np
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, register
from verl.utils.rollout_trace import rollout_trace_op

from core.branch_log import clip_text
from core.endpoint import Endpoint, EndpointConfig, GenerationConfig
from core.errors import EndpointError, MarsError
from train_backend.local.tree import state_key
from train_backend.mas.data import Problem
from train_backend.mas.rewards import ROLES
from train_backend.mas.rollout import (
    Branch,
    CallPlace,
    RoleModel,
    endpoint_role_model,
    tree_sample,
    workflow_runners,
)
from train_backend.verl import names
from train_backend.verl.agent_loop import SelfPlayAgentLoop
from train_backend.verl.samples import VERL_KEYS, weight_versions
from train_backend.verl.tree_loop import group_key

logger = logging.getLogger(__name__)
POLICY = "policy"  # the one policy verl trains answers for every role


# A role's own settings (role_sampling) -> the keys of verl's per-request sampling parameters,
# which its rollout servers read request by request (vLLM builds SamplingParams from them).
ROLE_SAMPLING_KEYS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_new_tokens": "max_tokens",
}


def role_params(params: dict[str, Any], own: dict[str, Any] | None) -> dict[str, Any]:
    """The run's sampling parameters with a role's own settings in place of the run's."""
    updated = dict(params)
    for key, value in (own or {}).items():
        if key in ROLE_SAMPLING_KEYS and value is not None:
            updated[ROLE_SAMPLING_KEYS[key]] = value
    if int(updated.get("top_k", -1)) == 0:  # ours: 0 = off; verl's servers: -1
        updated["top_k"] = -1
    return updated


def call_seed(row_seed: int, session: int, place: CallPlace) -> int:
    """A request's sampling seed: a hash of where the call sits (row, session, place in the
    tree), below 2**63 (vLLM's and torch's seeds are 64-bit)."""
    key = ",".join(str(part) for part in (row_seed, session, *place)).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def generation_config(params: dict[str, Any]) -> GenerationConfig:
    """What a partner's server is asked for (an OpenAI request carries no top_k)."""
    return GenerationConfig(
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        max_tokens=int(params["max_tokens"]),
    )


@register(names.WORKFLOW_LOOP_NAME)
class WorkflowAgentLoop(SelfPlayAgentLoop):
    """Tree-samples one problem of a dataset row through a MAS workflow."""

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        workflow = str(kwargs["workflow"])
        if workflow not in ROLES:
            raise MarsError(f"no training rewards for workflow {workflow!r}")
        problem = Problem(
            id=str(kwargs["problem_id"]),
            question=str(kwargs["question"]),
            answer=str(kwargs["answer"]),
            source=str(kwargs.get("source") or ""),
            answers_are=kwargs.get("answers_are") or "expression",
            kind=str(kwargs.get("kind") or "math"),
            metadata=json.loads(kwargs.get("metadata") or "{}"),
        )
        # verl plays a row `rollout.n` times under one uid, as sessions 0..n-1: each session is
        # its own tree, so its groups are keyed apart (the prompt group is the uid).
        uid = str(kwargs.get("uid") or problem.id)
        session = int(kwargs.get("session_id") or 0)
        episode = f"{uid}_{session}"
        params = {**sampling_params, "max_tokens": int(kwargs.get("max_new_tokens") or 256)}
        own = json.loads(kwargs.get("role_sampling") or "{}")
        server_fields: list[dict[str, Any]] = []
        requests = itertools.count()  # request ids unique within the episode, over every role
        options = {**json.loads(kwargs.get("workflow_options") or "{}")}
        options.update(workflow_runners())
        partners = json.loads(kwargs.get("partners") or "{}")
        role_policies = json.loads(kwargs.get("role_policies") or "{}")
        seeds = (
            (int(kwargs.get("seed") or 0), session)
            if getattr(self.rollout_config, "full_determinism", False)
            else None
        )
        roles = {
            role: self._role_model(
                f"{episode}-c",
                role_params(params, own.get(role)),
                int(kwargs.get("priority", 0)),
                server_fields,
                requests,
                role_policies.get(role),
                seeds,
            )
            for role in ROLES[workflow]
            if role not in partners
        }
        endpoints = {role: Endpoint(EndpointConfig(**config)) for role, config in partners.items()}
        for role, endpoint in endpoints.items():
            gen = generation_config(role_params(params, own.get(role)))
            roles[role] = endpoint_role_model(role, self._render, endpoint, gen, self._tokenize)
        try:
            found, _main = await tree_sample(
                workflow,
                problem,
                0,
                roles,
                options,
                branches=int(kwargs.get("branches") or 2),
                continuation=kwargs.get("continuation") or "random",
                rng=np.random.default_rng([int(kwargs.get("seed") or 0), session]),
                branch_roles=[role for role in ROLES[workflow] if role not in partners]
                if partners
                else None,
            )
        except EndpointError as error:  # over the prompt budget, or a partner failed: dropped
            logger.warning("%s dropped from training: %s", problem.id, error)
            return []
        finally:
            for endpoint in endpoints.values():
                await endpoint.aclose()
        fields = {
            names.GAME: workflow,
            names.SEED: int(kwargs.get("seed") or 0),
            names.EPISODE: episode,
            names.GROUP: uid,
        }
        outputs = self._branch_outputs(found, workflow, fields, weight_versions(server_fields))
        for index, output in enumerate(outputs):
            output.extra_fields[names.ORDER] = f"{fields[names.SEED]}:{session}:{index}"
        return outputs

    def _role_model(
        self,
        prefix: str,
        params: dict[str, Any],
        priority: int,
        server_fields: list[dict[str, Any]],
        requests: itertools.count,
        policy: str | None = None,
        seeds: tuple[int, int] | None = None,
    ) -> RoleModel:
        """A role's model: verl's rollout of the job's one policy, or in a job of several
        policies (policies.py) the rollout of the role's own. `seeds` (the row's seed and the
        session): each request is seeded by its place in the tree."""

        async def generate(prompt_ids: list[int], place: CallPlace) -> list[int]:
            seeded = {**params, "seed": call_seed(*seeds, place)} if seeds else params
            generation = await self._generate(
                prompt_ids,
                0,
                seeded,
                request_id=f"{prefix}{next(requests)}",
                priority=priority,
                policy=policy,
            )
            server_fields.append(generation.server_fields)
            return generation.response_ids

        def decode(ids: list[int]) -> str:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

        return RoleModel(policy or POLICY, self._render, generate, decode)

    def _render(self, messages: list[dict[str, str]]) -> list[int]:
        tokens = self.continuous_token_builder.build_initial_tokens(messages)
        return self._within_budget(list(tokens))

    def _tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _branch_outputs(
        self,
        found: list[Branch],
        workflow: str,
        episode_fields: dict[str, Any],
        versions: dict[str, int],
    ) -> list[AgentLoopOutput]:
        """One turn sample per branch; the branches of one (role, call) share a tree group."""
        roles = ROLES[workflow]
        episode = str(episode_fields[names.EPISODE])
        outputs = []
        for branch in found:
            call = branch.call
            seat = roles.index(call.agent)
            response = list(call.completion_ids)[: self.response_length]
            fields = {
                names.SEAT: seat,
                names.TURN: call.index,
                names.REWARD: float(branch.ret),
                names.LEGAL: True,
                names.STATE: state_key(call.prompt_ids),
                names.TREE_GROUP: group_key(episode, seat, call.index),
                names.BRANCH: branch.branch,
                names.CHOSEN: branch.chosen,
                names.FORCED: False,
                names.ROLE: call.agent,
                names.REPLY: clip_text(call.text),
            }
            outputs.append(
                AgentLoopOutput(
                    prompt_ids=list(call.prompt_ids),
                    response_ids=response,
                    response_mask=[1] * len(response),
                    response_logprobs=None,  # replayed prefixes hold calls of other branches
                    reward_score=float(branch.ret),
                    num_turns=2,
                    metrics=AgentLoopMetrics(generate_sequences=0.0, num_preempted=-1),
                    extra_fields={**versions, **episode_fields, **fields, **VERL_KEYS},
                )
            )
        return outputs
