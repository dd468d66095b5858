"""The self-play agent loop: one game per dataset row, the policy in both seats.

The game is played by the project's own episode engine (`games.engine.play_episode`): the same
specs, prompt renderer, move parser, invalid-move rule and rewards as `mars arena`. Each seat is
a `FunctionPlayer` whose reply comes from verl's server manager, token-in/token-out; the decoded
reply is split into reasoning and answer as the endpoint layer does.

What a training sample is depends on the row's `sample_unit` (samples.py builds them):

- `conversation` (the default, as in the MARSHAL code): one `AgentLoopOutput` per seat. The
  seat's chat is one growing token sequence: the first prompt (rendered with the model's chat
  template by verl's continuous-token builder), then each reply's generated tokens verbatim
  (reasoning included) and the observations that follow it (the next user message, rendered by
  the same builder). The sample's response is everything after the first prompt; the response
  mask is 1 on the seat's own replies only, and `extra_fields` hold each turn's index, reward and
  reply span (`names.SPANS`), so each turn's advantage lands on its own reply.
- `turn`: one output per model call, prompt = the seat's chat so far as the arena renders it
  (earlier replies as their answers), response = that call's generated tokens.

With `branches` >= 2 in the row (`estimator: at_grpo`), the game is tree-sampled instead
(tree_loop.py): K replies at every policy turn, one sample per branch, each a turn sample whose
reward is the branch's return and whose `names.TREE_GROUP` is the group key the trainer puts in
verl's `uid`.

With `opponent` in the row (`--opponent random`, `mcts:N`, `cfr:N`, ...), the policy plays one
seat (`policy_seat`: alternating by seed, by block of deals in Kuhn and Leduc) and that bot the
other, inside the loop; only the policy's turns are samples.

Every turn sample also carries `names.STATE`, a key of the prompt tokens its reply was sampled
from (the information-state groups of `state_weight`).

A dataset row gives `game`, `seed`, and optionally `prompt_style`, `invalid`, `sample_unit`,
`max_new_tokens`, `opponent` and the tree settings (see data.py).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.rollout_trace import rollout_trace_op

from core.endpoint import Completion, Usage
from core.errors import EndpointError, MarsError
from core.reasoning import split_reasoning
from games.engine import EpisodeOptions, play_episode
from games.players.base import Player
from games.players.llm import FunctionPlayer
from games.rules import CHOICES as RULE_CHOICES
from games.rules import PlayRules
from games.spec import GameSpec, get_game
from train_backend.config import TreeSettings
from train_backend.local.opponents import make_fixed_opponent, policy_seat
from train_backend.verl import names
from train_backend.verl.samples import (
    Generation,
    Message,
    SeatChat,
    conversation_outputs,
    tree_outputs,
    turn_outputs,
)
from train_backend.verl.tree_loop import ServerTree, TokenPolicy, TreeGame, tree_options

logger = logging.getLogger(__name__)

SAMPLE_UNITS = ("conversation", "turn")


@functools.cache
def opponent_bot(name: str, game: str) -> Player:
    """The fixed bot `--opponent NAME` names for one game, built once per worker process."""
    spec = get_game(game)
    bots = make_fixed_opponent(name, [spec]).bots
    if spec.name not in bots:
        raise MarsError(f"opponent {name!r} is not a bot: verl's agent loop plays bots only")
    return bots[spec.name]


def seat_players(
    spec: GameSpec, seed: int, policy: Player, opponent: Player | None
) -> list[Player]:
    """Self-play (the policy in every seat), or the policy in `policy_seat` and the bot opposite."""
    if opponent is None:
        return [policy] * len(spec.seat_names)
    return [policy, opponent] if policy_seat(spec, seed) == 0 else [opponent, policy]


@dataclass
class _Row:
    """A dataset row, read: the game to play and how."""

    spec: GameSpec
    seed: int
    options: EpisodeOptions
    unit: str  # conversation | turn
    episode: str
    fields: dict[str, Any]  # the episode's fields of every sample (names.GAME, ...)
    opponent: Player | None
    params: dict[str, Any]  # sampling parameters, max_tokens included
    priority: int


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
        row = self._read_row(sampling_params, kwargs)
        tree = tree_options(kwargs)
        if tree is None:
            return await self._play_line(row)
        played = await self._play_tree(row, tree)
        if played is None:
            return []
        keep_log_probs = not (tree.all_actions or tree.counterfactual)
        return tree_outputs(played, row.fields, keep_log_probs, self.response_length)

    def _read_row(self, sampling_params: dict[str, Any], kwargs: dict[str, Any]) -> _Row:
        game, seed = str(kwargs["game"]), int(kwargs["seed"])
        spec = get_game(game)
        rules = {name: str(kwargs[name]) for name in RULE_CHOICES if kwargs.get(name)}
        options = EpisodeOptions(
            prompt_style=str(kwargs.get("prompt_style") or "full"),
            invalid=str(kwargs.get("invalid") or "penalty"),
            rules=PlayRules(**rules),  # type: ignore[arg-type]
        )
        unit = str(kwargs.get("sample_unit") or "conversation")
        if unit not in SAMPLE_UNITS:
            raise ValueError(f"sample_unit must be one of {', '.join(SAMPLE_UNITS)}, not {unit!r}")
        if options.prompt_style != "full":
            unit = "turn"  # every compact prompt stands alone: there is no conversation to keep
        max_new_tokens = int(kwargs.get("max_new_tokens") or self.response_length)
        episode = episode_id(kwargs, game, seed)
        uid = kwargs.get("uid")
        name = kwargs.get("opponent")
        return _Row(
            spec=spec,
            seed=seed,
            options=options,
            unit=unit,
            episode=episode,
            fields={
                names.GAME: spec.name,
                names.SEED: seed,
                names.EPISODE: episode,
                names.GROUP: str(uid) if uid is not None else f"{spec.name}:{seed}",
            },
            opponent=opponent_bot(str(name), spec.name) if name else None,
            params={**sampling_params, "max_tokens": max_new_tokens},
            priority=int(kwargs.get("priority", 0)),
        )

    async def _play_line(self, row: _Row) -> list[AgentLoopOutput]:
        """One game, each model call a sample (turn) or each seat's chat one (conversation)."""
        generations: list[Generation] = []
        chats: dict[int, SeatChat] = {}
        unit = row.unit

        async def respond(messages: list[Message], seat: int, _seed: int) -> Completion:
            if unit == "conversation":
                prompt_ids = await self._conversation_prompt(chats, seat, messages)
            else:
                prompt_ids = await self._turn_prompt(messages)
            generation = await self._generate(
                prompt_ids,
                len(messages),
                row.params,
                request_id=f"{row.episode}-seat{seat}",
                priority=row.priority,
            )
            generations.append(generation)
            if unit == "conversation":
                await self._append_reply(chats[seat], generation)
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
        players = seat_players(row.spec, row.seed, policy, row.opponent)
        result = await play_episode(row.spec, players, row.seed, row.options)
        if result.error is not None:
            logger.warning(
                "%s seed %s dropped from training: %s", row.spec.name, row.seed, result.error
            )
            return []
        # A bot's moves are turns of the episode too, but no model call: only the policy's count.
        model_turns = [turn for turn in result.turns if "usage" in turn]
        if len(model_turns) != len(generations):
            raise RuntimeError(
                f"{len(model_turns)} model turns but {len(generations)} model calls in one episode"
            )
        if unit == "conversation":
            return conversation_outputs(model_turns, generations, chats, row.fields)
        return turn_outputs(model_turns, generations, row.fields)

    async def _play_tree(self, row: _Row, tree: TreeSettings) -> TreeGame | None:
        """One tree-sampled game (tree_loop.py); None when its main line failed."""
        tokenizer = self.tokenizer
        policy = TokenPolicy(
            model=None,
            tokenizer=tokenizer,
            source="verl",
            stop_ids=(int(tokenizer.eos_token_id),),
            pad_id=int(tokenizer.pad_token_id or 0),
            encoder=self.continuous_token_builder.build_initial_tokens,
        )

        async def generate(
            prompt_ids: list[int], number: int
        ) -> tuple[list[int], list[float] | None, dict[str, Any]]:
            generation = await self._generate(
                self._within_budget(list(prompt_ids)),
                0,
                row.params,
                request_id=f"{row.episode}-s{number}",
                priority=row.priority,
            )
            return generation.response_ids, generation.log_probs, generation.server_fields

        new_tokens = int(row.params["max_tokens"])
        rollout = ServerTree(
            policy,
            generate,
            row.spec,
            tree=tree,
            options=row.options,
            episode=row.episode,
            max_new_tokens=new_tokens,
            max_context_tokens=self.prompt_length + new_tokens,
            opponents={row.spec.name: row.opponent} if row.opponent is not None else None,
        )
        played = await rollout.play_game(row.spec, row.seed)
        error = played.result.error
        if error is not None:
            logger.warning("%s seed %s dropped from training: %s", row.spec.name, row.seed, error)
            return None
        return played

    async def _turn_prompt(self, messages: list[Message]) -> list[int]:
        # verl's token builder renders the chat with the model's template. Its own wrapper
        # (`ct_build_initial_tokens`) would cut an over-long chat from the left; a seat whose chat
        # no longer fits cannot go on, so the game is dropped instead (see docs/verl.md).
        prompt_ids = await self.loop.run_in_executor(
            None, lambda: self.continuous_token_builder.build_initial_tokens(messages)
        )
        return self._within_budget(list(prompt_ids))

    async def _conversation_prompt(
        self, chats: dict[int, SeatChat], seat: int, messages: list[Message]
    ) -> list[int]:
        """The seat's whole chat as tokens: its last context and reply, then what came after."""
        chat = chats.get(seat)
        if chat is None:
            prompt_ids = await self._turn_prompt(messages)
            chats[seat] = SeatChat(prompt_ids, list(prompt_ids), [], None, list(messages))
            return list(prompt_ids)
        # The engine put this seat's last reply (as its answer) after the messages it sent last;
        # the reply's own tokens are already in `chat.tokens`, so only what follows is rendered.
        answered = len(chat.messages) + 1
        merge, mask, log_probs = await self.ct_merge_context_msg(
            messages[:answered], messages, chat.tokens, chat.mask, chat.log_probs
        )
        chat.tokens, chat.mask, chat.log_probs = list(merge.token_ids), mask, log_probs
        chat.messages = list(messages)
        return self._within_budget(list(chat.tokens))

    async def _append_reply(self, chat: SeatChat, generation: Generation) -> None:
        if not chat.spans and generation.log_probs is not None:
            chat.log_probs = []  # the server reports log-probs: keep them aligned from here
        if chat.log_probs is not None and generation.log_probs is None:
            chat.log_probs = None
        start = len(chat.mask)
        merge, mask, log_probs = await self.ct_merge_assistant_token(
            chat.tokens,
            generation.response_ids,
            chat.mask,
            chat.log_probs,
            assistant_logprobs=generation.log_probs if chat.log_probs is not None else None,
        )
        chat.tokens, chat.mask, chat.log_probs = list(merge.token_ids), mask, log_probs
        chat.spans.append((start, len(chat.mask)))

    def _within_budget(self, prompt_ids: list[int]) -> list[int]:
        if len(prompt_ids) > self.prompt_length:
            raise EndpointError(
                f"a seat's chat reached {len(prompt_ids)} tokens, over "
                f"rollout.prompt_length={self.prompt_length} (max_game_tokens)",
                retries=0,
            )
        return prompt_ids

    async def _generate(
        self,
        prompt_ids: list[int],
        messages: int,
        sampling_params: dict[str, Any],
        *,
        request_id: str,
        priority: int,
        policy: str | None = None,
    ) -> Generation:
        started = time.perf_counter()
        # `policy`: in a job of several policies, the one whose rollout answers (policies.py)
        routing = {"policy": policy} if policy else {}
        output = await self.server_manager.generate(
            request_id=request_id,
            prompt_ids=prompt_ids,
            sampling_params=dict(sampling_params),
            priority=priority,
            **routing,
        )
        seconds = time.perf_counter() - started
        limit = int(sampling_params.get("max_tokens", self.response_length))
        response_ids = list(output.token_ids[:limit])
        if not response_ids:
            raise EndpointError("the rollout server returned no tokens", retries=0)
        log_probs = list(output.log_probs[: len(response_ids)]) if output.log_probs else None
        return Generation(
            prompt_ids=list(prompt_ids),
            response_ids=response_ids,
            log_probs=log_probs,
            messages=messages,
            seconds=seconds,
            num_preempted=output.num_preempted if output.num_preempted is not None else -1,
            server_fields=dict(output.extra_fields),
        )
