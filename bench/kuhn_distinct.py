"""How many of a Kuhn self-play step's games can be distinct, by the game's own arithmetic.

Kuhn Poker has 6 deals and 5 betting lines, 30 possible games. The CPU trainer plays a step's
games from consecutive seeds and a seed's deal is `seed % 6` (games/chance.py), so a step of n
games plays every deal n // 6 or n // 6 + 1 times. A policy plays line l of deal d with
probability p(l | d); of the m games of that deal, 1 - (1 - p)^m is the chance that l is among
them, so a step's expected distinct games are the sum of that over every deal and line. The
bench computes it, and by sampling the chance that a step's distinct share falls under one half,
for a near-Nash policy (OpenSpiel's CFR average policy) and the uniform one, at several games per
step; with `--run DIR` it adds a training run's observed shares (its metrics.jsonl).

Run: .venv/bin/python bench/kuhn_distinct.py [--games 12,16,24,32] [--run RUN_DIR]
The last line is JSON: the near-Nash policy's expected share at the first --games (12, the
marshal-mini Kuhn step) against the target of one half, and at the others.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import pyspiel
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import cfr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, int_list, run_dry
from core.errors import MarsError

TARGET = 0.5  # the least share of a step's games that should be distinct (issue 54)
DEALS = 6
Lines = dict[int, dict[str, float]]  # deal -> betting line -> probability


def line_probabilities(policy: openspiel_policy.Policy) -> Lines:
    """p(line | deal) of `policy` playing both seats, per deal in OpenSpiel's chance order."""
    game = pyspiel.load_game("kuhn_poker")
    lines: Lines = {}
    root = game.new_initial_state()
    deal = 0
    for first, _ in root.chance_outcomes():
        dealt = root.child(first)
        for second, _ in dealt.chance_outcomes():
            found: dict[str, float] = {}
            _walk(dealt.child(second), policy, 1.0, "", found)
            lines[deal] = found
            deal += 1
    return lines


def _walk(
    state: pyspiel.State,
    policy: openspiel_policy.Policy,
    reach: float,
    line: str,
    found: dict[str, float],
) -> None:
    if state.is_terminal():
        found[line] = found.get(line, 0.0) + reach
        return
    for action, p in policy.action_probabilities(state).items():
        if p > 0:
            mark = state.action_to_string(state.current_player(), action)[0].lower()
            _walk(state.child(action), policy, reach * p, line + mark, found)


def games_per_deal(n: int) -> list[int]:
    """How many of a step's n games each deal gets when seeds run consecutively from a
    multiple of n (the first deals take the remainder)."""
    return [n // DEALS + (1 if deal < n % DEALS else 0) for deal in range(DEALS)]


def expected_share(lines: Lines, n: int) -> float:
    counts = games_per_deal(n)
    distinct = sum(
        1 - (1 - p) ** counts[deal] for deal, found in lines.items() for p in found.values()
    )
    return distinct / n


def share_under_half(lines: Lines, n: int, trials: int, seed: int) -> float:
    """The sampled chance that one step's distinct share is under `TARGET`."""
    rng = np.random.default_rng(seed)
    counts = games_per_deal(n)
    distinct = np.zeros(trials)
    for deal, found in lines.items():
        probabilities = np.array(list(found.values()))
        draws = rng.multinomial(counts[deal], probabilities / probabilities.sum(), size=trials)
        distinct += (draws > 0).sum(axis=1)
    return float(np.mean(distinct / n < TARGET))


def observed(run: Path) -> dict[str, float | int]:
    shares = [
        json.loads(line)["selfplay/distinct_share"]
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if line.strip()
    ]
    return {
        "steps": len(shares),
        "lowest": round(min(shares), 3),
        "median": round(statistics.median(shares), 3),
    }


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    games = int_list(args.games, "--games")
    if any(n < 1 for n in games):
        raise MarsError(f"--games: every count must be at least 1, not {args.games}")
    pyspiel.load_game("kuhn_poker")
    dry.count("game")
    if args.run is not None:
        if not (args.run / "metrics.jsonl").is_file():
            raise MarsError(f"--run {args.run}: no metrics.jsonl there")
        dry.count("run")
    dry.count("games-per-step setting", len(games))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--games", default="12,16,24,32", help="games per step, comma-separated")
    parser.add_argument("--cfr-iterations", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=20000)
    parser.add_argument("--run", type=Path, default=None, help="a Kuhn training run's folder")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    try:  # bad settings: one line, before any solving
        dry_run(DryRun(), args)
    except MarsError as exc:
        raise SystemExit(" ".join(str(exc).split("\n"))) from None
    games = int_list(args.games, "--games")
    game = pyspiel.load_game("kuhn_poker")
    solver = cfr.CFRSolver(game)
    for _ in range(args.cfr_iterations):
        solver.evaluate_and_update_policy()
    policies = {
        f"cfr:{args.cfr_iterations}": solver.average_policy(),
        "uniform": openspiel_policy.UniformRandomPolicy(game),
    }
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for name, policy in policies.items():
        lines = line_probabilities(policy)
        possible = sum(1 for found in lines.values() for p in found.values() if p > 1e-3)
        print(f"{name}: {possible} of 30 games have probability over 0.001")
        figures[name] = {}
        for n in games:
            mean = float(expected_share(lines, n))
            under = share_under_half(lines, n, args.trials, seed=n)
            figures[name][str(n)] = {"expected": round(mean, 3), "p_under_half": round(under, 4)}
            print(f"  {n:>3} games a step: expected share {mean:.3f}, P(share < 0.5) {under:.4f}")
    result: dict[str, object] = {
        "metric": "kuhn_nash_distinct_share",
        "games_per_step": games[0],
        "value": figures[f"cfr:{args.cfr_iterations}"][str(games[0])]["expected"],
        "target": TARGET,
        "met": figures[f"cfr:{args.cfr_iterations}"][str(games[0])]["expected"] >= TARGET,
        "figures": figures,
    }
    if args.run is not None:
        result["observed"] = observed(args.run)
        print(f"observed in {args.run}: {result['observed']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
