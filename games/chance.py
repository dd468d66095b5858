"""Chance nodes and per-episode randomness.

Each episode seed gives independent streams: one for chance nodes and one per seat's player, so a
deal does not depend on how the players used their randomness. Games with `deal_radices` (Kuhn,
Leduc) take their deal from the seed instead: seed s plays deal number s mod (number of deals),
read as a mixed-radix number whose k-th digit picks the k-th chance outcome, so any run of
consecutive seeds covers all deals evenly. A deal table (`deal_table`, the MARSHAL code's Leduc
deals) replaces that count: seed s plays entry s mod (table size), whose k-th number is the
action of the k-th chance node.
"""

from __future__ import annotations

import functools
import itertools
import random

import pyspiel

from games.rules import LeducDeals
from games.spec import GameSpec

DealTable = tuple[tuple[int, ...], ...]

_CHANCE_STREAM = 0


def stream(seed: int, index: int) -> random.Random:
    """An RNG for (episode seed, stream index); index 0 is chance, 1 + seat the seat's player."""
    return random.Random(seed * 8 + index)


@functools.cache
def leduc_rank_triples() -> DealTable:
    """The MARSHAL code's 24 Leduc deals (roll/agentic/env/leduc_poker/env.py, `reset`).

    Cards 0..5 are J J Q Q K K (rank = card // 2). Every ordered triple of distinct cards
    (private 1, private 2, public), in lexicographic order, stands for its rank triple the
    first time that rank triple appears; each of the 24 rank triples is then one deal.
    """
    first: dict[tuple[int, ...], tuple[int, ...]] = {}
    for cards in itertools.permutations(range(6), 3):
        first.setdefault(tuple(card // 2 for card in cards), cards)
    return tuple(first.values())


def deal_table(spec: GameSpec, leduc_deals: LeducDeals) -> DealTable | None:
    """The explicit deals of `spec` under the rules (None: deals come from `deal_radices`)."""
    if leduc_deals == "rank_triples" and spec.openspiel_name == "leduc_poker":
        return leduc_rank_triples()
    return None


def deal_index(spec: GameSpec, seed: int, deals: DealTable | None) -> int | None:
    """The deal an episode seed plays: its entry of the deal table, or its number among the
    `deal_radices` deals; None when the game has neither (chance draws from the seed's stream)."""
    if deals:
        return seed % len(deals)
    if spec.deal_radices:
        return seed % spec.deal_count
    return None


class ChanceSampler:
    __slots__ = ("_deal", "_fixed", "_place", "_radices", "_rng", "_seed", "_step")

    def __init__(self, spec: GameSpec, seed: int, deals: DealTable | None = None) -> None:
        index = deal_index(spec, seed, deals) or 0
        self._fixed = deals[index] if deals else None
        self._radices = () if deals else spec.deal_radices
        self._deal = index
        self._place = 1
        self._step = 0
        self._seed = seed
        self._rng: random.Random | None = None

    def sample(self, state: pyspiel.State) -> int:
        outcomes = state.chance_outcomes()
        if self._fixed is not None and self._step < len(self._fixed):
            action = self._fixed[self._step]
            if all(action != outcome for outcome, _ in outcomes):
                raise RuntimeError(f"deal {self._fixed}: card {action} cannot be dealt here")
            self._step += 1
            return action
        if self._step < len(self._radices):
            radix = self._radices[self._step]
            if len(outcomes) != radix:
                raise RuntimeError(
                    f"chance node {self._step} has {len(outcomes)} outcomes, the spec says {radix}"
                )
            digit = (self._deal // self._place) % radix
            self._place *= radix
            self._step += 1
            return outcomes[digit][0]
        if self._rng is None:
            self._rng = stream(self._seed, _CHANCE_STREAM)
        actions = [a for a, _ in outcomes]
        weights = [p for _, p in outcomes]
        return self._rng.choices(actions, weights)[0]
