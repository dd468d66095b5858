"""The arena: a player against an opponent, N episodes per seat, scored per seat.

Episodes run concurrently (a pool of asyncio workers; model calls are further limited by the
endpoint's own concurrency). Each finished episode becomes one record keyed by
(game, episode seed, seat of the player), handed to a sink in batches (so 20,000 bot games do not
open the records file 20,000 times) and at least once a second. Keys already recorded are skipped,
which is how a rerun resumes.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from core.errors import MarsError
from core.stats import wilson_ci
from games.chance import deal_table
from games.engine import EpisodeOptions, play_bot_episode, play_episode, plays_synchronously
from games.episode import SEAT_NAMES, EpisodeResult
from games.players.base import Player
from games.spec import GameSpec

SeatChoice = Literal["both", "first", "second"]
SEAT_CHOICES: tuple[str, ...] = ("both", "first", "second")
RecordKey = tuple[str, int, str]
Sink = Callable[[list[dict[str, Any]]], None]


@dataclass(frozen=True)
class ArenaConfig:
    episodes: int  # per seat
    seats: SeatChoice = "both"
    first_seed: int = 0  # episode seeds are first_seed .. first_seed + episodes - 1, per seat
    concurrency: int = 16  # episodes in flight
    options: EpisodeOptions = field(default_factory=EpisodeOptions)
    flush_every: int = 32  # records per sink call (few held at once: less GC work)...
    flush_seconds: float = 1.0  # ...or at least this often

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise MarsError("--episodes must be at least 1")
        if self.seats not in SEAT_CHOICES:
            raise MarsError(f"--seats must be one of {', '.join(SEAT_CHOICES)}")
        if self.concurrency < 1:
            raise MarsError("--concurrency must be at least 1")

    def seat_indices(self) -> list[int]:
        return [0, 1] if self.seats == "both" else [SEAT_NAMES.index(self.seats)]


def record_key(record: dict[str, Any]) -> RecordKey:
    return (record["game"], int(record["seed"]), record["seat"])


def arena_record(
    result: EpisodeResult,
    player_seat: int,
    player: str,
    opponent: str,
    ids: tuple[str, str] | None = None,
) -> dict:
    """`ids`: who the player and the opponent are (`Player.identity`: the model behind `llm`),
    recorded as `player_id` / `opponent_id` so ratings can pool runs; default the strings."""
    player_id, opponent_id = ids or (player, opponent)
    return result.to_record(
        seat=SEAT_NAMES[player_seat],
        player=player,
        opponent=opponent,
        player_id=player_id,
        opponent_id=opponent_id,
    )


class _Batcher:
    """Collects records and hands them to the sink in batches, at least every `seconds`."""

    def __init__(self, sink: Sink | None, size: int, seconds: float) -> None:
        self.sink = sink
        self.size = size
        self.seconds = seconds
        self.pending: list[dict[str, Any]] = []
        self.last = time.monotonic()

    def add(self, record: dict[str, Any]) -> None:
        if self.sink is None:
            return
        self.pending.append(record)
        if len(self.pending) >= self.size or time.monotonic() - self.last >= self.seconds:
            self.flush()

    def flush(self) -> None:
        if self.sink is not None and self.pending:
            self.sink(self.pending)
        self.pending = []
        self.last = time.monotonic()


async def run_episodes(
    spec: GameSpec,
    jobs: Iterable[tuple[int, tuple[Player, Player], Callable[[EpisodeResult], dict]]],
    *,
    options: EpisodeOptions,
    concurrency: int,
    sink: Sink | None,
    flush_every: int = 32,
    flush_seconds: float = 1.0,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Play (seed, players, to_record) jobs with `concurrency` workers; return how many ran.

    Records go to `sink` (batched) and `on_record` (each at once); none are kept here, so a long
    run's memory stays flat.
    """
    pending = iter(jobs)
    batcher = _Batcher(sink, flush_every, flush_seconds)
    played = 0
    deals = deal_table(spec, options.rules.leduc_deals)
    synchronous: dict[tuple[Player, ...], bool] = {}  # per seating: bots only, outcome rewards

    async def worker() -> None:
        nonlocal played
        for seed, seat_players, to_record in pending:
            bots = synchronous.get(seat_players)
            if bots is None:
                bots = synchronous[seat_players] = plays_synchronously(seat_players, options)
            if bots:  # no coroutine per episode
                result = play_bot_episode(spec, seat_players, seed, deals)
            else:
                result = await play_episode(spec, seat_players, seed, options)
            record = to_record(result)
            played += 1
            batcher.add(record)
            if on_record is not None:
                on_record(record)

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        batcher.flush()  # whatever finished is kept, even when interrupted
    return played


