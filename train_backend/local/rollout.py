"""Self-play rollouts with the policy in process: every game of a step plays at once, in lockstep.

Each game runs through `games.engine.play_episode` with the policy in both seats, as a
`FunctionPlayer` whose replies come from one `MicroBatcher`: all pending turns of all games are
decoded as one batch. Records are exactly what `mars selfplay` writes (plus `step`); the token ids
of every model call are kept, keyed by (game, episode seed, seat) in call order, so the update
never re-tokenises text. With `conversation` each seat's context is kept as one token sequence
(train_backend.local.conversation), and a step's samples are the seats' conversations.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.batcher import MicroBatcher, Sampling, generate_batch
from core.reasoning import split_reasoning
from games.arena import run_episodes
from games.engine import EpisodeOptions
from games.players.base import Player
from games.players.llm import FunctionPlayer
from games.selfplay import selfplay_record, turn_table
from games.spec import GameSpec, get_game
from train_backend.local.conversation import ChatContinuation, SeatConversation
from train_backend.local.opponents import policy_seat

if TYPE_CHECKING:
    import torch

    from core.causal_lm import Message, Policy
    from core.endpoint import Completion

# Episode seeds: step s of a run with seed S plays seeds S * SEED_STRIDE + (s - 1) * games_per_step
# + j for its j-th game of each kind, so no two steps share a seed and Kuhn deals cycle evenly.
SEED_STRIDE = 10_000_000
MAX_BATCH = 128

TokenKey = tuple[str, int, int]  # (game, episode seed, seat)


@dataclass(frozen=True)
class TurnSample:
    """A training sequence: one model call's prompt and reply token ids, or a seat's whole
    conversation (its first prompt, then every reply with the context between them, which
    `loss_mask` marks 0). `rows` are the step's turn rows it holds and `spans` their replies'
    [start, end) in `completion_ids`; empty means one turn whose reply is all of it."""

    game: str
    episode: int
    seat: int
    turn: int
    prompt_ids: list[int]
    completion_ids: list[int]
    loss_mask: tuple[int, ...] | None = None
    rows: tuple[int, ...] = ()
    spans: tuple[tuple[int, int], ...] = ()


class PolicyResponder:
    """Turns chats into batched generations and `Completion`s; remembers the token ids."""

    def __init__(
        self,
        policy: Policy,
        batcher: MicroBatcher,
        *,
        max_new_tokens: int,
        max_context_tokens: int,
        keep_tokens: bool,
        conversation: bool = False,
    ) -> None:
        self.policy = policy
        self.batcher = batcher
        self.max_new_tokens = max_new_tokens
        self.max_context_tokens = max_context_tokens
        self.keep_tokens = keep_tokens
        self.tokens: dict[TokenKey, list[tuple[list[int], list[int]]]] = {}
        # `conversation`: each seat's context is its earlier tokens, replies verbatim (full prompts)
        self.continuation = ChatContinuation(policy) if conversation else None
        self.chats: dict[TokenKey, SeatConversation] = {}
        self.generated_tokens = 0

    def player(self, game: str, name: str = "policy") -> FunctionPlayer:
        async def respond(messages: list[Message], seat: int, seed: int) -> Completion:
            return await self._respond(game, messages, seat, seed)

        return FunctionPlayer(respond, name=name)

    async def _respond(
        self, game: str, messages: list[Message], seat: int, seed: int
    ) -> Completion:
        from core.endpoint import Completion, Usage

        started = time.perf_counter()
        key = (game, seed, seat)
        chat = self.chats.get(key)
        if self.continuation is None:
            prompt_ids = self.policy.encode_chat(messages)
        elif chat is None:
            chat = self.chats[key] = self.continuation.start(messages)
            prompt_ids = list(chat.tokens)
        else:
            prompt_ids = self.continuation.next_prompt(chat, messages)
        # A seat's chat may not outgrow max_context_tokens (the config's max_game_tokens); a turn
        # with no room left gets an empty reply, which the game scores as invalid.
        room = min(self.max_new_tokens, self.max_context_tokens - len(prompt_ids))
        generated = await self.batcher.submit(prompt_ids, max(0, room))
        ids = generated.completion_ids
        self.generated_tokens += len(ids)
        if self.keep_tokens:
            self.tokens.setdefault(key, []).append((prompt_ids, ids))
        if chat is not None:
            ChatContinuation.add_reply(chat, ids)
        text, reasoning = split_reasoning(self.policy.decode(ids))
        return Completion(
            text=text,
            reasoning=reasoning,
            finish_reason="stop" if generated.stopped else "length",
            usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=len(ids)),
            latency_s=time.perf_counter() - started,
        )

    def samples(self, rows: Sequence[Mapping[str, Any]]) -> list[TurnSample]:
        """The training samples of a step's turn rows (kept tokens): one per row, or, for a
        conversation responder, one per seat and game holding that seat's rows."""
        samples = []
        if self.continuation is None:
            for row in rows:
                key = (row["game"], row["episode"], row["seat"])
                prompt_ids, completion_ids = self.tokens[key][row["turn"]]
                samples.append(TurnSample(*key, row["turn"], prompt_ids, completion_ids))
            return samples
        by_seat: dict[TokenKey, list[int]] = {}
        for index, row in enumerate(rows):
            by_seat.setdefault((row["game"], row["episode"], row["seat"]), []).append(index)
        for key, indices in by_seat.items():
            chat = self.chats[key]
            sample = TurnSample(
                *key,
                turn=rows[indices[0]]["turn"],
                prompt_ids=chat.prompt_ids,
                completion_ids=chat.completion_ids,
                loss_mask=tuple(chat.mask),
                rows=tuple(indices),
                spans=tuple(chat.spans[rows[i]["turn"]] for i in indices),
            )
            samples.append(sample)
        return samples


