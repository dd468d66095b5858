"""What a training step reports: its metrics.jsonl line, the progress line, the average policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from games.episode import SEAT_NAMES
from games.rules import LeducDeals
from games.selfplay import distinct_games
from games.spec import get_game
from train_backend.local.rollout import StepRollout
from train_backend.local.tree import state_key
from train_backend.local.update import UpdateStats

# How many of a step's games (main lines: a tree's branches are not games) were different games
# (games.selfplay.game_line), and their share of the step's games.
DISTINCT_GAMES = "selfplay/distinct_games"
DISTINCT_SHARE = "selfplay/distinct_share"


def average_policy_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """`exploitability_avg/<game>`: the exploitability of the average of the policies evaluated
    so far (each evaluation's P(action | state) from `policy/<game>/...`, reach-weighted as
    fictitious play averages), and how many evaluations it averages. Games shown per private
    card instead of per state are left out."""
    from games.exploitability import average_table, figures, table_from_shares

    tables: dict[str, list[Any]] = {}
    for row in rows:
        shares: dict[str, dict[str, dict[str, float]]] = {}
        for key, value in row.items():
            parts = key.split("/")
            if len(parts) == 4 and parts[0] == "policy":
                shares.setdefault(parts[1], {}).setdefault(parts[2], {})[parts[3]] = value
        for game, by_state in shares.items():
            table = table_from_shares(get_game(game), by_state)
            if table is not None:
                tables.setdefault(game, []).append(table)
    metrics: dict[str, float] = {}
    for game, found in tables.items():
        spec = get_game(game)
        metrics[f"exploitability_avg/{game}"] = figures(spec, average_table(spec, found))[
            "exploitability"
        ]
        metrics[f"exploitability_avg/{game}/policies"] = len(found)
    return metrics


def row_states(rollout: StepRollout) -> list[str]:
    """Per turn row, a key of what the model saw before that reply (its information state as a
    prompt): the call's prompt, or a conversation's tokens up to the reply."""
    if rollout.rows and "state" in rollout.rows[0]:
        return [row["state"] for row in rollout.rows]
    states = [""] * len(rollout.rows)
    for index, sample in enumerate(rollout.samples):
        if not sample.rows:
            states[index] = state_key(sample.prompt_ids)
            continue
        for row, (start, _) in zip(sample.rows, sample.spans, strict=True):
            states[row] = state_key([*sample.prompt_ids, *sample.completion_ids[:start]])
    return states


def step_metrics(
    step: int,
    rollout: StepRollout,
    advantages: np.ndarray,
    stats: UpdateStats,
    *,
    lr: float,
    leduc_deals: LeducDeals,
) -> dict[str, Any]:
    """One metrics.jsonl line (the eval fields are added by the trainer at eval steps)."""
    rows, records = rollout.rows, rollout.records
    distinct = distinct_games(records, leduc_deals)
    turns = len(rows)
    invalid_turns = sum(1 for row in rows if not row["legal"])
    metrics: dict[str, Any] = {
        "step": step,
        "lr": lr,
        "loss": stats.loss,
        "pg_loss": stats.pg_loss,
        "kl": stats.kl,
        "entropy": stats.entropy,
        "clip_frac": stats.clip_frac,
        "grad_norm": stats.grad_norm,
        "optimizer_updates": stats.updates,
        "trained_turns": stats.sequences,
        "episodes": len(records),
        "turns": turns,
        "reward_mean": float(np.mean([row["reward"] for row in rows])) if rows else 0.0,
        "advantage_mean": float(advantages.mean()) if advantages.size else 0.0,
        "advantage_std": float(advantages.std()) if advantages.size else 0.0,
        "invalid_rate": invalid_turns / turns if turns else 0.0,
        "invalid_episode_rate": (
            sum(1 for r in records if r["invalid_seat"] is not None) / len(records)
            if records
            else 0.0
        ),
        "completion_tokens_mean": (
            float(np.mean([row["tokens"] for row in rows])) if rows else 0.0
        ),
        "generated_tokens": rollout.generated_tokens,
        "generate_calls": rollout.generate_calls,
        "rollout_s": round(rollout.seconds, 3),
        "tokens_per_s": rollout.generated_tokens / rollout.seconds if rollout.seconds else 0.0,
        DISTINCT_GAMES: distinct,
        DISTINCT_SHARE: distinct / len(records) if records else 0.0,
        **rollout.extra,
    }
    games = sorted({r["game"] for r in records})
    for game in games:
        mine = [r for r in records if r["game"] == game]
        for seat, seat_name in enumerate(SEAT_NAMES):
            # Against a fixed opponent only the episodes where the policy held this seat count.
            played = [r for r in mine if r.get("policy_seat", seat) == seat]
            if not played:
                continue
            metrics[f"return_mean/{game}/{seat_name}"] = float(
                np.mean([r["returns"][seat] for r in played])
            )
            metrics[f"reward_mean/{game}/{seat_name}"] = float(
                np.mean([r["rewards"][seat] for r in played])
            )
    return metrics


NO_UPDATE_WARNING = (
    "  warning: no optimiser update (every sample's advantage was 0 and there is no KL term: "
    "all branches of every group earned the same return)"
)


def progress_line(metrics: dict[str, Any], total_steps: int) -> str:
    line = (
        f"step {metrics['step']}/{total_steps}  reward {metrics['reward_mean']:+.3f}  "
        f"invalid {metrics['invalid_rate']:.3f}  loss {metrics['loss']:+.4f}  "
        f"clip {metrics['clip_frac']:.3f}  {metrics['tokens_per_s']:.0f} tok/s  "
        f"{metrics['seconds_per_step']:.1f} s"
    )
    return line + (NO_UPDATE_WARNING if metrics.get("optimizer_updates") == 0 else "")


def evaluation_lines(metrics: dict[str, Any]) -> list[str]:
    """The in-training evaluation held in one step's metrics, one line per game, opponent and
    seat (win rate with its 95% interval) and per exploitability measured; [] without one."""
    lines = []
    for key in sorted(k for k in metrics if k.startswith("eval/") and k.endswith("/win")):
        prefix = key.removesuffix("/win")
        _, game, opponent, seat = prefix.split("/", 3)
        lines.append(
            f"  {game} vs {opponent}, {seat} seat: win {metrics[key]:.2f} "
            f"[{metrics[prefix + '/ci95_low']:.2f}, {metrics[prefix + '/ci95_high']:.2f}], "
            f"invalid {metrics[prefix + '/invalid_rate']:.2f} (n {metrics[prefix + '/n']})"
        )
    for key in sorted(k for k in metrics if k.startswith("exploitability/") and k.count("/") == 1):
        lines.append(
            f"  {key.split('/', 1)[1]} exploitability {metrics[key]:.3f} "
            f"[{metrics[key + '/ci95_low']:.3f}, {metrics[key + '/ci95_high']:.3f}]"
        )
    return lines
