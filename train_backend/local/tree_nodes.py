"""The parts of a tree-sampled rollout (train_backend.local.tree): a reply with its token ids, a
branched turn of a main line, and the key of a state. Its settings are
`train_backend.config.TreeSettings`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import MarsError

if TYPE_CHECKING:
    from core.endpoint import Completion
    from games.episode import EpisodeResult


@dataclass(frozen=True)
class Reply:
    """A reply as the engine sees it, and the token ids it came from."""

    text: str
    reasoning: str
    completion_ids: tuple[int, ...]
    stopped: bool
    forced: bool = False  # an all-actions branch: a sampled reply with its answer rewritten

    def completion(self, prompt_tokens: int) -> Completion:
        from core.endpoint import Completion, Usage

        return Completion(
            text=self.text,
            reasoning=self.reasoning,
            finish_reason="stop" if self.stopped else "length",
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=len(self.completion_ids)),
        )


@dataclass
class Node:
    """One policy turn of a main line: its state and its K branches."""

    game: str
    seed: int
    call: int  # index among the episode's model calls (both seats, re-asks included)
    seat: int
    turn: int  # the seat's own turn index
    prompt_ids: list[int]
    branches: list[Reply]
    prompt: str = ""  # `chat_key` of the messages the branches answered
    chosen: int = 0
    returns: list[float | None] = field(default_factory=list)
    legal: list[bool | None] = field(default_factory=list)
    actions: list[str | None] = field(default_factory=list)  # each branch's parsed action
    rewards: list[float | None] = field(default_factory=list)  # each branch's immediate reward
    off_policy: bool = False  # reached after the other seat's exploratory move: not trained
    failed: bool = False  # a branch's replay could not finish (a model call failed): not trained
    failed_branches: set[int] = field(default_factory=set)  # which ones (greedy skips them)


# A model call of a main line as its replays answer it: the reply, its prompt's token count and
# the `chat_key` of the messages it answered (a replay must render the same).
Scripted = tuple[Reply, int, str]


@dataclass
class MainLine:
    """A main line's model calls so far (both seats), replayed verbatim by its branches."""

    replies: list[Scripted] = field(default_factory=list)
    seat_calls: dict[int, int] = field(default_factory=dict)
    explored: list[tuple[int, int]] = field(default_factory=list)  # (seat, call) per exploration


def sampled_branches(replies: Sequence[Reply]) -> list[int]:
    """The branches a random continuation picks from: the policy's own samples (a uniform pick
    among K samples is itself a policy sample, so the main line stays on-policy and its return
    estimates the same thing as the other branches'), all of them if every one was forced."""
    own = [index for index, reply in enumerate(replies) if not reply.forced]
    return own or list(range(len(replies)))


def state_key(token_ids: Sequence[int]) -> str:
    """A stable key of what the model saw before a reply (its information state as a prompt)."""
    import numpy as np

    return hashlib.blake2b(
        np.asarray(token_ids, dtype=np.int64).tobytes(), digest_size=12
    ).hexdigest()


def chat_key(messages: Sequence[Any]) -> str:
    """What a replay compares with the main line: the chat a call was given (its prompt ids are
    a function of it; 5 us for a Kuhn prompt, where rendering and tokenising it takes 300 us)."""
    return json.dumps(messages, sort_keys=True, default=str)


def check_replayed(game: str, seed: int, index: int, seat: int, recorded: str, now: str) -> None:
    """A replayed call must see the chat the main line's call saw."""
    if recorded != now:
        raise MarsError(
            f"{game} seed {seed}: the replay of model call {index} (seat {seat}) rendered "
            "another prompt than the main line's: the game must be deterministic given its replies"
        )


def set_branch_return(node: Node, branch: int, result: EpisodeResult, team_weight: float) -> None:
    """Branch `branch`'s return from `result`, the episode played through it: the seat's rewards
    from the branch's call on, plus `team_weight` x the seats' mean. A replay that could not
    finish (a model call failed) marks the node failed: its group is left out of the update."""
    calls = [t for t in result.turns if "usage" in t]
    if result.error is not None:
        node.failed = True
        node.failed_branches.add(branch)
        node.returns[branch] = 0.0
        node.legal[branch] = False
        return
    if node.call >= len(calls):
        raise MarsError(
            f"{node.game} seed {node.seed}: a replay ended after {len(calls)} model calls, before "
            f"its branch's call {node.call}: the game must be deterministic given its replies"
        )
    at = calls[node.call]
    position = next(i for i, t in enumerate(result.turns) if t is at)
    later = result.turns[position:]
    local = sum(t["reward"] for t in later if t["seat"] == node.seat)
    team = sum(t["reward"] for t in later) / len(result.players)
    node.returns[branch] = team_weight * team + local
    node.legal[branch] = bool(at["legal"])
    if node.actions:
        node.actions[branch] = at.get("action")
        node.rewards[branch] = float(at["reward"])
