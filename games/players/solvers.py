"""Equilibrium bots for the poker games: the CFR average policy and a near-Nash policy.

Policies are solved with OpenSpiel's C++ solvers (`CFRSolver`, `CFRPlusSolver`, through
`games.solvers`), written once to the cache directory as JSON (info state -> [[action, probability],
...]) and read back from there afterwards. The cache directory is `--cache-dir`, else
`$MARS_CACHE_DIR`, else `~/.cache/mars`.
"""

from __future__ import annotations

import functools
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import pyspiel

from core.errors import MarsError
from core.files import mars_cache_dir, write_atomic
from games.players.base import (
    BotAgent,
    Player,
    PlayerContext,
    positive_int_argument,
    register_player,
)
from games.solvers import Method, cfr_average_policy, exploitability
from games.spec import GameSpec

DEFAULT_CFR_ITERATIONS = 1000
# CFR+ converges much faster than CFR; these reach exploitability < 0.001 (Kuhn) and
# about 0.002 (Leduc), stored with the policy.
NASH_ITERATIONS = {"kuhn_poker": 2000, "leduc_poker": 500}
POLICY_SCHEMA_VERSION = 1


def cache_dir(explicit: Path | None = None) -> Path:
    return explicit if explicit is not None else mars_cache_dir()


@dataclass(frozen=True)
class TabularPolicy:
    game: str
    method: Method
    iterations: int
    exploitability: float
    table: dict[str, tuple[tuple[int, ...], tuple[float, ...]]]

    def to_pyspiel(self) -> pyspiel.TabularPolicy:
        return pyspiel.TabularPolicy(
            {
                key: list(zip(actions, probs, strict=True))
                for key, (actions, probs) in self.table.items()
            }
        )


def solve(game: pyspiel.Game, game_name: str, method: Method, iterations: int) -> TabularPolicy:
    average = cfr_average_policy(game, method, iterations)
    table = {
        key: (tuple(a for a, _ in pairs), tuple(p for _, p in pairs))
        for key, pairs in average.items()
    }
    return TabularPolicy(game_name, method, iterations, exploitability(game, average), table)


def _policy_path(root: Path, game_name: str, method: Method, iterations: int) -> Path:
    tag = "cfr" if method == "cfr" else "cfrplus"
    return root / "policies" / f"{game_name}-{tag}-{iterations}.json"


def _read_policy(path: Path) -> TabularPolicy | None:
    try:
        data = json.loads(path.read_text())
        if data.get("schema_version") != POLICY_SCHEMA_VERSION:
            return None
        table = {k: (tuple(a), tuple(p)) for k, (a, p) in data["policy"].items()}
        return TabularPolicy(
            data["game"], data["method"], data["iterations"], data["exploitability"], table
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing or damaged: solve again


@functools.lru_cache(maxsize=16)
def cached_policy(spec: GameSpec, method: Method, iterations: int, root: Path) -> TabularPolicy:
    """The solved policy from the disk cache, solving and storing it on a miss. A variant
    (games.variants) is the same game underneath, so it shares its original's file."""
    path = _policy_path(root, spec.base_name, method, iterations)
    policy = _read_policy(path)
    if policy is not None:
        return policy
    started = time.perf_counter()
    policy = solve(spec.game, spec.base_name, method, iterations)
    payload = {
        "schema_version": POLICY_SCHEMA_VERSION,
        "game": spec.base_name,
        "method": method,
        "iterations": iterations,
        "exploitability": policy.exploitability,
        "solve_seconds": round(time.perf_counter() - started, 3),
        "policy": {k: [list(a), list(p)] for k, (a, p) in policy.table.items()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(payload))
    return policy


class PolicyAgent(BotAgent):
    __slots__ = ("_rng", "_table")

    def __init__(self, table: dict[str, tuple[tuple[int, ...], tuple[float, ...]]], rng) -> None:
        self._table = table
        self._rng = rng

    def choose(self, state: pyspiel.State) -> int:
        actions, probs = self._table[state.information_state_string()]
        return self._rng.choices(actions, probs)[0]


class PolicyPlayer(Player):
    def __init__(self, name: str, policy: TabularPolicy) -> None:
        self.name = name
        self.policy = policy

    def agent(self, *, seat: int, rng: random.Random, seed: int) -> PolicyAgent:
        return PolicyAgent(self.policy.table, rng)

    def action_probabilities(self, state: pyspiel.State) -> dict[int, float]:
        actions, probs = self.policy.table[state.information_state_string()]
        return dict(zip(actions, probs, strict=True))


def _require_solvable(player: str, spec: GameSpec) -> None:
    if not spec.extra.get("solvable"):
        solvable = ", ".join(s.name for s in _all_specs() if s.extra.get("solvable"))
        raise MarsError(f"player {player!r} works only for {solvable}, not {spec.name}")


def _all_specs() -> list[GameSpec]:
    from games.spec import list_games

    return list_games()


@register_player("cfr", "cfr:ITERS, CFR average policy (poker games), default 1000 iterations")
def _cfr(argument: str | None, context: PlayerContext) -> Player:
    iterations = positive_int_argument("cfr", argument, default=DEFAULT_CFR_ITERATIONS)
    _require_solvable("cfr", context.spec)
    policy = cached_policy(context.spec, "cfr", iterations, cache_dir(context.cache_dir))
    return PolicyPlayer(f"cfr:{iterations}", policy)


@register_player("nash", "near-equilibrium policy from CFR+ (poker games)")
def _nash(argument: str | None, context: PlayerContext) -> Player:
    if argument:
        raise MarsError(f"player 'nash' takes no argument (got 'nash:{argument}')")
    _require_solvable("nash", context.spec)
    iterations = NASH_ITERATIONS.get(context.spec.base_name, 1000)
    policy = cached_policy(context.spec, "cfr+", iterations, cache_dir(context.cache_dir))
    return PolicyPlayer("nash", policy)
