"""The samples a played game gives verl: one per model call, per seat's chat, or per tree branch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

from train_backend.local.tree import state_key
from train_backend.verl import names
from train_backend.verl.tree_loop import TreeGame, branch_fields

Message = dict[str, str]

# The keys verl's own loops always fill, so batches from any loop concatenate.
VERL_KEYS: dict[str, Any] = {"turn_scores": [], "tool_rewards": [], "reward_extra_info": {}}


@dataclass
class Generation:
    """What one model call sent and got back, kept until the game's rewards are known."""

    prompt_ids: list[int]
    response_ids: list[int]
    log_probs: list[float] | None
    messages: int
    seconds: float
    num_preempted: int
    server_fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class SeatChat:
    """One seat's conversation as one token sequence (sample_unit: conversation)."""

    prompt_ids: list[int]  # the first prompt
    tokens: list[int]  # everything the model has seen and said so far
    mask: list[int]  # per token after the first prompt: 1 on the seat's own replies
    log_probs: list[float] | None
    messages: list[Message]  # the chat the last call was given
    spans: list[tuple[int, int]] = field(default_factory=list)

    @property
    def response_ids(self) -> list[int]:
        return self.tokens[len(self.prompt_ids) :]


def turn_outputs(
    turns: list[dict[str, Any]],
    generations: list[Generation],
    episode_fields: dict[str, Any],
) -> list[AgentLoopOutput]:
    """One sample per model call (sample_unit: turn), its turn's reward as the score."""
    versions = weight_versions([g.server_fields for g in generations])
    outputs = []
    for turn, generation in zip(turns, generations, strict=True):
        extra = {
            **generation.server_fields,
            **versions,
            **episode_fields,
            names.SEAT: turn["seat"],
            names.TURN: turn["turn"],
            names.REWARD: turn["reward"],
            names.LEGAL: turn["legal"],
            names.ACTION: turn["action"],
            names.STATE: state_key(generation.prompt_ids),
            **VERL_KEYS,
        }
        outputs.append(
            AgentLoopOutput(
                prompt_ids=generation.prompt_ids,
                response_ids=generation.response_ids,
                response_mask=[1] * len(generation.response_ids),
                response_logprobs=generation.log_probs,
                # verl's v1 worker copies the last output's score onto all earlier ones; the
                # mars trainer restores each turn's own reward from `names.REWARD`.
                reward_score=turn["reward"],
                num_turns=generation.messages + 1,
                metrics=AgentLoopMetrics(
                    generate_sequences=generation.seconds,
                    num_preempted=generation.num_preempted,
                ),
                extra_fields=extra,
            )
        )
    return outputs


def conversation_outputs(
    model_turns: list[dict[str, Any]],
    generations: list[Generation],
    chats: dict[int, SeatChat],
    episode_fields: dict[str, Any],
) -> list[AgentLoopOutput]:
    """One sample per seat (sample_unit: conversation): its whole chat, its replies masked in."""
    versions = weight_versions([g.server_fields for g in generations])
    outputs = []
    for seat in sorted(chats):
        chat = chats[seat]
        turns = [turn for turn in model_turns if turn["seat"] == seat]
        calls = [
            g for turn, g in zip(model_turns, generations, strict=True) if turn["seat"] == seat
        ]
        if len(turns) != len(chat.spans):
            raise RuntimeError(f"seat {seat}: {len(turns)} turns but {len(chat.spans)} replies")
        extra = {
            **versions,
            **episode_fields,
            names.SEAT: seat,
            names.TURN: [turn["turn"] for turn in turns],
            names.REWARD: [turn["reward"] for turn in turns],
            names.LEGAL: [turn["legal"] for turn in turns],
            names.ACTION: [turn["action"] for turn in turns],
            names.SPANS: [list(span) for span in chat.spans],
            # what the seat saw before each reply: its whole chat up to that call
            names.STATE: [state_key(g.prompt_ids) for g in calls],
            **VERL_KEYS,
        }
        outputs.append(
            AgentLoopOutput(
                prompt_ids=chat.prompt_ids,
                response_ids=chat.response_ids,
                response_mask=chat.mask,
                response_logprobs=chat.log_probs,
                # The mars trainer puts each turn's reward on its reply's last token.
                reward_score=sum(turn["reward"] for turn in turns),
                num_turns=len(chat.messages) + 1,
                metrics=AgentLoopMetrics(
                    generate_sequences=sum(g.seconds for g in calls),
                    num_preempted=sum(max(g.num_preempted, 0) for g in calls),
                ),
                extra_fields=extra,
            )
        )
    return outputs


def tree_outputs(
    played: TreeGame,
    episode_fields: dict[str, Any],
    keep_log_probs: bool,
    response_length: int,
) -> list[AgentLoopOutput]:
    """One turn sample per branch of every policy turn: the turn's prompt, the branch's reply,
    its return as the reward. Forced branches (all_actions, counterfactual) were not sampled,
    so with those options no sample carries rollout log-probs (verl needs all or none)."""
    versions = weight_versions(played.server_fields)
    episode = str(episode_fields[names.EPISODE])
    outputs = []
    for node in played.nodes:
        for branch, reply in enumerate(node.branches):
            response = list(reply.completion_ids)[:response_length]
            probs = getattr(reply, "log_probs", None)
            fields = branch_fields(node, branch, episode)
            outputs.append(
                AgentLoopOutput(
                    prompt_ids=list(node.prompt_ids),
                    response_ids=response,
                    response_mask=[1] * len(response),
                    response_logprobs=list(probs)[: len(response)]
                    if keep_log_probs and probs is not None
                    else None,
                    reward_score=fields[names.REWARD],
                    num_turns=2,
                    metrics=AgentLoopMetrics(generate_sequences=0.0, num_preempted=-1),
                    extra_fields={**versions, **episode_fields, **fields, **VERL_KEYS},
                )
            )
    return outputs


def weight_versions(server_fields: list[dict[str, Any]]) -> dict[str, int]:
    """The oldest and newest policy versions the game was played with (verl's staleness tags),
    from the extra fields the server returned with each generation."""
    starts = [f.get("min_global_steps", f.get("global_steps")) for f in server_fields]
    ends = [f.get("max_global_steps", f.get("global_steps")) for f in server_fields]
    versions: dict[str, int] = {}
    if any(v is not None for v in starts):
        versions["min_global_steps"] = min(v for v in starts if v is not None)
    if any(v is not None for v in ends):
        versions["max_global_steps"] = max(v for v in ends if v is not None)
    return versions
