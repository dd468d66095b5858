"""The two tools every variant is built with: seeded picks and whole-word substitution."""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")


def seeded_rng(text: str) -> random.Random:
    """A generator seeded by a string, the same in every process (no PYTHONHASHSEED, no `hash`)."""
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


class Chooser:
    """The seeded choices of variant `number` of game `base`.

    `pick` shuffles a pool once per (game, what) and gives variant k its k-th entry, so the first
    len(pool) variants of a game never share a pick; `phrase` draws freely per variant.
    """

    def __init__(self, base: str, number: int) -> None:
        self.base = base
        self.number = number

    def pick(self, what: str, pool: Sequence[T]) -> T:
        order = list(pool)
        seeded_rng(f"{self.base}|{what}").shuffle(order)
        return order[(self.number - 1) % len(order)]

    def phrase(self, what: str, options: Sequence[T]) -> T:
        return seeded_rng(f"{self.base}|{self.number}|{what}").choice(list(options))

    def shuffled(self, what: str, pool: Sequence[T]) -> list[T]:
        order = list(pool)
        seeded_rng(f"{self.base}|{self.number}|{what}").shuffle(order)
        return order


def capitalized(word: str) -> str:
    return word[:1].upper() + word[1:]


class Lexicon:
    """Replaces whole words (or phrases) of rendered text in one pass: a replacement is never
    replaced again. `exact` keys match as written (symbols such as J or PASS); `words` keys match
    as written and capitalised, and the replacement follows the capital."""

    def __init__(self, exact: Mapping[str, str], words: Mapping[str, str] | None = None) -> None:
        table = dict(exact)
        for key, value in (words or {}).items():
            table.setdefault(key, value)
            table.setdefault(capitalized(key), capitalized(value))
        self.table = table
        keys = sorted(table, key=len, reverse=True)  # the longest phrase wins
        self._pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, keys)) + r")(?!\w)")

    def __call__(self, text: str) -> str:
        return self._pattern.sub(lambda match: self.table[match.group(0)], text)
