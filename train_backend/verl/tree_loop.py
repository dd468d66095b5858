"""Tree sampling (at_grpo) inside verl's agent loop: the CPU trainer's tree, replies from verl.

The tree is `train_backend.local.tree.TreeRollout`, unchanged: a main line played by the game
engine, K replies sampled at every policy turn, one of them continuing the main line (random or
greedy, `TreeSettings.continuation_for`), and each other branch's return read from a replay of the
episode with fresh policy samples after it. Here it plays one game (one dataset row and rollout
session) and its replies come from verl's rollout server: `ServerTree` overrides the one method
that generates, sending each of the K samples of a turn as its own request (so they run
concurrently and vLLM's prefix cache shares the prompt).

The game then yields one training sample per branch: the turn's prompt, the branch's reply, its
return as the reward, and the group key (episode, seat, turn) that the mars trainer writes into
verl's `uid` before scoring, so verl's prompt groups are the tree's groups. A group one of whose
replays could not finish (a request failed, or a replayed chat outgrew the prompt budget) is
marked `names.REPLAY_FAILED` on every branch, and the trainer leaves it out of the update.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.branch_log import clip_text, observation_of
from core.causal_lm import Message, Policy
from core.reasoning import split_reasoning
from games.engine import EpisodeOptions, play_episode
from games.episode import EpisodeResult
from games.players.base import Player
from games.spec import GameSpec
from train_backend.config import TreeSettings
from train_backend.local.tree import Node, Reply, TreeRollout, state_key

# (prompt ids, request number) -> (token ids, log-probs or None, the server's extra fields)
Generate = Callable[[list[int], int], Awaitable[tuple[list[int], list[float] | None, dict]]]


@dataclass(frozen=True)
class ServerReply(Reply):
    """A reply sampled by verl's rollout server, with the log-probs it reported."""

    log_probs: tuple[float, ...] | None = None


@dataclass
class TokenPolicy(Policy):
    """What the tree needs of a policy without holding the model: the tokenizer, the stop token,
    and the agent loop's own prompt encoder (verl's token builder)."""

    encoder: Callable[[list[Message]], list[int]] | None = None

    def encode_chat(self, messages: list[Message]) -> list[int]:
        if self.encoder is None:
            return super().encode_chat(messages)
        return list(self.encoder(messages))


@dataclass
class _Responder:
    """The slice of the CPU trainer's `PolicyResponder` the tree reads."""

    policy: TokenPolicy
    max_new_tokens: int
    max_context_tokens: int
    batcher: Any = None  # never used: `ServerTree._sample` generates through verl


@dataclass
class TreeGame:
    """One tree-sampled game: its main line and every policy turn's branches."""

    result: EpisodeResult
    nodes: list[Node]
    server_fields: list[dict[str, Any]] = field(default_factory=list)


class ServerTree(TreeRollout):
    """`TreeRollout` for one game, generating through verl's server manager."""

    def __init__(
        self,
        policy: TokenPolicy,
        generate: Generate,
        spec: GameSpec,
        *,
        tree: TreeSettings,
        options: EpisodeOptions,
        episode: str,
        max_new_tokens: int,
        max_context_tokens: int,
        opponents: Mapping[str, Player] | None = None,
    ) -> None:
        responder = _Responder(policy, max_new_tokens, max_context_tokens)
        super().__init__(
            responder,  # type: ignore[arg-type]
            [spec],
            tree=tree,
            options=options,
            step=0,
            run_seed=zlib.crc32(episode.encode()),  # the random continuation's draws
            opponents=opponents,
        )
        self.generate = generate
        self.requests = 0
        self.server_fields: list[dict[str, Any]] = []

    async def _sample(self, prompt_ids: list[int], count: int) -> list[Reply]:
        numbers = range(self.requests, self.requests + count)
        self.requests += count
        outputs = await asyncio.gather(*(self.generate(prompt_ids, n) for n in numbers))
        replies: list[Reply] = []
        for ids, log_probs, server_fields in outputs:
            self.generated_tokens += len(ids)
            self.server_fields.append(server_fields)
            text, reasoning = split_reasoning(self.policy.decode(ids))
            stopped = bool(ids) and ids[-1] in self.policy.stop_ids
            probs = tuple(log_probs) if log_probs is not None else None
            replies.append(ServerReply(text, reasoning, tuple(ids), stopped, log_probs=probs))
        return replies

    async def play_game(self, spec: GameSpec, seed: int) -> TreeGame:
        """The main line and every branch's return (what `TreeRollout.play` does for a step)."""
        main = self._main_player(spec)
        other = self._recording(spec, self.opponents[spec.name]) if self.opponents else main
        result = await play_episode(spec, self._seats(spec, seed, main, other), seed, self.options)
        await self._finish_returns({} if result.error else {(spec.name, seed): result})
        self.nodes.sort(key=lambda node: node.call)
        return TreeGame(result, self.nodes, self.server_fields)


def group_key(episode: str, seat: int, turn: int) -> str:
    """The tree group of a branch: the K replies sampled at one state of one played game."""
    return f"{episode}/seat{seat}/turn{turn}"


def branch_fields(node: Node, branch: int, episode: str) -> dict[str, Any]:
    """A branch sample's per-turn fields (names.py), its reward being the branch's return."""
    from train_backend.verl import names

    return {
        names.SEAT: node.seat,
        names.TURN: node.turn,
        names.REWARD: float(node.returns[branch] or 0.0),
        names.LEGAL: bool(node.legal[branch]),
        names.STATE: state_key(node.prompt_ids),
        names.TREE_GROUP: group_key(episode, node.seat, node.turn),
        names.BRANCH: branch,
        names.CHOSEN: branch == node.chosen,
        names.FORCED: node.branches[branch].forced,
        names.REPLAY_FAILED: node.failed,
        names.ACTION: node.actions[branch] if node.actions else None,
        names.REPLY: clip_text(node.branches[branch].text),
        names.OBSERVATION: observation_of(node.prompt),
    }


def tree_options(row: Mapping[str, Any]) -> TreeSettings | None:
    """The dataset row's tree settings (data.py: a column per `TreeSettings` field), or None when
    the row is not tree-sampled."""
    if int(row.get("branches") or 0) < 2:
        return None
    given = {
        name: value.item() if hasattr(value, "item") else value  # numpy scalars from parquet
        for name in TreeSettings.model_fields
        if (value := row.get(name)) is not None
    }
    return TreeSettings.model_validate(given)
