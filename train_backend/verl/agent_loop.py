"""The self-play agent loop: one game per dataset row, the policy in both seats, an output a turn.

The game is played by the project's own episode engine (`games.engine.play_episode`): the same
specs, prompt renderer, move parser, invalid-move rule and rewards as `mars arena`. Each seat is
a `FunctionPlayer` whose reply comes from verl's server manager: the seat's chat is rendered with
the model's chat template by verl's token builder, generated token-in/token-out, decoded, and the
reasoning is split from the answer as the endpoint layer does. Every call becomes one
`AgentLoopOutput` (prompt = the seat's whole chat so far, response = the generated tokens) whose
`extra_fields` carry the game, episode, seat, turn index and the turn's own reward.

A dataset row gives `game`, `seed`, and optionally `prompt_style` and `invalid` (see data.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)
from verl.utils.rollout_trace import rollout_trace_op

from games.engine import EpisodeOptions, play_episode
from games.episode import EpisodeResult
from games.players.llm import FunctionPlayer
from games.spec import get_game
from harness.endpoint import Completion, Usage
from harness.errors import EndpointError
from harness.reasoning import split_reasoning
from train_backend.verl import names

logger = logging.getLogger(__name__)


@dataclass
class _Generation:
    """What one model call sent and got back, kept until the game's rewards are known."""

    prompt_ids: list[int]
    response_ids: list[int]
    log_probs: list[float] | None
    messages: int
    seconds: float
    num_preempted: int
    server_fields: dict[str, Any] = field(default_factory=dict)


def episode_id(row: dict[str, Any], game: str, seed: int) -> str:
    """Unique per played game: verl's prompt uid and rollout session when it gives them."""
    uid, session = row.get("uid"), row.get("session_id")
    if uid is not None and session is not None:
        return f"{uid}_{session}"
    return f"{game}:{seed}:{uuid.uuid4().hex[:12]}"


@register(names.AGENT_LOOP_NAME)
class SelfPlayAgentLoop(AgentLoopBase):
    """Plays one game of a dataset row with the policy in every seat."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        game, seed = str(kwargs["game"]), int(kwargs["seed"])
        spec = get_game(game)
        options = EpisodeOptions(
            prompt_style=str(kwargs.get("prompt_style") or "full"),
            invalid=str(kwargs.get("invalid") or "penalty"),
        )
        episode = episode_id(kwargs, game, seed)
        uid = kwargs.get("uid")
        generations: list[_Generation] = []
        priority = int(kwargs.get("priority", 0))

        async def respond(messages: list[dict[str, str]], seat: int, _seed: int) -> Completion:
            generation = await self._generate(
                messages, sampling_params, request_id=f"{episode}-seat{seat}", priority=priority
            )
            generations.append(generation)
            text = self.tokenizer.decode(generation.response_ids, skip_special_tokens=True)
            answer, reasoning = split_reasoning(text)
            usage = Usage(
                prompt_tokens=len(generation.prompt_ids),
                completion_tokens=len(generation.response_ids),
            )
            return Completion(
                text=answer, reasoning=reasoning, usage=usage, latency_s=generation.seconds
            )

        policy = FunctionPlayer(respond, name="policy")
        result = await play_episode(spec, [policy] * len(spec.seat_names), seed, options)
        if result.error is not None:
            logger.warning("%s seed %s dropped from training: %s", game, seed, result.error)
            return []
        episode_fields = {
            names.GAME: spec.name,
            names.SEED: seed,
            names.EPISODE: episode,
            names.GROUP: str(uid) if uid is not None else f"{spec.name}:{seed}",
        }
        return self._outputs(result, generations, episode_fields)

    async def _generate(
        self,
        messages: list[dict[str, str]],
        sampling_params: dict[str, Any],
        *,
        request_id: str,
        priority: int,
    ) -> _Generation:
        # verl's token builder renders the chat with the model's template. Its own wrapper
        # (`ct_build_initial_tokens`) would cut an over-long chat from the left; a seat whose chat
        # no longer fits cannot go on, so the game is dropped instead (see docs/verl.md).
        prompt_ids = await self.loop.run_in_executor(
            None, lambda: self.continuous_token_builder.build_initial_tokens(messages)
        )
        if len(prompt_ids) > self.prompt_length:
            raise EndpointError(
                f"a seat's chat reached {len(prompt_ids)} tokens, over "
                f"rollout.prompt_length={self.prompt_length} (max_game_tokens)",
                retries=0,
            )
        started = time.perf_counter()
        output = await self.server_manager.generate(
            request_id=request_id,
            prompt_ids=prompt_ids,
            sampling_params=dict(sampling_params),
            priority=priority,
        )
        seconds = time.perf_counter() - started
        response_ids = list(output.token_ids[: self.response_length])
        if not response_ids:
            raise EndpointError("the rollout server returned no tokens", retries=0)
        log_probs = list(output.log_probs[: len(response_ids)]) if output.log_probs else None
        return _Generation(
            prompt_ids=list(prompt_ids),
            response_ids=response_ids,
            log_probs=log_probs,
            messages=len(messages),
            seconds=seconds,
            num_preempted=output.num_preempted if output.num_preempted is not None else -1,
            server_fields=dict(output.extra_fields),
        )

    def _outputs(
        self,
        result: EpisodeResult,
        generations: list[_Generation],
        episode_fields: dict[str, Any],
    ) -> list[AgentLoopOutput]:
        if len(result.turns) != len(generations):
            raise RuntimeError(
                f"{len(result.turns)} turns but {len(generations)} model calls in one episode"
            )
        weight_versions = _weight_versions(generations)
        outputs = []
        for turn, generation in zip(result.turns, generations, strict=True):
            extra = {
                **generation.server_fields,
                **weight_versions,
                **episode_fields,
                names.SEAT: turn["seat"],
                names.TURN: turn["turn"],
                names.REWARD: turn["reward"],
                names.LEGAL: turn["legal"],
                names.ACTION: turn["action"],
                # The keys verl's own loops always fill, so batches from any loop concatenate.
                "turn_scores": [],
                "tool_rewards": [],
                "reward_extra_info": {},
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


def _weight_versions(generations: list[_Generation]) -> dict[str, int]:
    """The oldest and newest policy versions the game was played with (verl's staleness tags)."""
    starts = [
        g.server_fields.get("min_global_steps", g.server_fields.get("global_steps"))
        for g in generations
    ]
    ends = [
        g.server_fields.get("max_global_steps", g.server_fields.get("global_steps"))
        for g in generations
    ]
    versions: dict[str, int] = {}
    if any(v is not None for v in starts):
        versions["min_global_steps"] = min(v for v in starts if v is not None)
    if any(v is not None for v in ends):
        versions["max_global_steps"] = max(v for v in ends if v is not None)
    return versions
