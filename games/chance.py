"""Chance nodes and per-episode randomness.

Each episode seed gives independent streams: one for chance nodes and one per seat's player, so a
deal does not depend on how the players used their randomness. Games with `deal_radices` (Kuhn,
Leduc) take their deal from the seed instead: seed s plays deal number s mod (number of deals),
read as a mixed-radix number whose k-th digit picks the k-th chance outcome, so any run of
consecutive seeds covers all deals evenly.
"""

from __future__ import annotations

import random

import pyspiel

from games.spec import GameSpec

_CHANCE_STREAM = 0


def stream(seed: int, index: int) -> random.Random:
    """An RNG for (episode seed, stream index); index 0 is chance, 1 + seat the seat's player."""
    return random.Random(seed * 8 + index)


class ChanceSampler:
    __slots__ = ("_deal", "_place", "_radices", "_rng", "_seed", "_step")

    def __init__(self, spec: GameSpec, seed: int) -> None:
        self._radices = spec.deal_radices
        self._deal = seed % spec.deal_count if self._radices else 0
        self._place = 1
        self._step = 0
        self._seed = seed
        self._rng: random.Random | None = None

    def sample(self, state: pyspiel.State) -> int:
        outcomes = state.chance_outcomes()
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
