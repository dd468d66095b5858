"""Speed of the vectorised `marshal` advantage estimator against a plain Python loop, side by side.

Builds a seeded table of 1,000,000 turns (100,000 self-play episodes over six games, two seats,
uneven turn counts, shaped rewards with draws and invalid moves, rows shuffled), times
`compute_advantages(..., "marshal")` and a straightforward per-trajectory Python implementation
on the same table, checks that they agree, and ends with one JSON line.

Run: .venv/bin/python bench/advantage_speed.py [--episodes 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, run_dry
from core.errors import MarsError
from train_backend.advantage import ESTIMATORS, compute_advantages

GAMES = ("tic_tac_toe", "kuhn_poker", "hanabi_mini", "connect_four", "leduc_poker", "hanabi_simple")
MEAN_ACTIONS = 10  # both seats together; 100,000 episodes -> exactly 1,000,000 turns
TARGET_SECONDS = 1.0
TARGET_SPEEDUP = 20.0
REFERENCE_BUDGET_SECONDS = 60.0


def make_turns(n_episodes: int, seed: int = 0) -> pd.DataFrame:
    """A shuffled turn table whose turn count is exactly n_episodes * MEAN_ACTIONS."""
    rng = np.random.default_rng(seed)
    half = n_episodes // 2
    spread = rng.integers(-8, 9, size=half)
    offsets = np.concatenate([spread, -spread, np.zeros(n_episodes - 2 * half, dtype=np.int64)])
    actions = MEAN_ACTIONS + rng.permutation(offsets)  # 2..18 actions, sum exact
    game = rng.integers(0, len(GAMES), size=n_episodes)

    episode_of_action = np.repeat(np.arange(n_episodes), actions)
    position = np.arange(actions.sum()) - np.repeat(np.cumsum(actions) - actions, actions)
    seat = position % 2
    turn = position // 2
    is_last = turn == (np.repeat(actions, actions) - 1 - seat) // 2  # each seat's last turn

    # Outcome for seat 0; seat 1 gets the negation (a shared score in Hanabi: the same value).
    outcome = rng.choice(
        [-2.0, -1.0, 0.0, 1.0, 2.0], size=n_episodes, p=[0.1, 0.35, 0.1, 0.35, 0.1]
    )
    hanabi = np.isin(game, [GAMES.index("hanabi_mini"), GAMES.index("hanabi_simple")])
    outcome[hanabi] = rng.integers(0, 5, size=int(hanabi.sum()))
    invalid = rng.random(n_episodes) < 0.05  # the mover of the final action replied invalidly

    ep_outcome = outcome[episode_of_action]
    seat_outcome = np.where(hanabi[episode_of_action] | (seat == 0), ep_outcome, -ep_outcome)
    seat_outcome = np.where(seat_outcome == 0.0, 0.1, seat_outcome)  # draws
    reward = 0.05 + np.where(is_last, seat_outcome, 0.0)
    last_action = position == np.repeat(actions, actions) - 1
    offender = invalid[episode_of_action] & last_action
    reward = np.where(offender, -11.0, reward)
    bystander = invalid[episode_of_action] & is_last & ~last_action
    reward = np.where(bystander, 0.05, reward)  # the other seat gets nothing for the end step

    table = pd.DataFrame(
        {
            "episode": episode_of_action,
            "game": np.asarray(GAMES, dtype=object)[game[episode_of_action]],
            "seat": seat,
            "turn": turn,
            "reward": reward,
        }
    )
    return table.iloc[rng.permutation(len(table))].reset_index(drop=True)


def python_marshal(table: pd.DataFrame) -> list[float]:
    """The marshal estimator written as plain loops: group, sum back to front, normalise."""
    games = table["game"].tolist()
    episodes = table["episode"].tolist()
    seats = table["seat"].tolist()
    turns = table["turn"].tolist()
    rewards = table["reward"].tolist()

    trajectories: dict[tuple[Any, Any, Any], list[tuple[int, int]]] = defaultdict(list)
    for row in range(len(rewards)):
        trajectories[(games[row], episodes[row], seats[row])].append((turns[row], row))

    returns = [0.0] * len(rewards)
    rows_of_agent: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for (game, _episode, seat), items in trajectories.items():
        items.sort()
        running = 0.0
        for _turn, row in reversed(items):
            running = rewards[row] + running
            returns[row] = running
            rows_of_agent[(game, seat)].append(row)

    advantages = [0.0] * len(rewards)
    for rows in rows_of_agent.values():
        values = [returns[row] for row in rows]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((value - mean) ** 2 for value in values) / len(values))
        divisor = std if std >= 1e-6 else 1.0
        for row, value in zip(rows, values, strict=True):
            advantages[row] = 0.0 if len(rows) == 1 else (value - mean) / divisor
    return advantages


def timed(function: Any, *args: Any, **kwargs: Any) -> tuple[float, float, Any]:
    """Wall-clock and process CPU seconds of one call, and its result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function(*args, **kwargs)
    return time.perf_counter() - wall, time.process_time() - cpu, result


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """Every estimator the bench times, each on a small table of the bench's own making."""
    if args.episodes < 1 or args.repeats < 1:
        raise MarsError("--episodes and --repeats must be at least 1")
    table = make_turns(20, seed=args.seed)
    for name in ESTIMATORS:
        dry.config(lambda name=name: compute_advantages(table, name), "estimator")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3, help="numpy runs before and after")
    parser.add_argument("--seed", type=int, default=0)
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return

    table = make_turns(args.episodes, seed=args.seed)
    n_turns = len(table)
    print(f"table: {n_turns:,} turns, {args.episodes:,} episodes, {len(GAMES)} games, 2 seats")

    def time_marshal() -> tuple[list[float], list[float], np.ndarray]:
        walls, cpus = [], []
        for _ in range(args.repeats):
            wall, cpu, result = timed(compute_advantages, table, "marshal")
            walls.append(wall)
            cpus.append(cpu)
        return walls, cpus, result

    # numpy runs before and after the loop, so a change in machine load affects both sides.
    walls, cpus, advantages = time_marshal()

    # Probe the loop on 1% first so a slow machine never spends minutes on the full set.
    probe = table.iloc[: max(1, n_turns // 100)]
    probe_wall, _, _ = timed(python_marshal, probe)
    if probe_wall * 100 * 1.2 <= REFERENCE_BUDGET_SECONDS:
        reference_wall, reference_cpu, reference = timed(python_marshal, table)
        compared = advantages
        how = "full table"
    else:
        # A prefix of the shuffled rows holds partial trajectories; that is fine for timing, and
        # the agreement check runs both implementations on the same slice.
        piece = table.iloc[: n_turns // 10]
        slice_wall, slice_cpu, reference = timed(python_marshal, piece)
        reference_wall, reference_cpu = slice_wall * 10, slice_cpu * 10
        compared = compute_advantages(piece, "marshal")
        how = f"10% slice ({slice_wall:.2f} s) scaled x10 linearly"

    more_walls, more_cpus, _ = time_marshal()
    walls += more_walls
    cpus += more_cpus
    marshal_wall, marshal_cpu = statistics.median(walls), statistics.median(cpus)
    agree = bool(np.allclose(compared, np.asarray(reference), rtol=1e-9, atol=1e-9))
    speedup = reference_wall / marshal_wall
    speedup_cpu = reference_cpu / marshal_cpu
    print(
        f"marshal (numpy): median {marshal_wall:.3f} s wall, {marshal_cpu:.3f} s CPU, "
        f"{len(walls)} runs ({', '.join(f'{t:.3f}' for t in walls)})"
    )
    print(
        f"python reference: {reference_wall:.2f} s wall, {reference_cpu:.2f} s CPU ({how}); "
        f"agree (allclose): {agree}"
    )
    print(f"speed-up: {speedup:.1f}x wall, {speedup_cpu:.1f}x CPU")

    for name in ESTIMATORS:
        if name != "marshal":
            wall, cpu, _ = timed(compute_advantages, table, name)
            print(f"{name}: {wall:.3f} s wall, {cpu:.3f} s CPU")

    met = agree and marshal_wall <= TARGET_SECONDS and speedup >= TARGET_SPEEDUP
    print(
        json.dumps(
            {
                "metric": "marshal_seconds_1M_turns" if n_turns == 1_000_000 else "marshal_seconds",
                "value": round(marshal_wall, 4),
                "target": TARGET_SECONDS,
                "speedup_vs_python": round(speedup, 1),
                "speedup_target": TARGET_SPEEDUP,
                "cpu_seconds": round(marshal_cpu, 4),
                "speedup_vs_python_cpu": round(speedup_cpu, 1),
                "turns": n_turns,
                "agree": agree,
                "met": met,
            }
        )
    )


if __name__ == "__main__":
    main()
