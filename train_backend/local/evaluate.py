"""In-training evaluation: the policy in the arena, in process, against each game's opponents.

Every (game, opponent) pair of `config.eval_opponents` plays `eval_episodes` games from each seat
through `games.arena.run_arena`, all pairs at once on one batcher, with greedy decoding
(temperature 0: the policy's own choice, no sampling noise, so two evaluations differ only by the
weights). The seeds are the same at every evaluation, so the curve compares the same deals. The
opponent `self` (Hanabi) is the policy itself and is scored from the first seat only.

With an `ExploitabilityEval` (the config's `eval_exploitability`, by default Kuhn when it is
trained), the policy's exploitability is measured too, sampled as in self-play (see
`train_backend.local.exploitability`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.stats import wilson_ci
from games.arena import ArenaConfig, run_arena
from games.engine import EpisodeOptions
from games.players import PlayerContext, make_player, needs_model
from games.players.base import Player
from games.spec import GameSpec
from train_backend.local.exploitability import (
    ExploitabilityEval,
    evaluate_exploitability,
    responder_for,
)
from train_backend.local.rollout import PolicyResponder

EVAL_FIRST_SEED = 900_000_000  # far from every training seed
DEFAULT_OPPONENTS = ("random",)


@dataclass(frozen=True)
class EvalPair:
    spec: GameSpec
    opponent: str
    bot: Player | None  # None: the policy itself sits in the other seat


def eval_pairs(specs: Sequence[GameSpec], opponents: dict[str, list[str]]) -> list[EvalPair]:
    """Build every opponent once (solving CFR policies now); bad names raise MarsError."""
    pairs = []
    for spec in specs:
        # a variant plays its original's opponents unless it names its own
        chosen = opponents.get(spec.name) or opponents.get(spec.base_name, list(DEFAULT_OPPONENTS))
        for name in chosen:
            bot = None if needs_model(name) else make_player(name, PlayerContext(spec=spec))
            pairs.append(EvalPair(spec, name, bot))
    return pairs


def _seat_metrics(prefix: str, stats: dict[str, Any]) -> dict[str, float]:
    n = stats["n"]
    non_loss = n - round(stats["loss"] * n)
    low, high = stats["win_ci"]
    non_loss_low, non_loss_high = wilson_ci(non_loss, n)
    return {
        f"{prefix}/n": n,
        f"{prefix}/win": stats["win"],
        f"{prefix}/draw": stats["draw"],
        f"{prefix}/loss": stats["loss"],
        f"{prefix}/ci95_low": low,
        f"{prefix}/ci95_high": high,
        f"{prefix}/non_loss": non_loss / n if n else 0.0,
        f"{prefix}/non_loss_ci95_low": non_loss_low,
        f"{prefix}/non_loss_ci95_high": non_loss_high,
        f"{prefix}/invalid_rate": stats["invalid_rate"],
        f"{prefix}/normalized_return": stats["normalized_return"],
    }


async def evaluate(
    responder: PolicyResponder,
    pairs: Sequence[EvalPair],
    *,
    episodes: int,
    options: EpisodeOptions,
    step: int,
    exploitability: ExploitabilityEval | None = None,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Metrics `eval/<game>/<opponent>/<seat>/<field>` (and `exploitability/<game>...`) and the
    arena records (with `step`)."""
    records: list[dict[str, Any]] = []

    async def play(pair: EvalPair) -> dict[str, Any]:
        # Each pair plays the same seeds: its own key space keeps the seats' contexts apart.
        policy = responder.player(f"{pair.spec.name} vs {pair.opponent}", name="policy")
        opponent = pair.bot or policy
        config = ArenaConfig(
            episodes=episodes,
            seats="first" if pair.bot is None else "both",
            first_seed=EVAL_FIRST_SEED,
            concurrency=2 * episodes,
            options=options,
        )
        summary = await run_arena(pair.spec, policy, opponent, config, on_record=records.append)
        summary["opponent"] = pair.opponent
        return summary

    summaries = await asyncio.gather(*(play(pair) for pair in pairs))
    metrics: dict[str, float] = {}
    for pair, summary in zip(pairs, summaries, strict=True):
        for seat, stats in summary["seats"].items():
            metrics.update(_seat_metrics(f"eval/{pair.spec.name}/{pair.opponent}/{seat}", stats))
    for record in records:
        record["step"] = step
    if exploitability is not None:
        sampled = responder_for(
            responder.policy,
            exploitability.sampling,
            seed=exploitability.seed,
            max_new_tokens=responder.max_new_tokens,
            max_context_tokens=responder.max_context_tokens,
        )
        metrics.update(await evaluate_exploitability(sampled, exploitability))
    return metrics, records