async def run_arena(
    spec: GameSpec,
    player: Player,
    opponent: Player,
    config: ArenaConfig,
    *,
    sink: Sink | None = None,
    done: set[Any] | frozenset[Any] = frozenset(),
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Play every (seat, seed) not in `done`; records go to `sink` and `on_record`.

    Returns the summary of the episodes played now; after a resume, summarise all records.
    """
    tally = ArenaTally(spec, player.name, opponent.name)

    def record_played(record: dict[str, Any]) -> None:
        tally.add(record)
        if on_record is not None:
            on_record(record)

    def to_record_for(seat: int) -> Callable[[EpisodeResult], dict]:
        ids = (player.identity, opponent.identity)
        return lambda result: arena_record(result, seat, player.name, opponent.name, ids)

    jobs = []
    for seat in config.seat_indices():
        seat_players = (player, opponent) if seat == 0 else (opponent, player)
        to_record, seat_name = to_record_for(seat), SEAT_NAMES[seat]
        seeds = range(config.first_seed, config.first_seed + config.episodes)
        jobs += [
            (seed, seat_players, to_record)
            for seed in seeds
            if (spec.name, seed, seat_name) not in done
        ]

    workers = config.concurrency if (player.is_model or opponent.is_model) else 1
    await run_episodes(
        spec,
        jobs,
        options=config.options,
        concurrency=workers,
        sink=sink,
        flush_every=config.flush_every,
        flush_seconds=config.flush_seconds,
        on_record=record_played,
    )
    return tally.summary()


def _rate(count: int, n: int) -> tuple[float, list[float]]:
    low, high = wilson_ci(count, n)
    return (count / n if n else 0.0), [low, high]


@dataclass
class SeatTally:
    """Aggregates of the episodes in which the player sat in one seat, fed one record at a time."""

    spec: GameSpec
    seat: int
    n: int = 0
    errors: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: {"win": 0, "draw": 0, "loss": 0})
    return_sum: float = 0.0
    return_sumsq: float = 0.0
    reward_sum: float = 0.0
    invalid_episodes: int = 0
    model_turns: int = 0
    invalid_turns: int = 0
    completion_tokens: int = 0
    first_error: str | None = None

    def add(self, record: dict[str, Any]) -> None:
        if record.get("error"):
            self.errors += 1
            self.first_error = self.first_error or str(record["error"])
            return
        seat = self.seat
        self.n += 1
        self.outcomes[record["outcomes"][seat]] += 1
        value = record["returns"][seat]
        self.return_sum += value
        self.return_sumsq += value * value
        self.reward_sum += record["rewards"][seat]
        if record["invalid_seat"] == seat:
            self.invalid_episodes += 1
        if record["model_turns"][seat]:
            self.model_turns += record["model_turns"][seat]
            self.invalid_turns += record["invalid_turns"][seat]
            self.completion_tokens += record["completion_tokens"][seat]

    def _mean_return(self) -> tuple[float, list[float]]:
        n = self.n
        if n == 0:
            return 0.0, [0.0, 0.0]
        mean = self.return_sum / n
        if n == 1:
            return mean, [mean, mean]
        variance = max(0.0, (self.return_sumsq - n * mean * mean) / (n - 1))
        half = 1.96 * math.sqrt(variance / n)
        return mean, [mean - half, mean + half]

    def summary(self) -> dict[str, Any]:
        n = self.n
        if n == 0:
            return self._no_score()
        out: dict[str, Any] = {"n": n}
        for name, count in self.outcomes.items():
            out[name], out[f"{name}_ci"] = _rate(count, n)
        mean, interval = self._mean_return()
        out["mean_return"], out["mean_return_ci"] = mean, interval
        # The normalisation is linear, so the mean and interval map through it directly.
        out["normalized_return"] = self.spec.normalize(mean) if n else 0.0
        out["normalized_return_ci"] = [self.spec.normalize(v) for v in interval] if n else [0, 0]
        out["mean_reward"] = self.reward_sum / n if n else 0.0
        turns = self.model_turns
        out["model_turns"] = turns
        out["invalid_rate"] = self.invalid_turns / turns if turns else 0.0
        out["invalid_episode_rate"], out["invalid_episode_rate_ci"] = _rate(
            self.invalid_episodes, n
        )
        out["mean_tokens_per_turn"] = self.completion_tokens / turns if turns else 0.0
        out["errors"] = self.errors
        if self.first_error:
            out["first_error"] = self.first_error
        return out

    def _no_score(self) -> dict[str, Any]:
        """A seat without a graded episode has no score: every rate and return is None."""
        out: dict[str, Any] = {"n": 0}
        for name in ("win", "draw", "loss", "mean_return", "normalized_return"):
            out[name], out[f"{name}_ci"] = None, None
        out.update(mean_reward=None, model_turns=0, invalid_rate=None)
        out.update(invalid_episode_rate=None, invalid_episode_rate_ci=None)
        out.update(mean_tokens_per_turn=None, errors=self.errors, first_error=self.first_error)
        return out


class ArenaTally:
    """Per-seat tallies of arena records; `summary()` is the arena summary."""

    def __init__(self, spec: GameSpec, player: str, opponent: str) -> None:
        self.spec = spec
        self.player = player
        self.opponent = opponent
        self.seats = {name: SeatTally(spec, seat) for seat, name in enumerate(SEAT_NAMES)}

    def add(self, record: dict[str, Any]) -> None:
        if record.get("game") == self.spec.name and record.get("seat") in self.seats:
            self.seats[record["seat"]].add(record)

    def summary(self) -> dict[str, Any]:
        variant = {"variant_of": self.spec.variant_of} if self.spec.variant_of else {}
        return {
            "game": self.spec.name,
            **variant,
            "player": self.player,
            "opponent": self.opponent,
            "normalization": {
                "min_return": self.spec.min_return,
                "max_return": self.spec.max_return,
            },
            "seats": {
                name: tally.summary()
                for name, tally in self.seats.items()
                if tally.n or tally.errors
            },
        }


def summarize(
    spec: GameSpec, player: str, opponent: str, records: Iterable[dict[str, Any]]
) -> dict[str, Any]:
    """The arena summary of `records`: per seat of the player, rates as fractions in [0, 1]."""
    tally = ArenaTally(spec, player, opponent)
    for record in records:
        tally.add(record)
    return tally.summary()
