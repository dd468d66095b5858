"""Kuhn Poker with a table instead of a model: which update settles, and where the floor is.

Two questions that the tiny model's runs cannot answer alone (docs/training.md, "Card use on
Kuhn"):

1. **The floor of pure policies.** Every one of the 2^12 deterministic policies is scored with
   OpenSpiel's exact `exploitability`; the lowest is 1/6, so any policy at or below the issue's
   0.15 has to mix.
2. **Does the update itself settle?** The CPU trainer's at_grpo step with a perfect model: one
   pair of logits per information state (no sharing between states), 32 deals a step, at every
   visited state K branches that include every legal action and finish the deal with the
   current policy (Monte Carlo return), the return centred in its branch group (`mean`; or
   divided by the group's std, `mean_std`; or by its information state's spread, `state_std`),
   a KL magnet to the uniform policy, Adam with several epochs over each batch. The last
   iterate's exploitability is printed every 10 steps, per seed.

Run: .venv/bin/python bench/kuhn_tabular.py [--lr 0.01] [--magnet 0.2] [--scale mean]
     [--steps 60] [--seeds 0,1,2]
The last line is JSON: the worst seed's final exploitability against the issue's 0.15, and the
pure-policy floor.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pyspiel
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import exploitability

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, int_list, run_dry

TARGET = 0.15
GAME = pyspiel.load_game("kuhn_poker")


def tabular_policy(logits: np.ndarray) -> openspiel_policy.TabularPolicy:
    table = openspiel_policy.TabularPolicy(GAME)
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    table.action_probability_array[:] = shifted / shifted.sum(axis=1, keepdims=True)
    return table


def pure_policy_floor() -> float:
    table = openspiel_policy.TabularPolicy(GAME)
    best = float("inf")
    for bets in itertools.product((0.0, 1.0), repeat=len(table.state_lookup)):
        table.action_probability_array[:] = np.array([[1.0 - b, b] for b in bets])
        best = min(best, float(exploitability.exploitability(GAME, table)))
    return best


class TabularRun:
    """One seed of the at_grpo update on a table of logits (rows in OpenSpiel's state order)."""

    def __init__(self, args: argparse.Namespace, seed: int) -> None:
        self.args = args
        self.rng = np.random.default_rng(seed)
        self.rows = openspiel_policy.TabularPolicy(GAME).state_lookup
        self.logits = np.zeros((len(self.rows), 2))
        self.adam_m = np.zeros_like(self.logits)
        self.adam_v = np.zeros_like(self.logits)
        self.updates = 0

    def probs(self, row: int) -> np.ndarray:
        z = np.exp(self.logits[row] - self.logits[row].max())
        return z / z.sum()

    def deal(self) -> pyspiel.State:
        state = GAME.new_initial_state()
        while state.is_chance_node():
            outcomes, chances = zip(*state.chance_outcomes(), strict=True)
            state.apply_action(int(self.rng.choice(outcomes, p=chances)))
        return state

    def finish(self, state: pyspiel.State) -> list[float]:
        state = state.clone()
        while not state.is_terminal():
            row = self.rows[state.information_state_string()]
            state.apply_action(int(self.rng.choice(2, p=self.probs(row))))
        return state.returns()

    def branch_samples(self) -> list[tuple[int, int, float]]:
        samples: list[tuple[int, int, float]] = []
        for _ in range(self.args.games):
            state = self.deal()
            while not state.is_terminal():
                seat, row = state.current_player(), self.rows[state.information_state_string()]
                sampled = self.rng.choice(2, size=self.args.branches - 2, p=self.probs(row))
                actions = [0, 1, *map(int, sampled)]  # every legal action is a branch
                returns = np.array([self.finish(child(state, a))[seat] for a in actions])
                advantages = returns - returns.mean()
                if self.args.scale == "mean_std":
                    spread = returns.std()
                    advantages = advantages / spread if spread > 1e-6 else advantages * 0.0
                pairs = zip(actions, advantages, strict=True)
                samples += [(row, a, float(adv)) for a, adv in pairs]
                # Random continuation among the policy's own samples (the local trainer's default).
                state.apply_action(int(self.rng.choice(sampled)) if len(sampled) else 0)
        return by_state_spread(samples) if self.args.scale == "state_std" else samples

    def update(self, samples: list[tuple[int, int, float]], lr: float) -> None:
        for _ in range(self.args.epochs):
            ascent = np.zeros_like(self.logits)
            for row, action, advantage in samples:
                p = self.probs(row)
                score = -p
                score[action] += 1.0
                log_p = np.log(p)
                ascent[row] += advantage * score - self.args.magnet * p * (log_p - p @ log_p)
            grad = -ascent / len(samples)
            self.updates += 1
            self.adam_m = 0.9 * self.adam_m + 0.1 * grad
            self.adam_v = 0.999 * self.adam_v + 0.001 * grad**2
            m_hat = self.adam_m / (1 - 0.9**self.updates)
            v_hat = self.adam_v / (1 - 0.999**self.updates)
            self.logits -= lr * m_hat / (np.sqrt(v_hat) + 1e-8)

    def run(self) -> list[float]:
        curve = []
        for step in range(self.args.steps):
            self.update(self.branch_samples(), self.args.lr)
            if (step + 1) % 10 == 0:
                table = tabular_policy(self.logits)
                curve.append(float(exploitability.exploitability(GAME, table)))
        return curve


def by_state_spread(samples: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """scale state_std: the group-centred values divided by their state's root mean square."""
    squares: dict[int, list[float]] = {}
    for row, _, advantage in samples:
        squares.setdefault(row, []).append(advantage * advantage)
    spread = {row: float(np.sqrt(np.mean(values))) for row, values in squares.items()}
    return [(row, a, adv / spread[row] if spread[row] > 1e-6 else 0.0) for row, a, adv in samples]


def child(state: pyspiel.State, action: int) -> pyspiel.State:
    branch = state.clone()
    branch.apply_action(action)
    return branch


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """Each seed's table set up, and the exploitability of its starting (uniform) policy: what
    every 10th step measures."""
    from core.errors import MarsError

    if args.steps < 10:
        raise MarsError("--steps must be at least 10 (exploitability is measured every 10)")
    for seed in int_list(args.seeds, "--seeds"):
        run = TabularRun(args, seed)
        exploitability.exploitability(GAME, tabular_policy(run.logits))
        dry.count("run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lr", type=float, default=0.01, help="Adam step (logits per update)")
    parser.add_argument("--magnet", type=float, default=0.2, help="KL to uniform coefficient")
    parser.add_argument("--scale", choices=("mean", "mean_std", "state_std"), default="mean")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--games", type=int, default=32)
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seeds", default="0,1,2")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.branches < 3:
        parser.error("--branches must be at least 3 (both actions plus one sampled reply)")
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    finals = []
    for seed in int_list(args.seeds, "--seeds"):
        curve = TabularRun(args, seed).run()
        finals.append(curve[-1])
        print(f"seed {seed}: exploitability every 10 steps", " ".join(f"{x:.3f}" for x in curve))
    floor = pure_policy_floor()
    print(f"best deterministic policy: {floor:.4f}")
    worst = max(finals)
    figures = {
        "metric": "worst_seed_final_exploitability",
        "value": round(worst, 4),
        "target": TARGET,
        "met": worst <= TARGET,
        "lr": args.lr,
        "magnet": args.magnet,
        "scale": args.scale,
        "pure_policy_floor": round(floor, 4),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