def make_responder(
    policy: Policy,
    sampling: Sampling,
    *,
    generator: torch.Generator | None,
    max_new_tokens: int,
    max_context_tokens: int,
    keep_tokens: bool,
    max_batch: int = MAX_BATCH,
    conversation: bool = False,
) -> PolicyResponder:
    batcher = MicroBatcher(
        lambda requests: generate_batch(policy, requests, sampling, generator),
        max_batch=max_batch,
    )
    return PolicyResponder(
        policy,
        batcher,
        max_new_tokens=max_new_tokens,
        max_context_tokens=max_context_tokens,
        keep_tokens=keep_tokens,
        conversation=conversation,
    )


def games_for_step(specs: Sequence[GameSpec], games_per_step: int) -> dict[str, int]:
    """How many games of each kind a step plays: round-robin over the mix."""
    counts = dict.fromkeys((spec.name for spec in specs), 0)
    for index in range(games_per_step):
        counts[specs[index % len(specs)].name] += 1
    return counts


def first_seed(run_seed: int, step: int, games_per_step: int) -> int:
    return run_seed * SEED_STRIDE + (step - 1) * games_per_step


@dataclass
class StepRollout:
    records: list[dict[str, Any]]
    rows: list[dict[str, Any]]  # the turn table (one row per model call), aligned with samples
    samples: list[TurnSample]
    generated_tokens: int
    seconds: float
    generate_calls: int
    extra: dict[str, Any] = field(default_factory=dict)
    # tree steps: per row, what the branch log adds to it (reply, reasoning, action, reward)
    replies: list[dict[str, Any]] = field(default_factory=list)


async def play_step(
    responder: PolicyResponder,
    specs: Sequence[GameSpec],
    *,
    step: int,
    run_seed: int,
    games_per_step: int,
    options: EpisodeOptions,
    opponents: Mapping[str, Player] | None = None,
) -> StepRollout:
    """Play one step's games (all at once) and collect records, turn rows and tokens.

    Self-play by default; with `opponents` (game -> fixed player) the policy takes one seat
    (`policy_seat`) and the fixed player the other, and only the policy's turns are rows.
    """
    started = time.perf_counter()
    counts = games_for_step(specs, games_per_step)
    base = first_seed(run_seed, step, games_per_step)
    records: list[dict[str, Any]] = []

    def to_record(result: Any) -> dict[str, Any]:
        record = selfplay_record(result)
        record["step"] = step
        return record

    def seats(spec: GameSpec, seed: int) -> tuple[Player, Player]:
        model = responder.player(spec.name)
        if opponents is None:
            return (model, model)
        fixed = opponents[spec.name]
        return (model, fixed) if policy_seat(spec, seed) == 0 else (fixed, model)

    def fixed_record(result: Any) -> dict[str, Any]:
        record = to_record(result)
        record["policy_seat"] = policy_seat(get_game(record["game"]), record["seed"])
        return record

    async def play_game(spec: GameSpec) -> None:
        convert = to_record if opponents is None else fixed_record
        seeds = range(base, base + counts[spec.name])
        jobs = [(seed, seats(spec, seed), convert) for seed in seeds]
        await run_episodes(
            spec,
            jobs,
            options=options,
            concurrency=max(1, len(jobs)),
            sink=None,
            on_record=records.append,
        )

    await asyncio.gather(*(play_game(spec) for spec in specs if counts[spec.name]))
    # Same order whatever order games finished in: by game (as listed), then seed.
    order = {spec.name: index for index, spec in enumerate(specs)}
    records.sort(key=lambda r: (order[r["game"]], r["seed"]))
    rows = turn_table(records)
    if opponents is not None:  # a checkpoint opponent's turns are model turns too: not trained
        policy_seats = {(r["game"], r["seed"]): r["policy_seat"] for r in records}
        rows = [row for row in rows if row["seat"] == policy_seats[(row["game"], row["episode"])]]
    return StepRollout(
        records=records,
        rows=rows,
        samples=responder.samples(rows),
        generated_tokens=responder.generated_tokens,
        seconds=time.perf_counter() - started,
        generate_calls=responder.batcher.calls,
    )
