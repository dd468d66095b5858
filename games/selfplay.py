"""Self-play: one model in both seats, producing the per-turn trajectories the trainers consume.

Each episode becomes one record keyed by (game, episode seed) holding every turn (seat, turn
index, prompt, reply, reward, token counts). `turn_table` flattens records into the table of turns
that `train_backend.advantage.compute_advantages` reads: one row per turn with the columns
`episode`, `game`, `seat`, `turn`, `reward`, `tokens`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.errors import MarsError
from games.arena import Sink, run_episodes
from games.chance import deal_index, deal_table
from games.engine import EpisodeOptions
from games.episode import EpisodeResult, conversation
from games.players.base import Player
from games.rules import LeducDeals
from games.spec import GameSpec, get_game

SelfPlayKey = tuple[str, int]


@dataclass(frozen=True)
class SelfPlayConfig:
    episodes: int  # per game
    first_seed: int = 0
    concurrency: int = 16
    options: EpisodeOptions = field(default_factory=EpisodeOptions)

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise MarsError("--episodes must be at least 1")
        if self.concurrency < 1:
            raise MarsError("--concurrency must be at least 1")


def selfplay_key(record: dict[str, Any]) -> SelfPlayKey:
    return (record["game"], int(record["seed"]))


def selfplay_record(result: EpisodeResult) -> dict[str, Any]:
    return result.to_record(kind="selfplay")


class _GameTally:
    def __init__(self) -> None:
        self.episodes = self.errors = self.invalid = self.turns = self.tokens = 0
        self.return_sum = [0.0, 0.0]
        self.reward_sum = [0.0, 0.0]

    def add(self, record: dict[str, Any]) -> None:
        if record.get("error"):
            self.errors += 1
            return
        self.episodes += 1
        self.invalid += record["invalid_seat"] is not None
        self.turns += sum(record["model_turns"])
        self.tokens += sum(record["completion_tokens"])
        for seat in (0, 1):
            self.return_sum[seat] += record["returns"][seat]
            self.reward_sum[seat] += record["rewards"][seat]

    def summary(self, spec: GameSpec) -> dict[str, Any]:
        n = self.episodes or 1
        means = [value / n for value in self.return_sum]
        return {
            "episodes": self.episodes,
            "errors": self.errors,
            "mean_return": means,
            "normalized_return": [spec.normalize(m) for m in means] if self.episodes else None,
            "mean_reward": [value / n for value in self.reward_sum],
            "invalid_episode_rate": self.invalid / n,
            "turns": self.turns,
            "mean_tokens_per_turn": self.tokens / self.turns if self.turns else 0.0,
        }


def summarize_selfplay(
    specs: Sequence[GameSpec], records: Iterable[dict[str, Any]]
) -> dict[str, Any]:
    tallies = {spec.name: _GameTally() for spec in specs}
    for record in records:
        if record.get("game") in tallies:
            tallies[record["game"]].add(record)
    return {"games": {spec.name: tallies[spec.name].summary(spec) for spec in specs}}


async def run_selfplay(
    specs: Sequence[GameSpec],
    model: Player,
    config: SelfPlayConfig,
    *,
    sink: Sink | None = None,
    done: set[Any] | frozenset[Any] = frozenset(),
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Play `config.episodes` episodes per game with `model` in both seats (skipping `done` keys).

    Returns the summary of the episodes played now; records go to `sink` and `on_record`.
    """
    if not model.is_model:
        raise MarsError(f"self-play needs a model player, not {model.name!r}")
    played: list[dict[str, Any]] = []

    def keep(record: dict[str, Any]) -> None:
        played.append(record)
        if on_record is not None:
            on_record(record)

    seeds = range(config.first_seed, config.first_seed + config.episodes)
    for spec in specs:
        jobs = [
            (seed, (model, model), selfplay_record)
            for seed in seeds
            if (spec.name, seed) not in done
        ]
        await run_episodes(
            spec,
            jobs,
            options=config.options,
            concurrency=config.concurrency,
            sink=sink,
            on_record=keep,
        )
    return summarize_selfplay(specs, played)


TURN_COLUMNS = ("episode", "game", "seat", "turn", "reward", "tokens")


def turn_table(records: Iterable[dict[str, Any]], *, with_text: bool = False) -> list[dict]:
    """One row per model turn of the good (error-free) records, for the advantage estimators.

    `episode` is the episode seed (episode ids are scoped by game), `turn` counts the seat's turns
    from 0, `tokens` is the reply's completion tokens. With `with_text`, each row also carries the
    full chat that turn was sent (`messages`) and the `reply`.
    """
    rows: list[dict[str, Any]] = []
    for record in records:
        if record.get("error"):
            continue
        seat_turns: dict[int, list[dict[str, Any]]] = {}
        for turn in record["turns"]:
            if "usage" not in turn:
                continue
            seat = turn["seat"]
            seat_turns.setdefault(seat, []).append(turn)
            row = {
                "episode": record["seed"],
                "game": record["game"],
                "seat": seat,
                "turn": turn["turn"],
                "reward": turn["reward"],
                "tokens": turn["usage"]["completion_tokens"],
                "prompt_tokens": turn["usage"]["prompt_tokens"],
                "legal": turn["legal"],
                "action": turn["action"],
            }
            if with_text:
                row["messages"] = conversation(seat_turns[seat])[:-1]
                row["reply"] = turn["reply"]
            rows.append(row)
    return rows


def game_line(record: dict[str, Any], leduc_deals: LeducDeals) -> tuple[Any, ...]:
    """What makes a played game this game and not another: the game, its deal (the seed's entry
    of the deals; the seed itself when chance draws from the seed's own stream; nothing in a game
    without chance) and every turn's seat and move in order (None: an invalid reply)."""
    spec = get_game(record["game"])
    seed = int(record["seed"])
    deal: int | tuple[str, int] | None = deal_index(spec, seed, deal_table(spec, leduc_deals))
    if deal is None and spec.has_chance:
        deal = ("seed", seed)
    moves = tuple(
        (turn["seat"], turn.get("action") if turn.get("legal", True) else None)
        for turn in record.get("turns") or []
    )
    return (spec.name, deal, moves)


def distinct_games(records: Iterable[dict[str, Any]], leduc_deals: LeducDeals) -> int:
    """How many of the records are different games (`game_line`): a step whose games all repeat
    one line has 1, one whose every game differs has as many as it played."""
    return len({game_line(record, leduc_deals) for record in records})
