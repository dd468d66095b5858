"""Speed of the puzzle environments: moves applied per second, each environment side by side.

For each environment at its default size (Plan-Path 10 x 10, Sokoban 6 x 6 with one box, Sudoku
4 x 4) it builds seeded move lists over evaluation levels (random walks for the grid puzzles,
walls and blocked pushes included; for Sudoku the right fills in a random order mixed with fills
on clues, clashing fills and full-grid answers) and times applying them, each list on a fresh
copy of the level's start (the copy is timed too). The figure is the slowest environment's rate
against the issue's target of 20,000 moves per second; the rates of all three ride along.

Run: .venv/bin/python bench/puzzle_env_speed.py [--levels 20] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, report, run_dry
from harness.puzzles import ENVIRONMENTS, Level, make_level, new_state

TARGET_MOVES_PER_S = 20_000.0


def move_lists(level: Level, rng: random.Random) -> list[list[Any]]:
    if level.env == "plan_path":
        return [[rng.choice("UDLR") for _ in range(100)] for _ in range(4)]
    if level.env == "sokoban":
        return [[rng.choice("UDLR") for _ in range(150)] for _ in range(4)]
    n = level.layout.size
    clues = level.layout.clues
    right = [[r, c, level.solution[r][c]] for r in range(n) for c in range(n) if not clues[r][c]]
    lists: list[list[Any]] = []
    for _ in range(4):
        fills = list(right)
        rng.shuffle(fills)
        wrong = [[rng.randrange(n), rng.randrange(n), rng.randint(1, n)] for _ in range(4)]
        lists.append(wrong[:2] + fills[: len(fills) // 2] + wrong[2:] + fills[len(fills) // 2 :])
    lists.append([list(row) for row in level.solution])  # a full-grid answer: one move
    return lists


def time_env(env: str, levels: int, seconds: float) -> float:
    rng = random.Random(0)
    work = []
    for index in range(levels):
        level = make_level(env, "eval", index)
        work.append((new_state(level), move_lists(level, rng)))
    applied, elapsed = 0, 0.0
    while elapsed < seconds:
        start = time.perf_counter()
        for fresh, lists in work:
            for moves in lists:
                applied += fresh.copy().apply(moves).applied
        elapsed += time.perf_counter() - start
    return applied / elapsed


def dry_run(dry: DryRun) -> None:
    """Per environment: an evaluation level made, its move lists built and each applied once."""
    rng = random.Random(0)
    for env in ENVIRONMENTS:
        level = make_level(env, "eval", 0)
        for moves in move_lists(level, rng):
            new_state(level).copy().apply(moves)
        dry.count("environment")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=0.5, help="timed seconds per env")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(dry_run)
        return
    rates = {env: time_env(env, args.levels, args.seconds) for env in ENVIRONMENTS}
    slowest = min(rates, key=rates.__getitem__)
    report(
        "puzzle_env_moves_per_s_slowest",
        rates[slowest],
        TARGET_MOVES_PER_S,
        lower_is_better=False,
        slowest=slowest,
        moves_per_s={env: round(rate) for env, rate in rates.items()},
    )


if __name__ == "__main__":
    main()
